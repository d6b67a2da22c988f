"""Any judge as a cascade stage, in Python: `RecordedJudge` (verdicts looked up by id: a missing id or an abstained
line hands the item on, counted, never an LM error), its confidence levels, and Python stages (a callable returning
a Verdict) that save and reload by import path only when importing is allowed, or refuse to save with the reason."""

from __future__ import annotations

import json
import math
import warnings

import pytest

from rubricforge_dspy.core.verdict import Verdict, VerdictLineError
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.recorded import (
    CallableJudge,
    RecordedContradictionWarning,
    RecordedJudge,
    recorded_confidence,
    recorded_contradiction,
)
from rubricforge_dspy.program.store import ProgramError
from rubricforge_dspy.trust.cascade import fit_cascade
from tests.support.helpers import make_trajectory
from tests.support.recorded import no_tool_error_passes


def write(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def items(n=4):
    return [make_trajectory(i, success=i % 2 == 0, task=f"t{i}") for i in range(n)]


def test_a_recorded_stage_decides_known_ids_and_hands_on_missing_or_abstained_ones(tmp_path):
    ts = items(4)
    path = write(tmp_path / "v.jsonl",
                 {"id": ts[0].id, "passed": True, "score": 1.0, "abstained": False, "reason": "ok"},
                 {"id": ts[1].id, "passed": False, "score": 0.0, "abstained": False},
                 {"id": ts[2].id, "passed": False, "score": 0.0, "abstained": True, "error_kind": "timeout",
                  "error": "the other tool timed out"})
    recorded = RecordedJudge.from_file(path)
    assert recorded.confidence_levels == (0.0, 1.0) and recorded.predictors() == []
    cascade = Cascade([recorded], [StageRule("recorded", 0.5, 0.4)])
    result = cascade.batch(ts)
    assert result.stages == ["recorded", "recorded", "escalated", "escalated"]
    assert [v.passed for v in result[:2]] == [True, False]
    # another tool's timeout is not this stage's LM error: the item is handed on (to a person), not failed
    assert result[2].error_kind == "escalated" and result[3].error_kind == "escalated"
    assert recorded.n_missing == 1 and recorded.missing_ids == [ts[3].id] and recorded.n_lookups == 4
    one = cascade(trajectory=ts[3])
    assert one.stage == "escalated" and recorded.n_missing == 2
    with pytest.raises(Exception, match="looks a trajectory up by its id"):
        recorded(trajectory="rendered text")


def test_continuous_scores_make_a_continuous_stage_and_bad_lines_name_file_and_line(tmp_path):
    ts = items(2)
    path = write(tmp_path / "v.jsonl", {"id": ts[0].id, "passed": True, "score": 0.83, "abstained": False},
                 {"id": ts[1].id, "passed": False, "score": 0.2, "score_calibrated": 0.1, "abstained": False})
    recorded = RecordedJudge.from_file(path)
    assert recorded.confidence_levels is None
    assert recorded(trajectory=ts[1]).score_calibrated == 0.1  # the schema's key, read as the stage's confidence
    bad = write(tmp_path / "bad.jsonl", {"id": "a", "passed": True, "score": 1.0, "abstained": False},
                {"id": "a", "passed": True, "score": 1.0, "abstained": False})
    with pytest.raises(VerdictLineError, match=r"bad.jsonl:2: duplicate id 'a'"):
        RecordedJudge.from_file(bad)


def test_verdicts_read_from_a_platform_are_written_beside_the_stage_and_pinned(tmp_path):
    ts = items(2)
    recorded = RecordedJudge.from_lines([{"id": ts[0].id, "passed": True, "score": 1.0, "abstained": False}],
                                        "somewhere")
    cascade_path = tmp_path / "c.json"
    Cascade([recorded], [StageRule("recorded", 0.5, 0.4)]).save(cascade_path)
    assert (tmp_path / "c.recorded.verdicts.jsonl").is_file()
    loaded = load_judge(cascade_path)
    assert loaded(trajectory=ts[0]).passed is True and loaded(trajectory=ts[1]).stage == "escalated"
    (tmp_path / "c.recorded.verdicts.jsonl").write_text("")
    with pytest.raises(ProgramError, match="is not the file it was saved with"):
        load_judge(cascade_path)


def test_a_callable_stage_fits_saves_and_reloads_by_import_path_only_when_allowed(tmp_path):
    ts = [make_trajectory(i, success=i % 3 != 0, task=f"t{i}") for i in range(90)]
    cascade = fit_cascade([no_tool_error_passes], ts, alpha=0.1, delta=0.1, method="bonferroni",
                          bound="pooled")  # the stage kind is under test, not the per-stage power
    assert isinstance(cascade.stages[0], CallableJudge)
    path = tmp_path / "c.json"
    cascade.save(path)
    stage_file = json.loads((tmp_path / f"c.{cascade.rules[0].name}.json").read_text())
    assert stage_file["import"] == "tests.support.recorded:no_tool_error_passes"
    with pytest.raises(ProgramError, match=r"Python code to import \(tests.support.recorded:no_tool_error_passes\)"):
        load_judge(path)
    loaded = load_judge(path, allow_import=True)
    assert loaded.stages[0].fn is no_tool_error_passes
    assert [v.passed for v in loaded.batch(ts[:6])] == [v.passed for v in cascade.batch(ts[:6])]


def test_a_stage_without_an_import_path_refuses_to_save_with_the_reason(tmp_path):
    stage = CallableJudge(lambda t: Verdict.from_answer(True, 0.9))
    with pytest.raises(ProgramError, match="stage 'mine' cannot be saved: .*a lambda"):
        Cascade([stage], [StageRule("mine", 0.5, 0.1)]).save(tmp_path / "c.json")

    def local(t):
        return Verdict.from_answer(True, 0.9)

    with pytest.raises(ProgramError, match="defined inside another"):
        Cascade([CallableJudge(local)], [StageRule("mine", 0.5, -math.inf)]).save(tmp_path / "c.json")


# -- another tool's verdict means what it said (issue 39 item 3) --------------------------------------------

def random_lines(rng, ts):
    """A verdict file as another tool may write it: passes and fails with scores that agree or contradict, some
    with a calibrated score on either side of 0.5 (a tool with its own operating point), some flagged
    contradictions, abstentions, and ids with no line."""
    lines = []
    for t in ts:
        kind = rng.random()
        if kind < 0.08:
            continue  # no line: handed on
        passed = bool(rng.random() < 0.5)
        score = float(rng.choice([0.0, 1.0, 0.5, 0.4999, rng.random(), rng.random()]))
        line = {"id": t.id, "passed": passed, "score": score, "abstained": kind < 0.15}
        if line["abstained"]:
            line.update(passed=False, score=0.0, error_kind="timeout", error="the other tool timed out")
        elif kind < 0.35:
            line["score_calibrated"] = float(rng.choice([0.0, 1.0, 0.5, rng.random()]))
        elif kind < 0.42:
            line["contradiction"] = True
        lines.append(line)
    return lines


def said(line):
    """What the tool said: 'pass', 'fail', or None (no verdict, or a score that contradicts it)."""
    if line is None or line["abstained"] or line.get("contradiction"):
        return None
    if line.get("score_calibrated") is None and line["passed"] != (line["score"] >= 0.5):
        return None
    return "pass" if line["passed"] else "fail"


def test_a_cascade_of_one_verdict_file_never_reverses_a_verdict_of_that_tool_at_any_threshold_pair(tmp_path):
    import numpy as np

    from rubricforge_dspy.judge.stage_rule import stage_confidence
    from rubricforge_dspy.metrics.risk_control import cascade_outcomes, threshold_grid

    ts = items(40)
    decided_somewhere = {"pass": 0, "fail": 0}
    for seed in range(25):
        rng = np.random.default_rng(seed)
        lines = random_lines(rng, ts)
        by_id = {line["id"]: line for line in lines}
        path = write(tmp_path / f"v{seed}.jsonl", *lines)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stages = [RecordedJudge.from_file(path), RecordedJudge.from_file(path, confidence_levels=None),
                      RecordedJudge.from_file(path, confidence_levels=(0, .25, .5, .75, 1))]
        truth = [said(by_id.get(t.id)) for t in ts]
        for recorded in stages:
            verdicts = recorded.batch(ts)
            conf = np.array([[np.nan if (c := stage_confidence(v)) is None else c for v in verdicts]])
            grid = threshold_grid([recorded.confidence_levels])
            # the fit's view (`cascade_outcomes` on the stage's confidences): every vector of the grid
            decided, passed, _ = cascade_outcomes(conf, grid)
            for i, verdict in enumerate(truth):
                if verdict is None:  # no verdict, or a contradiction: never decided by this stage
                    assert not decided[:, i].any(), (seed, ts[i].id, by_id.get(ts[i].id))
                else:
                    assert (passed[decided[:, i], i] == (verdict == "pass")).all(), (seed, by_id[ts[i].id])
            # the run's view (`Cascade.settle`, what `batch` does), at every threshold pair of the grid
            for t_pass, t_fail in grid[:, 0]:
                cascade = Cascade([recorded], [StageRule("recorded", float(t_pass), float(t_fail))])
                for verdict, expected in zip(verdicts, truth, strict=True):
                    settled = cascade.settle(0, verdict)
                    if settled is not None:
                        assert expected is not None and settled.passed == (expected == "pass")
                        decided_somewhere[expected] += 1
        result = Cascade([stages[0]], [StageRule("recorded", 0.5, math.nextafter(0.5, 0))]).batch(ts)  # widest
        for verdict, stage, expected in zip(result, result.stages, truth, strict=True):
            assert (stage == "recorded") == (expected is not None)
            if expected is not None:
                assert verdict.passed == (expected == "pass")
    assert min(decided_somewhere.values()) > 100  # the property was exercised on passes and fails alike


def test_a_line_whose_score_contradicts_its_verdict_is_handed_on_counted_and_warned_with_the_share(tmp_path):
    ts = items(8)
    lines = [{"id": ts[0].id, "passed": True, "score": 0.1, "abstained": False},  # the reported case: a fail once
             {"id": ts[1].id, "passed": False, "score": 0.9, "abstained": False},
             {"id": ts[2].id, "passed": False, "score": 0.3, "abstained": False, "contradiction": True},
             {"id": ts[3].id, "passed": True, "score": 0.8, "abstained": False},
             {"id": ts[4].id, "passed": False, "score": 0.2, "abstained": False},
             # an operating point on the calibrated score: the tool's passed stands, no contradiction
             {"id": ts[5].id, "passed": True, "score": 0.3, "score_calibrated": 0.45, "abstained": False},
             {"id": ts[6].id, "passed": False, "score": 0.7, "score_calibrated": 0.6, "abstained": False},
             {"id": ts[7].id, "passed": False, "score": 0.0, "abstained": True, "error_kind": "timeout"}]
    path = write(tmp_path / "v.jsonl", *lines)
    with pytest.warns(RecordedContradictionWarning,
                      match=r"^3 of 7 lines \(43%\) of .*v\.jsonl have a score that contradicts their verdict: "
                            r"handed on"):
        recorded = RecordedJudge.from_file(path)
    assert recorded.n_contradictions == 3 and set(recorded.contradiction_ids) == {t.id for t in ts[:3]}
    assert recorded.confidence_levels is None
    for t_pass, t_fail in ((0.5, 0.4), (0.99, 0.01), (math.inf, 0.4), (0.5, -math.inf)):
        recorded.reset_counts()
        result = Cascade([recorded], [StageRule("recorded", t_pass, t_fail)]).batch(ts)
        assert result.stages[:3] == ["escalated"] * 3 and recorded.n_contradicted == 3
        for i, expected in ((3, True), (4, False), (5, True), (6, False)):
            assert result.stages[i] in ("recorded", "escalated")
            if result.stages[i] == "recorded":
                assert result[i].passed is expected
    # at the widest rule every consistent line is decided as the tool said, the tool's own operating point too
    result = Cascade([recorded], [StageRule("recorded", 0.5, math.nextafter(0.5, 0))]).batch(ts)
    assert result.stages[3:7] == ["recorded"] * 4 and [v.passed for v in result[3:7]] == [True, False, True, False]
    # the same file with no contradiction warns nothing
    clean = write(tmp_path / "clean.jsonl", *lines[3:])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordedContradictionWarning)
        assert RecordedJudge.from_file(clean).n_contradictions == 0


def test_the_confidence_keeps_the_verdict_and_orders_within_it():
    grid = [i / 100 for i in range(101)]
    passes = [recorded_confidence(True, s) for s in grid]
    fails = [recorded_confidence(False, s) for s in grid]
    assert min(passes) == 0.5 and max(passes) == 1.0 and max(fails) < 0.5 and min(fails) == 0.0
    assert passes == sorted(passes) and fails == sorted(fails)
    # the score itself wherever it agrees with the verdict
    assert all(recorded_confidence(True, s) == s for s in grid if s >= 0.5)
    assert all(recorded_confidence(False, s) == s for s in grid if s < 0.5)
    assert recorded_confidence(False, 0.0, score_calibrated=0.9) < 0.5 <= recorded_confidence(True, 1.0, 0.1)
    assert recorded_contradiction(True, 0.1) and recorded_contradiction(False, 0.5)
    assert not recorded_contradiction(True, 0.1, score_calibrated=0.3)
    assert recorded_contradiction(False, 0.1, declared=True)


def test_a_recorded_stage_costs_one_judge_verdict_per_item_and_makes_no_lm_call(tmp_path):
    from rubricforge_dspy.trust.cascade import stage_cost

    ts = items(2)
    recorded = RecordedJudge.from_file(write(tmp_path / "v.jsonl", {"id": ts[0].id, "passed": True, "score": 1.0,
                                                                     "abstained": False}))
    assert recorded.predictors() == [] and recorded.cost_per_item == 1.0 and stage_cost(recorded) == 1.0


def test_a_verdict_file_with_only_id_and_passed_works_as_a_stage_and_in_the_report(tmp_path):
    """Another tool's verdict file needs only id and passed: abstained defaults to false and score to the
    verdict (1.0 / 0.0), said once per file; the recorded stage decides with it and `report` reads it."""
    from rubricforge_dspy.core.verdict import VerdictDefaultsWarning
    from rubricforge_dspy.report import write_report

    ts = items(4)
    path = write(tmp_path / "other_tool.jsonl", *({"id": t.id, "passed": t.label == 1} for t in ts))
    with pytest.warns(VerdictDefaultsWarning, match="4 without 'abstained', 4 without 'score'") as said:
        recorded = RecordedJudge.from_file(path)
    assert len([w for w in said if issubclass(w.category, VerdictDefaultsWarning)]) == 1
    result = Cascade([recorded], [StageRule("recorded", 0.5, 0.4)]).batch(ts)
    assert result.stages == ["recorded"] * 4 and [v.passed for v in result] == [t.label == 1 for t in ts]
    labeled = write(tmp_path / "tool.jsonl", *({"id": t.id, "passed": i != 1, "label": t.label, "task_id": t.task_id}
                                              for i, t in enumerate(items(20))))
    with pytest.warns(VerdictDefaultsWarning):
        text = write_report([labeled], tmp_path / "r.md", figures=False, n_resamples=200).read_text()
    # 10 failed items, 9 of them passed (all but item 1); 11 of 20 right
    assert "| **tool** (reference) | 0.900 [" in text and "| 20 | 0.550 [" in text
