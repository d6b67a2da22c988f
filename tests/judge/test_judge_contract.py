"""The one judge contract (judge.contract.BaseJudge): every judge kind is called, evaluated, batched and
awaited the same way, and the async path is exactly as strict as the sync one, against a real HTTP server
on 127.0.0.1 (the project's fake) as well as offline."""

from __future__ import annotations

import asyncio

import dspy
import pytest

from rubricforge_dspy import metrics
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.judge.contract import PREDICTION_FIELDS, BaseJudge
from rubricforge_dspy.judge.execution import RetryPolicy, ajudge_verdict, judge_verdict
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge, VerdictFormatError
from rubricforge_dspy.judge.operating_point import Calibration
from rubricforge_dspy.lm.circuit import JudgeUnavailableError
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.helpers import make_trajectory
from tests.support.hybrid import dataset, fitted, llm_blind_to_errors


def lm_for(fake: FakeOpenAI, **overrides):
    return make_lm(LMConfig(model=fake.model, api_base=fake.api_base,
                            **{"num_retries": 0, "timeout": 5, "cache": False, **overrides}))


def examples(trajectories):
    return [dspy.Example(trajectory=t, label=t.label).with_inputs("trajectory") for t in trajectories]


@pytest.fixture
def three_judges(tmp_path):
    """A plain, a hybrid and a floor judge, each saved and loaded back with `load_judge`."""
    lm = ScriptedLM(llm_blind_to_errors, model="scripted-complementary")
    train, path, _, _ = fitted(lm, tmp_path)
    floor_path = tmp_path / "floor.json"
    FloorJudge(SymptomFloor.fit(train)).save(floor_path)
    plain_path = tmp_path / "plain.json"
    TrajectoryJudge().save(plain_path)
    judges = {name: load_judge(p, check_certificate=False)
              for name, p in (("plain", plain_path), ("hybrid", path), ("floor", floor_path))}
    return judges, lm


def test_every_judge_kind_is_one_contract(three_judges):
    judges, lm = three_judges
    assert [type(j).__name__ for j in judges.values()] == ["TrajectoryJudge", "HybridJudge", "FloorJudge"]
    t = dataset(4, offset=300)[2]  # an errored booking
    with dspy.context(lm=lm):
        for judge in judges.values():
            assert isinstance(judge, BaseJudge)
            prediction = judge(trajectory=t)
            assert set(PREDICTION_FIELDS) <= set(prediction.keys())
            assert set(prediction.raw) == {"passed", "score"}
            assert len(judge.fingerprint(lm).sha256) == 64 and len(judge.rubric_sha256) == 64
            assert asyncio.run(judge.acall(trajectory=t)) == prediction
    with pytest.raises(InputError, match="features"):
        judges["floor"](trajectory="[1] USER: only text")


def test_dspy_evaluate_gives_the_report_numbers_for_every_judge_kind(three_judges):
    """dspy.Evaluate over dspy.Examples (labels beside the input, never in it) gives, for the plain, the hybrid
    and the floor judge, the agreement and false-pass rate that the report's metrics compute from the
    verdicts the batch path records."""
    judges, lm = three_judges
    test = dataset(40, offset=200)
    devset = examples(test)
    failed = [e for e in devset if e.label == 0]
    labels = [t.label for t in test]
    seen = {}
    with dspy.context(lm=lm):
        for name, judge in judges.items():
            agree = dspy.Evaluate(devset=devset, metric=lambda e, p, trace=None: p.passed == bool(e.label),
                                  num_threads=4, display_progress=False)(judge)
            false_pass = dspy.Evaluate(devset=failed, metric=lambda e, p, trace=None: bool(p.passed),
                                       num_threads=4, display_progress=False)(judge)
            recorded = judge.batch(devset, num_threads=4)
            assert recorded.n_abstained == 0
            passed = [int(v.passed) for v in recorded]
            assert agree.score == pytest.approx(100 * metrics.accuracy(labels, passed), abs=0.01), name
            assert false_pass.score == pytest.approx(100 * metrics.false_pass_rate(labels, passed), abs=0.01), name
            seen[name] = (agree.score, false_pass.score)
    # not one number three times: the LLM part misses errored bookings, the floor misses wrong dates
    assert seen["hybrid"][0] > max(seen["plain"][0], seen["floor"][0])
    assert seen["plain"][1] > 0 and seen["floor"][1] > 0


def test_the_prediction_says_when_the_operating_point_changed_the_decision():
    lm = ScriptedLM(lambda messages: {"reason": "Looks done.", "passed": True, "score": 0.8})
    judge = TrajectoryJudge()
    judge.calibration = Calibration("platt", {"a": 1.0, "b": -1.0}, 10)  # 0.8 -> 0.45
    judge.threshold = 0.6
    with dspy.context(lm=lm):
        prediction = judge(trajectory="[1] USER: hi")
    assert prediction.raw == {"passed": True, "score": 0.8}
    assert prediction.calibrated and prediction.decision_changed and not prediction.passed
    judge.threshold = None
    with dspy.context(lm=lm):
        kept = judge(trajectory="[1] USER: hi")
    assert kept.calibrated and not kept.decision_changed and kept.passed


def test_32_concurrent_acalls_against_a_real_server_return_32_verdicts():
    trajectories = [make_trajectory(i, success=i % 2 == 0) for i in range(32)]

    def responder(body, n):
        ok = "booked" in user_text(body).lower() and "error" not in user_text(body).lower()
        return {"reason": "From the tool results.", "passed": ok, "score": 0.9 if ok else 0.1}

    with FakeOpenAI(responder, delay=0.05) as fake:
        judge = TrajectoryJudge()
        judge.set_lm(lm_for(fake, max_connections=32))

        async def main():
            return await asyncio.gather(*(judge.acall(trajectory=t) for t in trajectories))

        predictions = asyncio.run(main())
        assert fake.n_requests == 32
        sync = [judge(trajectory=t) for t in trajectories]
    assert len(predictions) == 32 and all(not p.abstained for p in predictions)
    assert [p.passed for p in predictions] == [p.passed for p in sync]


@pytest.mark.parametrize("fault, kind", [("truncated", "truncated"), ("garbage", "parse")])
def test_the_async_path_is_as_strict_as_the_sync_path(fault, kind):
    """A cut or unparsable answer raises the same VerdictFormatError from acall as from a call, and is
    recorded as the same abstention (one attempt: an answer, not an outage) by both execution twins."""
    with FakeOpenAI(lambda body, n: fault) as fake:
        judge = TrajectoryJudge()
        judge.set_lm(lm_for(fake))
        with pytest.raises(VerdictFormatError) as sync_error:
            judge(trajectory="[1] USER: hi")
        with pytest.raises(VerdictFormatError) as async_error:
            asyncio.run(judge.acall(trajectory="[1] USER: hi"))
        sync = judge_verdict(judge, "[1] USER: hi")
        asynchronous = asyncio.run(ajudge_verdict(judge, "[1] USER: hi"))
    assert sync_error.value.kind == async_error.value.kind == kind
    assert sync == asynchronous and sync.abstained and sync.error_kind == kind
    assert sync.attempts == asynchronous.attempts == 1


def test_ajudge_verdict_retries_transient_errors_like_judge_verdict():
    replies = ["http_503", "http_503", {"reason": "Done.", "passed": True, "score": 0.9}]
    with FakeOpenAI(lambda body, n: replies[n % 3]) as fake:
        judge = TrajectoryJudge()
        judge.set_lm(lm_for(fake))
        policy = RetryPolicy(max_retries=2, backoff=0.0)
        verdict = asyncio.run(ajudge_verdict(judge, "[1] USER: hi", policy))
        again = judge_verdict(judge, "[1] USER: hi", policy)
    assert verdict == again and verdict.passed and verdict.attempts == again.attempts == 3


def test_batch_and_abatch_count_every_failure_and_stop_on_a_dead_server():
    trajectories = [make_trajectory(i, success=True) for i in range(12)]

    def responder(body, n):
        index = int(user_text(body).split("HAT", 1)[1][:3]) if "HAT" in user_text(body) else 0
        return "garbage" if index % 4 == 0 else {"reason": "Booked.", "passed": True, "score": 0.9}

    with FakeOpenAI(responder) as fake:
        judge = TrajectoryJudge()
        judge.set_lm(lm_for(fake))
        threaded = judge.batch(trajectories, num_threads=4)
        awaited = asyncio.run(judge.abatch(examples(trajectories), concurrency=8))
    assert len(threaded) == len(awaited) == 12
    assert threaded == awaited  # same verdicts, in input order
    assert threaded.n_abstained == 3 and threaded.errors == {"parse": 3}
    with FakeOpenAI(lambda body, n: "http_400") as dead:
        judge.set_lm(lm_for(dead))
        with pytest.raises(JudgeUnavailableError, match="3 consecutive"):
            judge.batch(trajectories, num_threads=1, max_consecutive_lm_errors=3)
        with pytest.raises(JudgeUnavailableError):
            asyncio.run(judge.abatch(trajectories, concurrency=1, max_consecutive_lm_errors=3))


def test_judge_verdict_keeps_what_the_prediction_says():
    """The recorded verdict is the Prediction's own (calibrated score, contradiction), with its attempts."""
    lm = ScriptedLM(lambda messages: {"reason": "Looks done.", "passed": True, "score": 0.4})  # contradicts itself
    judge = TrajectoryJudge()
    judge.calibration = Calibration("platt", {"a": 1.0, "b": -1.0}, 10)
    with dspy.context(lm=lm):
        prediction = judge(trajectory="[1] USER: hi")
        verdict = judge_verdict(judge, "[1] USER: hi")
    assert verdict.contradiction and not verdict.passed and verdict.attempts == 1
    assert verdict.score_calibrated == pytest.approx(prediction.score_calibrated)
