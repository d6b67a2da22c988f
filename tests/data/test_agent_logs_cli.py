"""The agent-log formats end to end through the CLI: `judge` over HTTP (the fake server), `convert` to the
generic JSONL and back, and `report` once a SWE-bench-style results file labels the coding-agent runs."""

from __future__ import annotations

import json
from pathlib import Path

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.testing.fake_server import FakeOpenAI

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
DIRS = {"inspect": DATA / "inspect", "mini_swe": DATA / "mini_swe", "swe_agent": DATA / "swe_agent",
        "openhands": DATA / "openhands", "atif": DATA / "atif"}
# A file of tool results answering no call (an upstream Inspect fixture) loads, but the generic format
# refuses it by design (tests/data/test_convert.py checks that this is loud).
NOT_CONVERTIBLE = {"log_tool_call_error.json"}


def test_judge_writes_one_verdict_per_trajectory_of_every_agent_log_format(tmp_path):
    data = [str(d) for d in DIRS.values()]
    loaded = load_trajectories(data)
    assert {t.hidden["format"] for t in loaded} == set(DIRS)
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: {"reason": "The tool results back the answer.", "passed": True,
                                     "score": 0.8}) as fake:
        assert main(["judge", "--data", *data, "--out", str(out), "--concurrency", "2",
                     "--api-base", fake.api_base, "--model", "fake-judge-r1"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == sorted(t.id for t in loaded)
    assert all(not x["abstained"] for x in lines)
    labeled = {t.id: t.label for t in loaded if t.label is not None}
    assert {x["id"]: x["label"] for x in lines if x["label"] is not None} == labeled


def test_convert_round_trips_every_agent_log_sample(tmp_path):
    for name, folder in DIRS.items():
        suffixes = (".json", ".jsonl", ".eval", ".traj")
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in suffixes):
            if path.name in NOT_CONVERTIBLE:
                continue
            out = tmp_path / f"{name}-{path.parent.name}-{path.name}.jsonl"  # two ATIF runs are both trajectory.json
            assert main(["convert", "--data", str(path), "--out", str(out)]) == 0, path
            before = load_trajectories(path)
            after = load_trajectories(out)
            assert [t.id for t in after] == [t.id for t in before], path
            assert [render_trajectory(t) for t in after] == [render_trajectory(t) for t in before], path


def test_report_on_coding_agent_runs_once_a_results_file_labels_them(tmp_path, capsys):
    runs = [str(DIRS["swe_agent"]), str(DIRS["openhands"])]
    loaded = load_trajectories(runs)
    ids = sorted(t.id for t in loaded)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"resolved": ids[::2], "unresolved": ids[1::2]}))
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: {"reason": "Submitted a patch.", "passed": True, "score": 0.9}) as fake:
        assert main(["judge", "--data", *runs, "--labels", str(results), "--out", str(out),
                     "--api-base", fake.api_base, "--model", "fake-judge-r1"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert {x["id"]: x["label"] for x in lines} == {i: int(k % 2 == 0) for k, i in enumerate(ids)}
    assert main(["report", "--predictions", str(out), "--out", str(tmp_path / "r" / "report.md")]) == 0
    report = (tmp_path / "r" / "report.md").read_text()
    assert "false-pass rate" in report.lower() and str(len(ids)) in report
