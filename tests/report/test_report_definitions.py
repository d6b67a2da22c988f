"""The report opens with what the embedded model can and cannot tell, and defines every judge row before the first
table that lists it (issue 41 item 7): rendered from a run directory holding every row the evaluation protocol
writes, from plain verdict files, and the committed demo report the README links."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rubricforge_dspy.pipeline.protocol import JUDGES
from rubricforge_dspy.report import compute_report, load_run, render_markdown
from rubricforge_dspy.report.judges import EMBEDDED_CAVEAT_TITLE, UNDEFINED
from tests.support.report_rules import DEFINITION, problems

ROOT = Path(__file__).resolve().parents[2]
DEMO_REPORT = ROOT / "artifacts" / "demo" / "report.md"


def _run_dir(tmp_path: Path, judges: list[str], *, embedded: bool, split: bool = True) -> Path:
    """A run directory as the protocol writes it: 12 test items on 12 tasks, every judge's verdict lines."""
    rng = np.random.default_rng(3)
    run = tmp_path / "run"
    (run / "predictions").mkdir(parents=True)
    labels = [1, 0] * 6
    for judge in judges:
        with (run / "predictions" / f"{judge}.jsonl").open("w", encoding="utf-8") as out:
            for k, label in enumerate(labels):
                passed = bool(rng.random() < 0.6)
                out.write(json.dumps({"id": f"t{k}", "task_id": f"task{k}", "domain": "airline", "agent": "a",
                                      "n_steps": 10 + k, "passed": passed, "score": 0.8 if passed else 0.2,
                                      "reason": "r", "abstained": False, "error": None, "label": label,
                                      "reward": float(label), "model": judge}) + "\n")
    meta = {"lm": "openai/smollm2-135m", "reflection_lm": "openai/smollm2-135m", "dataset": "synthetic",
            "induced": "induced", "judges": judges, "graded": False, "config": {"fewshot_k": 4},
            "embedded": embedded}
    if split:
        meta["split"] = {"train": {"trajectories": 20}, "val": {"trajectories": 4}, "test": {"trajectories": 12}}
    (run / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    return run


def _render(run: Path) -> str:
    return render_markdown(compute_report(load_run(run), n_resamples=200))


def test_every_row_the_protocol_writes_is_defined_before_its_first_table_and_the_caveat_opens_the_report(tmp_path):
    markdown = _render(_run_dir(tmp_path, list(JUDGES), embedded=True))
    assert problems(markdown, embedded=True) == []
    lines = markdown.splitlines()
    # the opening: the title, then the caveat, before the facts and every section
    assert lines[2] == EMBEDDED_CAVEAT_TITLE
    caveat = "\n".join(lines[2:lines.index("## The rows of the tables")])
    assert "plumbing, not a judge" in caveat and "It cannot tell" in caveat
    # what the LLM rows said on these items is counted from their verdicts (7 of 12 here: the seeded draw)
    for judge in ("induced", "geval", "fewshot", "hybrid"):
        assert f"`{judge}` passed " in caveat
    defined = dict(DEFINITION.match(line).groups() for line in lines if DEFINITION.match(line))
    assert "4 labeled training trajectories" in defined["fewshot"]  # the run's fewshot_k
    assert "fit on the training split" in defined["floor"] and "fit on the training split" in defined["length_only"]


def test_a_row_nobody_defined_fails_the_check(tmp_path):
    """A judge the protocol might add one day, without a definition: the report says it is undefined and the
    check names it (the protocol's rows are the ones above)."""
    markdown = _render(_run_dir(tmp_path, ["oracle", "induced", "newcomer"], embedded=True))
    assert problems(markdown, embedded=True) == ["newcomer: defined as unknown"] * markdown.count("\n| newcomer |")
    assert f"- `newcomer`: {UNDEFINED}" in markdown


def test_a_server_models_run_has_no_caveat_and_still_every_definition(tmp_path):
    markdown = _render(_run_dir(tmp_path, list(JUDGES), embedded=False))
    assert EMBEDDED_CAVEAT_TITLE not in markdown
    assert problems(markdown, embedded=False) == []


def test_rows_of_plain_verdict_files_are_defined_as_the_files(tmp_path):
    run = _run_dir(tmp_path, ["mine", "theirs"], embedded=False, split=False)
    (run / "run.json").unlink()  # verdict files, not a run
    files = [run / "predictions" / "mine.jsonl", run / "predictions" / "theirs.jsonl"]
    markdown = render_markdown(compute_report(load_run(files), n_resamples=200))
    assert problems(markdown, embedded=False) == []
    assert "- `mine`: the verdicts of the file `mine.jsonl`" in markdown
    assert "the reference the other rows are compared with" in markdown.split("- `mine`:")[1].splitlines()[0]


@pytest.mark.skipif(not DEMO_REPORT.exists(), reason="the committed demo run is not in this checkout")
def test_the_committed_demo_report_opens_with_the_caveat_and_defines_every_row():
    markdown = DEMO_REPORT.read_text(encoding="utf-8")
    assert problems(markdown, embedded=True) == []
