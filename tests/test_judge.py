import dspy
import pytest
from dspy.utils.dummies import DummyLM

from rubricforge_dspy.judge import JudgeTrajectory, TrajectoryJudge
from rubricforge_dspy.rubric import SEED_RUBRIC
from rubricforge_dspy.testing import ScriptedLM, system_text
from tests.helpers import make_trajectory


def run(judge, lm, trajectory="[1] USER: hi"):
    with dspy.context(lm=lm):
        return judge(trajectory=trajectory)


def test_signature_contract():
    assert list(JudgeTrajectory.input_fields) == ["trajectory"]
    assert list(JudgeTrajectory.output_fields) == ["reason", "passed", "score"]
    assert JudgeTrajectory.output_fields["passed"].annotation is bool
    assert JudgeTrajectory.output_fields["score"].annotation is float
    assert TrajectoryJudge().rubric == SEED_RUBRIC


def test_verdict_is_typed_and_score_clamped():
    lm = DummyLM([{"reason": "booked and confirmed", "passed": True, "score": 1.7}], adapter=dspy.JSONAdapter())
    verdict = run(TrajectoryJudge(), lm)
    assert verdict.passed is True and verdict.score == 1.0 and not verdict.abstained and verdict.error is None


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


@pytest.mark.parametrize("raw", ["not json at all", '{"reason": "x", "passed": "maybe", "score": 0.5}',
                                 '{"reason": "x", "passed": true, "score": NaN}'])
def test_unparsable_output_is_an_abstained_fail(raw):
    verdict = run(TrajectoryJudge(), ScriptedLM(lambda m: raw))
    assert verdict.passed is False and verdict.score == 0.0 and verdict.abstained and verdict.error


def test_lm_errors_are_an_abstained_fail_not_an_exception():
    def boom(messages):
        raise ConnectionError("server went away")

    verdict = run(TrajectoryJudge(), ScriptedLM(boom))
    assert verdict.abstained and verdict.passed is False and "server went away" in verdict.error


def test_judge_call_is_deterministic_single_call():
    lm = ScriptedLM(lambda m: {"reason": "r", "passed": True, "score": 0.8})
    judge = TrajectoryJudge()
    first, second = run(judge, lm), run(judge, lm)
    assert (first.passed, first.score) == (second.passed, second.score)


def test_program_hash_distinguishes_fewshot_demos_from_the_bare_rubric():
    from rubricforge_dspy.baselines import fewshot_judge
    from rubricforge_dspy.rubric import rubric_sha256
    from tests.helpers import make_dataset

    plain, fewshot = TrajectoryJudge(), fewshot_judge(make_dataset(8), k=4)
    assert plain.program_sha256 == rubric_sha256(SEED_RUBRIC)
    assert fewshot.rubric == plain.rubric and fewshot.program_sha256 != plain.program_sha256
    assert len(fewshot.judge.demos) == 4 and sorted(d.passed for d in fewshot.judge.demos) == [False, False, True, True]
