"""The judge-vs-label metric for `dspy.Evaluate` (issue 39, item 5): a cascade's escalations are skipped and counted,
never scored as fails, so `dspy.Evaluate` with it and `rubricforge report` give the same agreement on the same
verdicts (a scripted cascade: floor, then an LLM stage that is sometimes unsure; no real LM)."""

from __future__ import annotations

import json
import math

import dspy
import pytest

from rubricforge_dspy.apply.cascade import run_cascade
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data import to_examples
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.metric import label_agreement
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text


def _answers(messages):
    """Deterministic by the text: unsure of a third (it escalates), passes a third, fails a third."""
    kind = sum(map(ord, last_user_text(messages))) % 3
    if kind == 0:
        return {"reason": "Cannot tell.", "passed": True, "score": 0.5}
    return {"reason": "Read the pages.", "passed": kind == 1, "score": 0.9 if kind == 1 else 0.1}


def _walkthrough_agreement(example, prediction, trace=None) -> float:
    """The walkthrough's metric before issue 39: an escalation (passed False) scored as a verdict."""
    return float(bool(prediction.passed) == bool(example.label))


def test_evaluate_with_label_agreement_gives_the_agreement_report_gives(halves, tmp_path):
    trajectories = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))[:90]
    cascade = Cascade([load_judge(halves / "floor.json"), TrajectoryJudge()],
                      [StageRule("floor", 0.95, 0.05), StageRule("judge", 0.8, 0.2)])
    lm = ScriptedLM(_answers)

    metric = label_agreement()
    devset = to_examples(trajectories, require_label=True)
    with dspy.context(lm=lm):
        evaluation = dspy.Evaluate(devset=devset, metric=metric, num_threads=1, display_progress=False)(cascade)
        old = dspy.Evaluate(devset=devset, metric=_walkthrough_agreement, num_threads=1,
                            display_progress=False)(cascade)
    result = metric.result(evaluation)

    verdicts = tmp_path / "v.jsonl"
    run_cascade(cascade, trajectories, verdicts, lm=lm)
    lines = [json.loads(x) for x in verdicts.read_text().splitlines()]
    escalated = sum(x["stage"] == "escalated" for x in lines)
    assert 0 < escalated < len(lines)  # the scripted cascade escalates some items: the case that matters
    report = tmp_path / "report" / "report.md"
    assert main(["report", "--predictions", str(verdicts), "--out", str(report)]) == 0
    rows = json.loads(report.with_suffix(".json").read_text())["main"]
    assert len(rows) == 1
    row = rows[0]

    assert result.escalated == escalated and result.n == 90 and result.decided == row["n"] == 90 - escalated
    assert result.agreement == pytest.approx(100 * row["accuracy"])
    assert f"{result.agreement:.1f}% on {90 - escalated} decided of 90 ({escalated} escalated" in str(result)
    # dspy.Evaluate's own average never turns the escalations into a number (NaN, not a disagreement)...
    assert math.isnan(evaluation.score)
    # ...as the walkthrough's old metric did: it scored each escalation as a fail against the label
    assert old.score < result.agreement
    assert metric.escalated == escalated and metric.decided == 90 - escalated  # the counters of the one run


def test_an_abstention_that_is_not_an_escalation_is_a_fail_and_an_unlabeled_example_is_refused():
    metric = label_agreement()
    failed = dspy.Prediction(passed=False, abstained=True, error_kind="parse", score=None)
    escalated = dspy.Prediction(passed=False, abstained=True, error_kind="escalated", score=None)
    passed = dspy.Prediction(passed=True, abstained=False, error_kind=None, score=0.9)
    fail_label, pass_label = dspy.Example(label=0), dspy.Example(label=1)
    assert metric(fail_label, failed) == 1.0 and metric(pass_label, failed) == 0.0
    assert math.isnan(metric(pass_label, escalated)) and metric(pass_label, escalated, trace=[]) is False
    assert metric(pass_label, passed, trace=[]) is True
    result = metric.result([(fail_label, failed, 1.0), (pass_label, escalated, math.nan), (pass_label, passed, 1.0)])
    assert (result.agreed, result.decided, result.escalated, result.failed, result.n) == (2, 2, 1, 1, 3)
    assert result.agreement == 100.0
    with pytest.raises(InputError, match="has no label"):
        metric(dspy.Example(id="x1"), passed)
