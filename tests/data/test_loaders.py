"""Loaders on real data: the shared raw collection (skipped when absent) and the bundled evals/data files."""

from __future__ import annotations

import json
import re
import tracemalloc
from collections import defaultdict
from pathlib import Path

import pytest

from rubricforge_dspy.data.formats import (
    FORMATS,
    LoadReport,
    TrajectoryFormatError,
    detect_format,
    iter_trajectories,
    load_trajectories,
)
from rubricforge_dspy.data.formats.jsonl import schema, validation_problem
from tests.support.helpers import BUNDLED, REPO, shared_missing
from tests.support.helpers import SHARED_RAW as SHARED

DOCS_FORMAT = REPO / "docs" / "FORMAT.md"

# Records whose run crashed before any message (info.error set, traj == []): not loadable, reported as skipped.
CRASHED = {
    "tau_bench_agentverify/assertions-agent-none-0.1_range_0-100_6_18_2025.json": 34,
    "tau_bench_grok/react-grok-4-fast-reasoning-0.0_range_0--1_"
    "user-grok-4-fast-reasoning-llm_1129215652.json": 1,
    "tau_bench_grok/tool-calling-grok-4-1-fast-reasoning-0.0_range_0--1_"
    "user-grok-4-1-fast-reasoning-llm_1129145530.json": 1,
    "tau_bench_llama31_8b/tool-calling-Llama-3.1-8B-Instruct-1.0_range_0--1_"
    "user-gpt-4o-llm_locale-en_checkpoint.json": 1,
}


def _format_of(rel: str) -> str | None:
    top = rel.split("/")[0]
    if top.startswith("tau_bench_") and rel.endswith(".json"):
        return "tau_bench"
    if top == "tau2_leaderboard":
        return "tau2"
    if top == "react_webshop" and rel.endswith(".jsonl"):
        return "webshop_react"
    if top == "adapt":
        return "adapt"
    return None


def parse_sources_table(path: Path) -> dict[str, dict]:
    """SOURCES.md table rows of trajectory files: #traj, positives (reward > 0), #tasks, #(reward = 1)."""
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not re.fullmatch(r"\d+", cells[2]) or not re.fullmatch(r"\d+", cells[4]):
            continue
        labels = cells[3]
        binary = re.search(r"binary pass=(\d+) fail=(\d+)", labels)
        graded = re.search(r"r=1:(\d+) 0<r<1:(\d+) r=0:(\d+)", labels)
        if binary:
            positives, perfect = int(binary[1]), int(binary[1])
        elif graded:
            positives, perfect = int(graded[1]) + int(graded[2]), int(graded[1])
        else:
            continue  # annotations / raw logs, not trajectory files
        rel = cells[0]
        rows[rel] = {"n": int(cells[2]), "positives": positives, "perfect": perfect, "tasks": int(cells[4]),
                     "format": _format_of(rel)}
    return rows


def _stats(trajectories):
    return len(trajectories), sum(t.label for t in trajectories), len({t.task_id for t in trajectories})


# ----------------------------------------------------------------------------- shared raw data

@pytest.fixture(scope="module")
def shared_table():
    if not (SHARED / "SOURCES.md").is_file():
        pytest.skip(shared_missing(SHARED / "SOURCES.md"))
    table = parse_sources_table(SHARED / "SOURCES.md")
    assert len(table) >= 19, "SOURCES.md table was not parsed"
    return table


@pytest.fixture(scope="module")
def shared_load():
    if not SHARED.is_dir():
        pytest.skip(shared_missing(SHARED))
    loaded = load_trajectories(SHARED, on_error="skip")
    return loaded, loaded.report


def _raw_task_ids(path: Path, indices) -> set[str]:
    records = json.loads(path.read_text(encoding="utf-8"))
    return {str(records[i]["task_id"]) for i in indices}


@pytest.mark.parametrize("fmt", FORMATS[:4])
def test_every_shared_file_of_each_format_matches_sources_md(fmt, shared_table):
    files = [rel for rel, row in shared_table.items() if row["format"] == fmt]
    assert files, f"no {fmt} files listed in SOURCES.md"
    for rel in files:
        row, path = shared_table[rel], SHARED / rel
        assert detect_format(path) == fmt, rel
        report = LoadReport()
        trajectories = list(iter_trajectories(path, format=fmt, on_error="skip", report=report))
        n, positives, tasks = _stats(trajectories)
        assert report.loaded == n
        assert len(report.skipped) == CRASHED.get(rel, 0), (rel, report.skipped[:3])
        assert n + len(report.skipped) == row["n"], rel
        assert positives == row["perfect"], rel  # each loader's own rule: success = reward 1
        at_zero = list(iter_trajectories(path, format=fmt, on_error="skip", label_threshold=0.0))
        assert sum(t.label for t in at_zero) == row["positives"], rel
        if report.skipped:  # crashed runs: reward 0, no messages; their tasks still count in SOURCES.md
            assert all(problem.startswith("empty trajectory") and "crashed" in problem
                       for _, _, problem in report.skipped)
            skipped_tasks = _raw_task_ids(path, [record for _, record, _ in report.skipped])
            assert len({t.task_id for t in trajectories} | skipped_tasks) == row["tasks"], rel
        else:
            assert tasks == row["tasks"], rel
        perfect = sum(t.reward >= 1.0 for t in trajectories)
        assert perfect == row["perfect"], rel


def test_graded_threshold_on_shared_files(shared_table):
    graded = ("react_webshop/react_webshop_davinci002_500.jsonl", "adapt/ADaPT_maxd3_webshop_gpt-3.5-turbo.json")
    for rel in graded:
        trajectories = load_trajectories(SHARED / rel, label_threshold=0.999)
        assert sum(t.label for t in trajectories) == shared_table[rel]["perfect"]


def test_directory_load_finds_every_listed_file(shared_table, shared_load):
    trajectories, report = shared_load
    loaded_files = {Path(t.source.file).relative_to(SHARED).as_posix() for t in trajectories}
    assert loaded_files == set(shared_table)
    assert report.loaded == len(trajectories) == sum(r["n"] for r in shared_table.values()) - sum(CRASHED.values())
    ignored = {Path(f).name for f, _ in report.ignored_files}
    assert {"airline_error_classes.jsonl", "retail_error_classes.jsonl", "SOURCES.md"} <= ignored
    assert len({t.id for t in trajectories}) == len(trajectories)


def test_shared_ids_are_stable(shared_load):
    first, _ = shared_load
    again = load_trajectories(SHARED / "tau_bench_official", on_error="skip")
    assert [t.id for t in again] == [t.id for t in first if "tau_bench_official" in t.source.file]
    assert again[0].id == "gpt-4o-airline:0:0"


def test_act_and_react_runs_yield_tool_calls(shared_load):
    trajectories, _ = shared_load
    for prefix, agent in (("act-", "grok-4-fast-non-reasoning/act"), ("react-", "grok-4-fast-reasoning/react")):
        run = [t for t in trajectories if Path(t.source.file).name.startswith(prefix)]
        assert run and all(t.agent == agent and t.domain == "airline" for t in run)
        assert sum(t.n_tool_calls for t in run) > 200
        assert sum(t.n_tool_errors for t in run) > 0
        for t in run:
            calls = [s for s in t.steps if s.kind == "tool_call"]
            results = [s for s in t.steps if s.kind == "tool_result"]
            assert len(results) <= len(calls) <= len(results) + 1
            assert all(s.tool_name != "respond" for s in calls)
            assert all(isinstance(s.arguments, dict) for s in calls)
            for s in t.steps:
                assert not (s.kind == "user" and s.content.startswith("API output:"))
                assert not s.content.startswith("API output:")
            assert t.hidden["run"]["mode"] == "text-actions"


def test_tau_bench_tool_errors_are_flagged(shared_load):
    trajectories, _ = shared_load
    tau = [t for t in trajectories if t.hidden["format"] == "tau_bench"]
    results = [s for t in tau for s in t.steps if s.kind == "tool_result"]
    assert sum(s.is_error for s in results) > 500
    for s in results:
        starts_error = s.content.startswith(("Error:", "Unknown action")) or s.content.startswith('# var_')
        if s.content.startswith(("Error:", "Unknown action")):
            assert s.is_error, s.content[:80]
        if s.is_error:
            assert starts_error, s.content[:80]
    shapes = {re.sub(r"\d+", "N", s.content[:12]) for s in results if s.is_error}
    assert {"Error: user ", "Unknown acti", '# var_N = "E'} <= shapes


def test_tau2_error_flags_and_metadata(shared_load):
    trajectories, _ = shared_load
    tau2 = [t for t in trajectories if t.hidden["format"] == "tau2"]
    # submission directory + the run's agent model (info.agent_info.llm)
    assert {t.agent for t in tau2} == {"button-claude-opus-4-6_distyl-ai/claude-opus-4-6",
                                       "claude-sonnet-4-5_aide-platform/claude-sonnet-4-5",
                                       "gpt-oss-120b_openai/openai/gpt-oss-120b",
                                       "toolorchestra_nvidia/gpt-4.1-mini-2025-04-14"}
    errors = defaultdict(int)
    for t in tau2:
        errors[t.agent.split("/")[0]] += t.n_tool_errors
        assert t.hidden["reward_info"]["reward"] == t.reward
        assert t.hidden["system_prompt"] and "policy" in t.hidden["system_prompt"][:200].lower()
        assert t.hidden["evaluation_criteria"] is not None
    assert errors["claude-sonnet-4-5_aide-platform"] == 1 and errors["gpt-oss-120b_openai"] == 16
    assert errors["toolorchestra_nvidia"] > 0  # no `error` field there: detected from the content
    leaked = [t for t in tau2 if "api_key" in json.dumps(t.hidden.get("user_info"), default=str)
              and "<redacted>" not in json.dumps(t.hidden.get("user_info"), default=str)]
    assert not leaked
    assert not any("CmMK" in json.dumps(t.hidden, default=str) for t in tau2)  # the leaked key's prefix


def test_assertions_agent_python_literal_arguments(shared_load):
    trajectories, _ = shared_load
    run = [t for t in trajectories if "assertions-agent" in t.source.file]
    calls = [s for t in run for s in t.steps if s.kind == "tool_call"]
    assert calls and all(isinstance(s.arguments, dict) for s in calls)
    results = [s for t in run for s in t.steps if s.kind == "tool_result"]
    assert all(s.call_id for s in results) and all(s.tool_name for s in results)
    assert {t.domain for t in run} == {"retail"} and {t.agent for t in run} == {"unknown-model/assertions-agent"}


def test_system_prompt_and_info_are_hidden(shared_load):
    trajectories, _ = shared_load
    for t in trajectories:
        for s in t.steps:
            assert not s.content.startswith(("# Airline Agent Policy", "# Retail agent policy"))
            assert "Your score (min" not in s.content
        if t.hidden["format"] == "tau_bench":
            instruction = t.hidden.get("instruction")
            if instruction:
                assert not any(instruction in s.content for s in t.steps)
            assert "info" in t.hidden and "reward_info" in t.hidden


# ----------------------------------------------------------------------------- bundled evals/data

BUNDLED_EXPECTED = {
    # rel path: (format, n, positives at threshold 0, tasks, positives at 0.999, domain, agent)
    "tau_bench_official/gpt-4o-airline.json": ("tau_bench", 200, 84, 50, 84, "airline", "gpt-4o"),
    "tau_bench_grok/tool-calling-grok-4-fast-reasoning-0.0_range_0--1_user-grok-4-fast-reasoning-llm_1129144541.json":
        ("tau_bench", 115, 69, 115, 69, "retail", "grok-4-fast-reasoning/tool-calling"),
    "react_webshop/react_webshop_davinci002_500.jsonl":
        ("webshop_react", 500, 444, 500, 179, "webshop", "react-text-davinci-002"),
    "adapt/ADaPT_maxd3_webshop_gpt-3.5-turbo.json":
        ("adapt", 100, 77, 100, 44, "webshop", "ADaPT-maxd3/gpt-3.5-turbo"),
}


# the public multi-agent sets shipped converted to the generic JSONL (evals/data/SOURCES.md): trajectories
CONVERTED_EXPECTED = {"mint_alfworld/mint_alfworld_6agents.jsonl": 804,
                      "intercode_bash/intercode_bash_7agents.jsonl": 1342,
                      "devai/devai_requirements.jsonl": 1097}  # issue 39: human-labeled, beside a recorded judge


@pytest.mark.parametrize("rel", sorted(CONVERTED_EXPECTED))
def test_converted_multi_agent_sets_load_whole(rel):
    trajectories = load_trajectories(BUNDLED / rel)
    assert len(trajectories) == CONVERTED_EXPECTED[rel] and not trajectories.report.skipped
    tasks = {t.task_id for t in trajectories}
    assert len(tasks) < len(trajectories) and all(t.label in (0, 1) for t in trajectories)  # several per task


@pytest.mark.parametrize("rel", sorted(BUNDLED_EXPECTED))
def test_bundled_file_counts(rel):
    fmt, n, positives, tasks, perfect, domain, agent = BUNDLED_EXPECTED[rel]
    path = BUNDLED / rel
    assert detect_format(path) == fmt
    trajectories = load_trajectories(path, label_threshold=0.0)  # on_error="raise": bundled files are clean
    report = trajectories.report
    assert _stats(trajectories) == (n, positives, tasks)
    default = load_trajectories(path)  # the loader's own rule: success = reward 1
    assert sum(t.label for t in default) == perfect
    assert report.loaded == n and not report.skipped
    assert {t.domain for t in trajectories} == {domain} and {t.agent for t in trajectories} == {agent}
    strict = load_trajectories(path, label_threshold=0.999)
    assert sum(t.label for t in strict) == perfect


def test_bundled_counts_match_bundled_sources_md():
    table = parse_sources_table(BUNDLED / "SOURCES.md")
    assert set(table) == set(BUNDLED_EXPECTED)
    for rel, row in table.items():
        _, n, positives, tasks, perfect, _, _ = BUNDLED_EXPECTED[rel]
        assert (row["n"], row["positives"], row["tasks"], row["perfect"]) == (n, positives, tasks, perfect)


def test_bundled_files_are_byte_copies_of_shared():
    if not SHARED.is_dir():
        pytest.skip(shared_missing(SHARED))
    for rel in BUNDLED_EXPECTED:
        assert (BUNDLED / rel).read_bytes() == (SHARED / rel).read_bytes(), rel


def test_bundled_directory_load():
    trajectories = load_trajectories(BUNDLED)
    report = trajectories.report
    # trace and agent-log samples (no outcome, or Inspect scorer labels: tests/data/test_agent_log_loaders.py) aside
    labeled = [t for t in trajectories if t.label is not None and t.hidden["format"] != "inspect"]
    assert len(labeled) == sum(v[1] for v in BUNDLED_EXPECTED.values()) + sum(CONVERTED_EXPECTED.values())
    assert {t.hidden["format"] for t in trajectories if t.label is None} == {
        "otel", "langfuse", "inspect", "mini_swe", "swe_agent", "openhands", "atif"}
    assert {Path(f).name for f, _ in report.ignored_files} >= {"SOURCES.md", "LICENSES.md"}
    assert len({t.id for t in trajectories}) == len(trajectories)
    only_webshop = load_trajectories(BUNDLED, format="webshop_react")
    report = only_webshop.report
    assert {t.hidden["format"] for t in only_webshop} == {"webshop_react"} and len(only_webshop) == 500


def test_bundled_tau_bench_steps():
    trajectories = load_trajectories(BUNDLED / "tau_bench_official")
    first = trajectories[0]
    assert first.id == "gpt-4o-airline:0:0" and first.trial == 0 and first.task_id == "0"
    assert first.steps[0].kind == "user"
    assert first.hidden["system_prompt"].startswith("# Airline Agent Policy")
    assert first.hidden["gold_actions"] and first.hidden["gt_data_hash"]
    assert first.hidden["instruction"].startswith("You are mia_li_3668")
    for t in trajectories:
        calls = {s.call_id: s for s in t.steps if s.kind == "tool_call"}
        for s in t.steps:
            if s.kind == "tool_result":
                assert s.call_id in calls and s.tool_name == calls[s.call_id].tool_name
        finals = [i for i, s in enumerate(t.steps) if s.kind == "final_answer"]
        assert len(finals) <= 1
        if finals:  # the closing assistant text: nothing but user turns after it
            assert all(s.kind == "user" for s in t.steps[finals[0] + 1:])
    assert sum(t.n_tool_errors for t in trajectories) > 0
    assert sum(any(s.kind == "final_answer" for s in t.steps) for t in trajectories) > 100


def test_bundled_webshop_has_no_evaluator_output():
    trajectories = load_trajectories(BUNDLED / "react_webshop")
    for t in trajectories:
        assert t.steps[0].kind == "user" and t.steps[0].content == t.hidden["instruction"].strip()
        assert all("Your score" not in s.content for s in t.steps)
        assert not any(s.kind == "final_answer" for s in t.steps)
        for s in t.steps:
            if s.kind == "tool_call":
                assert s.tool_name in {"search", "click", "exit"}
    assert sum(t.n_tool_errors for t in trajectories) == 310  # "Invalid action!"
    scored = [t for t in trajectories if t.hidden["score_in_final_obs"] is not None]
    assert len(scored) == 460
    assert all(abs(t.hidden["score_in_final_obs"] - t.reward) < 1e-6 for t in scored)


def test_bundled_adapt_actions_only():
    trajectories = load_trajectories(BUNDLED / "adapt")
    assert "overall" not in {t.task_id for t in trajectories}
    assert trajectories[0].hidden["file_overall"]["count"] == 100
    for t in trajectories:
        assert t.steps[0].kind == "user" and t.steps[0].content.startswith("I am looking to buy")
        assert not any(s.kind == "tool_result" for s in t.steps)
        assert t.n_tool_calls > 0
        assert (t.hidden["success"] is True) == (t.reward == 1.0)


# ----------------------------------------------------------------------------- generic JSONL

def _docs_example_lines() -> list[str]:
    text = DOCS_FORMAT.read_text(encoding="utf-8")
    block = re.search(r"```jsonl\n(.*?)```", text, re.DOTALL)
    assert block, "docs/FORMAT.md has no ```jsonl example"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_schema_is_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema())


def test_docs_example_loads(tmp_path):
    lines = _docs_example_lines()
    pretty = re.search(r"```json\n(.*?)```", DOCS_FORMAT.read_text(encoding="utf-8"), re.DOTALL).group(1)
    assert json.loads(pretty) == json.loads(lines[0])
    for line in lines:
        assert validation_problem(json.loads(line)) is None
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(path) == "jsonl"
    _loaded = load_trajectories(path)
    (first, second) = _loaded
    report = _loaded.report
    assert [s.kind for s in first.steps] == ["user", "tool_call", "tool_result", "final_answer"]
    assert first.steps[1].arguments == {"reservation_id": "ABC123"} and first.steps[2].is_error
    assert first.label == 0 and first.hidden["system_prompt"].startswith("You are an airline agent")
    assert first.hidden["metadata"]["gold_actions"]
    assert second.reward == 0.75 and second.label == 1 and second.domain == "webshop"
    assert second.steps[2].tool_name == "search" and not second.steps[2].is_error
    assert report.loaded == 2


@pytest.mark.slow
def test_jsonl_streams_in_constant_memory(tmp_path):
    record = json.loads(_docs_example_lines()[1])
    big = tmp_path / "big.jsonl"
    filler = "x" * 20_000
    with open(big, "w", encoding="utf-8") as handle:
        for i in range(1000):  # ~20 MB
            record["id"] = f"r{i}"
            record["metadata"] = {"filler": filler}
            handle.write(json.dumps(record) + "\n")
    assert big.stat().st_size > 20_000_000
    tracemalloc.start()
    count = 0
    for _ in iter_trajectories(big):
        count += 1
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == 1000
    assert peak < 5_000_000, f"peak {peak} bytes while streaming a {big.stat().st_size} byte file"


# --- text-only ReAct agents and legacy function calling in the generic JSONL (issue 12) -----------------

def _jsonl(tmp_path, *messages, name="runs.jsonl"):
    path = tmp_path / name
    record = {"id": "r1", "task_id": "t1", "reward": 1.0, "messages": list(messages)}
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


REACT = (
    {"role": "user", "content": "Find the patient's latest HbA1c and report it."},
    {"role": "assistant", "content": "Thought: search the observations.", "action": "GET /Observation?code=4548-4"},
    {"role": "user", "observation": True, "content": '{"entry": [{"value": 6.1}]}'},
    {"role": "assistant", "content": "Thought: report it.", "action": "FINISH([6.1])"},
    {"role": "user", "observation": True, "content": "Error: FINISH takes a string", "is_error": True},
)


def test_text_actions_and_observations_render_as_actions_and_results(tmp_path):
    from rubricforge_dspy.evidence.render import render_trajectory
    from tests.support.render_grammar import unquote

    (t,) = load_trajectories(_jsonl(tmp_path, *REACT))
    assert [s.kind for s in t.steps] == ["user", "assistant", "tool_call", "tool_result",
                                         "assistant", "tool_call", "tool_result"]
    assert (t.n_tool_calls, t.n_user_turns, t.n_tool_errors) == (2, 1, 1)
    assert t.steps[3].call_id == t.steps[2].call_id and t.steps[3].tool_name == "action"
    text = unquote(render_trajectory(t))
    assert text.startswith("COUNTERS: steps=7 tool_calls=2 tool_errors=1 user_turns=1")
    assert "TOOL CALL action(GET /Observation?code=4548-4)" in text
    assert 'TOOL RESULT action: {"entry": [{"value": 6.1}]}' in text
    # the last assistant message is followed by its action and an observation: it is not a final answer
    assert text.endswith("FINAL ANSWER: (none)")


def test_final_answer_is_the_last_assistant_text_with_no_action_or_observation_after_it(tmp_path):
    closing = {"role": "assistant", "content": "The latest HbA1c is 6.1%."}
    thanks = {"role": "user", "content": "Thanks!"}
    (t,) = load_trajectories(_jsonl(tmp_path, *REACT, closing, thanks))
    assert [s.kind for s in t.steps][-2:] == ["final_answer", "user"]
    assert t.steps[-2].content == "The latest HbA1c is 6.1%."


def test_an_observation_must_follow_an_action(tmp_path):
    path = _jsonl(tmp_path, {"role": "user", "observation": True, "content": "You are in a kitchen."})
    with pytest.raises(TrajectoryFormatError, match=r"runs\.jsonl, record 0: message 0: observation answers no "
                                                    r"earlier action.*plain user message"):
        load_trajectories(path)


def test_action_and_observation_marks_are_checked_by_the_schema(tmp_path):
    for bad in ({"role": "user", "content": "x", "action": "ls"},
                {"role": "assistant", "content": "x", "observation": True},
                {"role": "assistant", "content": "x", "action": ["ls"]}):
        record = {"id": "r", "task_id": "t", "reward": 0, "messages": [bad]}
        assert validation_problem(record), bad


def test_legacy_function_call_becomes_a_tool_call_and_its_result(tmp_path):
    from rubricforge_dspy.evidence.render import render_trajectory
    from tests.support.render_grammar import unquote

    messages = (
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"role": "function", "name": "get_weather", "content": "{\"temp_c\": 18}"},
        {"role": "assistant", "content": "18 degrees C in Paris."},
    )
    (t,) = load_trajectories(_jsonl(tmp_path, *messages))
    assert [s.kind for s in t.steps] == ["user", "tool_call", "tool_result", "final_answer"]
    assert t.steps[1].arguments == {"city": "Paris"} and t.steps[2].call_id == t.steps[1].call_id
    text = unquote(render_trajectory(t))
    assert 'TOOL CALL get_weather({"city": "Paris"})' in text and 'TOOL RESULT get_weather: {"temp_c": 18}' in text
    orphan = ({"role": "user", "content": "hi"}, {"role": "function", "name": "f", "content": "1"})
    with pytest.raises(TrajectoryFormatError, match="function message answers no earlier action"):
        load_trajectories(_jsonl(tmp_path, *orphan, name="orphan.jsonl"))


def test_text_actions_survive_a_round_trip_through_the_format(tmp_path):
    from rubricforge_dspy.data.formats.jsonl import to_record

    (t,) = load_trajectories(_jsonl(tmp_path, *REACT))
    record = to_record(t, reward=1.0, label=1)
    assert [m.get("action") for m in record["messages"] if m["role"] == "assistant" and "action" in m] == \
        ["GET /Observation?code=4548-4", "FINISH([6.1])"]
    again = tmp_path / "again.jsonl"
    again.write_text(json.dumps({**record, "id": "r2"}) + "\n", encoding="utf-8")
    (u,) = load_trajectories(again)
    assert u.steps == t.steps


def test_docs_react_example_reads_as_documented(tmp_path):
    text = DOCS_FORMAT.read_text(encoding="utf-8")
    block = re.search(r"### Text-only \(ReAct\) agents.*?```\n(.*?)```", text, re.DOTALL).group(1)
    messages = [json.loads(line) for line in block.splitlines() if line.strip()]
    (t,) = load_trajectories(_jsonl(tmp_path, *messages))
    assert (t.n_tool_calls, t.n_user_turns, t.n_tool_errors) == (2, 1, 1)
    assert t.steps[-1].kind == "final_answer" and t.steps[-1].content == messages[-1]["content"]
