"""Fixtures of the review tests: a review of the bundled demo run, served for real by uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_DATA = ROOT / "rubricforge_dspy" / "pipeline" / "demo-gpt-4o-airline.json"
DEMO_RUN = ROOT / "artifacts" / "demo"
DEMO_VERDICTS = DEMO_RUN / "predictions" / "induced.jsonl"
DEMO_PROGRAM = DEMO_RUN / "induced.json"

pytest.importorskip("starlette", reason="the review page needs starlette (pip install starlette jinja2 uvicorn)")
pytest.importorskip("uvicorn", reason="the review page needs uvicorn")


@pytest.fixture
def demo_inputs(tmp_path):
    from rubricforge_dspy.review import ReviewInputs

    return ReviewInputs(data=[DEMO_DATA], verdicts=DEMO_VERDICTS, labels_out=tmp_path / "labels.jsonl",
                        labeler="tester", program=DEMO_PROGRAM, run_dir=DEMO_RUN,
                        allow_unverified_program=True)  # the demo's program predates program hashes


def start(inputs):
    """A `ReviewServer` on 127.0.0.1 (a free port) serving `inputs`, once it accepts connections."""
    from rubricforge_dspy.review import ReviewServer, ReviewState

    server = ReviewServer(ReviewState(inputs))
    server.start()  # returns when uvicorn has started (an event set by its startup), not after a sleep
    return server


@pytest.fixture
def demo_server(demo_inputs):
    server = start(demo_inputs)
    yield server
    server.stop()


def journal_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


STAGE_A = "tool-a"  # stage names are checked where a cascade is made (core.terminal.check_name)


def write_cascade_run(directory: Path) -> tuple[Path, Path, Path]:
    """A real cascade run over four items: two recorded stages (another tool's verdict files, no LM) with
    hand-set thresholds (``tool-a``: fail <= 0.1, pass >= 0.9; ``tool-b``: fail <= 0.2, pass >= 0.8), saved
    as ``cascade.json`` and run by ``rubricforge judge --cascade`` into ``v.jsonl`` (with its ``v.jsonl.job.json``).
    ``i1`` is decided by the first stage, ``i2`` by the second, ``i0`` (0.5 / 0.5) and ``i3`` (0.3 / 0.6) are
    escalated by ``tool-b``. Returns (data, verdicts, cascade file)."""
    from rubricforge_dspy.cli.main import main
    from rubricforge_dspy.judge.cascade import Cascade, StageRule
    from rubricforge_dspy.judge.recorded import RecordedJudge
    from tests.support.review_runs import write_run

    data, _ = write_run(directory, ["i0", "i1", "i2", "i3"])
    scores = {"a": {"i0": 0.5, "i1": 0.95, "i2": 0.5, "i3": 0.3}, "b": {"i0": 0.5, "i1": 0.5, "i2": 0.9, "i3": 0.6}}
    for name, by_id in scores.items():
        (directory / f"{name}.jsonl").write_text("".join(
            json.dumps({"id": i, "passed": s >= 0.5, "score": s, "abstained": False}) + "\n" for i, s in by_id.items()))
    stages = [RecordedJudge.from_file(directory / f"{name}.jsonl", confidence_levels=None) for name in scores]
    cascade = directory / "cascade.json"
    Cascade(stages, [StageRule(STAGE_A, 0.9, 0.1), StageRule("tool-b", 0.8, 0.2)]).save(cascade)
    verdicts = directory / "v.jsonl"
    assert main(["judge", "--cascade", str(cascade), "--data", str(data), "--out", str(verdicts)]) == 0
    return data, verdicts, cascade
