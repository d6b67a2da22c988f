import json
import re
from pathlib import Path

from rubricforge_dspy.core.trajectory import Source, Step, Trajectory
from rubricforge_dspy.evidence.render import ELISION, RenderConfig, estimate_tokens, render_trajectory
from tests.support.helpers import make_trajectory
from tests.support.render_grammar import parse, unquote


def test_render_shows_observable_events_counters_and_marks_errors():
    quoted = render_trajectory(make_trajectory(1, success=False))
    assert quoted.startswith("QUOTES: text inside <") and parse(quoted).counters == (8, 2, 1, 2)
    text = unquote(quoted)
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
    text = unquote(text)
    assert "[1] USER: start: please help" in text and "[202] FINAL ANSWER: done, booked" in text
    assert "steps elided to fit the token budget" in text
    assert ELISION.split("{n}")[0] in text


def _trajectory(*steps: Step) -> Trajectory:
    return Trajectory(id="x", task_id="t", domain="d", agent="a", reward=1.0, label=1, source=Source("f", 0),
                      steps=tuple(steps))


def test_a_render_that_fits_its_budget_is_not_cut_at_all():
    long = "line of shell output\n" * 150  # ~3,000 characters, far beyond max_step_chars
    text = render_trajectory(_trajectory(Step("tool_result", long, tool_name="bash"), Step("final_answer", "ok")),
                             RenderConfig(max_tokens=20_000, max_step_chars=200))
    assert text.count("line of shell output") == 150 and "elided" not in text


def test_short_steps_keep_everything_and_long_ones_share_the_rest():
    shorts = [Step("user", f"short question {i}") for i in range(6)]
    longs = [Step("tool_result", f"{name}: " + " ".join(f"word{j}" for j in range(2000)), tool_name=name)
             for name in ("first", "second")]
    config = RenderConfig(max_tokens=1500, max_step_chars=100)
    text = render_trajectory(_trajectory(*shorts, *longs, Step("final_answer", "done")), config)
    assert estimate_tokens(text) <= config.max_tokens
    text = unquote(text)
    assert all(f"short question {i}" in text for i in range(6)) and "steps elided" not in text
    first, second = (line for line in text.split("\n[") if line.startswith(("7] TOOL RESULT", "8] TOOL RESULT")))
    assert "chars elided" in first and "chars elided" in second
    # the long steps share what the short ones leave: far more than max_step_chars each, about equally
    assert len(first) > 5 * config.max_step_chars and abs(len(first) - len(second)) < 0.1 * len(first)


def test_step_chars_is_what_a_long_step_keeps_when_steps_must_be_elided():
    steps = [Step("tool_result", "x1 " + "payload " * 400, tool_name="get") for _ in range(40)]
    trajectory = _trajectory(Step("user", "start"), *steps, Step("final_answer", "done"))
    small = render_trajectory(trajectory, RenderConfig(max_tokens=3000, max_step_chars=100))
    large = render_trajectory(trajectory, RenderConfig(max_tokens=3000, max_step_chars=1000))
    assert "steps elided" in small and "steps elided" in large
    kept = lambda text: [line for line in text.split("\n[") if "TOOL RESULT" in line]  # noqa: E731
    assert len(kept(small)) > len(kept(large))  # more, shorter steps
    # every kept long step but the oldest of the tail (which gets what is left) keeps about step_chars
    assert sorted(map(len, kept(large)))[1] > 900 and max(map(len, kept(small))) < 300


def test_json_tool_output_is_trimmed_by_structure():
    records = [{"id": f"obs-{i}", "value": i * 1.5, "unit": "mg/dL"} for i in range(300)]
    payload = json.dumps({"resourceType": "Bundle", "total": 300, "note": "n" * 3000, "entry": records})
    text = unquote(render_trajectory(_trajectory(Step("tool_result", payload, tool_name="fhir_search"),
                                                 Step("final_answer", "done")), RenderConfig(max_tokens=600)))
    body = text.split("TOOL RESULT fhir_search: ", 1)[1].split("\n[2]")[0]
    trimmed = json.loads(body)  # still valid JSON
    assert list(trimmed) == ["resourceType", "total", "note", "entry"]  # every key, in order
    assert trimmed["entry"][0] == records[0] and trimmed["entry"][-1] == records[-1]
    marker = next(item for item in trimmed["entry"] if isinstance(item, str))
    shown = sum(isinstance(item, dict) for item in trimmed["entry"])
    assert marker == f"... {300 - shown} more items"
    assert " chars ... " in trimmed["note"] and len(trimmed["note"]) < 3000


def test_long_shell_output_keeps_head_and_tail_and_says_how_much_was_cut():
    output = "".join(f"{i:05d} compiling module_{i}.c\n" for i in range(2000)) + "error: linker failed (exit 1)"
    text = render_trajectory(_trajectory(Step("tool_call", tool_name="bash", arguments="make"),
                                         Step("tool_result", output, tool_name="bash", is_error=True)),
                             RenderConfig(max_tokens=800))
    assert estimate_tokens(text) <= 800
    assert parse(text).events[1].error  # the cut marker sits outside the quotes (the grammar parses)
    text = unquote(text)
    body = text.split("TOOL RESULT bash (ERROR):\n", 1)[1].split("\nFINAL ANSWER")[0]
    head, marker, tail = re.split(r"\n(\[\.\.\. \d+ chars elided \.\.\.\])\n", body)
    assert head.startswith("00000 compiling module_0.c\n") and tail.endswith("error: linker failed (exit 1)")
    elided = int(re.search(r"\d+", marker).group())
    assert len(head) + len(tail) + elided == len(output)  # the marker stands for exactly the characters cut


def test_code_and_shell_output_keep_newlines_and_indentation():
    code = "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n\n\n\n\n    return s"
    text = unquote(render_trajectory(_trajectory(Step("tool_call", tool_name="python", arguments=code),
                                                 Step("tool_result", "a\tb\n  indented", tool_name="python"))))
    assert "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n\n    return s" in text
    assert "TOOL RESULT python:\na\tb\n  indented" in text


def test_control_bytes_are_removed_and_counted():
    dirty = "ok\x00\x00 done\x1b[31m red\x1b[0m\x07 \x85end"
    text = unquote(render_trajectory(_trajectory(Step("tool_result", dirty, tool_name="sh"),
                                                 Step("final_answer", "x"))))
    line = next(line for line in text.splitlines() if "TOOL RESULT sh" in line)
    assert line == "[1] TOOL RESULT sh: ok done red end [6 control characters removed]"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)


def test_render_never_exceeds_its_budget_on_shipped_data():
    from rubricforge_dspy.core.presets import PRESETS
    from rubricforge_dspy.data.formats import load_trajectories

    data = Path(__file__).resolve().parents[2] / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"
    trajectories = load_trajectories(data)
    for preset in PRESETS.values():
        for t in trajectories[::10]:
            rendered = render_trajectory(t, RenderConfig.of(preset))
            assert estimate_tokens(rendered) <= preset.render_tokens, (preset.name, t.id)


def test_render_command_honours_step_chars(capsys):
    from rubricforge_dspy.cli.main import main

    data = str(Path(__file__).resolve().parents[2] / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json")
    outputs = {}
    for chars in (40, 400):
        assert main(["render", "--data", data, "--index", "3", "--render-tokens", "1200",
                     "--step-chars", str(chars)]) == 0
        outputs[chars] = capsys.readouterr().out
    assert outputs[40] != outputs[400]
    kept = {chars: sum(line.startswith("[") and "elided" not in line for line in text.splitlines())
            for chars, text in outputs.items()}
    assert kept[40] > kept[400]  # a smaller guaranteed share keeps more (shorter) steps
