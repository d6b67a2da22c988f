"""`rubricforge render` prints byte for byte the trajectory text `rubricforge judge` sends (and
`TrajectoryJudge().render` the text of the library's default, the server preset), read back from the
request bodies the fake OpenAI server records."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.presets import EMBEDDED, SERVER
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text

AIRLINE = Path(__file__).resolve().parents[2] / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"
ITEMS = 4  # the first items of the file; each is longer than the embedded render budget
SENTINEL = "\x1fRUBRICFORGE-TRAJECTORY\x1f"


@pytest.fixture(autouse=True)
def no_endpoint_in_the_environment(monkeypatch):
    monkeypatch.delenv("RUBRICFORGE_API_BASE", raising=False)


def framing() -> tuple[str, str]:
    """What DSPy's adapter puts before and after the trajectory in the judge's user message: the
    ``[[ ## trajectory ## ]]`` marker line before, the output-format instruction after."""
    judge = TrajectoryJudge()
    messages = judge.adapter.format(judge.judge.signature, demos=[], inputs={"trajectory": SENTINEL})
    user = [m["content"] for m in messages if m["role"] == "user"][-1]
    before, after = user.split(SENTINEL)
    assert before.endswith("[[ ## trajectory ## ]]\n") and after.startswith("\n\n")
    return before, after


def sent_trajectories(bodies: list[dict]) -> list[str]:
    """The trajectory text of each recorded chat request, cut out of its user message at the framing."""
    before, after = framing()
    texts = []
    for body in bodies:
        user = user_text(body)
        assert user.startswith(before) and user.endswith(after), user[:200]
        texts.append(user[len(before):len(user) - len(after)])
    return texts


def judge_sends(fake: FakeOpenAI, out: Path, *flags: str) -> list[str]:
    start = len(fake.chat_bodies)
    assert main(["judge", "--data", str(AIRLINE), "--limit", str(ITEMS), "--out", str(out), "--no-cache",
                 "--api-base", fake.api_base, "--model", "m@r", *flags]) == 0
    return sent_trajectories(fake.chat_bodies[start:])


def render_prints(capsys, *flags: str) -> tuple[list[str], str]:
    """`rubricforge render` of each item (its stdout, less print's newline) and the stderr of the last."""
    texts, err = [], ""
    for index in range(ITEMS):
        assert main(["render", "--data", str(AIRLINE), "--index", str(index), *flags]) == 0
        captured = capsys.readouterr()
        assert captured.out.endswith("\n")
        texts.append(captured.out[:-1])
        err = captured.err
    return texts, err


def test_render_prints_what_judge_sends_under_each_preset(tmp_path, capsys, monkeypatch):
    with FakeOpenAI() as fake:
        server_sent = judge_sends(fake, tmp_path / "server.jsonl")
        embedded_sent = judge_sends(fake, tmp_path / "embedded.jsonl", "--preset", "embedded")
        api_base = fake.api_base
    capsys.readouterr()
    server_shown, server_err = render_prints(capsys, "--api-base", api_base)
    embedded_shown, embedded_err = render_prints(capsys, "--api-base", api_base, "--preset", "embedded")
    # Requests run concurrently: compare the multisets, each item's render must be among what was sent.
    assert sorted(server_sent) == sorted(server_shown)
    assert sorted(embedded_sent) == sorted(embedded_shown)
    assert f"preset server: {SERVER.render_tokens} tokens" in server_err
    assert f"preset embedded: {EMBEDDED.render_tokens} tokens" in embedded_err
    # The presets differ on these items: the embedded render elides steps, the server one keeps them all.
    for server_text, embedded_text in zip(server_shown, embedded_shown, strict=True):
        assert len(embedded_text) < len(server_text)
        assert "elided" in embedded_text and "elided" not in server_text
    # Without --api-base the environment decides, as for judge; with neither, the embedded preset.
    monkeypatch.setenv("RUBRICFORGE_API_BASE", api_base)
    assert render_prints(capsys)[0] == server_shown
    monkeypatch.delenv("RUBRICFORGE_API_BASE")
    assert render_prints(capsys)[0] == embedded_shown


def test_the_library_default_renders_what_judge_sends_with_the_server_preset(tmp_path):
    trajectories = load_trajectories(AIRLINE)
    with FakeOpenAI() as fake:
        sent = judge_sends(fake, tmp_path / "server.jsonl", "--preset", "server")
    judge = TrajectoryJudge()
    assert sorted(sent) == sorted(judge.render(t) for t in trajectories[:ITEMS])
    assert all(judge.render(t) == render_trajectory(t, RenderConfig.of(SERVER)) for t in trajectories[:ITEMS])


@pytest.mark.filterwarnings("ignore::rubricforge_dspy.program.drift.UncertifiedJudgeWarning")
def test_render_of_a_frozen_program_and_the_size_flags_match_judge(tmp_path, capsys):
    program = tmp_path / "program.json"
    TrajectoryJudge(render_config=RenderConfig(max_tokens=3000, max_step_chars=200)).save(program)
    with FakeOpenAI() as fake:
        own = judge_sends(fake, tmp_path / "own.jsonl", "--program", str(program))
        resized = judge_sends(fake, tmp_path / "resized.jsonl", "--program", str(program), "--step-chars", "90")
        flags = judge_sends(fake, tmp_path / "flags.jsonl", "--render-tokens", "1500", "--step-chars", "120")
        api_base = fake.api_base
    capsys.readouterr()
    shown_own, err = render_prints(capsys, "--api-base", api_base, "--program", str(program))
    assert sorted(own) == sorted(shown_own) and "own render: 3000 tokens, step chars 200" in err
    shown_resized, err = render_prints(capsys, "--program", str(program), "--step-chars", "90")
    assert sorted(resized) == sorted(shown_resized) and "3000 tokens, step chars 90" in err
    # --max-tokens is render's older name of --render-tokens.
    shown_flags, err = render_prints(capsys, "--api-base", api_base, "--render-tokens", "1500", "--step-chars", "120")
    assert sorted(flags) == sorted(shown_flags) and "1500 tokens, step chars 120" in err
    assert shown_own != shown_resized != shown_flags
