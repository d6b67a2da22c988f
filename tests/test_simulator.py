"""The simulated GPU judge server (evals/simulator): scheduler limits, prefix cache, deterministic
rubric-dependent verdicts, reflection, faults. Behaviour only; no timing assertions."""

from __future__ import annotations

import json

import httpx
import pytest

from evals.simulator import judging
from evals.simulator.model import PAGE_TOKENS, Engine, GpuModel, Router, SimRequest, run_all_queued, run_closed_loop
from evals.simulator.server import FaultPlan, SimServer
from tests.support.helpers import make_trajectory

RUBRIC = "You grade agent episodes.\nCriteria:\n1. Goal: the user's goal is met by a successful tool result.\n"
SHARP = RUBRIC + "2. Unresolved tool error: fail when a tool result marked ERROR is never resolved.\n"
FAILED_EPISODE = """COUNTERS: steps=4 tool_calls=1 tool_errors=1 user_turns=1
EVENTS:
[1] USER: Please book flight HAT001.
[2] TOOL CALL book_reservation({"flight": "HAT001"})
[3] TOOL RESULT book_reservation (ERROR): payment method not found
[4] FINAL ANSWER: Your flight is booked!
FINAL ANSWER: Your flight is booked!"""


def body(system: str, episode: str, **extra) -> dict:
    schema = {"type": "object", "properties": {"reason": {"type": "string"}, "passed": {"type": "boolean"},
                                               "score": {"type": "number"}}}
    return {"model": "m", "messages": [{"role": "system", "content": system},
                                       {"role": "user",
                                        "content": f"[[ ## trajectory ## ]]\n{episode}\n\nRespond with JSON"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": schema}},
            "max_tokens": 256, "seed": 0, **extra}


def test_scheduler_never_runs_more_than_max_running():
    engine = Engine(GpuModel(max_running=3))
    for i in range(10):
        engine.submit(SimRequest.from_prompt(f"prompt {i} " * 50, output_tokens=5))
    finished = []
    while not engine.idle:
        assert len(engine.running) <= 3
        finished += engine.step()[1]
    assert len(finished) == 10 and engine.stats.max_running == 3


def test_kv_capacity_limits_admission():
    engine = Engine(GpuModel(kv_capacity_tokens=1000))
    for i in range(4):
        engine.submit(SimRequest.from_prompt(chr(65 + i) * 1600, output_tokens=10))  # 400 + 10 tokens each
    engine.step()
    assert len(engine.running) == 2 and len(engine.waiting) == 2


def test_shared_prefix_is_cached_after_it_was_prefilled():
    rubric = "R" * 4000  # 1,000 tokens shared
    engine = Engine()
    first = SimRequest.from_prompt(rubric + "episode one " * 40, output_tokens=3)
    engine.submit(first)
    while not engine.idle:
        engine.step()
    second = SimRequest.from_prompt(rubric + "another episode " * 40, output_tokens=3)
    engine.submit(second)
    while not engine.idle:
        engine.step()
    assert first.cached_tokens == 0
    assert 1000 - PAGE_TOKENS <= second.cached_tokens <= 1000 + PAGE_TOKENS
    assert engine.stats.cached_tokens == second.cached_tokens


def test_ideal_client_beats_one_request_at_a_time():
    prompts = [("S" * 2000 + f"episode {i} " * 200, 30) for i in range(40)]
    limit = run_all_queued([SimRequest.from_prompt(p, o) for p, o in prompts])
    serial = run_closed_loop([SimRequest.from_prompt(p, o) for p, o in prompts], concurrency=1)
    assert limit.requests == serial.requests == 40
    assert limit.throughput > 2 * serial.throughput


def test_cache_aware_router_sends_shared_prefixes_to_one_worker():
    router = Router(2, "cache_aware", cache_threshold=0.5, balance_abs=32)
    keys = SimRequest.from_prompt("P" * 4000 + "x" * 100, 1).keys
    first = router.choose(keys, [0, 0])
    assert router.choose(keys, [1, 0]) == first
    rr = Router(2, "round_robin")
    assert [rr.choose(keys, [0, 0]) for _ in range(4)] == [0, 1, 0, 1]


def test_verdicts_are_deterministic_and_depend_on_the_rubric():
    generic = judging.verdict(RUBRIC, FAILED_EPISODE)
    assert generic == judging.verdict(RUBRIC, FAILED_EPISODE)
    sharp = [judging.verdict(SHARP + f"\n(variant {i})", FAILED_EPISODE) for i in range(20)]
    assert sum(not v["passed"] for v in sharp) >= 15  # the recognized check finds the unresolved ERROR
    credulous = [judging.verdict(RUBRIC + f"\n(variant {i})", FAILED_EPISODE) for i in range(20)]
    assert sum(v["passed"] for v in credulous) >= 12  # a generic rubric passes a fluent failure
    assert all("Simulated judge" in v["reason"] for v in sharp + credulous)


def test_reflection_turns_false_pass_feedback_into_a_recognized_criterion():
    examples = [{"Inputs": {"trajectory": FAILED_EPISODE}, "Generated Outputs": {"passed": True},
                 "Feedback": "WRONG (false pass): the judge passed this episode, but ..."}]
    request = (f"[[ ## length_limit ## ]]\nThe new instruction must be at most 3000 characters.\n\n"
               f"[[ ## current_instruction ## ]]\n{RUBRIC}\n\n[[ ## examples_with_feedback ## ]]\n"
               f"{json.dumps(examples)}\n\nRespond with a JSON object")
    revised = judging.reflect(request)
    assert judging.recognized(revised) and not judging.recognized(RUBRIC)
    assert "2. " in revised and judging.REVISED_NOTE in revised
    false_fail = [{**examples[0], "Feedback": "WRONG (false fail): ..."}]
    undo = request.replace(RUBRIC, revised).replace(json.dumps(examples), json.dumps(false_fail))
    assert not judging.recognized(judging.reflect(undo))


def test_http_server_answers_as_simulated_with_structured_output():
    with SimServer(speedup=1e6) as server:
        assert httpx.get(server.api_base.replace("/v1", "/health")).json()["simulated"] is True
        assert "simulated" in httpx.get(f"{server.api_base}/models").json()["data"][0]["owned_by"]
        one = httpx.post(f"{server.api_base}/chat/completions", json=body(SHARP, FAILED_EPISODE)).json()
        two = httpx.post(f"{server.api_base}/chat/completions", json=body(SHARP, FAILED_EPISODE)).json()
        stats = httpx.get(server.api_base.replace("/v1", "/sim/stats")).json()
    content = json.loads(one["choices"][0]["message"]["content"])
    assert set(content) == {"reason", "passed", "score"} and one["system_fingerprint"] == "simulated"
    assert one["choices"] == two["choices"]
    assert two["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the whole prompt was seen before
    assert stats["simulated"] and stats["counts"]["verdict"] == 2


def test_dspy_judge_gets_a_verdict_from_the_simulator():
    import dspy

    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm

    with SimServer(speedup=1e6) as server:
        lm = make_lm(LMConfig(model="simulated@test", api_base=server.api_base))
        with dspy.context(lm=lm):
            prediction = TrajectoryJudge()(trajectory=make_trajectory(0, success=False))
    assert isinstance(prediction.passed, bool) and "Simulated judge" in prediction.reason


@pytest.mark.parametrize("fault", ["http_500", "garbage", "truncated"])
def test_faults(fault):
    with SimServer(speedup=1e6, faults=FaultPlan({fault: 1.0})) as server:
        reply = httpx.post(f"{server.api_base}/chat/completions", json=body(RUBRIC, FAILED_EPISODE))
        injected = server.injected[fault]
    assert injected == 1
    if fault == "http_500":
        assert reply.status_code == 500
        return
    choice = reply.json()["choices"][0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])
    assert choice["finish_reason"] == ("length" if fault == "truncated" else "stop")


def test_stall_answers_late_and_dying_server_drops_connections():
    with SimServer(speedup=1e6, faults=FaultPlan({"stall": 1.0}, stall_s=0.2)) as server:
        assert httpx.post(f"{server.api_base}/chat/completions", json=body(RUBRIC, FAILED_EPISODE)).status_code == 200
    with SimServer(speedup=1e6, faults=FaultPlan(die_after=2)) as server:
        for _ in range(2):
            httpx.post(f"{server.api_base}/chat/completions", json=body(RUBRIC, FAILED_EPISODE)).raise_for_status()
        with pytest.raises(httpx.TransportError):
            httpx.post(f"{server.api_base}/chat/completions", json=body(RUBRIC, FAILED_EPISODE), timeout=5)


def test_fault_plan_rejects_unknown_kinds_and_draws_deterministically():
    with pytest.raises(ValueError, match="unknown fault"):
        FaultPlan.parse("explode=0.5")
    plan = FaultPlan.parse("garbage=0.5,http_500=0.5", seed=3)
    draws = [plan.fault_for(n) for n in range(50)]
    assert draws == [plan.fault_for(n) for n in range(50)] and set(draws) == {"garbage", "http_500"}
