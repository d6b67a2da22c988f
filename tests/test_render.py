from rubricforge_dspy.render import ELISION, RenderConfig, estimate_tokens, render_trajectory
from rubricforge_dspy.trajectory import Source, Step, Trajectory
from tests.helpers import make_trajectory


def test_render_shows_observable_events_counters_and_marks_errors():
    text = render_trajectory(make_trajectory(1, success=False))
    assert text.startswith("COUNTERS: steps=8 tool_calls=2 tool_errors=1 user_turns=2")
    assert "TOOL RESULT book_reservation (ERROR): Error: payment method not found" in text
    assert 'TOOL CALL book_reservation({"flight": "HAT001"})' in text
    assert text.endswith("FINAL ANSWER: Your flight is booked!")


def test_render_never_shows_reward_label_or_hidden_fields():
    t = make_trajectory(2, success=True)
    text = render_trajectory(t)
    assert "CANARY" not in text and "reward" not in text.lower() and "label" not in text.lower()


def test_render_is_deterministic():
    t = make_trajectory(3, success=False)
    assert render_trajectory(t) == render_trajectory(t)


def test_long_trajectories_are_cut_head_and_tail_with_marker():
    steps = [Step("user", "start: please help")]
    steps += [Step("assistant", f"thinking step {i} " + "x" * 300) for i in range(200)]
    steps += [Step("final_answer", "done, booked")]
    t = Trajectory(id="long", task_id="t", domain="d", agent="a", steps=tuple(steps), reward=0.0, label=0,
                   source=Source("f", 0))
    config = RenderConfig(max_tokens=800)
    text = render_trajectory(t, config)
    assert estimate_tokens(text) <= 800
    assert "[1] USER: start: please help" in text and "[202] FINAL ANSWER: done, booked" in text
    assert "steps elided to fit the token budget" in text
    assert ELISION.split("{n}")[0] in text


def test_long_steps_are_clipped():
    t = Trajectory(id="x", task_id="t", domain="d", agent="a", reward=1.0, label=1, source=Source("f", 0),
                   steps=(Step("tool_result", "y" * 5000, tool_name="get"), Step("final_answer", "ok")))
    text = render_trajectory(t, RenderConfig(max_step_chars=200))
    assert "[...]" in text and max(len(line) for line in text.splitlines()) <= 220
