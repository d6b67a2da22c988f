import dspy
import pytest
from dspy.utils.dummies import DummyLM
from dspy.utils.exceptions import AdapterParseError

from rubricforge_dspy.core.errors import RubricForgeDeprecationWarning
from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.judge.module import TrajectoryJudge, TrajectoryVerdictSignature, VerdictFormatError
from rubricforge_dspy.lm.errors import error_kind, is_transient
from rubricforge_dspy.testing.scripted import Cut, ScriptedLM, system_text
from tests.support.helpers import make_trajectory


def run(judge, lm, trajectory="[1] USER: hi"):
    with dspy.context(lm=lm):
        return judge(trajectory=trajectory)


def test_signature_contract():
    assert list(TrajectoryVerdictSignature.input_fields) == ["trajectory"]
    assert list(TrajectoryVerdictSignature.output_fields) == ["reason", "passed", "score"]
    assert TrajectoryVerdictSignature.output_fields["passed"].annotation is bool
    assert TrajectoryVerdictSignature.output_fields["score"].annotation is float
    assert TrajectoryJudge().rubric == SEED_RUBRIC


def test_verdict_is_typed_and_score_clamped():
    lm = DummyLM([{"reason": "booked and confirmed", "passed": True, "score": 1.7}], adapter=dspy.JSONAdapter())
    verdict = run(TrajectoryJudge(), lm)
    assert verdict.passed is True and verdict.score == 1.0 and not verdict.abstained and verdict.error is None
    assert verdict.contradiction is False


def test_rubric_is_the_instruction_sent_to_the_lm():
    seen = []
    lm = ScriptedLM(lambda m: seen.append(system_text(m)) or {"reason": "r", "passed": False, "score": 0.2})
    run(TrajectoryJudge("My custom rubric: 1. Errors: none."), lm)
    assert "My custom rubric" in seen[0]


def test_trajectory_objects_are_rendered_before_judging():
    seen = []
    lm = ScriptedLM(lambda m: seen.append(m[-1]["content"]) or {"reason": "r", "passed": False, "score": 0.2})
    run(TrajectoryJudge(), lm, make_trajectory(5, success=False))
    assert "(ERROR)" in seen[0] and "CANARY" not in seen[0]


@pytest.mark.parametrize("raw, kind", [
    ("not json at all", "parse"),
    ('{"reason": "x", "passed": true, "score": 0.9', "parse"),           # json_repair would close it
    ('{"reason": "x", "passed": "maybe", "score": 0.5}', "invalid"),
    ('{"reason": "x", "passed": true, "score": NaN}', "invalid"),
])
def test_the_module_raises_on_a_bad_verdict_and_the_execution_layer_records_it(raw, kind):
    with pytest.raises(VerdictFormatError) as raised:
        run(TrajectoryJudge(), ScriptedLM(lambda m: raw))
    assert raised.value.kind == kind and isinstance(raised.value, AdapterParseError)  # GEPA sees a format failure
    with dspy.context(lm=ScriptedLM(lambda m: raw)):
        outcome = judge_verdict(TrajectoryJudge(), "[1] USER: hi")
    verdict = outcome
    assert (verdict.passed, verdict.score, verdict.abstained, verdict.error_kind) == (False, 0.0, True, kind)
    assert outcome.attempts == 1  # a format failure is an answer: never retried


def test_a_truncated_answer_is_never_a_verdict_even_when_it_would_parse():
    complete_json = '{"reason": "booked", "passed": true, "score": 0.9}'  # parses, but the server cut it
    with pytest.raises(VerdictFormatError) as raised:
        run(TrajectoryJudge(), ScriptedLM(lambda m: Cut(complete_json)))
    assert raised.value.kind == "truncated" and raised.value.lm_response == complete_json
    with dspy.context(lm=ScriptedLM(lambda m: Cut(complete_json))):
        verdict = judge_verdict(TrajectoryJudge(), "[1] USER: hi")
    assert verdict.abstained and not verdict.passed and verdict.error_kind == "truncated"


def test_passed_contradicting_score_is_counted_and_resolved_to_fail():
    verdict = run(TrajectoryJudge(), ScriptedLM(lambda m: {"reason": "r", "passed": True, "score": 0.2}))
    assert verdict.contradiction is True and verdict.passed is False and verdict.score == 0.2
    verdict = run(TrajectoryJudge(), ScriptedLM(lambda m: {"reason": "r", "passed": False, "score": 0.8}))
    assert verdict.contradiction is True and verdict.passed is False and verdict.score == 0.8
    verdict = run(TrajectoryJudge(), ScriptedLM(lambda m: {"reason": "r", "passed": True, "score": 0.8}))
    assert verdict.contradiction is False and verdict.passed is True


def test_lm_errors_propagate_from_the_module_and_are_retried_then_recorded_by_type():
    calls = []

    def boom(messages):
        calls.append(1)
        raise ConnectionError("server went away")

    with pytest.raises(Exception, match="server went away"):
        run(TrajectoryJudge(), ScriptedLM(boom))
    calls.clear()
    with dspy.context(lm=ScriptedLM(boom)):
        outcome = judge_verdict(TrajectoryJudge(), "[1] USER: hi", RetryPolicy(max_retries=2, backoff=0.0))
    assert outcome.abstained and "server went away" in outcome.error
    assert outcome.error_kind == "other" and outcome.attempts == 1  # an unknown error type is not retried


def test_error_kinds_come_from_exception_types_not_messages():
    from dspy import lm15
    from dspy.utils import exceptions as e

    cases = [
        (e.LMTimeoutError("says connection refused"), "timeout"),
        (e.LMTransportError("says HTTP 500"), "connection"),
        (e.LMServerError("says timeout"), "http_5xx"),
        (e.LMRateLimitError("HTTP 429"), "rate_limit"),
        (e.LMInvalidRequestError("says 503"), "http_4xx"),
        (e.ContextWindowExceededError(message="too long"), "http_4xx"),
        (lm15.TimeoutError("x", provider="p"), "timeout"),
        (TimeoutError("slow"), "timeout"),
        (ConnectionRefusedError("refused"), "connection"),
        (ValueError("parse failed: timeout connection 500"), "other"),
    ]
    for error, kind in cases:
        assert error_kind(error) == kind, error
    assert is_transient(e.LMServerError("x")) and is_transient(e.LMRateLimitError("x"))
    assert not is_transient(e.LMInvalidRequestError("x")) and not is_transient(ValueError("timeout"))


def test_judge_call_is_deterministic_single_call():
    lm = ScriptedLM(lambda m: {"reason": "r", "passed": True, "score": 0.8})
    judge = TrajectoryJudge()
    first, second = run(judge, lm), run(judge, lm)
    assert (first.passed, first.score) == (second.passed, second.score)


def test_program_hash_distinguishes_fewshot_demos_from_the_bare_rubric():
    from rubricforge_dspy.core.rubric import rubric_sha256
    from rubricforge_dspy.judge.baselines import fewshot_judge
    from tests.support.helpers import make_dataset

    plain, fewshot = TrajectoryJudge(), fewshot_judge(make_dataset(8), k=4)
    assert plain.rubric_sha256 == rubric_sha256(SEED_RUBRIC)
    assert fewshot.rubric == plain.rubric and fewshot.rubric_sha256 != plain.rubric_sha256
    with pytest.warns(RubricForgeDeprecationWarning, match="renamed judge.rubric_sha256"):
        assert plain.program_sha256 == plain.rubric_sha256  # the old name still answers, with a warning
    assert len(fewshot.judge.demos) == 4 and sorted(d.passed for d in fewshot.judge.demos) == [False, False, True, True]
