"""ATIF files as real producers write them (issue 19, item 7): accepted variants, and refusals that name the
file and the step. The real sample is evals/data/atif/openagents-regex-log (OpenAgentsInc/openagents,
a Claude Code run on Terminal-Bench's regex-log task; see evals/data/SOURCES.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats import detect_format, load_trajectories
from rubricforge_dspy.evidence.render import render_trajectory

DATA = Path(__file__).resolve().parents[2] / "evals" / "data" / "atif"
OPENAGENTS = DATA / "openagents-regex-log" / "20251211-161750-ba4ddb16" / "trajectory.json"
HELLO = DATA / "hello-world__abc123" / "agent" / "trajectory.json"


def _one(path: Path):
    trajectories = load_trajectories(path)
    assert len(trajectories) == 1
    return trajectories[0]


def _write(tmp_path: Path, record: dict, name: str = "trajectory.json") -> Path:
    path = tmp_path / "trial-x" / "agent" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_real_openagents_claude_code_file_is_read():
    """schema_version "1.4" (no ATIF-v prefix), agent.model, calls as {id, name}, results as system steps
    written before the step holding their call, result.success flags."""
    assert detect_format(OPENAGENTS) == "atif"
    t = _one(OPENAGENTS)
    record = json.loads(OPENAGENTS.read_text())
    assert t.id == record["session_id"] and t.agent == "claude-code/claude-sonnet-4-20250514"
    kinds = [s.kind for s in t.steps]
    assert kinds[0] == "user" and kinds.count("tool_call") == 5 and kinds.count("tool_result") == 5
    for n, step in enumerate(t.steps):  # every result follows its own call
        if step.kind == "tool_result":
            assert step.call_id in {s.call_id for s in t.steps[:n] if s.kind == "tool_call"}
    results = {s.call_id: s for s in t.steps if s.kind == "tool_result"}
    assert results["toolu_01TQktt5rHsfYcF1BCvJDFTj"].content == "EACCES: permission denied, mkdir '/app'"
    assert results["toolu_01TQktt5rHsfYcF1BCvJDFTj"].tool_name == "Write"
    assert [results[k].is_error for k in ("toolu_01TQktt5rHsfYcF1BCvJDFTj", "toolu_01JmxcEQkWqqRRhx5E7DSnu6",
                                          "toolu_01EV5hsgGqBm4whMCUvfUWxC", "toolu_0186rmktgkZUgbWnnJXs8WB2")] == \
        [True, False, True, False]
    assert t.hidden["system_prompt"] is None  # "Tool result for ..." steps are results, not a system prompt
    text = render_trajectory(t)
    assert "Tool result for" not in text and "permission denied" in text and "(ERROR)" in text
    assert t.label is None and t.hidden["extra"]["success"] is True  # its outcome stays hidden


def _variant(mutate) -> dict:
    record = json.loads(HELLO.read_text())
    mutate(record)
    return record


def _drop_ids(r):
    del r["session_id"]
    r.pop("agent")
    for step in r["steps"]:
        step.pop("step_id")


def _openai_calls(r):
    for step in r["steps"]:
        step["tool_calls"] = [{"id": c["tool_call_id"], "type": "function",
                               "function": {"name": c["function_name"], "arguments": json.dumps(c["arguments"])}}
                              for c in step.get("tool_calls", [])]


def _name_input_calls(r):
    for step in r["steps"]:
        step["tool_calls"] = [{"id": c["tool_call_id"], "name": c["function_name"], "input": c["arguments"]}
                              for c in step.get("tool_calls", [])]


def _content_parts(r):
    for step in r["steps"]:
        step["message"] = [{"type": "text", "text": step["message"]}, {"type": "image", "source": {"path": "x.png"}}]


def _types_and_extras(r):
    r["schema_version"] = "ATIF-v1.7"
    r["session_id"] = 12345
    r["extra"] = {"anything": [1, 2]}
    for step in r["steps"]:
        step["step_id"] = str(step["step_id"])
        step["timestamp"] = 1765491470.5
        step["extra"] = {"is_sidechain": False}
        step["unknown_field"] = {"nested": True}


def _alt_sources(r):
    for step in r["steps"]:
        step["source"] = {"agent": "assistant", "user": "human", "system": "system"}[step["source"]]


def _observation_list_and_flags(r):
    results = r["steps"][3]["observation"]["results"]
    results[0]["is_error"] = False  # the producer's flag wins over the text ("Error: cat: ...")
    results[1]["is_error"] = True
    r["steps"][3]["observation"] = results


VARIANTS = {"no ids, no agent": _drop_ids, "OpenAI-shaped calls": _openai_calls, "name/input calls": _name_input_calls,
            "content-part messages": _content_parts, "other types and extra fields": _types_and_extras,
            "assistant/human sources": _alt_sources,
            "observation list with is_error flags": _observation_list_and_flags,
            "version 1.6 without prefix": lambda r: r.update(schema_version="1.6"),
            "lower-case prefix": lambda r: r.update(schema_version="atif-v1.5")}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_producer_variants_read_like_the_reference(name, tmp_path):
    reference = _one(HELLO)
    t = _one(_write(tmp_path, _variant(VARIANTS[name])))
    assert [(s.kind, s.content, s.tool_name) for s in t.steps] == \
        [(s.kind, s.content, s.tool_name) for s in reference.steps]
    assert [s.arguments for s in t.steps if s.kind == "tool_call"] == \
        [s.arguments for s in reference.steps if s.kind == "tool_call"]
    flags = [s.is_error for s in t.steps if s.kind == "tool_result"]
    expected = [False, False, True] if name.startswith("observation list") else [False, True, False]
    assert flags == expected


@pytest.mark.parametrize("mutate,problem", [
    (lambda r: r.update(steps={"a": 1}), "'steps' must be a list"),
    (lambda r: r["steps"].insert(1, "not a step"), r"steps\[1\] is not an object"),
    (lambda r: r["steps"][2].update(source="robot"), r"steps\[2\]: unknown source 'robot'"),
    (lambda r: r["steps"][2].update(tool_calls=["ls"]), r"steps\[2\]: a tool call is not an object"),
    (lambda r: r["steps"][2].update(observation="text"), r"steps\[2\]: 'observation' must be an object"),
    (lambda r: r.update(schema_version="2.0"), "schema_version '2.0'"),
])
def test_what_cannot_be_read_is_refused_naming_file_and_step(mutate, problem, tmp_path):
    path = _write(tmp_path, _variant(mutate))
    with pytest.raises(TrajectoryFormatError, match=f"trajectory.json, record 0: .*{problem}"):
        load_trajectories(path, format="atif")


def test_bare_version_is_sniffed_only_with_atif_steps(tmp_path):
    record = _variant(lambda r: r.update(schema_version="1.4"))
    assert detect_format(_write(tmp_path, record)) == "atif"
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema_version": "1.4", "steps": [{"name": "build"}]}))
    with pytest.raises(TrajectoryFormatError, match="unknown trajectory format"):
        detect_format(other)


def test_a_result_for_a_call_that_never_comes_is_still_shown(tmp_path):
    record = json.loads(OPENAGENTS.read_text())
    record = copy.deepcopy(record)
    record["steps"] = [s for s in record["steps"] if not s.get("tool_calls")]  # results only
    t = _one(_write(tmp_path, record))
    results = [s for s in t.steps if s.kind == "tool_result"]
    assert len(results) == 5 and results[0].is_error and results[0].call_id == "toolu_01TQktt5rHsfYcF1BCvJDFTj"
