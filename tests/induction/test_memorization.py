"""The memorization guard knows every word the renderer writes (issue 41 item 7)."""

import re

from rubricforge_dspy.core.trajectory import Source, Step, Trajectory
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.induction.memorization import Memorized

EPISODE = "Reservation ZFA04Y for Sophia Silva from JFK to SEA on 2024-05-15 costs $1,234.50."


def _trajectory(name: str, steps: list[Step]) -> Trajectory:
    return Trajectory(id=name, task_id=name, domain="airline", agent="a", steps=tuple(steps), reward=None,
                      label=None, source=Source("t.jsonl", 0))


def _renders() -> list[str]:
    """Renders that show every marker: quotes, counters, events, user/assistant turns, tool calls, a tool
    error, a clipped long step, elided steps, a control-character note, a final answer and its absence."""
    full = [Step("user", EPISODE), Step("assistant", "Let me look that up.\x07"),
            Step("tool_call", "", tool_name="get_reservation", arguments={"id": "ZFA04Y"}),
            Step("tool_result", "not found", tool_name="get_reservation", is_error=True),
            Step("tool_call", "", tool_name="search", arguments={"q": "JFK SEA"}),
            Step("tool_result", "flight " * 2000, tool_name="search"),
            Step("final_answer", "Booked ZFA04Y.")]
    many = [Step("user", EPISODE)] + [Step("assistant", f"step {i} " + "word " * 80) for i in range(60)]
    return [render_trajectory(_trajectory("full", full)),
            render_trajectory(_trajectory("long", full), RenderConfig(max_tokens=300, max_step_chars=40)),
            render_trajectory(_trajectory("many", many), RenderConfig(max_tokens=400, max_step_chars=40))]


def _marker_lines(render: str) -> list[str]:
    """The render's own text: every line with the quoted (agent-, tool- or user-written) text removed."""
    nonce = re.search(r"<(\w+)>", render).group(1)
    outside = re.sub(rf"<{nonce}>.*?</{nonce}>", " ", render, flags=re.S)
    return [line.strip() for line in outside.splitlines() if line.strip()]


def test_every_marker_the_renderer_writes_is_shown_by_the_renders_used_here():
    text = "\n".join(_renders())
    for marker in ("QUOTES:", "COUNTERS:", "EVENTS:", "USER:", "ASSISTANT:", "TOOL CALL", "TOOL RESULT",
                   "(ERROR)", "FINAL ANSWER:", "steps elided", "chars elided", "control character"):
        assert marker in text, marker


def test_a_rubric_quoting_the_renderers_own_lines_is_not_rejected():
    renders = _renders()
    guard = Memorized(renders)
    for line in sorted({line for render in renders for line in _marker_lines(render)}):
        rubric = f"1. Fail when the record shows a line like: {line}"
        assert guard.check(rubric, where=line), (line, guard.leaks(rubric))
    assert guard.rejected == []


def test_a_rubric_quoting_a_training_episode_is_still_rejected():
    guard = Memorized(_renders())
    for copied in ("ZFA04Y", "Sophia Silva", "JFK", "2024-05-15", "$1,234.50"):
        assert not guard.check(f"1. Fail when reservation {copied} is booked.")
    assert [r["leaks"] for r in guard.rejected][0] == ["identifier: ZFA04Y"]
    assert len(guard.rejected) == 5
