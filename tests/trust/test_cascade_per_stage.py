"""The cascade fit of the third pass: every stage bounded by default, an order from the fit split (all calibration
tasks tested), refusals that name where the procedure stopped and never ask for fewer tasks than were tested, and
the judge verdicts a certified cascade needs."""

from __future__ import annotations

import re

import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.trust.cascade import (
    CascadeCalibrationError,
    fit_cascade,
    format_fit_report,
    judge_verdicts_line,
)
from tests.support.hybrid import WRONG, dataset


@pytest.fixture(scope="module")
def floor():
    return FloorJudge(SymptomFloor.fit(dataset(40)))


def tool(t) -> Verdict:
    """Another tool's verdicts (no LM): it reads the wrong date but not the error, and over-credits a third of
    the wrong dates with a middling score."""
    text = " ".join(step.content for step in t.steps if isinstance(step.content, str))
    if WRONG in text:
        over = int(t.id.split("-")[-1]) % 3 == 0 if t.id.split("-")[-1].isdigit() else False
        return Verdict.from_answer(over, 0.6 if over else 0.1, "wrong date")
    return Verdict.from_answer(True, 0.9, "looks booked")


def test_the_default_fit_bounds_every_stage_and_reports_both_false_pass_rates(floor):
    cascade = fit_cascade([floor, tool], dataset(400, offset=10_000), alpha=0.2, delta=0.1,
                          order_trajectories=dataset(200, offset=40_000))
    report, guarantee = cascade.fit_report, cascade.guarantee
    assert guarantee["bound"] == "per_stage" and guarantee["max_false_pass"] == pytest.approx(0.1)
    assert guarantee["false_pass_rate"] == "among_failed"
    assert guarantee["method"] == "ordered_sequence" and guarantee["order"] == "ordering data"
    assert report["units"]["tested_tasks"] == 400 and report["units"]["ordering_tasks"] == 0
    for row in report["stages"]:
        if row["decided"]:
            assert row["p_disagreement"] is not None and row["p_disagreement"] <= 0.1
            if row["t_pass"] is not None:
                assert row["p_false_pass"] is not None and row["p_false_pass"] <= 0.1
    text = format_fit_report(report)
    assert "for every stage, among the items it decides" in text and "bound: per_stage:" in text
    assert "failures among its" in text and "bounded per stage: D and FP" in text
    assert "false-pass <= 0.1 for every stage" in text
    assert "ordering data: 200 labeled trajectories apart from the calibration" in text
    assert "floor: out-of-fold probabilities" in text
    verdicts = report["judge_verdicts"]
    judge = next(row for row in report["stages"] if row["name"] == verdicts["stages"][0])
    assert verdicts["needed"] == judge["reached"] < 400
    assert judge_verdicts_line(verdicts["needed"], 400) in text
    assert re.search(r"judge verdicts needed: \d+ of 400 \(\d+% saved\)", text)


def test_the_fit_can_bound_the_failures_among_a_stages_passes_instead(floor):
    cascade = fit_cascade([floor, tool], dataset(400, offset=10_000), alpha=0.2, delta=0.1, max_false_pass=0.2,
                          false_pass="among_passes", order_trajectories=dataset(200, offset=40_000))
    assert cascade.guarantee["false_pass_rate"] == "among_passes"
    for row in cascade.fit_report["stages"]:
        if row["decided"] and row["t_pass"] is not None:
            assert row["p_false_pass"] is not None and row["p_false_pass"] <= 0.1
            assert row["failures_among_passes_ci95"][0] <= 0.2
    text = format_fit_report(cascade.fit_report)
    assert "bounded per stage: D and the failures among its passes" in text
    assert "false-pass (failures among its passes) <= 0.2" in text
    with pytest.raises(InputError, match="false_pass must be one of"):
        fit_cascade([floor, tool], dataset(40), alpha=0.2, delta=0.1, false_pass="over_everything")


def test_judge_verdicts_line_wording():
    assert judge_verdicts_line(101, 188) == "judge verdicts needed: 101 of 188 (46% saved)"


def test_ordering_data_must_not_share_a_task_with_the_calibration(floor):
    calibration = dataset(120, offset=10_000)
    with pytest.raises(InputError, match="both in the ordering data and in the calibration"):
        fit_cascade([floor, tool], calibration, alpha=0.2, delta=0.1, order_trajectories=calibration[:30])
    with pytest.raises(InputError, match="orders the 'ordered_sequence' method"):
        fit_cascade([floor, tool], calibration, alpha=0.2, delta=0.1, method="holm",
                    order_trajectories=dataset(50, offset=40_000))


@pytest.mark.parametrize(("n", "alpha", "kwargs"), [
    (16, 0.05, {"method": "holm"}),
    (24, 0.1, {}),
    (40, 0.05, {}),
    (60, 0.05, {"order": True}),
    (20, 0.05, {"method": "split_fixed_sequence"}),
    (30, 0.1, {"method": "holm", "bound": "pooled"}),
    (40, 0.05, {"bound": "pooled", "max_false_pass": 0.02}),
])
def test_a_refusal_names_where_it_stopped_and_never_asks_for_fewer_tasks_than_were_tested(floor, n, alpha, kwargs):
    kwargs = dict(kwargs)
    if kwargs.pop("order", False):
        kwargs["order_trajectories"] = dataset(80, offset=40_000)
    with pytest.raises(CascadeCalibrationError) as refused:
        fit_cascade([floor, tool], dataset(n, offset=20_000), alpha=alpha, delta=0.1, **kwargs)
    message = str(refused.value)
    assert ("the sequence stopped at its first vector not certified" in message
            or "the vector with the smallest p-value" in message)
    # every p-value given as the reason is above the level it needed
    reason = re.search(r"failed \(p = ([0-9.e-]+) > ([0-9.e-]+)\)", message)
    if reason:
        assert float(reason.group(1)) > float(reason.group(2))
    tested = int(re.search(r"(\d+) trials of (\d+) tasks tested", message).group(2))
    asked = re.search(r"needs about (\d+) labeled tasks in the test", message)
    if asked:
        assert int(asked.group(1)) > tested
        assert refused.value.needed_labels is not None and refused.value.needed_labels > tested
    else:
        assert "no number of" in message
