"""The executors of a judging run: how the judge calls are made, concurrently.

`EventLoopExecutor`: the fast path (`TrajectoryJudge.direct_call`), the whole batch on one asyncio loop's
thread (used by the local path and by each Ray worker). `ThreadExecutor`: any judge on any LM, from worker
threads through `judge_verdict`. Both make the calls through the execution layer
(`rubricforge_dspy.judge.execution`): the same retry policy and the same recording rule.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from rubricforge_dspy.apply.summary import UsageTotals
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.judge.execution import RetryPolicy, ajudge_verdict, judge_verdict
from rubricforge_dspy.lm.circuit import JudgeUnavailableError

if TYPE_CHECKING:
    from rubricforge_dspy.judge.module import DirectCall

__all__ = ["EventLoopExecutor", "ThreadExecutor"]

ItemT = TypeVar("ItemT")  # what the caller judges an item as (a runner's item, a Ray worker's trajectory)


class EventLoopExecutor:
    """One asyncio event loop on its own thread, for the fast path (`TrajectoryJudge.direct_call`).

    `drive` runs the whole batch on that loop: it pulls the items to judge, keeps `concurrency` calls
    (`ajudge_verdict`: the same retry policy and recording rule as the thread path) in flight as tasks, and
    hands each finished verdict to the batch's writer as it completes, all on the loop's thread, while the
    calling thread waits. One thread does the work: no hand-off between threads per item (a self-pipe
    write and a condition wait each cost about as much CPU as the HTTP call). No DSPy history, trace or
    usage is kept but the running totals (`UsageTotals`), as on the thread path.

    `direct` is one `DirectCall`, or several (one per endpoint, as a Ray worker has them: `apply.ray`)
    dealt round-robin item by item from the `first`-th on; an item's retries stay on its endpoint."""

    def __init__(self, direct: DirectCall | list[DirectCall] | tuple[DirectCall, ...], policy: RetryPolicy,
                 tracker: UsageTotals, concurrency: int, first: int = 0) -> None:
        import dspy

        self.directs: list[DirectCall] = list(direct) if isinstance(direct, (list, tuple)) else [direct]
        self.turn = itertools.count(first)
        self.policy, self.concurrency = policy, concurrency
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rubricforge-judge-loop", daemon=True)
        self.thread.start()
        self.stopped = asyncio.run_coroutine_threadsafe(self._made(), self.loop).result()
        self._task: asyncio.Task[BaseException | None] | None = None
        self._ended = threading.Event()
        with dspy.context(usage_tracker=tracker, disable_history=True, trace=None):
            self.context = contextvars.copy_context()  # what every call runs in (DSPy's settings are contextvars)

    @staticmethod
    async def _made() -> asyncio.Event:
        return asyncio.Event()

    def drive(self, jobs: Iterator[tuple[ItemT, dict[str, Any]]], collect: Callable[[ItemT, Verdict], None],
              check: Callable[[], None], tracker_of: Callable[[ItemT], UsageTotals | None] | None = None) -> None:
        """Judge every ``(item, inputs)`` of `jobs` (consumed on the loop's thread); `collect(item, verdict)`
        is called with each verdict as it completes, then `check()` (which may raise to stop the batch).
        `tracker_of(item)`: the usage tracker of that item's call (a `UsageTotals` under the run's), or None
        for the run's own.

        An exception from `jobs` (a bad input record) lets the calls in flight finish and be collected, then
        propagates; one from `check` (the circuit breaker) or an interrupt of the waiting thread (Ctrl-C)
        stops retries, collects the calls already finished, cancels the rest, and propagates."""
        future = self.context.run(asyncio.run_coroutine_threadsafe, self._drive(jobs, collect, check, tracker_of),
                                  self.loop)
        try:
            interrupt = future.result()
        except BaseException:
            if not future.done():  # interrupted while waiting: stop the drive, let it keep what finished
                self.loop.call_soon_threadsafe(self._cancel)
                self._ended.wait(timeout=60)
            raise
        if interrupt is not None:
            raise interrupt

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _drive(self, jobs: Iterator[tuple[ItemT, dict[str, Any]]], collect: Callable[[ItemT, Verdict], None],
                     check: Callable[[], None], tracker_of: Callable[[ItemT], UsageTotals | None] | None
                     ) -> BaseException | None:
        """The batch (see `drive`); returns a KeyboardInterrupt or SystemExit raised by `jobs` or `collect`
        for the waiting thread to raise (raised in a task, it would stop the loop before anyone hears of it)."""
        self._task = asyncio.current_task()
        finished: asyncio.Queue[asyncio.Task[Verdict]] = asyncio.Queue()
        pending: dict[asyncio.Task[Verdict], ItemT] = {}

        def take(task: asyncio.Task[Verdict]) -> None:
            item = pending.pop(task, None)
            if item is not None and not task.cancelled() and task.exception() is None:
                collect(item, task.result())

        async def some() -> None:  # at least one finished call, and every other one already finished
            take(await finished.get())
            while not finished.empty():
                take(finished.get_nowait())

        try:
            for item, inputs in jobs:
                direct = self.directs[next(self.turn) % len(self.directs)]
                call = ajudge_verdict(direct, inputs["trajectory"], self.policy, self.stopped)
                tracker = tracker_of(item) if tracker_of is not None else None
                # a task copies the context it is created in (`create_task(context=...)` is Python 3.11+ only)
                task = (asyncio.ensure_future(call) if tracker is None
                        else _tracked(tracker).run(self.loop.create_task, call))
                task.add_done_callback(finished.put_nowait)
                pending[task] = item
                if len(pending) >= self.concurrency:
                    await some()
                    check()
            while pending:
                await some()
                check()
        except Exception as error:
            if not isinstance(error, JudgeUnavailableError):
                # A bad input record or a duplicate id: finish and keep the verdicts in flight, then raise.
                while pending:
                    await some()
                raise
            self._abandon(pending, take)
            raise
        except BaseException as error:  # cancelled (Ctrl-C in the waiting thread): keep what finished, never wait
            self._abandon(pending, take)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                return error
            raise
        finally:
            self._ended.set()
        return None

    def _abandon(self, pending: dict[asyncio.Task[Verdict], ItemT], take: Callable[[asyncio.Task[Verdict]], None]
                 ) -> None:
        self.stopped.set()  # in-flight calls stop retrying
        for task in [t for t in pending if t.done()]:
            take(task)
        for task in list(pending):
            task.cancel()

    def stop(self) -> None:
        """No further retries (in-flight calls finish or fail once more)."""
        self.loop.call_soon_threadsafe(self.stopped.set)

    def close(self, cancel: bool) -> None:
        """Cancel what still runs (when `cancel`), close the engine's client, and end the loop."""
        async def finish() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for engine in {id(d.engine): d.engine for d in self.directs}.values():
                await engine.aclose()

        try:
            asyncio.run_coroutine_threadsafe(finish(), self.loop).result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            if not self.thread.is_alive():
                self.loop.close()


class ThreadExecutor:
    """The thread path: `concurrency` worker threads calling `judge_verdict` (any judge, any LM)."""

    def __init__(self, judge: Any, policy: RetryPolicy, tracker: UsageTotals, concurrency: int) -> None:
        self.judge, self.policy, self.tracker = judge, policy, tracker
        self.stopped = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rubricforge-judge")

    def submit(self, inputs: dict[str, Any], tracker: UsageTotals | None = None) -> Future[Verdict]:
        """One call; `tracker`: its own usage tracker (under the run's), or None for the run's."""
        context = contextvars.copy_context()
        return self.pool.submit(context.run, _judge_in_worker, self.judge, inputs, self.policy,
                                self.tracker if tracker is None else tracker, self.stopped)

    def stop(self) -> None:
        self.stopped.set()

    def close(self, cancel: bool) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=True)


def _tracked(tracker: UsageTotals) -> contextvars.Context:
    """The current context with `tracker` as DSPy's usage tracker: what one call's task runs in."""
    import dspy

    with dspy.context(usage_tracker=tracker):
        return contextvars.copy_context()


def _judge_in_worker(judge: Any, inputs: dict[str, Any], policy: RetryPolicy, tracker: UsageTotals,
                     stop: threading.Event) -> Verdict:
    # No LM history and no DSPy trace: both would keep every prompt (up to 10,000 of them).
    import dspy

    inputs = dict(inputs)
    with dspy.context(usage_tracker=tracker, disable_history=True, trace=None):
        return judge_verdict(judge, inputs.pop("trajectory"), policy, stop, **inputs)
