"""Fitting a cascade: certified thresholds from labeled calibration data, a refusal that says how many labels
it would need, an LM failure that stops the fit, and, against a real recording OpenAI-compatible server on
127.0.0.1, no LM request for a trajectory the floor decided."""

from __future__ import annotations

import dataclasses
import re

import dspy
import numpy as np
import pytest

from rubricforge_dspy.core.errors import InputError, ServerError
from rubricforge_dspy.judge.cascade import ESCALATED
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.metrics.risk_control import binomial_p_value, decided_needed
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from rubricforge_dspy.trust.cascade import (
    CascadeCalibrationError,
    CascadeStageError,
    calibration_units,
    cascade_summary,
    fit_cascade,
    format_fit_report,
)
from tests.support.cascade import judge_answers
from tests.support.helpers import make_trajectory
from tests.support.hybrid import dataset


@pytest.fixture(scope="module")
def floor():
    return FloorJudge(SymptomFloor.fit(dataset(40)))


def test_fit_certifies_floor_then_judge_and_reports_each_stage(floor):
    calibration = dataset(240, offset=1000)  # 60 errored (the floor sees them), 60 wrong dates (the judge does)
    lm = ScriptedLM(judge_answers)
    with dspy.context(lm=lm):
        cascade = fit_cascade([floor, TrajectoryJudge()], calibration, alpha=0.1, delta=0.1, method="holm",
                              bound="pooled")
    report = cascade.fit_report
    chosen = report["chosen"]
    assert chosen["certified"] and chosen["n_tested"] == 56 * 56 and chosen["method"] == "holm"
    # the exact p-value of what was certified, recomputed, passes Holm's first step
    assert chosen["p_value"] == pytest.approx(binomial_p_value(chosen["errors"], chosen["n_decided"], 0.1))
    assert chosen["p_value"] <= 0.1 / chosen["n_tested"]
    floor_row, judge_row = report["stages"]
    assert floor_row["name"] == "floor" and judge_row["name"] == "judge"
    assert floor_row["decided"] + judge_row["decided"] + report["escalated"] == 240
    assert floor_row["decided"] >= 60 and floor_row["disagreement"] == 0.0  # the floor is free: it decides first
    assert judge_row["calls"] == lm.calls  # the fit asked the judge once per item it could be left
    assert cascade.guarantee["alpha"] == 0.1 and "Learn then Test" in " ".join(cascade.guarantee["references"])
    held_out = dataset(40, offset=5000)
    with dspy.context(lm=ScriptedLM(judge_answers)):
        verdicts = cascade.batch(held_out)
    assert verdicts.n_abstained == 0 and verdicts.decided_by["floor"] >= 10
    summary = cascade_summary(cascade, verdicts, [t.label for t in held_out])
    floor_summary, judge_summary = summary["stages"]
    assert floor_summary["lm_calls"] == 0 and judge_summary["lm_calls"] == 40 - floor_summary["decided"]
    assert summary["lm_calls_saved"] == floor_summary["decided"] and summary["coverage"] == 1.0
    assert summary["overall"]["disagreement"] == 0.0 and summary["guarantee"]["alpha"] == 0.1


def test_too_few_labels_are_refused_with_the_count_needed(floor):
    with pytest.raises(CascadeCalibrationError) as refused:
        fit_cascade([floor], dataset(16, offset=2000), alpha=0.05, delta=0.1, method="holm")
    error = refused.value
    assert isinstance(error, InputError)  # the command line exits 2
    assert error.needed_decided == decided_needed(0.05, 0.1 / 56, 0.0) and error.needed_decided > 16
    assert re.search(rf"needs about {error.needed_labels} labeled tasks in the test", str(error))
    assert "16 trials of 16 tasks tested" in str(error) and "16 calibration trajectories of 16 tasks" in str(error)


def test_a_refusal_of_the_split_sequence_counts_its_ordering_share(floor):
    with pytest.raises(CascadeCalibrationError) as refused:
        fit_cascade([floor], dataset(20, offset=2000), alpha=0.05, delta=0.1, method="split_fixed_sequence")
    message = str(refused.value)
    assert "16 trials of 16 tasks tested, 4 more tasks ordered the grid (split fixed sequence: 20% of the tasks)" \
        in message
    assert "with the ordering share" in message


def test_every_trial_is_a_calibration_item_unless_one_per_task_is_asked():
    items = [make_trajectory(i, success=True, task=f"t{i % 5}", trial=i // 5) for i in range(20)]
    units = calibration_units(items, one_per_task=True, seed=3)
    assert len(units) == 5 and len({items[i].task_id for i in units}) == 5
    assert np.array_equal(units, calibration_units(items, one_per_task=True, seed=3))
    assert len(calibration_units(items)) == 20


def test_a_fit_uses_every_trial_with_the_task_as_unit_and_says_so(floor):
    """Three trials of each of 320 tasks: every trajectory is used (none dropped), the p-values are the betting
    ones over task means, and the fit's report and text say how many tasks and trials were used."""
    base = dataset(320, offset=7000)
    items = [dataclasses.replace(t, id=f"{t.id}#{k}", trial=k) for t in base for k in range(3)]
    cascade = fit_cascade([floor], items, alpha=0.1, delta=0.1, order_trajectories=dataset(80, offset=60_000))
    units, chosen = cascade.fit_report["units"], cascade.fit_report["chosen"]
    assert units["trials_used"] == 960 and units["dropped_trials"] == 0 and units["tasks"] == 320
    assert chosen["p_values"] == "betting" and chosen["n_tasks"] == 320 and chosen["n_order_tasks"] == 0
    assert chosen["n_trials"] == 3 * chosen["n_tasks"] and chosen["max_trials_per_task"] == 3
    text = format_fit_report(cascade.fit_report)
    assert "960 trajectories of 320 tasks used" in text and "none dropped" in text
    assert "ordered_sequence" in text and "betting p-values" in text and "order: ordering data" in text


def test_a_stage_certified_to_decide_nothing_is_dropped_and_never_called(floor):
    """The judge guesses (a coin by the episode's number): the certified cascade leaves it nothing to decide, so
    it is dropped; the fit says so, and judging with the cascade makes no LM call."""

    def guessing(messages):
        text = last_user_text(messages)
        flip = sum(map(ord, text)) % 2 == 0
        return {"reason": "A guess.", "passed": flip, "score": 0.95 if flip else 0.05}

    calibration = dataset(240, offset=8000)
    with dspy.context(lm=ScriptedLM(guessing)):
        cascade = fit_cascade([floor, TrajectoryJudge()], calibration, alpha=0.2, delta=0.1,
                              order_trajectories=dataset(120, offset=30_000))
    assert [rule.name for rule in cascade.rules] == ["floor"] and len(cascade.stages) == 1
    assert cascade.fit_report["dropped"][0]["name"] == "judge"
    assert "certified to decide nothing" in format_fit_report(cascade.fit_report)
    lm = ScriptedLM(guessing)
    with dspy.context(lm=lm):
        verdicts = cascade.batch(dataset(20, offset=9000))
    assert lm.calls == 0 and "judge" not in verdicts.decided_by


def lm_for(fake: FakeOpenAI):
    return make_lm(LMConfig(model=fake.model, api_base=fake.api_base, num_retries=0, timeout=5, cache=False))


def respond(body, n):
    return judge_answers([{"role": "user", "content": user_text(body)}])


def test_a_floor_decided_trajectory_makes_no_lm_request(floor):
    """Against a real HTTP server on 127.0.0.1 that records every request: the batch sends the judge only the
    trajectories the floor left, and no request holds a floor-decided one."""
    from rubricforge_dspy.judge.cascade import Cascade, StageRule

    cascade = Cascade([floor, TrajectoryJudge()], [StageRule("floor", float("inf"), 0.2), StageRule("judge", 0.8, 0.2)])
    items = dataset(16, offset=3000)
    with FakeOpenAI(respond) as fake:
        with dspy.context(lm=lm_for(fake)):
            verdicts = cascade.batch(items, num_threads=4)
            one = cascade(trajectory=items[2])  # errored: the floor decides it
        bodies = fake.chat_bodies
    by_floor = [t for t, s in zip(items, verdicts.stages, strict=True) if s == "floor"]
    assert by_floor and one.stage == "floor"
    assert len(bodies) == len(items) - len(by_floor)
    sent = "\n".join(user_text(b) for b in bodies)
    for t in by_floor:
        assert f"HAT{int(t.task_id[len('error'):]):03d}" not in sent, t.id
    assert all(v.passed == bool(t.label) for t, v in zip(items, verdicts, strict=True))


def test_an_lm_failure_stops_the_fit_instead_of_reading_as_a_confidence(floor):
    with FakeOpenAI(lambda body, n: "http_400") as fake:
        with dspy.context(lm=lm_for(fake)), pytest.raises(CascadeStageError, match="http_4xx") as failed:
            fit_cascade([floor, TrajectoryJudge()], dataset(8, offset=4000), alpha=0.1, delta=0.1)
    assert isinstance(failed.value, ServerError)


def test_an_lm_error_is_never_an_escalation(floor):
    """A server answering 400: a call raises; a batch records the judge stage's LM-error abstention (an error
    to retry), never "escalated", while what the floor decided stands."""
    from rubricforge_dspy.judge.cascade import Cascade, StageRule

    cascade = Cascade([floor, TrajectoryJudge()], [StageRule("floor", float("inf"), 0.2), StageRule("judge", 0.8, 0.2)])
    items = dataset(8, offset=6000)
    with FakeOpenAI(lambda body, n: "http_400") as fake:
        with dspy.context(lm=lm_for(fake)):
            verdicts = cascade.batch(items, num_threads=2)
            with pytest.raises(Exception) as raised:
                cascade(trajectory=items[0])
    assert not isinstance(raised.value, InputError)
    left = [v for v, s in zip(verdicts, verdicts.stages, strict=True) if s == "judge"]
    assert left and all(v.abstained and v.error_kind == "http_4xx" for v in left)
    assert ESCALATED not in verdicts.stages and "judge" not in verdicts.decided_by
    assert verdicts.decided_by["floor"] == len(items) - len(left)
