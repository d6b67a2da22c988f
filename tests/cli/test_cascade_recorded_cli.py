"""Any judge as a stage, from the command line: another tool's verdict file (lines written by hand in the
verdict-line schema) is a recorded stage of `cascade fit`; the saved cascade reloads (`load_judge`) and judges
(`judge --cascade`, no LM request); an id without a verdict is handed on and counted; a changed verdict file is
refused; a bad line stops before any work. And the hybrid stage: `floor --judge-verdicts` cross-validates, saves
plain JSON that reloads and serves as a cascade stage."""

from __future__ import annotations

import json
import shutil

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import Cascade
from rubricforge_dspy.judge.floor import FloorJudge
from rubricforge_dspy.judge.hybrid import HybridJudge
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.recorded import RecordedContradictionWarning, RecordedJudge
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.cascade import REWARD_ABOVE_0, lines_of
from tests.support.recorded import other_tool_verdicts


def fit(halves, tmp_path, *stages, alpha="0.05", out_name="cascade.json"):
    out = tmp_path / out_name
    code = main(["cascade", "fit", *[x for s in stages for x in ("--stage", str(s))],
                 "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", alpha, "--bound", "pooled",
                 "--method", "holm", "--out", str(out)])
    return code, out


def test_a_verdict_file_of_another_tool_is_a_stage_that_saves_reloads_and_judges(halves, tmp_path, capsys):
    verdicts = tmp_path / "verdicts.jsonl"
    missing = other_tool_verdicts(halves / "cal.jsonl", verdicts)
    code, out = fit(halves, tmp_path, halves / "floor.json", verdicts)
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "certified: disagreement <= 0.05" in printed
    assert f"stage 'recorded': {len(missing)} of 250 calibration item(s) have no verdict in {verdicts}" in printed
    stage_file = tmp_path / "cascade.recorded.json"
    saved = json.loads(stage_file.read_text())
    assert saved["kind"] == "rubricforge.recorded_judge" and saved["verdicts"]["path"] == "verdicts.jsonl"
    assert saved["confidence_levels"] == [0.0, 1.0]  # a pass/fail tool: its grid is two levels
    cascade = load_judge(out)
    assert isinstance(cascade, Cascade) and [r.name for r in cascade.rules] == ["floor", "recorded"]
    assert isinstance(cascade.stages[1], RecordedJudge) and len(cascade.stages[1].verdicts) == 250 - len(missing)
    row = cascade.fit_report["stages"][1]
    assert row["decided"] > 100 and row["disagreement"] == 0.0  # the tool is right wherever it has a line

    judged = tmp_path / "v.jsonl"
    with FakeOpenAI() as fake:
        assert main(["judge", "--cascade", str(out), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--out", str(judged), "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 0
        assert fake.n_requests == 0
    lines = {x["id"]: x for x in lines_of(judged)}
    assert len(lines) == 250 and {x["stage"] for x in lines.values()} == {"floor", "recorded", "escalated"}
    # an id without a line never gets the recorded stage's verdict: past the floor it goes to a person
    assert all(lines[i]["stage"] in ("floor", "escalated") for i in missing)
    assert sum(lines[i]["stage"] == "escalated" for i in missing) >= len(missing) - 5
    recorded = [x for x in lines.values() if x["stage"] == "recorded"]
    assert recorded and all(x["passed"] == bool(x["label"]) and x["reason"].startswith("[recorded]") for x in recorded)
    assert "recorded: ran on" in capsys.readouterr().err


def test_a_changed_verdict_file_is_refused_naming_it(halves, tmp_path, capsys):
    verdicts = tmp_path / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    code, out = fit(halves, tmp_path, halves / "floor.json", verdicts)
    assert code == 0
    capsys.readouterr()
    with verdicts.open("a") as handle:
        handle.write(json.dumps({"id": "new", "passed": True, "score": 1.0, "abstained": False}) + "\n")
    assert main(["judge", "--cascade", str(out), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--out", str(tmp_path / "v.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"its verdict file {verdicts} is not the file it was saved with" in err and "Traceback" not in err
    assert not (tmp_path / "v.jsonl").exists()


def test_a_moved_cascade_finds_its_verdict_file_by_relative_path(halves, tmp_path):
    folder = tmp_path / "a"
    folder.mkdir()
    verdicts = folder / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    assert fit(halves, folder, halves / "floor.json", verdicts)[0] == 0
    moved = shutil.copytree(folder, tmp_path / "b")
    cascade = load_judge(moved / "cascade.json")
    assert cascade.stages[1].path == moved / "verdicts.jsonl"


def test_a_bad_verdict_line_stops_the_fit_before_any_work(halves, tmp_path, capsys):
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text('{"id": "a", "passed": true, "score": 1.0, "abstained": false}\n'
                        '{"id": "b", "passed": true, "score": 7, "abstained": false}\n')
    code, out = fit(halves, tmp_path, halves / "floor.json", verdicts)
    err = capsys.readouterr().err
    assert code == 2 and f"{verdicts}:2: score" in err and "Traceback" not in err
    assert not out.exists()


def test_the_hybrid_stage_from_judge_verdicts_cross_validates_saves_and_is_a_stage(halves, tmp_path, capsys):
    verdicts = tmp_path / "train_verdicts.jsonl"
    missing = other_tool_verdicts(halves / "train.jsonl", verdicts, skip_every=50)
    hybrid = tmp_path / "hybrid.json"
    assert main(["floor", "--data", str(halves / "train.jsonl"), *REWARD_ABOVE_0, "--judge-verdicts", str(verdicts),
                 "--save-floor", str(hybrid), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["judge"]: row for row in report["rows"]}
    assert {"floor", "judge", "hybrid"} <= set(rows) and rows["hybrid"]["n"] == rows["floor"]["n"] == 250
    assert report["judge"] == {"source": str(verdicts), "graded": 250 - len(missing), "missing": len(missing),
                               "abstained": 0}
    # a right tool's verdict carries what the symptoms miss (its 5 ungraded items count as fails)
    assert rows["hybrid"]["kappa"] > rows["floor"]["kappa"]
    saved = json.loads(hybrid.read_text())  # plain JSON: the recorded judge by reference, the stack
    assert saved["kind"] == "rubricforge.recorded_hybrid" and saved["judge"]["verdicts"]["path"] == verdicts.name
    assert saved["hybrid"]["model"]["inputs"][:2] == ["llm_score", "llm_passed"]
    assert saved["hybrid"]["fit"]["missing_excluded"] == len(missing)
    loaded = load_judge(hybrid)
    assert isinstance(loaded, HybridJudge) and isinstance(loaded.llm, RecordedJudge)

    # as a cascade stage after the floor (calibrated on the other half: its verdicts there are another file)
    cal_verdicts = tmp_path / "cal_verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", cal_verdicts)
    both = tmp_path / "both.jsonl"
    both.write_text(verdicts.read_text() + cal_verdicts.read_text())
    assert main(["floor", "--data", str(halves / "train.jsonl"), *REWARD_ABOVE_0, "--judge-verdicts", str(both),
                 "--save-floor", str(hybrid)]) == 0
    code, out = fit(halves, tmp_path, halves / "floor.json", hybrid)
    assert code == 0, capsys.readouterr()
    cascade = load_judge(out)
    assert [r.name for r in cascade.rules] == ["floor", "hybrid"] and isinstance(cascade.stages[0], FloorJudge)
    stage = cascade.stages[1]
    result = cascade.batch(list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0)))
    reached = result.stage_calls["hybrid"]
    assert 0 < reached < 250 and stage.llm.n_lookups == reached  # looked up only the items the floor left


def test_the_hybrid_stage_with_a_live_judge_asks_once_per_labeled_item(halves, tmp_path, capsys):
    program = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), program, lm="fake-judge")
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join((halves / "train.jsonl").read_text().splitlines()[:60]) + "\n")
    answers = [{"reason": "Bought it.", "passed": True, "score": 0.9}, {"reason": "No.", "passed": False, "score": 0.2}]
    hybrid = tmp_path / "hybrid.json"
    with FakeOpenAI(lambda body, n: answers[n % 2]) as fake:
        assert main(["floor", "--data", str(small), *REWARD_ABOVE_0, "--judge", str(program), "--save-floor",
                     str(hybrid), "--json", "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 0
        assert fake.n_requests == 60
    report = json.loads(capsys.readouterr().out)
    assert {"judge", "hybrid"} <= {row["judge"] for row in report["rows"]} and report["judge"]["graded"] == 60
    loaded = load_judge(hybrid)  # the program with the stack in its manifest, as `induce --hybrid` writes
    assert isinstance(loaded, HybridJudge) and loaded.stack.with_passed and loaded.stack.fit["n"] == 60


def test_a_fitted_cascade_on_a_contradicting_verdict_file_keeps_every_verdict_and_warns_the_share(halves, tmp_path,
                                                                                                    capsys):
    verdicts = tmp_path / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    written = [json.loads(x) for x in verdicts.read_text().splitlines()]
    for k, line in enumerate(written):
        if k % 5 == 0:
            line["score"] = 1.0 - line["score"]  # the score says the opposite of the verdict
    verdicts.write_text("".join(json.dumps(x) + "\n" for x in written))
    k = sum(1 for i in range(len(written)) if i % 5 == 0)
    with pytest.warns(RecordedContradictionWarning):
        code, out = fit(halves, tmp_path, verdicts, alpha="0.1")
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert (f"warning: stage 'recorded': {k} of {len(written)} lines ({k / len(written):.0%}) of {verdicts} have a "
            "score that contradicts their verdict: handed on") in printed
    said = {x["id"]: x["passed"] for i, x in enumerate(written) if i % 5}
    with pytest.warns(RecordedContradictionWarning):
        cascade = load_judge(out)
    items = load_trajectories(halves / "cal.jsonl", label_threshold=0.0)
    result = cascade.batch(items)
    decided = [(t.id, v.passed) for t, v, s in zip(items, result, result.stages, strict=True) if s == "recorded"]
    assert len(decided) > 100 and all(i in said and said[i] is passed for i, passed in decided)
