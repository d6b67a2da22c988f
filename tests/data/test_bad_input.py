"""Bad input, per format: each problem raises TrajectoryFormatError naming the file and the record,
or, with on_error="skip", is counted in the LoadReport while the good records still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats import LoadReport, detect_format, iter_trajectories, load_trajectories
from tests.support.records import jsonl_record, tau_record, write_json, write_lines

BAD_BYTES = b"\xff\xfe\xc3("


# ----------------------------------------------------------------------------- record builders


def webshop_record(i: int, **changes) -> dict:
    record = {
        "session": f"fixed_{i}",
        "instruction": "buy a mug",
        "reward": 0.5,
        "score_in_final_obs": 0.5,
        "steps": [
            {"action": "reset", "observation": "WebShop \nInstruction:  \nbuy a mug \n[Search] "},
            {"action": "search[mug]", "observation": "[B01] mug $3"},
            {"action": "click[B01]", "observation": "Invalid action!"},
            {"action": "click[Buy Now]", "observation": "Your score (min 0.0, max 1.0): 0.5"},
        ],
    }
    record.update(changes)
    return record


def tau2_doc(sims: list) -> dict:
    return {
        "timestamp": "now",
        "info": {"agent_info": {"llm": "m", "implementation": "llm_agent"},
                 "user_info": {"llm": "u", "llm_args": {"api_key": "sk-SECRET"}},
                 "environment_info": {"domain_name": "airline", "policy": "# Airline Agent Policy"}},
        "tasks": [{"id": "1", "user_scenario": {"instructions": "be the user"}, "evaluation_criteria": {}}],
        "simulations": sims,
    }


def tau2_sim(i: int, **changes) -> dict:
    sim = {
        "id": f"sim{i}", "task_id": "1", "trial": i, "termination_reason": "user_stop",
        "reward_info": {"reward": 1.0},
        "messages": [
            {"role": "assistant", "content": "Hi! How can I help?"},
            {"role": "user", "content": "Cancel ABC."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "k", "name": "cancel_reservation", "arguments": {"reservation_id": "ABC"}}]},
            {"role": "tool", "id": "k", "content": "Error: Reservation ABC not found", "error": True},
            {"role": "assistant", "content": "It does not exist."},
        ],
    }
    sim.update(changes)
    return sim


def assert_names(exc: TrajectoryFormatError, path: Path, record) -> None:
    message = str(exc)
    assert str(path) in message, message
    assert f"record {record}" in message, message
    assert exc.file == str(path) and exc.record == record


def check(path: Path, bad_index, n_good: int, problem_part: str, fmt: str = "auto"):
    """Raise mode names file + record; skip mode loads the good records and reports the bad one."""
    with pytest.raises(TrajectoryFormatError) as info:
        list(iter_trajectories(path, format=fmt))
    assert_names(info.value, path, bad_index)
    assert problem_part in info.value.problem
    trajectories = load_trajectories(path, format=fmt, on_error="skip")
    report = trajectories.report
    assert len(trajectories) == n_good == report.loaded
    assert [(f, r) for f, r, _ in report.skipped] == [(str(path), bad_index)]
    assert problem_part in report.skipped[0][2]
    return trajectories, report


# ----------------------------------------------------------------------------- generic JSONL

def test_jsonl_malformed_json(tmp_path):
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0), '{"id": "broken", ', jsonl_record(2)])
    check(path, 1, 2, "malformed JSON (line 2")


def test_jsonl_missing_reward(tmp_path):
    bad = jsonl_record(1)
    del bad["reward"]
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0), bad, jsonl_record(2)])
    check(path, 1, 2, "missing 'reward'")


@pytest.mark.parametrize("messages, problem", [
    ([], "schema violation at messages"),
    ([{"role": "system", "content": "only a prompt"}], "empty trajectory"),
])
def test_jsonl_empty_trajectory(tmp_path, messages, problem):
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0), jsonl_record(1, messages=messages)])
    check(path, 1, 1, problem)


def test_jsonl_unknown_role(tmp_path):
    bad = jsonl_record(1)
    bad["messages"][2]["role"] = "robot"
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0), bad, jsonl_record(2)])
    _, report = check(path, 1, 2, "schema violation at messages/2/role")
    assert "robot" in report.skipped[0][2]


def test_jsonl_non_utf8_bytes(tmp_path):
    line = json.dumps(jsonl_record(1)).encode().replace(b"Booked.", b"Booked" + BAD_BYTES)
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0), line, jsonl_record(2)])
    check(path, 1, 2, "invalid UTF-8")


@pytest.mark.parametrize("change, problem", [
    ({"rewards": 1.0}, "Additional properties"),
    ({"reward": "high"}, "schema violation at reward"),
    ({"label": 2}, "schema violation at label"),
    ({"id": ""}, "schema violation at id"),
])
def test_jsonl_schema_violations(tmp_path, change, problem):
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0, **change), jsonl_record(1)])
    check(path, 0, 1, problem)


def test_jsonl_tool_result_without_call(tmp_path):
    bad = jsonl_record(0)
    bad["messages"][3]["tool_call_id"] = "nope"
    path = write_lines(tmp_path / "runs.jsonl", [bad, jsonl_record(1)])
    check(path, 0, 1, "answers no earlier tool call")


def test_jsonl_duplicate_id(tmp_path):
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0), jsonl_record(1), jsonl_record(0)])
    check(path, 2, 2, "duplicate trajectory id")


def test_jsonl_labels_threshold_and_override(tmp_path):
    path = write_lines(tmp_path / "runs.jsonl", [
        jsonl_record(0, reward=0.4), jsonl_record(1, reward=0.9), jsonl_record(2, reward=0.0, label=1),
    ])
    assert [t.label for t in load_trajectories(path)] == [1, 1, 1]
    assert [t.label for t in load_trajectories(path, label_threshold=0.5)] == [0, 1, 1]


def test_jsonl_blank_lines_and_error_flags(tmp_path):
    flagged = jsonl_record(0)
    flagged["messages"][3].update(content="fine-looking output", is_error=True)
    unflagged = jsonl_record(1)
    unflagged["messages"][3]["content"] = "Error: boom"
    path = write_lines(tmp_path / "runs.jsonl", ["", flagged, "   ", unflagged])
    first, second = load_trajectories(path)
    assert first.n_tool_errors == 1 and second.n_tool_errors == 1
    assert first.source.index == 1 and second.source.index == 3  # 0-based line index


# ----------------------------------------------------------------------------- tau-bench


def test_tau_bench_missing_reward(tmp_path):
    bad = tau_record(1)
    del bad["reward"]
    name = "tool-calling-m-0.0_range_0--1_user-u-llm_1.json"
    path = write_json(tmp_path / name, [tau_record(0), bad, tau_record(2)])
    good, _ = check(path, 1, 2, "missing 'reward'")
    assert good[0].agent == "m/tool-calling" and good[0].domain == "retail"
    assert good[0].n_tool_errors == 1 and good[0].steps[-1].kind == "final_answer"
    assert "secret instruction" not in repr(good[0].steps)


def test_tau_bench_empty_trajectory(tmp_path):
    crashed = tau_record(1, traj=[], reward=0.0)
    crashed["info"] = {"error": "ContextWindowExceededError", "traceback": "..."}
    path = write_json(tmp_path / "run.json", [tau_record(0), crashed])
    check(path, 1, 1, "empty trajectory")
    only_system = tau_record(1, traj=[{"role": "system", "content": "policy"}])
    path = write_json(tmp_path / "run2.json", [only_system, tau_record(0)])
    check(path, 0, 1, "empty trajectory")


def test_tau_bench_unknown_role(tmp_path):
    bad = tau_record(1)
    bad["traj"][1]["role"] = "customer"
    path = write_json(tmp_path / "run.json", [tau_record(0), bad])
    check(path, 1, 1, "unknown role 'customer'")


def test_tau_bench_malformed_json_names_the_record(tmp_path):
    text = json.dumps([tau_record(0), tau_record(1)])[:-1] + ', {"task_id": 2, "reward": oops}]'
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    assert detect_format(path) == "tau_bench"
    check(path, 2, 2, "malformed JSON")


def test_tau_bench_non_utf8_bytes(tmp_path):
    text = json.dumps([tau_record(0), tau_record(1, task_id="MARK"), tau_record(2)]).encode()
    path = tmp_path / "run.json"
    path.write_bytes(text.replace(b'"MARK"', b'"MA' + BAD_BYTES + b'RK"'))
    check(path, 1, 2, "invalid UTF-8")


def test_tau_bench_duplicate_task_trial_get_index_suffix(tmp_path):
    path = write_json(tmp_path / "run.json", [tau_record(0), tau_record(0)])
    ids = [t.id for t in load_trajectories(path)]
    assert ids == ["run:0:0#0", "run:0:0#1"]


def test_tau_bench_reused_call_ids_stay_paired(tmp_path):
    record = tau_record(0)
    record["traj"][4:4] = [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "x", "type": "function",
             "function": {"name": "calculate", "arguments": "{\"expression\": \"1+1\"}"}}]},
        {"role": "tool", "tool_call_id": "x", "name": "calculate", "content": "2"},
    ]
    traj = load_trajectories(write_json(tmp_path / "run.json", [record]))[0]
    pairs = [(s.kind, s.call_id, s.tool_name) for s in traj.steps if s.kind.startswith("tool")]
    assert pairs == [("tool_call", "x", "get_order_details"), ("tool_result", "x", "get_order_details"),
                     ("tool_call", "x#2", "calculate"), ("tool_result", "x#2", "calculate")]


def test_tau_bench_react_text_actions(tmp_path):
    record = tau_record(0)
    record["traj"] = [
        {"role": "system", "content": "# Airline Agent Policy"},
        {"role": "user", "content": "Hi, cancel ABC."},
        {"role": "assistant", "content": 'Thought: look it up\nAction:\n{"name": "get_reservation_details", '
                                         '"arguments": {"reservation_id": "ABC"}}'},
        {"role": "user", "content": "API output: Error: reservation not found"},
        {"role": "assistant", "content": 'Action:\n{"name": "respond", "arguments": {"content": "Not found."}}'},
        {"role": "user", "content": "Ok bye ###STOP###"},
    ]
    traj = load_trajectories(write_json(tmp_path / "react-m-0.0_range_0--1_user-u-llm_1.json", [record]))[0]
    kinds = [s.kind for s in traj.steps]
    assert kinds == ["user", "assistant", "tool_call", "tool_result", "final_answer", "user"]
    assert traj.steps[2].arguments == {"reservation_id": "ABC"} and traj.steps[3].is_error
    assert traj.steps[3].content == "Error: reservation not found" and traj.steps[4].content == "Not found."
    assert traj.agent == "m/react" and traj.domain == "airline"


# ----------------------------------------------------------------------------- WebShop / ADaPT / tau2

def test_webshop_bad_records(tmp_path):
    no_reward = webshop_record(1)
    del no_reward["reward"]
    lines = [webshop_record(0), no_reward, webshop_record(2, steps=[]), '{"session": ', webshop_record(4),
             json.dumps(webshop_record(5)).encode().replace(b"buy a mug", b"buy a " + BAD_BYTES)]
    path = write_lines(tmp_path / "episodes.jsonl", lines)
    assert detect_format(path) == "webshop_react"
    with pytest.raises(TrajectoryFormatError) as info:
        list(iter_trajectories(path))
    assert_names(info.value, path, 1)
    report = LoadReport()
    good = list(iter_trajectories(path, on_error="skip", report=report))
    assert [t.task_id for t in good] == ["fixed_0", "fixed_4"]
    assert [r for _, r, _ in report.skipped] == [1, 2, 3, 5]
    problems = [p for _, _, p in report.skipped]
    assert "missing 'reward'" in problems[0] and "empty trajectory" in problems[1]
    assert "malformed JSON" in problems[2] and "invalid UTF-8" in problems[3]
    steps = good[0].steps
    assert steps[0].content == "buy a mug" and steps[-1].content == "" and steps[4].is_error
    assert good[0].hidden["score_in_final_obs"] == 0.5


def test_adapt_bad_records(tmp_path):
    doc = {
        "fixed_0": {"problem": "buy a mug", "score": 1.0, "success": True, "action_history": ["search[mug]"]},
        "fixed_1": {"problem": "buy a cup", "success": False, "action_history": ["search[cup]"]},
        "fixed_2": {"problem": "buy a pot", "score": 0.0, "success": False, "action_history": []},
        "overall": {"score": 0.5, "success_rate": 0.5, "count": 3},
    }
    path = write_json(tmp_path / "ADaPT_maxd3_webshop_m.json", doc)
    assert detect_format(path) == "adapt"
    with pytest.raises(TrajectoryFormatError) as info:
        list(iter_trajectories(path))
    assert_names(info.value, path, 1)
    good = load_trajectories(path, on_error="skip")
    report = good.report
    assert [t.task_id for t in good] == ["fixed_0"] and good[0].agent == "ADaPT-maxd3/m"
    assert [(r, "score" in p or "empty" in p) for _, r, p in report.skipped] == [(1, True), (2, True)]


def test_tau2_bad_records(tmp_path):
    no_reward = tau2_sim(1, reward_info={"db_check": None})
    unknown_role = tau2_sim(2)
    unknown_role["messages"][1]["role"] = "operator"
    (tmp_path / "mysub_2025-01-01").mkdir()
    path = write_json(tmp_path / "mysub_2025-01-01" / "x.json",
                      tau2_doc([tau2_sim(0), no_reward, unknown_role, tau2_sim(3, messages=[])]))
    assert detect_format(path) == "tau2"
    with pytest.raises(TrajectoryFormatError) as info:
        list(iter_trajectories(path))
    assert_names(info.value, path, 1)
    good = load_trajectories(path, on_error="skip")
    report = good.report
    assert [t.trial for t in good] == [0]
    problems = {r: p for _, r, p in report.skipped}
    assert "reward" in problems[1] and "unknown role 'operator'" in problems[2] and "empty" in problems[3]
    traj = good[0]
    assert traj.n_tool_errors == 1 and traj.steps[-1].kind == "final_answer"
    assert traj.agent == "mysub/m" and traj.domain == "airline" and traj.id == "mysub_2025-01-01/x:1:0"
    assert traj.hidden["instruction"] == "be the user" and traj.hidden["system_prompt"] == "# Airline Agent Policy"
    assert traj.hidden["user_info"]["llm_args"]["api_key"] == "<redacted>"
    assert "sk-SECRET" not in json.dumps(traj.hidden)


def test_tau2_malformed_simulation(tmp_path):
    text = json.dumps(tau2_doc([tau2_sim(0), tau2_sim(1)]))
    text = text[: text.rindex("]")] + ', {"id": broken}]}'
    path = tmp_path / "x.json"
    path.write_text(text, encoding="utf-8")
    check(path, 2, 2, "malformed JSON")


# ----------------------------------------------------------------------------- files and options

def test_unknown_format_names_the_file(tmp_path):
    path = write_json(tmp_path / "mystery.json", {"hello": "world"})
    with pytest.raises(TrajectoryFormatError) as info:
        detect_format(path)
    assert str(path) in str(info.value) and "unknown trajectory format" in str(info.value)
    with pytest.raises(TrajectoryFormatError):
        load_trajectories(path)
    annotations = write_lines(tmp_path / "errors.jsonl", [{"task_id": 1, "reward": 0.0, "category": "x"}])
    with pytest.raises(TrajectoryFormatError):
        detect_format(annotations)


def test_missing_path_and_bad_options(tmp_path):
    with pytest.raises(TrajectoryFormatError) as info:
        load_trajectories(tmp_path / "absent.jsonl")
    assert "absent.jsonl" in str(info.value)
    path = write_lines(tmp_path / "runs.jsonl", [jsonl_record(0)])
    with pytest.raises(ValueError):
        load_trajectories(path, on_error="ignore")
    with pytest.raises(ValueError):
        load_trajectories(path, format="csv")


def test_directory_skips_unknown_files_and_reports_them(tmp_path):
    write_lines(tmp_path / "b.jsonl", [jsonl_record(1)])
    write_lines(tmp_path / "a.jsonl", [jsonl_record(0)])
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    write_json(tmp_path / "mystery.json", {"hello": "world"})
    (tmp_path / "sub").mkdir()
    write_json(tmp_path / "sub" / "run.json", [tau_record(7)])
    trajectories = load_trajectories([tmp_path])
    report = trajectories.report
    assert [t.task_id for t in trajectories] == ["t0", "t1", "7"]  # sorted paths
    assert {Path(f).name for f, _ in report.ignored_files} == {"notes.txt", "mystery.json"}
    assert "loaded 3" in report.summary()


def test_explicit_format_mismatch_is_a_record_error(tmp_path):
    path = write_lines(tmp_path / "runs.jsonl", [webshop_record(0)])
    with pytest.raises(TrajectoryFormatError) as info:
        load_trajectories(path, format="jsonl")
    assert_names(info.value, path, 0)
