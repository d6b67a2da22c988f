"""The one in-memory batch engine: many items through one judge, a bounded window of calls at once.

DSPy runs every in-memory loop over items through one executor (`dspy.utils.parallelizer.ParallelExecutor`,
behind ``Module.batch``, ``dspy.Parallel`` and ``dspy.Evaluate``); this module is the package's one for
judges. `judge_batch` (threads) and `ajudge_batch` (one event loop) serve `BaseJudge.batch` and ``abatch``,
the in-memory `Cascade` (each stage's ``batch`` runs here, over the items the earlier stages left), the
rewards (`rewards.trainers`) and the induction's loops over its validation and test items. The file-writing
job (`apply/`) has its own executors: it streams, resumes and caches, which a list in memory does not need.

What it guarantees, the same on both paths:

- **a bounded window**: at most `window` calls in flight; a finished call's slot is refilled at once (no
  chunk waits for its slowest item); with ``window=1``, or one item, the calls run on the calling thread;
- **results in input order**, one `Verdict` per item;
- **every failure a counted abstention**: each call goes through `judge.execution.judge_verdict` /
  `ajudge_verdict` (the same retry policy and recording rule everywhere), so an exception in one item
  is that item's abstention and never loses the others' verdicts;
- **the dead-server circuit**: with an `LMCircuit`, the batch stops with `JudgeUnavailableError` once it
  opens (no further item is started; on threads the calls in flight end without retrying, on the loop
  they are cancelled);
- **cancellation**: Ctrl-C, or any exception that is not an `Exception` (it is not recorded), cancels what
  was not started, ends the retry waits of what is in flight (on the loop: cancels it) and propagates at
  once;
- **DSPy's context in every worker**: each call runs in a copy of the caller's `contextvars` (DSPy's
  settings, ``dspy.context(lm=...)``, the usage tracker of ``dspy.track_usage()``, which then counts every
  call), as ``ParallelExecutor`` carries them;
- **no DSPy history and no trace**: the calls run under ``dspy.context(disable_history=True, trace=None)``
  (a batch would otherwise keep every prompt in the LM's history, up to 10,000 of them).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rubricforge_dspy.core.errors import InputError, RubricForgeError
from rubricforge_dspy.judge.execution import RetryPolicy, ajudge_verdict, judge_verdict

if TYPE_CHECKING:
    from rubricforge_dspy.core.trajectory import Trajectory
    from rubricforge_dspy.core.verdict import Verdict
    from rubricforge_dspy.lm.circuit import LMCircuit

__all__ = ["judge_batch", "ajudge_batch"]

OnVerdict = Callable[[int, "Verdict"], None]


def _checked(items: Sequence[Any], window: int, inputs: Sequence[Mapping[str, Any]] | None) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InputError(f"a batch's window (calls in flight at once) must be an integer >= 1, got {window!r}")
    if inputs is not None and len(inputs) != len(items):
        raise InputError(f"a batch got {len(items)} items and {len(inputs)} sets of inputs: one set per item")


def _quiet_context() -> contextvars.Context:
    """A copy of the caller's context (DSPy's settings, the usage tracker) with no history and no trace."""
    import dspy

    with dspy.context(disable_history=True, trace=None):
        return contextvars.copy_context()


def judge_batch(judge: Callable[..., Any], items: Sequence[Trajectory | str], *, window: int,
                policy: RetryPolicy = RetryPolicy(), circuit: LMCircuit | None = None,
                inputs: Sequence[Mapping[str, Any]] | None = None,
                on_verdict: OnVerdict | None = None) -> list[Verdict]:
    """Judge `items` on worker threads, at most `window` calls at once, each through `judge_verdict`.

    Args:
        judge: a strict judge (any callable `judge_verdict` takes: a `BaseJudge`, a module returning
            ``passed``, ``score`` and ``reason``).
        items: what each call is given as ``trajectory``: `Trajectory` objects or rendered texts.
        window: calls in flight at once (threads); 1 runs them one by one on the calling thread.
        policy: the retry policy of transient LM errors (`judge.execution.RetryPolicy`).
        circuit: the dead-server breaker shared by the calls (None: never stop).
        inputs: further declared inputs per item (a hybrid's ``features``), passed as is; None: none.
        on_verdict: called on the calling thread with ``(index, verdict)`` as each call finishes (in the
            order they finish), so a caller keeps what finished even when the batch is stopped later.

    Returns:
        One `Verdict` per item, in input order (an abstention with its error kind for each failed item).

    Raises:
        InputError: a window below 1, or `inputs` not one per item (before any call).
        JudgeUnavailableError: the circuit opened (the calls in flight end without retrying first).
        KeyboardInterrupt: raised in a worker or while waiting; what was not started never is.
    """
    _checked(items, window, inputs)
    context = _quiet_context()
    stop = threading.Event()
    results: list[Verdict | None] = [None] * len(items)

    def call(index: int) -> Verdict:
        extra = dict(inputs[index]) if inputs is not None else {}
        return judge_verdict(judge, items[index], policy, stop, circuit, **extra)

    if window == 1 or len(items) <= 1:
        for index in range(len(items)):
            results[index] = verdict = context.copy().run(call, index)
            if on_verdict is not None:
                on_verdict(index, verdict)
        return _in_order(results)

    pool = ThreadPoolExecutor(max_workers=min(window, len(items)), thread_name_prefix="rubricforge-judge")
    running: dict[Future[Verdict], int] = {}
    following = iter(range(len(items)))
    try:
        for index in following:  # fill the window
            running[pool.submit(context.copy().run, call, index)] = index
            if len(running) >= window:
                break
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                index = running.pop(future)
                results[index] = verdict = future.result()  # raises what the call raised (the circuit)
                if on_verdict is not None:
                    on_verdict(index, verdict)
                following_index = next(following, None)
                if following_index is not None:
                    running[pool.submit(context.copy().run, call, following_index)] = following_index
    except Exception:  # the circuit opened (or `on_verdict` raised): the calls in flight end without retries
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    except BaseException:  # Ctrl-C: never wait for a call in flight
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return _in_order(results)


async def ajudge_batch(judge: Any, items: Sequence[Trajectory | str], *, window: int,
                       policy: RetryPolicy = RetryPolicy(), circuit: LMCircuit | None = None,
                       inputs: Sequence[Mapping[str, Any]] | None = None,
                       on_verdict: OnVerdict | None = None) -> list[Verdict]:
    """The async `judge_batch`: at most `window` ``judge.acall``s at once, as tasks on the running event loop,
    each through `ajudge_verdict`.

    Args:
        judge: a judge with ``acall`` (a `BaseJudge`).
        items, window, policy, circuit, inputs, on_verdict: as `judge_batch` (`window`: tasks in flight).

    Returns:
        One `Verdict` per item, in input order.

    Raises:
        InputError: as `judge_batch`.
        JudgeUnavailableError: the circuit opened (the calls in flight are cancelled).
        asyncio.CancelledError: the batch was cancelled (the calls in flight are cancelled first).
    """
    _checked(items, window, inputs)
    context = _quiet_context()
    stop = asyncio.Event()
    results: list[Verdict | None] = [None] * len(items)

    def start(index: int) -> asyncio.Future[Verdict]:
        extra = dict(inputs[index]) if inputs is not None else {}
        # a task copies the context it is created in (`create_task(context=...)` is Python 3.11+ only)
        task: asyncio.Future[Verdict] = context.run(
            asyncio.ensure_future, ajudge_verdict(judge, items[index], policy, stop, circuit, **extra))
        return task

    running: dict[asyncio.Future[Verdict], int] = {}
    following = iter(range(len(items)))
    try:
        for index in following:
            running[start(index)] = index
            if len(running) >= window:
                break
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                index = running.pop(task)
                results[index] = verdict = task.result()
                if on_verdict is not None:
                    on_verdict(index, verdict)
                following_index = next(following, None)
                if following_index is not None:
                    running[start(following_index)] = following_index
    except BaseException:
        stop.set()
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    return _in_order(results)


def _in_order(results: list[Verdict | None]) -> list[Verdict]:
    verdicts = [v for v in results if v is not None]
    if len(verdicts) != len(results):  # (every item's call returned or raised: a hole is a bug of this module)
        raise RubricForgeError(f"the batch engine lost {len(results) - len(verdicts)} verdict(s)")
    return verdicts
