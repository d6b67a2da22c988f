"""`rubricforge show` prints what a program or cascade file says: names, models, dates and methods written by
whoever wrote the file (issue 33, item 6). Terminal escapes, carriage returns and line breaks in them are shown
escaped (``\\x1b``), so the file can neither drive the terminal nor add a line that reads as the tool's own."""

from __future__ import annotations

import json

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.terminal import terminal_safe
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import MANIFEST_KEY, PROGRAM_SHA_KEY, freeze, program_sha256
from tests.support.hybrid import dataset

CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home
LINK = "\x1b]8;;https://example.invalid\x07"  # an OSC 8 hyperlink
FORGED = "\r\ncertificate: certified\u202e"


def assert_clean(out: str) -> None:
    assert not any(c in out for c in "\x1b\x07\r\u202e"), repr(out)
    assert "certificate: certified" not in out.splitlines()


def test_show_escapes_a_programs_criteria_model_and_date(tmp_path, capsys):
    path = tmp_path / "p.json"
    rubric = f"Judge it.\n1. Err{CLEAR}ors: no unresolved ERROR.\n2. Claims{LINK}: grounded."
    freeze(TrajectoryJudge(rubric), path, lm=f"openai/m{FORGED}", extra={"calibration": {"method": f"p{CLEAR}"}})
    state = json.loads(path.read_text())
    state[MANIFEST_KEY]["created_at"] = f"2026{LINK}"
    state[MANIFEST_KEY][PROGRAM_SHA_KEY] = program_sha256(state)
    path.write_text(json.dumps(state))
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    assert "Err\\x1b[2J\\x1b[Hors" in out and "openai/m\\r\\ncertificate: certified\\u202e" in out
    assert "2026\\x1b]8;;https://example.invalid\\x07" in out and "p\\x1b[2J" in out


def test_show_escapes_a_cascades_stage_names_and_fit_report(tmp_path, capsys):
    """A stage named with an escape sequence (a cascade file anyone can write), and its fit report's method."""
    path = tmp_path / "cascade.json"
    floor = FloorJudge(SymptomFloor.fit(dataset(40)))
    Cascade([floor], [StageRule(f"floor{CLEAR}", 0.9, 0.1)]).save(path)
    state = json.loads(path.read_text())
    state[MANIFEST_KEY]["fit"] = {"units": {}, "stages": [], "escalated": 0}
    state[MANIFEST_KEY]["guarantee"] = {"alpha": 0.1, "method": f"ltt{FORGED}"}
    state[MANIFEST_KEY][PROGRAM_SHA_KEY] = program_sha256(state)
    path.write_text(json.dumps(state))
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    assert "floor\\x1b[2J\\x1b[H -> a person" in out and "ltt\\r\\ncertificate: certified" in out


def test_terminal_safe_escapes_only_what_drives_a_terminal():
    assert terminal_safe("plain é 名前 \\ path") == "plain é 名前 \\ path"
    assert terminal_safe(f"a{CLEAR}\t\u200b\u2028b") == "a\\x1b[2J\\x1b[H\\t\\u200b\\u2028b"
    assert terminal_safe("one\ntwo\x1b", keep_newlines=True) == "one\ntwo\\x1b"
    assert terminal_safe(3) == "3"
