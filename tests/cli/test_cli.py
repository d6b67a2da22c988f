"""The `rubricforge` command line, offline (a local fake OpenAI-compatible server stands in for the LM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.helpers import AIRLINE

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"


def test_stats_json_has_the_documented_keys(capsys):
    assert main(["stats", "--data", str(AIRLINE), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert {k: stats[k] for k in ("trajectories", "positives", "tasks", "skipped")} == \
        {"trajectories": 200, "positives": 84, "tasks": 50, "skipped": 0}
    assert stats["domains"] == ["airline"] and stats["agents"] == ["gpt-4o"]


def test_render_prints_exactly_what_the_judge_sees(capsys, monkeypatch):
    from rubricforge_dspy.core.presets import EMBEDDED
    from rubricforge_dspy.evidence.render import RenderConfig

    monkeypatch.delenv("RUBRICFORGE_API_BASE", raising=False)  # no endpoint: the embedded preset, as judge
    assert main(["render", "--data", str(AIRLINE), "--index", "3"]) == 0
    trajectories = load_trajectories(AIRLINE)
    assert capsys.readouterr().out == render_trajectory(trajectories[3], RenderConfig.of(EMBEDDED)) + "\n"


def test_bad_input_exits_2_naming_file_and_record(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n')
    assert main(["stats", "--data", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "record 0" in err


def test_skip_bad_counts_the_skipped_record(tmp_path, capsys):
    mixed = tmp_path / "mixed.jsonl"
    good = {"id": "g", "task_id": "t", "reward": 1.0, "messages": [{"role": "user", "content": "hi"},
                                                                  {"role": "assistant", "content": "done"}]}
    mixed.write_text(json.dumps(good) + "\n{not json\n")
    assert main(["stats", "--data", str(mixed), "--json", "--skip-bad"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["skipped"] == 1 and "mixed.jsonl, record 1" in captured.err


def test_judge_writes_one_verdict_line_per_trajectory_with_label_and_reward(tmp_path):
    out = tmp_path / "preds.jsonl"
    verdicts = [{"reason": "The booking call errored.", "passed": False, "score": 0.2},
                {"reason": "Booked and confirmed.", "passed": True, "score": 0.8}]
    with FakeOpenAI(lambda body, n: verdicts[n % 2]) as fake:
        argv = ["judge", "--data", str(AIRLINE), "--limit", "4", "--out", str(out), "--concurrency", "1",
                "--api-base", fake.url + "/v1", "--model", "fake-judge-r1"]
        assert main(argv) == 0
        first_requests = fake.n_requests
        assert main(argv) == 0  # re-running resumes: nothing judged twice
        assert fake.n_requests == first_requests == 4
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 4 and len({x["id"] for x in lines}) == 4
    for line in lines:
        assert {"id", "passed", "score", "reason", "abstained", "error", "label", "reward"} <= set(line)
        assert isinstance(line["passed"], bool) and 0.0 <= line["score"] <= 1.0


def test_judge_with_an_unreachable_server_records_abstained_fails(tmp_path):
    out = tmp_path / "preds.jsonl"
    with FakeOpenAI(lambda body, n: "http_500") as fake:
        assert main(["judge", "--data", str(AIRLINE), "--limit", "2", "--out", str(out), "--no-cache",
                     "--api-base", fake.url + "/v1", "--model", "fake-judge-r1", "--timeout", "5"]) == 3
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and all(x["abstained"] and x["passed"] is False for x in lines)
    assert all(fake.api_base in x["error"] for x in lines)  # the error names the endpoint


@pytest.mark.parametrize("command", ["stats", "render", "judge", "induce", "report", "demo", "serve", "floor", "gate"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0 and "usage: rubricforge" in capsys.readouterr().out


def test_serve_sglang_dry_run_prints_the_launch_command(capsys):
    assert main(["serve", "--engine", "sglang", "--model", "Qwen/Qwen2.5-7B-Instruct", "--revision", "a09a3545",
                 "--tp", "2", "--dry-run"]) == 0
    cmd = capsys.readouterr().out
    for flag in ("sglang.launch_server", "--schedule-policy lpm", "--grammar-backend xgrammar", "--tp-size 2",
                 "--served-model-name Qwen2.5-7B-Instruct@a09a3545", "--host 127.0.0.1", "--random-seed 0"):
        assert flag in cmd


def test_serve_router_dry_run(capsys):
    assert main(["serve", "--engine", "sglang", "--router-workers", "http://10.0.0.1:30000", "http://10.0.0.2:30000",
                 "--port", "31000", "--dry-run"]) == 0
    cmd = capsys.readouterr().out
    assert "sglang_router.launch_router" in cmd and "--policy cache_aware" in cmd and "10.0.0.2:30000" in cmd
