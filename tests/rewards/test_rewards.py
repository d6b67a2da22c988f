"""The judge as an RL reward: called exactly as TRL's GRPOTrainer._calculate_rewards and verl's reward
managers call their functions (read from their source; the trainers are not installed)."""

from __future__ import annotations

import json
import math
import warnings

import dspy
import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.judge.execution import RetryPolicy
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.rewards import (
    RewardAbstentionWarning,
    RewardJudgeError,
    as_reward_function,
    as_verl_compute_score,
)
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text

CANARY = "CANARY-LABEL"


def failing_on_errors(seen):
    def respond(messages):
        text = last_user_text(messages)
        seen.append("\n".join(m["content"] for m in messages))
        if "garbage" in text:
            return "this is not a verdict"
        failed = "(ERROR)" in text
        return {"reason": "a tool call failed" if failed else "the lookup succeeded", "passed": not failed,
                "score": 0.1 if failed else 0.9}
    return respond


PROMPT = [{"role": "system", "content": "You are a shop agent."}, {"role": "user", "content": "Find item 7."}]


def completion(tool_ok: bool, answer: str = "Item 7 is in stock."):
    """A TRL conversational completion after its tool loop: the assistant's tool call (no id, arguments
    a dict), the tool message TRL appended (a failure is ``str({"error": ...})``), the final answer."""
    result = '{"stock": 3}' if tool_ok else str({"error": "Tool get_item not found."})
    return [
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_item", "arguments": {"id": 7}}}]},
        {"role": "tool", "name": "get_item", "content": result},
        {"role": "assistant", "content": answer},
    ]


def trl_call(reward_func, prompts, completions, **columns):
    """What GRPOTrainer._calculate_rewards passes to a synchronous custom reward function."""
    reward_kwargs = {key: list(values) for key, values in columns.items()}
    logged = {}
    reward_kwargs["trainer_state"] = object()
    reward_kwargs["log_extra"] = lambda column, values: None
    reward_kwargs["log_metric"] = lambda name, value: logged.__setitem__(name, value)
    output = reward_func(prompts=prompts, completions=completions,
                         completion_ids=[[1, 2, 3] for _ in completions], **reward_kwargs)
    return [r if r is not None else math.nan for r in output], logged  # TRL: None -> NaN


def test_trl_conversational_with_tool_calls_is_judged_and_labels_never_shown():
    seen: list[str] = []
    reward = as_reward_function(TrajectoryJudge(), lm=ScriptedLM(failing_on_errors(seen)), max_concurrency=4)
    assert reward.__name__ == "rubricforge_judge"  # TRL's get_callable_name
    completions = [completion(True), completion(False), completion(True), completion(False)]
    rewards, logged = trl_call(reward, [PROMPT] * 4, completions, solution=[CANARY] * 4,
                               ground_truth=[f"{CANARY}-{i}" for i in range(4)], task=["find"] * 4)
    assert rewards == [0.9, 0.1, 0.9, 0.1]
    assert reward.counters.judged == 4 and reward.counters.abstained == 0 and reward.counters.passed == 2
    assert logged == {"rubricforge_judge/abstained": 0.0}
    assert len(seen) == 4 and all(CANARY not in text for text in seen)
    assert all("get_item" in text and "Find item 7." in text for text in seen)
    assert all("You are a shop agent." not in last for last in seen)  # system messages are not steps


def test_trl_standard_format_strings():
    seen: list[str] = []
    reward = as_reward_function(TrajectoryJudge(), lm=ScriptedLM(failing_on_errors(seen)), mode="binary")
    rewards, _ = trl_call(reward, ["Say hi."], ["Hi!"], answer=[CANARY])
    assert rewards == [1.0] and "Say hi." in seen[0] and "Hi!" in seen[0] and CANARY not in seen[0]


def test_abstentions_get_no_reward_are_counted_and_warned():
    reward = as_reward_function(TrajectoryJudge(), lm=ScriptedLM(failing_on_errors([])))
    bad_messages = [{"role": "tool", "content": "an observation answering no call"}]
    completions = [completion(True), completion(True, answer="garbage"), bad_messages]
    with pytest.warns(RewardAbstentionWarning, match=r"2 of 3 completion\(s\) were not judged"):
        rewards, logged = trl_call(reward, [PROMPT] * 3, completions)
    assert rewards[0] == 0.9 and math.isnan(rewards[1]) and math.isnan(rewards[2])
    counters = reward.counters
    assert (counters.items, counters.judged, counters.abstained, counters.malformed) == (3, 1, 2, 1)
    assert counters.by_kind == {"parse": 1, "malformed": 1}
    assert logged["rubricforge_judge/abstained"] == 2.0


def test_a_numeric_abstain_value_is_used_as_documented():
    reward = as_reward_function(TrajectoryJudge(), lm=ScriptedLM(failing_on_errors([])), abstain_value=-1.0)
    with pytest.warns(RewardAbstentionWarning):
        rewards, _ = trl_call(reward, [PROMPT], [completion(True, answer="garbage")])
    assert rewards == [-1.0]


def test_a_dead_judge_stops_the_run_instead_of_feeding_non_rewards():
    def down(messages):
        raise ConnectionError("judge server down")

    reward = as_reward_function(TrajectoryJudge(), lm=ScriptedLM(down), max_consecutive_abstentions=3,
                                retry=RetryPolicy(max_retries=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardAbstentionWarning)
        with pytest.raises(RewardJudgeError, match="abstained on the last 3"):
            trl_call(reward, [PROMPT] * 3, [completion(True)] * 3)


def test_a_dead_judge_stops_a_large_batch_after_the_limit_not_after_every_completion():
    """The limit was checked only after the whole trainer call: a dead server got one call (and its retries)
    per completion of the batch first. The batch runs through the engine's dead-server circuit: it stops after
    `max_consecutive_abstentions` failed calls, plus at most the other calls already in flight."""
    lm = ScriptedLM(lambda messages: (_ for _ in ()).throw(ConnectionError("judge server down")))
    reward = as_reward_function(TrajectoryJudge(), lm=lm, max_consecutive_abstentions=3, max_concurrency=2,
                                retry=RetryPolicy(max_retries=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RewardAbstentionWarning)
        with pytest.raises(RewardJudgeError, match="abstained on the last 3"):
            trl_call(reward, [PROMPT] * 40, [completion(True)] * 40)
    copies = reward._lm_copy
    calls = copies[1].calls - copies[0].calls  # the one-attempt copy counts from where it was copied
    assert 3 <= calls <= 3 + 2 - 1
    # the verdicts recorded before the circuit opened are counted (abstentions); the call that opened it gave none
    assert reward.counters.items == reward.counters.abstained <= 2 and reward.counters.judged == 0


def test_no_judge_lm_is_a_clear_error():
    with dspy.context(lm=None), pytest.raises(InputError, match="no judge LM"):
        as_reward_function(TrajectoryJudge())(prompts=["a"], completions=["b"])


def test_verl_compute_score_single_and_batched_never_read_ground_truth():
    seen: list[str] = []
    lm = ScriptedLM(failing_on_errors(seen))
    with pytest.raises(TypeError):
        as_verl_compute_score(TrajectoryJudge(), lm=lm)  # abstain_value is required: verl needs a number
    single = as_verl_compute_score(TrajectoryJudge(), lm=lm, abstain_value=0.0)
    extra = {"question": "What is 2+2?", "answer": CANARY, "num_turns": 2, "rollout_reward_scores": {}}
    # NaiveRewardManager: compute_score(data_source=, solution_str=, ground_truth=, extra_info=)
    score = single(data_source="openai/gsm8k", solution_str="The answer is 4.", ground_truth=CANARY, extra_info=extra)
    assert score == 0.9 and "The answer is 4." in seen[-1] and "2+2" not in seen[-1]
    with_prompt = as_verl_compute_score(TrajectoryJudge(), lm=lm, abstain_value=0.0, prompt_key="question",
                                        return_dict=True)
    result = with_prompt(data_source="x", solution_str="4", ground_truth=CANARY, extra_info=extra)
    assert result == {"score": 0.9, "judge_passed": True, "judge_abstained": False} and "2+2" in seen[-1]
    # BatchRewardManager: compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)
    batched = as_verl_compute_score(TrajectoryJudge(), lm=lm, abstain_value=-0.5, batched=True, max_concurrency=3)
    with pytest.warns(RewardAbstentionWarning):
        scores = batched(data_sources=["x"] * 3, solution_strs=["4", "garbage", "5"], ground_truths=[CANARY] * 3,
                         extra_infos=[dict(extra) for _ in range(3)], some_reward_kwarg=CANARY)
    assert scores == [0.9, -0.5, 0.9] and batched.counters.abstained == 1
    assert all(CANARY not in text for text in seen)


def test_verl_prompt_key_missing_is_named():
    single = as_verl_compute_score(TrajectoryJudge(), lm=ScriptedLM(failing_on_errors([])), abstain_value=0.0,
                                   prompt_key="question")
    with pytest.raises(InputError, match="prompt_key='question'"):
        single(data_source="x", solution_str="4", ground_truth="4", extra_info={"index": 1})


def test_trl_reward_against_the_fake_server_concurrently():
    """The whole client path on 127.0.0.1: 16 completions, 4 in flight, every request recorded."""
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.testing import FakeOpenAI

    def by_text(body, n):
        text = json.dumps(body)
        failed = "(ERROR)" in text
        return {"reason": "tool failed" if failed else "ok", "passed": not failed, "score": 0.2 if failed else 0.8}

    with FakeOpenAI(by_text) as fake:
        lm = make_lm(LMConfig(model=fake.model, api_base=fake.api_base))
        reward = as_reward_function(TrajectoryJudge(), lm=lm, max_concurrency=4)
        completions = [completion(i % 2 == 0, answer=f"Item 7 is in stock ({i}).") for i in range(16)]
        rewards, _ = trl_call(reward, [PROMPT] * 16, completions, solution=[CANARY] * 16)
        bodies = fake.chat_bodies
    assert rewards == [0.8 if i % 2 == 0 else 0.2 for i in range(16)]
    assert len(bodies) == 16 and all(CANARY not in json.dumps(body) for body in bodies)
    assert reward.counters.judged == 16


def test_a_reward_call_raises_no_deprecation_warning_of_the_package_own_api():
    """Each reward call used ``judge_verdict(...).verdict``, the package's own deprecated spelling: every
    call of a training loop warned DeprecationWarning (hidden by default filters, loud under -W error)."""
    reward = as_reward_function(TrajectoryJudge(), lm=ScriptedLM(failing_on_errors([])), max_concurrency=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rewards, _ = trl_call(reward, [PROMPT] * 2, [completion(True), completion(False)])
    assert rewards == [0.9, 0.1]
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert deprecations == [], [str(w.message) for w in deprecations]


def test_a_judge_that_makes_no_lm_call_rewards_with_no_lm_configured():
    """A floor, and a cascade of floors, need no LM: no LM is resolved, none is required (issue #34)."""
    from rubricforge_dspy.judge.cascade import Cascade, StageRule
    from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
    from tests.support.hybrid import dataset

    floor = FloorJudge(SymptomFloor.fit(dataset(40)))
    prompts = ["Book a flight to Oslo."] * 2
    completions = ["I booked the flight.", [{"role": "assistant", "content": "Done."}]]
    for judge in (floor, Cascade([floor], [StageRule("floor", 0.5, 0.49)])):
        with dspy.context(lm=None):
            rewards = as_reward_function(judge, mode="binary")(prompts=prompts, completions=completions)
        assert len(rewards) == 2 and all(r in (0.0, 1.0) for r in rewards)
