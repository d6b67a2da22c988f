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


def _forged_cascade(tmp_path, name: str, method: str):
    """A cascade file as anyone can write it: a stage name and a fit report's method forged, its digest recomputed."""
    path = tmp_path / "cascade.json"
    floor = FloorJudge(SymptomFloor.fit(dataset(40)))
    Cascade([floor], [StageRule("floor", 0.9, 0.1)]).save(path)
    state = json.loads(path.read_text())
    state["judge"]["stages"][0]["name"] = name
    state[MANIFEST_KEY]["fit"] = {"units": {}, "stages": [], "escalated": 0}
    state[MANIFEST_KEY]["guarantee"] = {"alpha": 0.1, "method": method}
    state[MANIFEST_KEY][PROGRAM_SHA_KEY] = program_sha256(state)
    path.write_text(json.dumps(state))
    return path


def test_show_escapes_a_cascades_fit_report_and_refuses_a_forged_stage_name_escaped(tmp_path, capsys):
    """A fit report's method with CR/LF is shown escaped; a stage named with an escape sequence is refused on
    load (exit 2), the refusal naming it escaped: nothing raw reaches the terminal either way."""
    assert main(["show", str(_forged_cascade(tmp_path, "floor", f"ltt{FORGED}"))]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    assert "floor -> a person" in out and "ltt\\r\\ncertificate: certified" in out
    assert main(["show", str(_forged_cascade(tmp_path, f"floor{CLEAR}", "ltt"))]) == 2
    captured = capsys.readouterr()
    assert_clean(captured.out + captured.err)
    assert "floor\\x1b[2J\\x1b[H" in captured.err and "is not allowed" in captured.err


def test_terminal_safe_escapes_only_what_drives_a_terminal():
    assert terminal_safe("plain é 名前 \\ path") == "plain é 名前 \\ path"
    assert terminal_safe(f"a{CLEAR}\t\u200b\u2028b") == "a\\x1b[2J\\x1b[H\\t\\u200b\\u2028b"
    assert terminal_safe("one\ntwo\x1b", keep_newlines=True) == "one\ntwo\\x1b"
    assert terminal_safe(3) == "3"
