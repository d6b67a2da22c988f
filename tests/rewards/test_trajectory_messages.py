"""`trajectory_to_messages`: a Trajectory as TRL's / verl's chat messages, observable steps only (issue 41)."""

import json

from rubricforge_dspy.core.trajectory import Source, Step, Trajectory
from rubricforge_dspy.rewards import trajectory_from_messages, trajectory_to_messages


def _trajectory() -> Trajectory:
    steps = (Step("user", "Book the cheapest flight to SEA."),
             Step("assistant", "Searching."),
             Step("tool_call", tool_name="search", arguments={"to": "SEA"}, call_id="c1"),
             Step("tool_call", tool_name="price", arguments={"id": 7}, call_id="c2"),
             Step("tool_result", "[HAT007]", tool_name="search", call_id="c1"),
             Step("tool_result", "payment method not found", tool_name="price", call_id="c2", is_error=True),
             Step("final_answer", "I could not book it."))
    return Trajectory(id="x", task_id="t", domain="airline", agent="a", steps=steps, reward=0.0, label=0,
                      source=Source("f.json", 0), hidden={"gold_actions": "SECRET-GOLD", "instruction": "SECRET-USER"})


def test_the_messages_have_trls_shape_and_round_trip():
    messages = trajectory_to_messages(_trajectory())
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    calls = messages[1]["tool_calls"]
    assert messages[1]["content"] == "Searching." and [c["function"]["name"] for c in calls] == ["search", "price"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"to": "SEA"}
    assert [m["tool_call_id"] for m in messages[2:4]] == ["c1", "c2"]
    assert messages[3]["content"] == str({"error": "payment method not found"})
    back = trajectory_from_messages(messages[:1], messages[1:])
    # the same steps; a failed tool's content keeps TRL's wrapping, as TRL itself writes it
    expected = [(s.kind, str({"error": s.content}) if s.is_error else s.content, s.tool_name, s.is_error)
                for s in _trajectory().steps]
    assert [(s.kind, s.content, s.tool_name, s.is_error) for s in back.steps] == expected


def test_labels_rewards_and_hidden_fields_never_reach_the_messages():
    text = json.dumps(trajectory_to_messages(_trajectory()))
    assert "SECRET" not in text and "label" not in text and "reward" not in text
