"""SWE-agent ``.traj`` and OpenHands loaders on the bundled real samples (evals/data/swe_agent, openhands):
detection, counts, roles, call pairing, error flags, instance ids, no leak of hidden fields, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.presets import EMBEDDED
from rubricforge_dspy.data.formats import detect_format, load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from tests.support.swe_poison import CANARY, poison_swe_file

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
SWE = DATA / "swe_agent"
OH = DATA / "openhands"
ATIF = DATA / "atif" / "hello-world__abc123" / "agent" / "trajectory.json"
FULL_VIEW = RenderConfig(max_tokens=10**7, max_step_chars=10**7)
SAMPLES = sorted(SWE.glob("*.traj")) + sorted(OH.glob("*.json*")) + [ATIF]


def _load_one(path: Path):
    trajectories = load_trajectories(path)
    report = trajectories.report
    assert report.loaded == len(trajectories) and not report.skipped
    return trajectories


def _check_pairing(trajectory) -> None:
    """Every tool result answers an earlier, not yet answered call (same id and name); no call id repeats."""
    calls = [s for s in trajectory.steps if s.kind == "tool_call"]
    assert len({c.call_id for c in calls}) == len(calls)
    open_calls: dict[str, str] = {}
    for step in trajectory.steps:
        if step.kind == "tool_call":
            open_calls[step.call_id] = step.tool_name
        elif step.kind == "tool_result" and step.call_id is not None:
            assert open_calls.pop(step.call_id) == step.tool_name


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name[:40])
def test_samples_are_detected_and_unlabeled(path):
    expected = "swe_agent" if path.suffix == ".traj" else "atif" if path == ATIF else "openhands"
    assert detect_format(path) == expected
    auto = load_trajectories(path, format="auto")
    explicit = _load_one(path)
    assert [t.id for t in auto] == [t.id for t in explicit]
    for t in explicit:
        assert t.hidden["format"] == expected and t.label is None
        assert (t.reward, t.label) == (None, None)
        assert t.steps[0].kind == "user"
        _check_pairing(t)


def test_swe_agent_old_format_pydicom():
    (t,) = _load_one(SWE / "pydicom__pydicom-1458.traj")
    record = json.loads((SWE / "pydicom__pydicom-1458.traj").read_text())
    assert t.id == t.task_id == "pydicom__pydicom-1458"  # the instance id, from the file name
    assert t.n_tool_calls == len(record["trajectory"]) == 12
    assert t.n_user_turns == 1 and t.steps[0].content.startswith("We're currently solving the following issue")
    assert "demonstration" not in t.steps[0].content.lower()  # the is_demo message is skipped
    calls = [s for s in t.steps if s.kind == "tool_call"]
    assert calls[0].tool_name == "create" and calls[0].arguments == "create reproduce_bug.py"
    assert calls[-1].tool_name == "submit"  # the final submit is an action
    errors = [s for s in t.steps if s.kind == "tool_result" and s.is_error]
    assert [s.tool_name for s in errors] == ["python", "edit", "edit", "edit"] and "Traceback" in errors[0].content
    # SWE-agent's linter refusing an edit is a failed call (issue 19)
    assert all(s.content.startswith("Your proposed edit has introduced new syntax error") for s in errors[1:])
    assert t.hidden["info"]["exit_status"] == "submitted" and t.hidden["demonstrations"]
    assert t.hidden["system_prompt"].startswith("SETTING:")


def test_swe_agent_function_calling_format_marshmallow():
    (t,) = _load_one(SWE / "marshmallow-code__marshmallow-1867.traj")
    assert t.id == "marshmallow-code__marshmallow-1867" and t.n_tool_calls == 11 and t.n_tool_errors == 1
    (refused,) = [s for s in t.steps if s.kind == "tool_result" and s.is_error]  # the linter refused an edit
    assert refused.content.startswith("Your proposed edit has introduced new syntax error(s)")
    assert t.steps[0].content.startswith("We're currently solving")  # message_type: observation, role user
    assert "replay_config" in t.hidden and t.hidden["system_prompt"]


def test_swe_agent_nested_instance_dir_and_errors(tmp_path):
    record = json.loads((SWE / "pydicom__pydicom-1458.traj").read_text())
    nested = tmp_path / "astropy__astropy-1" / "astropy__astropy-1.traj"
    nested.parent.mkdir()
    record["trajectory"][0]["observation"] = "bash: frobnicate: command not found"
    nested.write_text(json.dumps(record))
    (t,) = _load_one(tmp_path)  # a directory scan picks up .traj files
    assert t.id == "astropy__astropy-1" and t.steps[3].kind == "tool_result" and t.steps[3].is_error
    bad = tmp_path / "broken.traj"
    bad.write_text('{"trajectory": [], "history": [], "info": {}}')
    with pytest.raises(ValueError, match="broken.traj.*no observable step"):
        load_trajectories(bad, format="swe_agent")


def test_openhands_eval_output_line():
    (t,) = _load_one(OH / "multi_swe_bench_output.jsonl")
    record = json.loads((OH / "multi_swe_bench_output.jsonl").read_text().splitlines()[0])
    assert t.id == record["instance_id"] == "ponylang__ponyc-4595"
    actions = [e for e in record["history"] if e.get("source") == "agent" and e.get("action") not in
               (None, "system", "think", "finish", "message")]
    assert t.n_tool_calls == len(actions) == 21
    assert {s.tool_name for s in t.steps if s.kind == "tool_call"} == {"run", "read", "edit"}
    failed_runs = [e for e in record["history"] if e.get("observation") == "run"
                   and e["extras"]["metadata"]["exit_code"] != 0]
    assert len(failed_runs) == 5  # plus one refused edit ("ERROR: No replacement was performed", issue 19)
    refused = [s for s in t.steps if s.kind == "tool_result" and s.is_error and s.tool_name == "edit"]
    assert t.n_tool_errors == 6 and len(refused) == 1 and refused[0].content.startswith("ERROR:\nNo replacement")
    call = next(s for s in t.steps if s.kind == "tool_call")
    assert set(call.arguments) == {"command"}  # thought, cwd, confirmation_state... are not arguments
    assert t.steps[-1].kind == "final_answer" and t.steps[-1].content.startswith("The issue with")
    assert not any(s.content.startswith("Your thought has been logged") for s in t.steps)
    assert "git_patch" in t.hidden["test_result"] and t.hidden["metadata"]["llm_config"]["api_key"] == "<redacted>"


def test_openhands_event_list_and_pairing_by_cause(tmp_path):
    (t,) = _load_one(OH / "basic.json")
    assert t.id == "basic" and [s.kind for s in t.steps] == ["user", "assistant", "tool_call", "tool_result",
                                                             "final_answer"]
    events = [
        {"id": 1, "source": "user", "action": "message", "args": {"content": "fix it"}},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls", "thought": "look"}},
        {"id": 3, "source": "agent", "action": "run", "args": {"command": "false"}},
        {"id": 4, "source": "agent", "observation": "run", "cause": 3, "content": "",
         "extras": {"metadata": {"exit_code": 1}}},
        {"id": 5, "source": "agent", "observation": "error", "cause": 2, "content": "boom"},
        {"id": 6, "source": "environment", "observation": "agent_state_changed", "content": "",
         "extras": {"agent_state": "finished"}},
    ]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events))
    (t,) = _load_one(path)
    results = {s.call_id: s for s in t.steps if s.kind == "tool_result"}
    assert results["call_3"].is_error and results["call_2"].is_error and results["call_2"].content == "boom"
    assert t.n_tool_calls == 2 and t.steps[1].kind == "assistant" and t.steps[-1].kind == "tool_result"


def test_openhands_resolved_flag_is_not_a_label(tmp_path):
    record = json.loads((OH / "multi_swe_bench_output.jsonl").read_text().splitlines()[0])
    record["test_result"] = {**record["test_result"], "resolved": True, "report": {"resolved": True}}
    path = tmp_path / "out.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (t,) = _load_one(path)
    assert t.label is None and t.hidden["test_result"]["resolved"] is True


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name[:40])
def test_no_hidden_field_reaches_the_render(path, tmp_path):
    fmt = detect_format(path)
    poisoned = poison_swe_file(path, fmt, tmp_path / path.name)
    assert CANARY in poisoned.read_text()
    trajectories = _load_one(poisoned)
    assert [t.id for t in trajectories] == [t.id for t in _load_one(path)]
    for t in trajectories:
        text = render_trajectory(t, FULL_VIEW)
        assert CANARY not in text, text[text.index(CANARY) - 80:][:200]
        assert t.label is None  # a planted resolved flag is not read as a label
        assert CANARY in json.dumps(t.hidden, default=str)  # the canaries were loaded, into hidden


@pytest.mark.parametrize("folder", [SWE, OH, DATA / "atif"], ids=lambda p: p.name)
def test_cli_stats_and_render(folder, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RUBRICFORGE_API_BASE", raising=False)  # no endpoint: render shows the embedded preset's
    assert main(["stats", "--data", str(folder), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    n_files = sum(1 for p in folder.rglob("*") if p.is_file())
    assert stats["trajectories"] == n_files and stats["unlabeled"] == stats["trajectories"]
    assert stats["skipped"] == 0
    trajectories = load_trajectories(folder)
    assert main(["render", "--data", str(folder), "--index", "0"]) == 0
    assert capsys.readouterr().out.startswith(render_trajectory(trajectories[0], RenderConfig.of(EMBEDDED)))


def test_cli_labels_join_swe_bench_results_by_instance_id(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"resolved": ["pydicom__pydicom-1458"],
                                   "unresolved": ["marshmallow-code__marshmallow-1867"]}))
    assert main(["stats", "--data", str(SWE), "--labels", str(results), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["trajectories"], stats["unlabeled"], stats["positives"]) == (2, 0, 1)
    assert stats["labels"]["labels_join"]["matched"] == 2


def test_atif_pairs_results_by_source_call_id(tmp_path):
    (t,) = _load_one(ATIF)
    record = json.loads(ATIF.read_text())
    assert t.id == record["session_id"] and t.agent == "terminus-2/openai/gpt-4o-mini"
    kinds = [s.kind for s in t.steps]
    assert kinds == ["user", "assistant", "tool_call", "tool_result", "assistant", "tool_call", "tool_call",
                     "tool_result", "tool_result", "final_answer"]
    results = {s.call_id: s for s in t.steps if s.kind == "tool_result"}
    assert results["call_2"].is_error and not results["call_3"].is_error and t.n_tool_errors == 1
    assert t.hidden["system_prompt"].startswith("You are") and t.hidden["agent"]["extra"]["api_key"] == "<redacted>"
    del record["session_id"]
    trial = tmp_path / "my-trial" / "agent" / "trajectory.json"
    trial.parent.mkdir(parents=True)
    trial.write_text(json.dumps(record))
    assert _load_one(trial)[0].id == "my-trial"  # Harbor's <trial>/agent/trajectory.json
    record["steps"][1]["source"] = "robot"
    trial.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="trajectory.json, record 0: steps\\[1\\]: unknown source 'robot'"):
        load_trajectories(trial)
