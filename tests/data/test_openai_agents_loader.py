"""The OpenAI Agents SDK's exported trace records (format ``openai_agents``), on a sample the SDK wrote itself
(tests/fixtures/openai_agents/), and the otel loader's error naming a record once (issue #26, item 9)."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats import detect_format, load_trajectories
from rubricforge_dspy.evidence.render import render_trajectory
from tests.support.helpers import REPO

SAMPLE = REPO / "tests" / "fixtures" / "openai_agents" / "traces.jsonl"
CANARY = "CANARY-WORKFLOW-METADATA-5e1d"


def records() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def steps(trajectory) -> list[tuple]:
    return [(s.kind, s.tool_name, s.content, s.is_error) for s in trajectory.steps]


def test_an_agents_sdk_export_is_detected_and_read_as_the_episode():
    assert detect_format(SAMPLE) == "openai_agents"
    booked, failed = load_trajectories(SAMPLE)
    trace_ids = [r["id"] for r in records() if r["object"] == "trace"]
    assert [booked.id, failed.id] == trace_ids and booked.label is None and failed.label is None
    assert steps(booked) == [
        ("user", None, "Please book flight HAT101 for me.", False),
        ("tool_call", "transfer_to_booking_agent", "", False),
        ("tool_result", "transfer_to_booking_agent", '{"assistant": "Booking agent"}', False),
        ("tool_call", "book_flight", "", False),
        ("tool_result", "book_flight", "confirmation R101", False),
        ("final_answer", None, "Booked HAT101: confirmation R101.", False)]
    assert booked.steps[3].arguments == {"flight": "HAT101"}
    # the tool raised: the function span's error marks the result, the agent's false claim is the answer
    assert [s[:2] + s[3:] for s in steps(failed)][4] == ("tool_result", "book_flight", True)
    assert (failed.n_tool_errors, booked.n_tool_errors) == (1, 0)
    assert failed.steps[-1].content == "Your flight is booked!"
    assert booked.agent == "Triage agent/scripted-chat-model"
    assert booked.hidden["system_prompt"].startswith("Hand flight bookings") \
        and "Hand flight bookings" not in render_trajectory(booked)
    assert booked.hidden["workflow_name"] == "Flight booking"


@pytest.mark.parametrize("container", ["backend_body", "array", "body_per_line"])
def test_the_exporters_other_containers_read_the_same(tmp_path, container):
    """The body the SDK's BackendSpanExporter posts ({"data": [...]}), a JSON array, and bodies one per line."""
    items = records()
    path = tmp_path / "export.json"
    if container == "backend_body":
        path.write_text(json.dumps({"data": items}, indent=2))
    elif container == "array":
        path.write_text(json.dumps(items, indent=2))
    else:
        half = len(items) // 2
        path.write_text(json.dumps({"data": items[:half]}) + "\n" + json.dumps({"data": items[half:]}) + "\n")
    assert detect_format(path) == "openai_agents"
    assert [(t.id, steps(t)) for t in load_trajectories(path)] == [(t.id, steps(t)) for t in load_trajectories(SAMPLE)]


def test_trace_metadata_is_hidden_and_a_bad_record_is_named(tmp_path):
    items = records()
    items[0]["metadata"] = {"note": CANARY, "api_key": "sk-secret"}
    broken = {"object": "trace.span", "id": "span_x", "trace_id": items[0]["id"], "parent_id": None}  # no span_data
    guardrail = {"object": "trace.span", "id": "span_g", "trace_id": items[0]["id"], "parent_id": None,
                 "started_at": items[1]["started_at"], "ended_at": items[1]["ended_at"], "error": None,
                 "span_data": {"type": "guardrail", "name": f"{CANARY}-guardrail", "triggered": True}}
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [items[0], broken, guardrail, *items[1:]]))
    with pytest.raises(TrajectoryFormatError,
                       match=r"export\.jsonl, record 1: span 'span_x': a span needs a span_data object"):
        load_trajectories(path)
    loaded = load_trajectories(path, on_error="skip")
    assert len(loaded) == 2 and [(r, "span_data" in p) for _, r, p in loaded.report.skipped] == [(1, True)]
    first = loaded[0]
    assert first.hidden["metadata"] == {"note": CANARY, "api_key": "<redacted>"}
    assert first.hidden["evaluations"] == [{"span": f"{CANARY}-guardrail", "name": f"{CANARY}-guardrail",
                                            "triggered": True}]
    assert CANARY not in render_trajectory(first)


def test_otel_error_names_the_record_once(tmp_path):
    """`--format otel` on a file that is not spans said "record 0: record 0: not a span"."""
    with pytest.raises(TrajectoryFormatError) as raised:
        load_trajectories(SAMPLE, format="otel")
    assert str(raised.value) == f"{SAMPLE}, record 0: not a span (no traceId, context.trace_id or trace_id)"
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps([{"spans": [{"name": "x"}]}]))
    with pytest.raises(TrajectoryFormatError) as raised:
        load_trajectories(nested, format="otel")
    assert str(raised.value).count("record 0") == 1 and "span 0: not a span" in str(raised.value)
