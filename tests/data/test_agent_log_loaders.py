"""Inspect AI eval logs (``inspect``) and mini-SWE-agent trajectories (``mini_swe``): the bundled real
samples (evals/data/inspect, evals/data/mini_swe; SOURCES.md) and small written files for the cases the
samples lack."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import detect_format, load_trajectories
from rubricforge_dspy.data.formats.inspect_ai import score_reward
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from tests.support.agent_log_poison import CANARY, poison_agent_log

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
INSPECT = DATA / "inspect"
MINI = DATA / "mini_swe"
FULL_VIEW = RenderConfig(max_tokens=10**7, max_step_chars=10**7)
SAMPLES = sorted(INSPECT.iterdir()) + sorted(MINI.iterdir())


def _one(path, **kw):
    trajectories = load_trajectories(path, format="auto", **kw)
    report = trajectories.report
    assert report.loaded == len(trajectories) == 1 and not report.skipped
    return trajectories[0]


def _assert_paired(trajectory):
    """Every tool call is answered by exactly one later tool result with its call id, and vice versa."""
    calls = [s.call_id for s in trajectory.steps if s.kind == "tool_call"]
    results = [s.call_id for s in trajectory.steps if s.kind == "tool_result"]
    assert len(set(calls)) == len(calls) and sorted(results) == sorted(calls)
    for i, step in enumerate(trajectory.steps):
        if step.kind == "tool_result":
            assert any(s.kind == "tool_call" and s.call_id == step.call_id for s in trajectory.steps[:i])


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_are_detected(path):
    assert detect_format(path) == ("inspect" if path.parent == INSPECT else "mini_swe")


def test_directory_scan_includes_eval_archives():
    trajectories = load_trajectories(INSPECT)
    report = trajectories.report
    assert {Path(t.source.file).name for t in trajectories} == {p.name for p in INSPECT.iterdir()}
    assert not report.ignored_files and not report.skipped


def test_inspect_json_sample_scored_correct():
    t = _one(INSPECT / "log_read_sample.json")
    assert t.id == "log_read_sample.json/popularity:1:1" and t.task_id == "1" and t.trial == 1
    assert [s.kind for s in t.steps] == ["user", "final_answer"]
    assert t.steps[0].content.startswith("Is the following statement") and t.steps[1].content.strip() == "Yes"
    assert (t.reward, t.label) == (1.0, 1)
    assert t.hidden["scores"]["match"]["value"] == "C" and t.hidden["target"]
    assert "EXERCISE" in t.hidden["system_prompt"] and "EXERCISE" not in render_trajectory(t, FULL_VIEW)


def test_inspect_eval_archives_match_their_scores():
    correct = _one(INSPECT / "log_read_sample.eval")
    incorrect = _one(INSPECT / "log_formats.eval")
    assert (correct.reward, correct.label) == (1.0, 1) and (incorrect.reward, incorrect.label) == (0.0, 0)
    assert incorrect.steps[-1].kind == "final_answer" and incorrect.steps[-1].content == "No"
    assert correct.id.startswith("log_read_sample.eval/") and correct.task_id == "1"


def test_inspect_tool_errors_are_flagged_and_unlabeled():
    t = _one(INSPECT / "log_tool_call_error.json")
    assert (t.reward, t.label) == (None, None)
    assert [s.kind for s in t.steps] == ["tool_result"] * 11
    assert all(s.is_error and s.tool_name == "bash" for s in t.steps)
    assert [s.call_id for s in t.steps] == [f"bash_{i}" for i in range(1, 12)]
    assert t.id.endswith(":1:4") and t.trial == 4


@pytest.mark.parametrize("value, reward", [("C", 1.0), ("I", 0.0), ("P", 0.5), ("N", 0.0), (0.25, 0.25), (1, 1.0),
                                           ("0.75", 0.75), (True, 1.0), ("maybe", None), ({"a": 1}, None),
                                           (float("nan"), None)])
def test_score_reward_follows_inspect_value_to_float(value, reward):
    assert score_reward({"first": {"value": value}, "second": {"value": "C"}}) == reward
    assert score_reward({}) is None and score_reward(None) is None


def _inspect_log(messages, scores):
    return {"version": 2, "status": "success", "eval": {"task": "t", "model": "openai/m"},
            "samples": [{"id": "s1", "epoch": 2, "input": "x", "target": "y", "messages": messages, "scores": scores}]}


def test_inspect_tool_calls_pair_and_partial_credit_follows_the_rule(tmp_path):
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "list "}, {"type": "text", "text": "files"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "function": "bash", "arguments": {"cmd": "ls"}},
            {"id": "c2", "function": "python", "arguments": {"code": "1/0"}}]},
        {"role": "tool", "tool_call_id": "c1", "function": "bash", "content": "a.txt", "error": None},
        {"role": "tool", "tool_call_id": "c2", "function": "python", "content": "",
         "error": {"type": "unknown", "message": "ZeroDivisionError"}},
        {"role": "assistant", "content": "a.txt"},
    ]
    path = tmp_path / "log.json"
    path.write_text(json.dumps(_inspect_log(messages, {"model_graded": {"value": "P"}})))
    t = _one(path)
    assert [s.kind for s in t.steps] == ["user", "tool_call", "tool_call", "tool_result", "tool_result", "final_answer"]
    assert t.steps[0].content == "list files" and t.steps[1].arguments == {"cmd": "ls"}
    assert [s.is_error for s in t.steps if s.kind == "tool_result"] == [False, True]
    assert "ZeroDivisionError" in t.steps[4].content and t.steps[4].tool_name == "python"
    _assert_paired(t)
    assert t.id == "log.json/t:s1:2" and t.task_id == "s1" and t.agent == "openai/m"
    assert (t.reward, t.label) == (0.5, 0)  # "P" is not a full success by default
    assert _one(path, label_threshold=0.0).label == 1


def test_inspect_bad_sample_is_named_and_counted(tmp_path):
    log = _inspect_log([{"role": "narrator", "content": "x"}], {})
    log["samples"].append({**log["samples"][0], "id": "s2", "messages": [{"role": "user", "content": "ok"}]})
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(log))
    trajectories = load_trajectories(path, on_error="skip")
    report = trajectories.report
    assert [t.task_id for t in trajectories] == ["s2"]
    assert len(report.skipped) == 1 and report.skipped[0][1] == 0 and "narrator" in report.skipped[0][2]


def test_a_zip_eval_without_header_is_rejected(tmp_path):
    path = tmp_path / "x.eval"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("samples/1_epoch_1.json", "{}")
    with pytest.raises(ValueError, match="not an Inspect AI log"):
        detect_format(path)


def test_mini_swe_github_issue_steps():
    t = _one(MINI / "github_issue.traj.json")
    assert t.id == t.task_id == "github_issue" and (t.reward, t.label) == (None, None)
    assert t.steps[0].kind == "user" and t.steps[0].content.startswith("Please solve this issue")
    assert t.n_user_turns == 1
    calls = [s for s in t.steps if s.kind == "tool_call"]
    assert len(calls) == 10 and all(s.tool_name == "bash" for s in calls)
    assert calls[0].arguments.startswith("cat ") and "```" not in calls[0].arguments
    _assert_paired(t)
    results = [s for s in t.steps if s.kind == "tool_result"]
    codes = [re.search(r"<returncode>(-?\d+)</returncode>", s.content) for s in results]
    assert [s.is_error for s in results] == [bool(c and c.group(1) != "0") for c in codes]
    assert results[0].is_error and t.n_tool_errors == 2
    assert all(s.kind != "assistant" or "```" not in s.content for s in t.steps)  # the thought only


def test_mini_swe_current_layout_uses_instance_id_and_hides_info(tmp_path):
    data = {"info": {"instance_id": "django__django-11099", "exit_status": "Submitted", "submission": "diff --git",
                     "model_stats": {"instance_cost": 0.1, "api_calls": 2}},
            "messages": [{"role": "system", "content": "You are..."},
                         {"role": "user", "content": "Fix the bug"},
                         {"role": "assistant", "content": "Look first.\n\n```bash\nls\n```"},
                         {"role": "user", "content": "<returncode>0</returncode>\n<output>\nsetup.py\n</output>"},
                         {"role": "assistant",
                          "content": "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
                         {"role": "exit", "content": "diff --git a/x b/x"}],
            "trajectory_format": "mini-swe-agent-1.1"}
    path = tmp_path / "django__django-11099.traj.json"
    path.write_text(json.dumps(data))
    t = _one(path)
    assert t.id == "django__django-11099" and [s.kind for s in t.steps] == [
        "user", "assistant", "tool_call", "tool_result", "assistant", "tool_call"]
    assert t.hidden["submission"] == "diff --git" and t.hidden["exit_messages"] == ["diff --git a/x b/x"]
    assert "diff --git" not in render_trajectory(t, FULL_VIEW)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_no_planted_canary_reaches_the_judge(path, tmp_path):
    poisoned = poison_agent_log(path, detect_format(path), tmp_path / path.name)
    trajectories = load_trajectories(poisoned)
    report = trajectories.report
    assert trajectories and not report.skipped
    for t in trajectories:
        text = render_trajectory(t, FULL_VIEW)
        assert CANARY not in text, text[text.index(CANARY) - 80:][:200]
    hidden = json.dumps([t.hidden for t in trajectories], default=str)
    assert CANARY in hidden  # the canaries were planted and read, just not shown


def test_cli_stats_render_and_swebench_labels(tmp_path, capsys):
    for path in SAMPLES:
        assert main(["stats", "--data", str(path), "--json"]) == 0
        stats = json.loads(capsys.readouterr().out)
        assert stats["trajectories"] == 1
        assert main(["render", "--data", str(path), "--all"]) == 0
        assert "FINAL ANSWER" in capsys.readouterr().out
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"resolved_ids": ["github_issue"], "unresolved_ids": ["local"]}))
    assert main(["stats", "--data", str(MINI), "--labels", str(results), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["trajectories"] == 2 and stats["positives"] == 1 and stats["unlabeled"] == 0


def test_inspect_attachment_references_are_resolved(tmp_path):
    log = _inspect_log([{"role": "user", "content": "attachment://abc"},
                        {"role": "assistant", "content": [{"type": "text", "text": "attachment://def"}]}], {})
    log["samples"][0]["attachments"] = {"abc": "the long task", "def": "the long answer"}
    path = tmp_path / "att.json"
    path.write_text(json.dumps(log))
    t = _one(path)
    assert [s.content for s in t.steps] == ["the long task", "the long answer"]


def test_a_json_object_mentioning_eval_is_not_an_inspect_log(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"note": "eval samples task", "eval": 1, "samples": []}))
    with pytest.raises(ValueError, match="unknown trajectory format"):
        detect_format(path)


def test_mini_swe_agent_names_the_model_and_bad_files_are_named(tmp_path):
    data = {"info": {"config": {"model": {"model_name": "anthropic/claude-x"}}},
            "messages": [{"role": "user", "content": "task"}, {"role": "assistant", "content": "ok"}],
            "trajectory_format": "mini-swe-agent-1"}
    path = tmp_path / "x.traj.json"
    path.write_text(json.dumps(data))
    t = _one(path)
    assert t.agent == "mini-swe-agent/anthropic/claude-x" and t.id == "x"
    assert [s.kind for s in t.steps] == ["user", "final_answer"]
    bad = tmp_path / "bad.traj.json"
    bad.write_text(json.dumps({**data, "messages": [{"role": "narrator", "content": "?"}]}))
    trajectories = load_trajectories(bad, on_error="skip")
    report = trajectories.report
    assert not trajectories and len(report.skipped) == 1
    assert report.skipped[0][0] == str(bad) and "narrator" in report.skipped[0][2]
