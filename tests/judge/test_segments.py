"""The segments judge: windows that fit, every step read by some call, evidence from what was sent, strict
answers, no hidden field shown, JSON save and load, and the same against the fake OpenAI server."""

from __future__ import annotations

import json

import dspy
import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.evidence.tokens import estimate_tokens
from rubricforge_dspy.judge.execution import judge_verdict
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
