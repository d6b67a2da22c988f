"""The segments judge: windows that fit, every step read by some call, evidence from what was sent, strict
answers, no hidden field shown, JSON save and load, and the same against the fake OpenAI server."""

from __future__ import annotations

import json

import dspy
import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.evidence.tokens import estimate_tokens
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.judge.module import VerdictFormatError
from rubricforge_dspy.judge.segments import SEGMENTS_KIND, SegmentsJudge, plan_windows
from rubricforge_dspy.program.store import ProgramError
from rubricforge_dspy.testing.scripted import ScriptedLM, system_text
from tests.judge._long_episodes import HIDDEN_MARK, long_trajectory, marker

BUDGET = RenderConfig(max_tokens=1500)


def responder(seen, verdict=None):
    def respond(messages):
        seen.append("\n".join(str(m.get("content") or "") for m in messages))
        if "overview" in system_text(messages):
            return verdict or {"passed": False, "score": 0.2, "reason": "step [41] failed"}
        return {"findings": "none"}
    return respond


def test_plan_windows_covers_every_step_with_overlap():
    costs = [10, 50, 200, 30, 30, 30, 5, 500, 20]
    windows = plan_windows(costs, 100, overlap=1)
    covered = {i for a, b in windows for i in range(a, b)}
    assert covered == set(range(len(costs)))
    for a, b in windows:
        assert b - a == 1 or sum(costs[a:b]) <= 100
    assert any(windows[k][1] > windows[k + 1][0] for k in range(len(windows) - 1))  # some overlap


def test_every_step_reaches_some_call_and_the_evidence_says_complete():
    seen: list[str] = []
    judge = SegmentsJudge(render_config=BUDGET)
    with dspy.context(lm=ScriptedLM(responder(seen))):
        prediction = judge(trajectory=long_trajectory(100))
    window_requests = [s for s in seen if "[[ ## excerpt ## ]]" in s]
    assert all(any(marker(n) in s for s in seen) for n in range(1, 101))
    assert prediction.evidence == {"steps": 100, "whole": 100, "clipped": 0, "elided": 0, "chars_cut": 0,
                                   "complete": True, "read": "segments", "steps_read": list(range(1, 101))}
    assert prediction.calls == len(seen) and len(window_requests) >= 2
    assert prediction.passed is False and prediction.score == pytest.approx(0.2)
    # each window's prompt fits the budget and carries the task and the final answer
    for excerpt in judge.windows(long_trajectory(100))[0]:
        assert estimate_tokens(excerpt) <= BUDGET.max_tokens
        assert marker(1) in excerpt and marker(100) in excerpt


def test_a_step_longer_than_a_window_is_clipped_and_recorded():
    episode = long_trajectory(12, words=4000)
    seen: list[str] = []
    with dspy.context(lm=ScriptedLM(responder(seen))):
        prediction = SegmentsJudge(render_config=BUDGET)(trajectory=episode)
    evidence = prediction.evidence
    assert evidence["clipped"] > 0 and evidence["chars_cut"] > 0 and evidence["complete"] is False
    assert evidence["steps_read"] == list(range(1, 13)) and evidence["elided"] == 0
    assert evidence["whole"] + evidence["clipped"] == 12


def test_no_label_reward_or_hidden_field_reaches_the_lm():
    seen: list[str] = []
    with dspy.context(lm=ScriptedLM(responder(seen))):
        SegmentsJudge(render_config=BUDGET)(trajectory=long_trajectory(30))
    assert seen and not any(HIDDEN_MARK in s for s in seen)


def test_rubric_is_the_instruction_of_both_predictors():
    judge = SegmentsJudge("Fail any episode with an unreported tool error.")
    assert [p.signature.instructions for p in judge.predictors()] == [judge.rubric, judge.rubric]
    seen: list[str] = []
    with dspy.context(lm=ScriptedLM(responder(seen))):
        judge(trajectory=long_trajectory(20))
    assert all("Fail any episode with an unreported tool error." in s for s in seen)


def test_a_non_verdict_or_an_lm_error_raises_and_the_execution_layer_abstains():
    def bad(messages):
        if "overview" in system_text(messages):
            return {"passed": "true", "score": 0.9, "reason": "x"}
        return {"findings": "none"}
    judge = SegmentsJudge(render_config=BUDGET)
    with dspy.context(lm=ScriptedLM(bad)), pytest.raises(VerdictFormatError):
        judge(trajectory=long_trajectory(20))

    calls = []

    def dies_in_window_two(messages):
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("server went away")
        return responder([])(messages)
    with dspy.context(lm=ScriptedLM(dies_in_window_two)):
        verdict = judge_verdict(judge, long_trajectory(60))
    assert verdict.abstained and verdict.error_kind is not None and verdict.passed is False


def test_text_input_is_refused_before_any_call():
    lm = ScriptedLM(responder([]))
    with dspy.context(lm=lm), pytest.raises(InputError, match="reads a Trajectory"):
        SegmentsJudge()(trajectory="some rendered text")
    assert lm.calls == 0


def test_save_and_load_as_json(tmp_path):
    judge = SegmentsJudge("my rubric", render_config=BUDGET, overlap=2)
    path = tmp_path / "segments.json"
    judge.save(path)
    data = json.loads(path.read_text())
    assert data["kind"] == SEGMENTS_KIND and data["overlap"] == 2
    loaded = SegmentsJudge.from_file(path)
    assert loaded.rubric == "my rubric" and loaded.rubric_sha256 == judge.rubric_sha256
    assert loaded.render_config == BUDGET and loaded.overlap == 2
    with pytest.raises(InputError):
        judge.save(path, save_program=True)
    data["overlap"] = 5
    path.write_text(json.dumps(data))
    with pytest.raises(ProgramError, match="sha256"):
        SegmentsJudge.from_file(path)


def test_against_the_fake_openai_server_every_step_reaches_a_request():
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.testing.fake_server import FakeOpenAI
    from rubricforge_dspy.testing.fake_server import system_text as body_system

    def answer(body, n):
        if "overview" in body_system(body):
            return json.dumps({"passed": True, "score": 0.8, "reason": "all tests pass [99]"})
        return json.dumps({"findings": "none"})

    with FakeOpenAI(answer) as server:
        judge = SegmentsJudge(render_config=BUDGET)
        judge.set_lm(make_lm(LMConfig(model=server.model, api_base=server.api_base, num_retries=0, timeout=10)))
        prediction = judge(trajectory=long_trajectory(100))
        bodies = [json.dumps(b) for b in server.chat_bodies]
    assert all(any(marker(n) in body for body in bodies) for n in range(1, 101))
    assert not any(HIDDEN_MARK in body for body in bodies)
    assert prediction.evidence["complete"] is True and prediction.evidence["steps_read"] == list(range(1, 101))
    assert prediction.calls == len(bodies) and prediction.passed is True


def cheap_first_stage(trajectory):
    """A cheap stage that decides the short episodes and hands the long ones on (score 0.5)."""
    from rubricforge_dspy.core.verdict import Verdict

    return Verdict.from_answer(True, 0.99, "short") if len(trajectory.steps) < 50 else \
        Verdict.from_answer(True, 0.5, "unsure")


def test_as_a_cascade_stage_only_what_the_cheaper_stage_left_pays_for_it():
    from rubricforge_dspy.judge.cascade import Cascade
    from rubricforge_dspy.judge.recorded import CallableJudge

    seen: list[str] = []
    segments = SegmentsJudge(render_config=BUDGET)
    cascade = Cascade([CallableJudge(cheap_first_stage, import_path="tests.judge.test_segments:cheap_first_stage"),
                       segments], [(0.9, 0.1), (0.5, 0.49)])
    with dspy.context(lm=ScriptedLM(responder(seen))):
        verdicts = cascade.batch([long_trajectory(20), long_trajectory(100)], num_threads=1)
    assert [v.passed for v in verdicts] == [True, False] and verdicts.stages == ["stage0", "stage1"]
    assert verdicts.stage_calls == {"stage0": 2, "stage1": 1}
    assert any(marker(99) in s for s in seen) and not any("long-20" in s for s in seen)


def test_async_call_reads_the_same_windows():
    import asyncio

    seen_sync: list[str] = []
    seen_async: list[str] = []
    judge = SegmentsJudge(render_config=BUDGET)
    with dspy.context(lm=ScriptedLM(responder(seen_sync))):
        sync = judge(trajectory=long_trajectory(40))
    with dspy.context(lm=ScriptedLM(responder(seen_async))):
        done = asyncio.run(judge.acall(trajectory=long_trajectory(40)))
    assert seen_sync == seen_async and done.evidence == sync.evidence


def test_a_public_coding_agent_trajectory_every_step_reaches_a_request():
    """The longest shipped public coding-agent episode (OpenHands on Multi-SWE-bench, 66 steps, 17 KB): under
    a small budget, each step's whole rendered line is in some request sent to the fake server."""
    from pathlib import Path

    from rubricforge_dspy.data import load_trajectories
    from rubricforge_dspy.judge._reading import QuotedSteps
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.testing.fake_server import FakeOpenAI
    from rubricforge_dspy.testing.fake_server import system_text as body_system

    path = Path(__file__).resolve().parents[2] / "evals/data/openhands/multi_swe_bench_output.jsonl"
    episode = max(load_trajectories(path), key=lambda t: len(t.steps))
    assert len(episode.steps) >= 60

    def answer(body, n):
        if "overview" in body_system(body):
            return json.dumps({"passed": False, "score": 0.3, "reason": "x"})
        return json.dumps({"findings": "none"})

    with FakeOpenAI(answer) as server:
        judge = SegmentsJudge(render_config=RenderConfig(max_tokens=1200))
        judge.set_lm(make_lm(LMConfig(model=server.model, api_base=server.api_base, num_retries=0, timeout=10)))
        prediction = judge(trajectory=episode)
        sent = ["\n".join(str(m.get("content") or "") for m in body["messages"]) for body in server.chat_bodies]
    quoted = QuotedSteps(episode)
    capacity_line = [quoted.line(i, None)[0] for i in range(len(quoted))]
    whole = [i for i in range(len(quoted)) if any(capacity_line[i] in text for text in sent)]
    clipped = [i for i in range(len(quoted)) if i not in whole]
    assert all(any(f"\n[{i + 1}] " in text for text in sent) for i in clipped)  # its clipped line was sent
    assert prediction.evidence["whole"] == len(whole) and prediction.evidence["clipped"] == len(clipped)
    assert prediction.evidence["steps_read"] == list(range(1, len(episode.steps) + 1))
    assert prediction.evidence["complete"] == (prediction.evidence["clipped"] == 0)


@pytest.mark.parametrize("make", [lambda: SegmentsJudge(render_config=BUDGET),
                                  lambda: __import__("rubricforge_dspy.judge.explorer", fromlist=["x"]).ExplorerJudge(
                                      render_config=BUDGET)], ids=["segments", "explorer"])
def test_the_verdict_cache_key_differs_between_trajectories(make):
    from rubricforge_dspy.judge.cache import input_sha256

    judge = make()
    one, other = long_trajectory(20), long_trajectory(21)
    assert input_sha256(judge.inputs_of(one)) != input_sha256(judge.inputs_of(other))
    assert input_sha256(judge.inputs_of(one)) == input_sha256(judge.inputs_of(long_trajectory(20)))
    seen: list[str] = []
    respond = responder(seen, {"passed": True, "score": 0.9, "reason": "ok"}) if isinstance(judge, SegmentsJudge) \
        else (lambda m: {"action": "verdict", "argument": "", "passed": True, "score": 0.9, "reason": "ok"})
    with dspy.context(lm=ScriptedLM(respond)):
        assert judge(**judge.inputs_of(one)).passed is True  # judge(**inputs_of(t)) is judge(trajectory=t)


def test_batch_counts_a_failed_item_as_an_abstention_and_judges_the_rest():
    def respond(messages):
        text = "\n".join(str(m.get("content") or "") for m in messages)
        if "steps=25 " in text:  # every call about the 25-step episode fails
            raise ConnectionError("server went away")
        return responder([])(messages)

    with dspy.context(lm=ScriptedLM(respond)):
        verdicts = SegmentsJudge(render_config=BUDGET).batch(
            [long_trajectory(20), long_trajectory(25), long_trajectory(30)], num_threads=1,
            policy=RetryPolicy(max_retries=0))
    assert verdicts.n_abstained == 1 and verdicts[1].abstained and not verdicts[0].abstained
    assert sum(verdicts.errors.values()) == 1
