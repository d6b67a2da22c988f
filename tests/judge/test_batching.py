"""The one in-memory batch engine (judge.batching): order, the bounded window, failures counted, the dead-server
circuit, cancellation, DSPy's context in every worker and no DSPy history kept; and that BaseJudge.batch/abatch,
the in-memory Cascade and the rewards run through it. Offline: scripted LMs and scripted judges; no test waits on
a clock to decide (a blocked call is released by the calls the test counts, never by a sleep)."""

from __future__ import annotations

import asyncio
import re
import threading

import dspy
import pytest
from dspy.clients import base_lm

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.judge.batching import ajudge_batch, judge_batch
from rubricforge_dspy.judge.cascade import Cascade
from rubricforge_dspy.judge.execution import RetryPolicy
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.rewards.trainers import as_reward_function
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text

NO_RETRY = RetryPolicy(max_retries=0)
RELEASE_TIMEOUT = 30  # seconds a blocked call waits at most (a wrong engine fails instead of hanging)


def number(text: str) -> int:
    found = re.search(r"ITEM (\d+)", text)
    if found is None:
        raise ValueError(f"no item number in {text[-200:]!r}")
    return int(found.group(1))


def answer(n: int) -> dict[str, object]:
    """Item n's answer: passes when n is even; the reason names it."""
    return {"reason": f"item {n}", "passed": n % 2 == 0, "score": 0.9 if n % 2 == 0 else 0.1}


class Peak:
    """Counts calls in flight: the first `hold` calls wait until `hold` are in flight at once (so the peak is
    reached whatever the scheduling), later calls pass straight through."""

    def __init__(self, hold: int):
        self.hold, self.now, self.peak, self.calls = hold, 0, 0, 0
        self.lock = threading.Lock()
        self.full = threading.Event()

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.calls += 1
            self.peak = max(self.peak, self.now)
            if self.now >= self.hold:
                self.full.set()
        self.full.wait(RELEASE_TIMEOUT)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def test_verdicts_come_back_in_input_order_when_calls_finish_out_of_order():
    # item 0's call waits until every other item has been answered: it finishes last, its verdict stays first
    others_done = threading.Event()
    answered: set[int] = set()
    lock = threading.Lock()

    def respond(messages):
        n = number(last_user_text(messages))
        if n == 0:
            others_done.wait(RELEASE_TIMEOUT)
        with lock:
            answered.add(n)
            if len(answered - {0}) == 11:
                others_done.set()
        return answer(n)

    lm = ScriptedLM(respond)
    with dspy.context(lm=lm):
        verdicts = TrajectoryJudge().batch([f"ITEM {n}" for n in range(12)], num_threads=4, policy=NO_RETRY)
    assert others_done.is_set()
    assert [v.reason for v in verdicts] == [f"item {n}" for n in range(12)]
    assert [v.passed for v in verdicts] == [n % 2 == 0 for n in range(12)]
    assert lm.calls == 12 and verdicts.n_abstained == 0


@pytest.mark.parametrize("window", [1, 3, 5])
def test_the_window_bounds_the_calls_in_flight_on_threads(window):
    peak = Peak(window)

    def respond(messages):
        peak.enter()
        try:
            return answer(number(last_user_text(messages)))
        finally:
            peak.leave()

    lm = ScriptedLM(respond)
    with dspy.context(lm=lm):
        verdicts = TrajectoryJudge().batch([f"ITEM {n}" for n in range(20)], num_threads=window, policy=NO_RETRY)
    assert peak.calls == 20 and len(verdicts) == 20 and verdicts.n_abstained == 0
    assert peak.peak == window  # reached (the first calls wait for it) and never passed


class AsyncJudge:
    """A judge with ``acall`` that counts the calls in flight on the event loop; item n's verdict is `answer(n)`."""

    def __init__(self, hold: int, fail: set[int] = frozenset()):
        self.hold, self.fail = hold, set(fail)
        self.now = self.peak = self.calls = 0
        self.full = asyncio.Event()
        self.cancelled = 0

    async def acall(self, trajectory):
        self.now += 1
        self.calls += 1
        self.peak = max(self.peak, self.now)
        if self.now >= self.hold:
            self.full.set()
        try:
            await asyncio.wait_for(self.full.wait(), RELEASE_TIMEOUT)
            n = number(trajectory)
            if n in self.fail:
                raise ValueError(f"item {n} breaks the judge")
            return Verdict.from_answer(n % 2 == 0, 0.9 if n % 2 == 0 else 0.1, f"item {n}")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.now -= 1


@pytest.mark.parametrize("window", [1, 4])
def test_the_window_bounds_the_tasks_in_flight_on_the_event_loop(window):
    judge = AsyncJudge(window)
    verdicts = asyncio.run(ajudge_batch(judge, [f"ITEM {n}" for n in range(15)], window=window, policy=NO_RETRY))
    assert judge.calls == 15 and judge.peak == window
    assert [v.reason for v in verdicts] == [f"item {n}" for n in range(15)]


def test_an_exception_in_one_item_is_its_counted_abstention_and_the_others_keep_their_verdicts():
    def judge(trajectory):
        n = number(trajectory)
        if n == 3:
            raise RuntimeError("the judge broke on item 3")
        return Verdict.from_answer(n % 2 == 0, 0.9 if n % 2 == 0 else 0.1, f"item {n}")

    seen: list[int] = []
    verdicts = judge_batch(judge, [f"ITEM {n}" for n in range(8)], window=3, policy=NO_RETRY,
                           on_verdict=lambda index, verdict: seen.append(index))
    assert [v.abstained for v in verdicts] == [n == 3 for n in range(8)]
    assert verdicts[3].error_kind == "other" and "item 3" in verdicts[3].error
    assert [v.reason for i, v in enumerate(verdicts) if i != 3] == [f"item {n}" for n in range(8) if n != 3]
    assert sorted(seen) == list(range(8))

    async_verdicts = asyncio.run(ajudge_batch(AsyncJudge(2, fail={5}), [f"ITEM {n}" for n in range(8)], window=2,
                                              policy=NO_RETRY))
    assert [v.abstained for v in async_verdicts] == [n == 5 for n in range(8)]
    assert async_verdicts[5].error_kind == "other"


def test_batch_counts_every_failure_by_kind():
    def respond(messages):
        n = number(last_user_text(messages))
        return "this is not a verdict" if n % 3 == 0 else answer(n)

    with dspy.context(lm=ScriptedLM(respond)):
        verdicts = TrajectoryJudge().batch([f"ITEM {n}" for n in range(9)], num_threads=3, policy=NO_RETRY)
        awaited = asyncio.run(TrajectoryJudge().abatch([f"ITEM {n}" for n in range(9)], concurrency=3,
                                                       policy=NO_RETRY))
    for result in (verdicts, awaited):
        assert [v.abstained for v in result] == [n % 3 == 0 for n in range(9)]
        assert result.n_abstained == 3 and result.errors == {"parse": 3}


@pytest.mark.parametrize("window", [1, 2, 4])
def test_the_circuit_stops_the_batch_and_no_item_starts_after_it_opened(window):
    calls: list[int] = []
    lock = threading.Lock()

    def dead(trajectory):
        with lock:
            calls.append(number(trajectory))
        raise ConnectionError("connection refused")

    circuit = LMCircuit(3, "http://127.0.0.1:9/v1", advice="Stopped.")
    collected: list[int] = []
    with pytest.raises(JudgeUnavailableError, match="3 consecutive"):
        judge_batch(dead, [f"ITEM {n}" for n in range(50)], window=window, policy=NO_RETRY, circuit=circuit,
                    on_verdict=lambda index, verdict: collected.append(index))
    # each call in flight ends once; a new item starts only when one finished before the circuit opened
    assert len(calls) <= 3 + window - 1
    assert circuit.total == len(calls) and len(collected) <= 2


def test_the_circuit_stops_the_async_batch_and_cancels_what_is_in_flight():
    class Dead:
        def __init__(self):
            self.calls = self.cancelled = 0
            self.hanging = asyncio.Event()

        async def acall(self, trajectory):
            self.calls += 1
            if number(trajectory) >= 3:  # items from 3 on hang until cancelled
                self.hanging.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.cancelled += 1
                    raise
            await asyncio.wait_for(self.hanging.wait(), RELEASE_TIMEOUT)  # items 0-2 fail once one hangs
            raise ConnectionError("connection refused")

    judge = Dead()
    circuit = LMCircuit(3, "http://127.0.0.1:9/v1", advice="Stopped.")
    with pytest.raises(JudgeUnavailableError):
        asyncio.run(ajudge_batch(judge, [f"ITEM {n}" for n in range(40)], window=4, policy=NO_RETRY,
                                 circuit=circuit))
    assert judge.calls < 40 and judge.cancelled == judge.calls - 3 and judge.cancelled >= 1


def test_an_interrupt_stops_the_batch_at_once_and_starts_nothing_more():
    started: list[int] = []
    lock = threading.Lock()

    def judge(trajectory):
        n = number(trajectory)
        with lock:
            started.append(n)
        if n == 1:
            raise KeyboardInterrupt
        return Verdict.from_answer(True, 0.9, f"item {n}")

    with pytest.raises(KeyboardInterrupt):
        judge_batch(judge, [f"ITEM {n}" for n in range(100)], window=2, policy=NO_RETRY)
    assert len(started) < 100  # the rest was never started

    async def cancelled_batch() -> AsyncJudge:
        judge = AsyncJudge(hold=10 ** 6)  # every call waits: only a cancel ends them
        task = asyncio.ensure_future(ajudge_batch(judge, [f"ITEM {n}" for n in range(20)], window=5))
        while judge.calls < 5:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return judge

    judge_async = asyncio.run(cancelled_batch())
    assert judge_async.calls == 5 and judge_async.cancelled == 5 and judge_async.now == 0


def test_dspy_context_reaches_every_worker_and_no_history_is_kept():
    marker = object()
    seen: list[object] = []
    lock = threading.Lock()

    def respond(messages):
        with lock:
            seen.append(dspy.settings.get("rubricforge_test_marker"))
        return answer(number(last_user_text(messages)))

    lm = ScriptedLM(respond)
    history_before = len(base_lm.GLOBAL_HISTORY)
    with dspy.context(lm=lm, rubricforge_test_marker=marker), dspy.track_usage() as usage:
        verdicts = TrajectoryJudge().batch([f"ITEM {n}" for n in range(10)], num_threads=4, policy=NO_RETRY)
    assert verdicts.n_abstained == 0
    assert seen == [marker] * 10  # the caller's dspy.context, in every worker thread
    assert len(usage.usage_data["scripted"]) == 10  # the caller's usage tracker saw every call
    assert len(lm.history) <= 1 and len(base_lm.GLOBAL_HISTORY) == history_before  # no prompt kept per item


def test_the_async_engine_carries_the_context_and_keeps_no_history():
    lm = ScriptedLM(lambda messages: answer(number(last_user_text(messages))))
    history_before = len(base_lm.GLOBAL_HISTORY)

    async def run():
        with dspy.context(lm=lm), dspy.track_usage() as usage:
            verdicts = await TrajectoryJudge().abatch([f"ITEM {n}" for n in range(6)], concurrency=3)
        return verdicts, usage

    verdicts, usage = asyncio.run(run())
    assert [v.reason for v in verdicts] == [f"item {n}" for n in range(6)]
    assert len(usage.usage_data["scripted"]) == 6
    assert len(lm.history) <= 1 and len(base_lm.GLOBAL_HISTORY) == history_before


def test_a_window_below_one_and_mismatched_inputs_are_refused_before_any_call():
    calls: list[str] = []

    def judge(trajectory, **inputs):
        calls.append(trajectory)
        return Verdict.from_answer(True, 0.9, "ok")

    for window in (0, -1, 1.5, True):
        with pytest.raises(InputError, match="window"):
            judge_batch(judge, ["ITEM 1"], window=window)
    with pytest.raises(InputError, match="one set per item"):
        judge_batch(judge, ["ITEM 1", "ITEM 2"], window=2, inputs=[{"features": {}}])
    assert calls == []
    verdicts = judge_batch(judge, ["ITEM 1", "ITEM 2"], window=2, inputs=[{"features": {"a": 1.0}}, {}])
    assert len(verdicts) == 2


def test_the_cascade_runs_each_stage_through_the_engine_window():
    # stage one decides the even items (confident), hands the odd ones on; stage two's calls are counted
    first_peak, second_peak = Peak(2), Peak(2)

    def first(messages):
        first_peak.enter()
        try:
            n = number(last_user_text(messages))
            return {"reason": f"first {n}", "passed": n % 2 == 0, "score": 0.95 if n % 2 == 0 else 0.4}
        finally:
            first_peak.leave()

    def second(messages):
        second_peak.enter()
        try:
            n = number(last_user_text(messages))
            return {"reason": f"second {n}", "passed": False, "score": 0.05}
        finally:
            second_peak.leave()

    stages = [TrajectoryJudge(), TrajectoryJudge()]
    stages[0].set_lm(ScriptedLM(first, model="first"))
    stages[1].set_lm(ScriptedLM(second, model="second"))
    cascade = Cascade(stages, [(0.9, 0.01), (0.9, 0.1)])
    verdicts = cascade.batch([f"ITEM {n}" for n in range(12)], num_threads=2, policy=NO_RETRY)
    assert first_peak.calls == 12 and second_peak.calls == 6
    assert first_peak.peak == 2 and second_peak.peak == 2
    assert verdicts.stages == ["stage0" if n % 2 == 0 else "stage1" for n in range(12)]
    assert [v.passed for v in verdicts] == [n % 2 == 0 for n in range(12)]


def test_the_reward_function_carries_the_trainers_context_to_its_worker_threads():
    # before the engine, the reward's worker threads saw none of the caller's DSPy context: a usage tracker
    # (dspy.track_usage) around a trainer's reward call counted nothing
    lm = ScriptedLM(lambda messages: answer(number(last_user_text(messages))))
    reward = as_reward_function(TrajectoryJudge(), lm=lm, max_concurrency=4)
    with dspy.track_usage() as usage:
        rewards = reward(prompts=[f"task {n}" for n in range(8)], completions=[f"ITEM {n}" for n in range(8)])
    assert rewards == [0.9 if n % 2 == 0 else 0.1 for n in range(8)]
    assert sum(len(entries) for entries in usage.usage_data.values()) == 8
