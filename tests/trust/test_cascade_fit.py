"""Fitting a cascade: certified thresholds from labeled calibration data, a refusal that says how many labels
it would need, an LM failure that stops the fit, and, against a real recording OpenAI-compatible server on
127.0.0.1, no LM request for a trajectory the floor decided."""

from __future__ import annotations

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
from rubricforge_dspy.testing.scripted import ScriptedLM
from rubricforge_dspy.trust.cascade import (
    CascadeCalibrationError,
    CascadeStageError,
    calibration_units,
    cascade_summary,
    fit_cascade,
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
        cascade = fit_cascade([floor, TrajectoryJudge()], calibration, alpha=0.1, delta=0.1)
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
        fit_cascade([floor], dataset(16, offset=2000), alpha=0.05, delta=0.1)
    error = refused.value
    assert isinstance(error, InputError)  # the command line exits 2
    assert error.needed_decided == decided_needed(0.05, 0.1 / 56, 0.0) and error.needed_decided > 16
    assert re.search(rf"needs at least {error.needed_decided} decided labels", str(error))
    assert "16 calibration units" in str(error)


def test_one_trial_per_task_is_the_calibration_unit():
    items = [make_trajectory(i, success=True, task=f"t{i % 5}", trial=i // 5) for i in range(20)]
    units = calibration_units(items, seed=3)
    assert len(units) == 5 and len({items[i].task_id for i in units}) == 5
    assert np.array_equal(units, calibration_units(items, seed=3))
    assert len(calibration_units(items, one_per_task=False)) == 20


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
    by_floor = [t for t, s in zip(items, verdicts.stages) if s == "floor"]
    assert by_floor and one.stage == "floor"
    assert len(bodies) == len(items) - len(by_floor)
    sent = "\n".join(user_text(b) for b in bodies)
    for t in by_floor:
        assert f"HAT{int(t.task_id[len('error'):]):03d}" not in sent, t.id
    assert all(v.passed == bool(t.label) for t, v in zip(items, verdicts))


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
    left = [v for v, s in zip(verdicts, verdicts.stages) if s == "judge"]
    assert left and all(v.abstained and v.error_kind == "http_4xx" for v in left)
    assert ESCALATED not in verdicts.stages and "judge" not in verdicts.decided_by
    assert verdicts.decided_by["floor"] == len(items) - len(left)
