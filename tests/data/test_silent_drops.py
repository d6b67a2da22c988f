"""Held-out findings of issue 12: nothing is dropped or mislabeled without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.cli.data_options import SHOWN
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats import detect_format, load_trajectories
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.records import jsonl_record, tau_record, write_json, write_lines

VERDICT = {"reason": "Booked as asked.", "passed": True, "score": 0.8}


def _judge(tmp_path, *extra) -> list[dict]:
    out = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(lambda body, n: VERDICT) as fake:
        code = main(["judge", "--out", str(out), "--concurrency", "1", "--no-cache", "--api-base", fake.url + "/v1",
                     "--model", "fake-judge", *extra])
    assert code == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_judge_works_on_unlabeled_data_and_joins_labels(tmp_path, capsys):
    data = write_lines(tmp_path / "runs.jsonl", [jsonl_record(i, reward=None) for i in range(3)])
    lines = _judge(tmp_path, "--data", str(data))
    assert len(lines) == 3 and all(x["label"] is None and x["reward"] is None for x in lines)
    assert "none of the 3 trajectories has a label" in capsys.readouterr().err
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "run:t0:0", "label": 1}\n{"id": "run:t2:0", "reward": 0.0}\n{"id": "gone", "label": 0}\n')
    (tmp_path / "verdicts.jsonl").unlink()
    (tmp_path / "verdicts.job.json").unlink(missing_ok=True)
    lines = _judge(tmp_path, "--data", str(data), "--labels", str(labels))
    assert {x["id"]: x["label"] for x in lines} == {"run:t0:0": 1, "run:t1:0": None, "run:t2:0": 0}
    err = capsys.readouterr().err
    assert "2 of 3 labels joined" in err and "1 trajectories without a label" in err
    assert "1 label ids without a trajectory (e.g. gone)" in err


def test_judge_skip_bad_lists_each_reason_and_caps_the_listing(tmp_path, capsys):
    rows = [jsonl_record(0)] + ["{broken"] * (SHOWN + 5)
    data = write_lines(tmp_path / "runs.jsonl", rows)
    lines = _judge(tmp_path, "--data", str(data), "--skip-bad")
    assert len(lines) == 1
    err = capsys.readouterr().err
    assert f"skipped: {data}, record 1: malformed JSON" in err
    assert err.count("skipped: ") == SHOWN + 1 and "skipped: ... and 5 more" in err
    assert f"{SHOWN + 5} record(s) skipped (--skip-bad)" in err


def test_unreadable_file_in_a_directory_scan_is_reported(tmp_path, monkeypatch, capsys):
    good = write_lines(tmp_path / "a.jsonl", [jsonl_record(0)])
    locked = write_lines(tmp_path / "b.jsonl", [jsonl_record(1)])
    import builtins

    real_open = builtins.open

    def guarded(file, *args, **kwargs):  # tests run as root, where chmod 000 does not stop reads
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    with pytest.raises(TrajectoryFormatError, match="b.jsonl: cannot read file: .*Permission denied"):
        load_trajectories(tmp_path)
    with pytest.raises(TrajectoryFormatError, match="cannot read file"):  # named explicitly: same error
        load_trajectories(locked)
    trajectories = load_trajectories(tmp_path, on_error="skip")
    report = trajectories.report
    assert [t.source.file for t in trajectories] == [str(good)]
    assert report.skipped == [(str(locked), None, f"cannot read file: [Errno 13] Permission denied: '{locked}'")]
    assert main(["stats", "--data", str(tmp_path), "--skip-bad", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["skipped"] == 1 and "b.jsonl: cannot read file" in captured.err


def test_ignored_files_of_a_directory_scan_are_listed(tmp_path, capsys):
    write_lines(tmp_path / "a.jsonl", [jsonl_record(0)])
    (tmp_path / "notes.json").write_bytes(b"\xff\xfe garbage")
    (tmp_path / "README.md").write_text("about these runs")
    assert main(["stats", "--data", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"ignored file: {tmp_path / 'notes.json'}: unknown trajectory format" in err
    assert f"ignored 1 file(s): not a .json/.jsonl/.eval/.traj file (e.g. {tmp_path / 'README.md'})" in err


def test_a_json_array_of_generic_records_is_read(tmp_path):
    path = write_json(tmp_path / "records.json", [jsonl_record(0), jsonl_record(1)])
    assert detect_format(path) == "jsonl"
    trajectories = load_trajectories(path)
    assert [t.id for t in trajectories] == ["run:t0:0", "run:t1:0"]
    bad = write_json(tmp_path / "bad.json", [jsonl_record(0), {**jsonl_record(1), "messages": "x"}])
    trajectories = load_trajectories(bad, on_error="skip")
    report = trajectories.report
    assert len(trajectories) == 1 and report.skipped[0][:2] == (str(bad), 1)
    other = write_json(tmp_path / "other.json", [{"question": "q", "answer": "a"}])
    with pytest.raises(TrajectoryFormatError, match="a JSON array is read as tau-bench results .* generic records"):
        detect_format(other)


def test_tau_bench_crashed_run_error_says_how_to_skip(tmp_path):
    crashed = tau_record(1, traj=[], reward=0.0)
    crashed["info"] = {"error": "ContextWindowExceededError"}
    path = write_json(tmp_path / "run.json", [tau_record(0), crashed])
    with pytest.raises(TrajectoryFormatError, match="crashed.*--skip-bad"):
        load_trajectories(path)


def _tau2_file(path: Path, llm: str) -> Path:
    sim = {"id": "s", "task_id": "0", "trial": 0, "reward_info": {"reward": 1.0},
           "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "done"}]}
    doc = {"info": {"agent_info": {"llm": llm, "implementation": "llm_agent"},
                    "environment_info": {"domain_name": "airline"}}, "tasks": [], "simulations": [sim]}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json(path, doc)


def test_tau2_runs_of_different_models_in_one_submission_keep_their_model(tmp_path):
    sub = tmp_path / "acme-agent_acme_2025-11-01"
    _tau2_file(sub / "a.json", "gpt-4.1")
    _tau2_file(sub / "b.json", "claude-sonnet-4-5")
    trajectories = load_trajectories(sub)
    assert sorted(t.agent for t in trajectories) == ["acme-agent_acme/claude-sonnet-4-5", "acme-agent_acme/gpt-4.1"]
