"""Hostile stage names (issue 42 item 7): a ``cascade fit --name`` with a clear-screen, a window-title OSC, a
CR/LF, a forged ``written to:`` line or a ``/`` is refused before any work (exit 2, no LM request, nothing
saved), the error saying what a name may be; a saved cascade whose stage name was edited into one is refused
when loaded (exit 2). Before the fix such a name was fitted and saved, then printed raw by `cascade fit`,
`judge --cascade` and `certify` and stored raw in report.md; ``a/b`` ran the whole fit, LM calls included,
then crashed (exit 1) and saved nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.cascade import REWARD_ABOVE_0
from tests.support.recorded import other_tool_verdicts

PROGRAM = Path(__file__).resolve().parents[2] / "artifacts" / "demo" / "induced.json"  # an LLM stage
HOSTILE = ["a/b", "x\x1b[2Jy", "x\x1b]0;owned\x07y", "x\ry", "ok\nwritten to: /etc/passwd", "..", "", "\u202eevil"]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_is_refused_before_any_lm_call(halves, tmp_path, capsys, name):
    out = tmp_path / "cascade.json"
    with FakeOpenAI() as fake:
        code = main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--name", "floor",
                     "--stage", str(PROGRAM), "--name", name, "--allow-unverified-program",
                     "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.05",
                     "--api-base", fake.url + "/v1", "--model", "fake-judge", "--out", str(out)])
        requests = fake.n_requests
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert requests == 0 and not list(tmp_path.iterdir())
    assert "ASCII letters, digits" in captured.err and "Traceback" not in captured.err
    assert "\x1b" not in captured.out + captured.err and "\r" not in captured.out + captured.err
    assert not any(line.startswith("written to:") for line in (captured.out + captured.err).splitlines())


@pytest.mark.parametrize("name", HOSTILE[1:])
def test_a_saved_cascade_edited_to_a_hostile_name_is_refused_when_loaded(halves, tmp_path, capsys, name):
    verdicts = tmp_path / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    out = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--stage", str(verdicts),
                 "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.05", "--bound", "pooled",
                 "--method", "holm", "--out", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text()
    assert '"recorded"' in text
    out.write_text(text.replace('"recorded"', json.dumps(name)))
    for argv in (["judge", "--cascade", str(out), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                  "--out", str(tmp_path / "v.jsonl")],
                 ["show", str(out)]):
        code = main(argv)
        captured = capsys.readouterr()
        assert code == 2, (argv, captured)
        assert "\x1b" not in captured.out + captured.err and "\r" not in captured.out + captured.err
    assert not (tmp_path / "v.jsonl").exists()
