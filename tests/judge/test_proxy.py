"""The judge as a DSPy metric: ReAct -> Trajectory, scores, GEPA feedback, caching, abstention, bootstrapping."""

from __future__ import annotations

import inspect
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import dspy
import pytest

from rubricforge_dspy.core.criteria import attribute_reason
from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.data.formats.dspy_prediction import (
    condense_error,
    is_error_observation,
    trajectory_from_prediction,
)
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.judge.cache import VerdictCache
from rubricforge_dspy.judge.metric import UNATTRIBUTED, JudgeMetric, as_metric
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text
from tests.support.metric import QUESTION, agent_respond, divide, example, judging, run_react, strict_verdict

# ------------------------------------------------------------------ conversion


def test_react_prediction_becomes_an_observable_trajectory():
    pred = run_react()
    t = trajectory_from_prediction(example(), pred)
    kinds = [s.kind for s in t.steps]
    assert kinds == ["user", "assistant", "tool_call", "tool_result", "assistant", "tool_call", "tool_result",
                     "assistant", "assistant", "final_answer"]
    assert t.steps[0].content == QUESTION
    add_call, add_result = t.steps[2], t.steps[3]
    assert (add_call.tool_name, add_call.arguments) == ("add", {"a": 2, "b": 3})
    assert add_result.content == "5" and not add_result.is_error and add_result.call_id == add_call.call_id
    error = t.steps[6]
    assert error.is_error and error.tool_name == "divide"
    assert error.content == "Execution error in divide: ZeroDivisionError: division by zero"  # traceback condensed
    assert not any(s.tool_name == "finish" for s in t.steps)  # ReAct's finish signal is not a tool call
    assert t.steps[-1].content == "5, and 1 / 0 = 0"
    assert (t.n_tool_calls, t.n_tool_errors) == (2, 1)
    # the gold answer is a label, never an input: it must not reach the judge
    assert "GOLD-ANSWER-CANARY" not in render_trajectory(t)


def test_unknown_outcome_uses_placeholders_the_renderer_never_reads():
    t = trajectory_from_prediction(example(), run_react())
    assert (t.reward, t.label) == (None, None) and t.hidden == {}
    assert render_trajectory(t) == render_trajectory(replace(t, reward=1.0, label=1, hidden={"x": "CANARY"}))
    again = trajectory_from_prediction(example(), run_react())
    assert again.id == t.id  # the id is a hash of the steps


def test_error_observations():
    assert is_error_observation("divide", "Execution error in divide: \nTraceback ...\nZeroDivisionError: x")
    assert is_error_observation("book", "Error: payment method not found")
    assert not is_error_observation("search", "No errors found in 3 items")
    assert not is_error_observation("search", {"error": None})
    assert condense_error("Execution error in t: plain message") == "Execution error in t: plain message"


def test_generic_prediction_and_trace():
    pred = dspy.Prediction(reasoning="Think it through.", answer="42", confidence="high")
    ex = dspy.Example(question="Q?", context="C").with_inputs("question", "context")
    t = trajectory_from_prediction(ex, pred)
    assert [s.kind for s in t.steps] == ["user", "assistant", "final_answer"]
    assert t.steps[0].content == "question: Q?\ncontext: C"
    assert t.steps[-1].content == "answer: 42\nconfidence: high"
    draft = dspy.Prediction(draft="a first draft")
    final = dspy.Prediction(answer="42", confidence="high")
    traced = trajectory_from_prediction(ex, pred, trace=[(None, {}, draft), (None, {}, final)])
    assert [s.content for s in traced.steps if s.kind == "assistant"] == ["a first draft", "Think it through."]


def test_example_without_inputs_is_refused():
    with pytest.raises(ValueError, match="with_inputs"):
        trajectory_from_prediction(dspy.Example(question="Q", answer="A"), dspy.Prediction(answer="A"))
    t = trajectory_from_prediction(dspy.Example(question="Q", answer="A"), dspy.Prediction(answer="A"),
                                   input_fields=["question"])
    assert t.steps[0].content == "Q"


# ------------------------------------------------------------------ scores and feedback


def test_binary_graded_and_bootstrap_conventions():
    pred, judge = run_react(), TrajectoryJudge()
    good = judging(lambda text: {"reason": "fine", "passed": True, "score": 0.7})
    assert as_metric(judge, lm=good)(example(), pred) == 1.0
    assert as_metric(judge, mode="graded", lm=good)(example(), pred) == pytest.approx(0.7)
    assert as_metric(judge, mode="graded", lm=good)(example(), pred, trace=[]) is True  # bootstrapping: bool
    strict = judging(strict_verdict)
    assert as_metric(judge, lm=strict)(example(), pred) == 0.0
    assert as_metric(judge, mode="graded", lm=strict)(example(), pred) == pytest.approx(0.2)
    assert as_metric(judge, lm=strict)(example(), pred, []) is False
    with pytest.raises(ValueError, match="mode"):
        as_metric(judge, mode="soft")


def test_gepa_call_returns_score_and_feedback_naming_the_failed_criterion():
    metric = as_metric(TrajectoryJudge(), lm=judging(strict_verdict))
    inspect.signature(metric).bind(None, None, None, None, None)  # GEPA's own check of the metric
    out = metric(example(), run_react(), None, "react.react", [])
    assert isinstance(out, dspy.Prediction)
    assert out.score == 0.0
    assert "Failed criterion: 3. Grounded claims" in out.feedback
    assert "an ERROR contradicts" in out.feedback
    # feedback=True: always a Prediction with a float score (GEPA also scores with a trace)
    always = as_metric(TrajectoryJudge(), mode="graded", feedback=True, lm=judging(strict_verdict))
    assert always(example(), run_react(), []).score == pytest.approx(0.2)
    never = as_metric(TrajectoryJudge(), feedback=False, lm=judging(strict_verdict))
    assert never(example(), run_react(), None, "react.react", []) == 0.0


def test_gepa_accepts_the_metric():
    dspy.GEPA(metric=as_metric(TrajectoryJudge(), feedback=True), max_metric_calls=10,
              reflection_lm=ScriptedLM(lambda m: {"new_instruction": "x"}))


def test_feedback_for_passes_and_unattributed_failures():
    passing = as_metric(TrajectoryJudge(), lm=judging(lambda t: {"reason": "All good.", "passed": True, "score": 0.9}))
    assert "PASSED" in passing(example(), run_react(), None, "p", None).feedback
    vague = as_metric(TrajectoryJudge(), lm=judging(lambda t: {"reason": "Meh.", "passed": False, "score": 0.3}))
    assert f"Failed criterion: {UNATTRIBUTED}" in vague(example(), run_react(), None, "p", None).feedback


def test_attribute_reason_against_a_rubric_text():
    assert attribute_reason("Grounded claims do not hold here", SEED_RUBRIC).number == 3
    assert attribute_reason("fails criterion 5 of the rubric", SEED_RUBRIC).number == 5
    assert attribute_reason("a call ended in errors that stayed unresolved", SEED_RUBRIC).number == 2
    assert attribute_reason("the quantity details are not correct", SEED_RUBRIC).number == 4
    assert attribute_reason("nothing in common", SEED_RUBRIC) is None
    assert attribute_reason("anything", "no numbered criteria") is None


def test_abstention_scores_zero_and_says_the_judge_could_not_grade():
    broken = ScriptedLM(lambda messages: "this is not JSON", model="broken-judge")
    metric = as_metric(TrajectoryJudge(), mode="graded", lm=broken)
    assert metric(example(), run_react()) == 0.0
    assert metric(example(), run_react(), []) is False
    out = metric(example(), run_react(), None, "p", None)
    assert out.score == 0.0 and "could not grade" in out.feedback
    assert metric.abstentions == 3
    assert broken.calls >= 3  # abstentions are never cached: each call asked again


# ------------------------------------------------------------------ cache and LM routing


def test_cached_verdicts_make_no_second_lm_call():
    judge_lm = judging(strict_verdict)
    metric = as_metric(TrajectoryJudge(), lm=judge_lm)
    pred = run_react()
    metric(example(), pred)
    assert judge_lm.calls == 1
    assert metric(example(), pred) == 0.0 and metric(example(), run_react(), []) is False
    assert judge_lm.calls == 1 and metric.cache.hits == 2 and metric.cache.misses == 1
    # another rubric, another model, or no cache: a new LM call
    other_rubric = as_metric(TrajectoryJudge(SEED_RUBRIC + "\n7. Extra: x."), lm=judge_lm, cache=metric.cache)
    other_rubric(example(), pred)
    assert judge_lm.calls == 2
    other_model = judging(strict_verdict).copy(model="scripted-judge-v2")
    as_metric(TrajectoryJudge(), lm=other_model, cache=metric.cache)(example(), pred)
    assert other_model.calls == 1 and len(metric.cache) == 3
    uncached = as_metric(TrajectoryJudge(), lm=judge_lm, cache=False)
    uncached(example(), pred), uncached(example(), pred)
    assert judge_lm.calls == 4


def test_concurrent_calls_on_one_trajectory_make_one_lm_call():
    def slow(messages):
        time.sleep(0.05)
        return strict_verdict(last_user_text(messages))

    judge_lm = ScriptedLM(slow, model="slow-judge")
    metric = as_metric(TrajectoryJudge(), lm=judge_lm)
    pred = run_react()
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda _: metric(example(), pred), range(16)))
    assert scores == [0.0] * 16 and judge_lm.calls == 1


def test_judge_lm_differs_from_agent_lm_and_stays_out_of_the_agent_trace():
    agent_lm = ScriptedLM(agent_respond, model="scripted-agent")
    judge_lm = judging(strict_verdict)
    metric = as_metric(TrajectoryJudge(), lm=judge_lm)
    pred = run_react()
    with dspy.context(lm=agent_lm, trace=[]):
        metric(example(), pred, dspy.settings.trace)
        assert dspy.settings.trace == []  # the judge's predictor never enters the agent's trace
    assert agent_lm.calls == 0 and judge_lm.calls == 1
    # without lm=, the judge uses the configured LM, and the cache key names that model
    configured = judging(strict_verdict).copy(model="configured-judge")
    with dspy.context(lm=configured):
        as_metric(TrajectoryJudge(), cache=metric.cache)(example(), pred)
    assert configured.calls == 1


def test_render_config_and_cache_type():
    metric = as_metric(TrajectoryJudge(), lm=judging(strict_verdict), render_config=RenderConfig(max_tokens=64))
    t = metric.to_trajectory(example(), run_react())
    assert metric.render(t) == render_trajectory(t, RenderConfig(max_tokens=64))
    assert isinstance(metric, JudgeMetric) and isinstance(metric.cache, VerdictCache)


# ------------------------------------------------------------------ inside an optimizer


def test_metric_plugs_into_bootstrap_fewshot():
    def agent(messages):
        request = re.search(r"\[\[ ## question ## \]\]\n(.*?)\n", last_user_text(messages))[1]
        if "next_tool_name" in system_text(messages):
            if "[[ ## tool_name_0" in last_user_text(messages):
                return {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": {}}
            b = 0 if "zero" in request else 3
            return {"next_thought": "Compute.", "next_tool_name": "divide", "next_tool_args": {"a": 6, "b": b}}
        return {"reasoning": "From the tool.", "answer": "2"}

    trainset = [dspy.Example(question=q).with_inputs("question")
                for q in ("Divide 6 by zero.", "Divide 6 by three.", "Divide 6 by zero again.")]
    judge_lm = judging(strict_verdict)
    metric = as_metric(TrajectoryJudge(), lm=judge_lm)
    student = dspy.ReAct("question -> answer", tools=[divide], max_iters=3)
    optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=2, max_labeled_demos=0)
    with dspy.context(lm=ScriptedLM(agent, model="scripted-agent"), adapter=dspy.JSONAdapter()):
        compiled = optimizer.compile(student, trainset=trainset)
    assert metric.calls == 3 and judge_lm.calls == 3
    assert metric.passes == 1  # only the division by three passed the judge
    demos = compiled.react.demos
    assert demos and all("three" in d["question"] for d in demos)


def test_proxy_and_report_attribute_a_reason_to_the_same_criterion(tmp_path):
    """One attribution algorithm (rubricforge_dspy.core.criteria): the reason texts on which the proxy
    ("full name first") and the report ("criterion N first") used to disagree now get one answer."""
    from rubricforge_dspy.core.criteria import parse_criteria

    criteria = parse_criteria(SEED_RUBRIC)
    reason = "Criterion 2 fails, and Grounded claims are weak too."
    assert attribute_reason(reason, SEED_RUBRIC).number == 2  # the proxy used to say 3
    assert attribute_reason(reason, criteria).number == 2
    metric = as_metric(TrajectoryJudge(), lm=judging(lambda t: {"reason": reason, "passed": False, "score": 0.1}))
    assert "Failed criterion: 2. No unresolved errors" in metric(example(), run_react(), None, "p", None).feedback
    for text in ("the quantity details are not correct", "errors stayed unresolved; see #3", "(5) was skipped",
                 "Properly closed? no. Goal fulfilled? no."):
        assert attribute_reason(text, SEED_RUBRIC) == attribute_reason(text, criteria)


def test_gepa_feedback_says_the_calibrated_score_and_the_threshold_that_decided_the_verdict():
    """A program with a pass threshold on calibrated scores (the false-pass cap) failed a run the LM scored
    0.81; the feedback said "FAILED this trajectory (score 0.81)", which reads as a contradiction to the
    reflection LM. It now says which score decided it, against which threshold."""
    from rubricforge_dspy.judge.operating_point import Calibration

    judge = TrajectoryJudge()
    judge.calibration = Calibration("platt", {"a": 1.0, "b": -0.5}, n=20)  # 0.81 -> 0.577
    judge.threshold = 0.7
    lm = judging(lambda text: {"reason": "Grounded claims hold.", "passed": True, "score": 0.81})
    out = as_metric(judge, lm=lm)(example(), run_react(), None, "react.react", [])
    assert out.score == 0.0
    assert out.feedback.startswith("The judge FAILED this trajectory: calibrated score 0.58 is below the pass "
                                   "threshold 0.70 (raw score 0.81).")
    # a calibration without a threshold decides nothing: the rubric's rule on the raw score did
    judge.threshold = None
    out = as_metric(judge, lm=lm)(example(), run_react(), None, "react.react", [])
    assert out.score == 1.0
    assert out.feedback.startswith("The judge PASSED this trajectory: score 0.81 is at or above the pass "
                                   "threshold 0.50 (calibrated 0.58).")


def test_gepa_feedback_says_a_contradiction_decided_a_fail_with_a_high_score():
    lm = judging(lambda text: {"reason": "Grounded claims: unsure.", "passed": False, "score": 0.81})
    out = as_metric(TrajectoryJudge(), lm=lm)(example(), run_react(), None, "react.react", [])
    assert out.score == 0.0
    assert ("FAILED this trajectory: score 0.81 is at or above the pass threshold 0.50; the answer contradicted "
            "itself (its passed said fail, its score >= 0.5), and a contradiction is a fail.") in out.feedback
