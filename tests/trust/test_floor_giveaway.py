"""A floor that gives the outcome away (issue #26, item 9): when observable counts tell the outcome almost
without error (held-out kappa >= 0.95, e.g. episodes that end at success), no judge can be compared with the
floor. `rubricforge floor`, `rubricforge report` and the certificate's floor margin say so."""

from __future__ import annotations

import dataclasses
import json

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.judge_names import FLOOR_GIVEAWAY_KAPPA, floor_gives_away
from rubricforge_dspy.core.trajectory import Step
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.trust.floor_margin import floor_margin_of_records, margin_lines
from tests.support.helpers import make_dataset, make_trajectory
from tests.support.records import write_jsonl

WARNING = "The observable features give the outcome away here"


def given_away(n: int = 30):
    """Every failure hits a tool error, no success does: the floor reads the outcome off the counts."""
    return make_dataset(n)


def look_alike(n: int = 40):
    """Failures look exactly like successes (the booking 'succeeds', same length): nothing observable tells."""
    out = []
    for i in range(n):
        t = make_trajectory(i, success=i % 2 == 0)
        steps = tuple(Step("tool_result", '{"reservation_id": "R1"}', tool_name="book_reservation", call_id="c2")
                      if s.kind == "tool_result" and s.call_id == "c2" else s for s in t.steps)
        out.append(dataclasses.replace(t, steps=steps))
    return out


def test_floor_command_flags_a_floor_that_gives_the_outcome_away(tmp_path, capsys):
    away = write_jsonl(tmp_path / "away.jsonl", given_away())
    assert main(["floor", "--data", away, "--resamples", "100"]) == 0
    text = capsys.readouterr().out
    assert f"WARNING: {WARNING}" in text and "kappa 1.000" in text
    assert main(["floor", "--data", away, "--resamples", "100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["floor_gives_away"] is True and str(FLOOR_GIVEAWAY_KAPPA) in report["floor_giveaway_rule"]
    alike = write_jsonl(tmp_path / "alike.jsonl", look_alike())
    assert main(["floor", "--data", alike, "--resamples", "100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    floor = next(r for r in report["rows"] if r["judge"] == "floor")
    assert floor["kappa"] < FLOOR_GIVEAWAY_KAPPA and report["floor_gives_away"] is False
    assert main(["floor", "--data", alike, "--resamples", "100"]) == 0
    assert WARNING not in capsys.readouterr().out


def _judged(trajectories, path):
    """A judge that passes every failure whose task number is odd: it cannot beat a perfect floor."""
    with path.open("w") as handle:
        for t in trajectories:
            passed = bool(t.label) or int(t.task_id[1:]) % 4 == 1
            handle.write(json.dumps(verdict_line(t, Verdict.from_answer(passed, 0.8 if passed else 0.2, "r"),
                                                 model="m")) + "\n")
    return path


def test_report_flags_a_floor_that_gives_the_outcome_away(tmp_path):
    data = given_away()
    verdicts = _judged(data, tmp_path / "judge.jsonl")
    out = tmp_path / "out" / "report.md"
    assert main(["report", "--predictions", str(verdicts), "--floor-data", write_jsonl(tmp_path / "d.jsonl", data),
                 "--out", str(out)]) == 0
    floor_part = out.read_text().split("## The floor")[1].split("## ")[0]
    assert WARNING in floor_part and "cannot be compared against this floor" in floor_part
    numbers = json.loads(out.with_suffix(".json").read_text())["floor"]
    assert numbers["floor_gives_away"] is True
    alike = look_alike()
    (tmp_path / "alike").mkdir()
    verdicts = _judged(alike, tmp_path / "alike" / "judge.jsonl")
    out = tmp_path / "alike" / "out" / "report.md"
    assert main(["report", "--predictions", str(verdicts), "--floor-data",
                 write_jsonl(tmp_path / "alike" / "d.jsonl", alike), "--out", str(out)]) == 0
    assert WARNING not in out.read_text()
    assert json.loads(out.with_suffix(".json").read_text())["floor"]["floor_gives_away"] is False


def _records(labels, passed):
    return [{"id": f"i{i}", "label": y, "passed": p, "score": 0.9 if p else 0.1, "abstained": False}
            for i, (y, p) in enumerate(zip(labels, passed, strict=True))]


def test_certificate_floor_margin_flags_a_floor_that_gives_the_outcome_away():
    labels = [1, 0] * 10
    judge = [bool(y) or i % 4 == 1 for i, y in enumerate(labels)]
    margin = floor_margin_of_records(_records(labels, judge), _records(labels, [bool(y) for y in labels]),
                                     source="test")
    assert margin["floor"]["kappa"] == 1.0 and margin["floor_gives_away"] is True
    lines = margin_lines(margin)
    assert "does NOT beat the floor" in lines[0] and lines[1].startswith("  WARNING: the floor reaches kappa 1.000")
    older = {k: v for k, v in margin.items() if k != "floor_gives_away"}  # a certificate written before the flag
    assert margin_lines(older)[1] == lines[1]
    honest = floor_margin_of_records(_records(labels, judge), _records(labels, [i % 3 == 0 for i in range(20)]),
                                     source="test")
    assert honest["floor_gives_away"] is False and not any("WARNING" in line for line in margin_lines(honest))
    assert floor_gives_away(0.95) and not floor_gives_away(0.94) and floor_gives_away(None) is None
