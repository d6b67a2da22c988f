"""A stage of the job runner and how its calls are made: the item on its way through the stages (`RunItem`), the
stage as a back end sees it (`Stage`), the back ends' contract (`StageCalls`) and the local back end
(`LocalCalls`: a bounded window of calls on `apply.executors`' executors, collected by the calling thread).
Split from `apply.runner` (`JobRun`, the engine that drives them), which re-exports these names."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from rubricforge_dspy.apply.executors import EventLoopExecutor, ThreadExecutor
from rubricforge_dspy.apply.options import JobOptions
from rubricforge_dspy.apply.summary import UsageTotals
from rubricforge_dspy.core.verdict import EvidenceRecord, Verdict
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit

if TYPE_CHECKING:
    from rubricforge_dspy.apply.budget import Reservation
    from rubricforge_dspy.apply.writer import Spilled
    from rubricforge_dspy.core.trajectory import Trajectory

__all__ = ["RunItem", "Stage", "Jobs", "StageCalls", "LocalCalls"]


class RunItem:
    """One trajectory on its way through the stages (one stage for a plain judge): its place in the input, its
    cache key, the LLM stages run on it and their tokens, the confidence it was last handed on with."""

    __slots__ = ("index", "trajectory", "text_hash", "lm_stages", "tokens", "last", "usage", "cached", "evidence",
                 "calls", "reserved", "cost_reserved")

    def __init__(self, index: int, trajectory: Trajectory | Spilled) -> None:
        self.index, self.trajectory = index, trajectory
        self.text_hash: str | None = None
        self.lm_stages = 0
        self.tokens: dict[str, dict[str, int]] = {}
        self.last: tuple[str, float] | None = None
        self.usage: UsageTotals | None = None
        self.cached = False
        self.evidence: EvidenceRecord | None = None  # what the last LM stage asked was shown (`judge_reading`)
        self.calls = 0  # the HTTP requests sent for it (every stage, every call, retries: `token_usage`'s calls)
        self.reserved: Reservation | None = None  # its call's reservation of the run's token budget
        self.cost_reserved: Reservation | None = None  # ... and of its cost budget


@dataclass
class Stage:
    """One stage of a run, as a back end's `calls` sees it.

    Attributes:
        index: its place (0 for a plain judge); ``name``: its name (None for a plain judge).
        judge: the judge it calls, on the run's one-attempt LM.
        lm: that LM (None: the stage makes no LM call).
        fingerprint: the stage judge's fingerprint, the verdict cache's key with the input.
        circuit: the stage's dead-server breaker.
        local: a cascade's stage without an LM (a floor): one ``batch`` over what reaches it, locally.
    """

    index: int
    name: str | None
    judge: Any
    lm: Any
    fingerprint: str
    circuit: LMCircuit
    local: bool = False


Jobs = Iterator[tuple[RunItem, dict[str, Any]]]  # ``(item, its judge inputs)`` for a stage's calls


class StageCalls(Protocol):
    """How a stage's calls are made (`LocalCalls`, `apply.ray.RayCalls`, `apply.openai_batch.BatchCalls`)."""

    def run(self, stage: Stage, jobs: Jobs, collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
            tracker_of: Callable[[RunItem], UsageTotals | None] | None = None) -> bool:
        """Judge every job, `collect` each verdict, `check` after; True on a fast path (`LocalCalls.run`)."""
        ...


class LocalCalls:
    """The local back end's calls of a stage (`apply.executors`): the fast path (`TrajectoryJudge.direct_call`)
    on one event loop's thread while the calling thread waits, else `concurrency` worker threads with at most
    ``2 * concurrency`` items in flight, collected (and written) by the calling thread."""

    def __init__(self, options: JobOptions, tracker: UsageTotals) -> None:
        self.options, self.tracker = options, tracker

    def run(self, stage: Stage, jobs: Jobs, collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
            tracker_of: Callable[[RunItem], UsageTotals | None] | None = None) -> bool:
        """Judge every ``(item, inputs)`` of `jobs`, `collect(item, verdict)` each as it completes and `check()`
        after (the circuit); `tracker_of(item)`: the usage tracker of its call, or None. True on the fast path.

        On an LM failure (the circuit opens) or an interrupt, the finished calls are collected and the others
        abandoned; on an error of `jobs` (a bad input record) the calls in flight finish and are collected."""
        options = self.options
        direct = stage.judge.direct_call() if stage.lm is not None and hasattr(stage.judge, "direct_call") else None
        pool: EventLoopExecutor | ThreadExecutor
        if direct is not None:  # the whole batch on the loop's thread; this thread waits
            pool = EventLoopExecutor(direct, options.policy, self.tracker, options.concurrency)
        else:
            pool = ThreadExecutor(stage.judge, options.policy, self.tracker, options.concurrency)
        pending: dict[Future[Verdict], RunItem] = {}
        interrupted = False
        try:
            if isinstance(pool, EventLoopExecutor):
                pool.drive(jobs, collect, check, tracker_of)
            else:
                window = 2 * options.concurrency
                for item, inputs in jobs:
                    pending[pool.submit(inputs, tracker_of(item) if tracker_of is not None else None)] = item
                    if len(pending) >= window:
                        _collect_some(pending, collect, check)
                while pending:
                    _collect_some(pending, collect, check)
        except Exception as error:
            if isinstance(error, JudgeUnavailableError):
                interrupted = True  # in-flight calls stop retrying; the ones that finished are kept
                pool.stop()
                _collect_finished(pending, collect)
            else:  # a bad input record or a duplicate id: finish and keep the verdicts in flight, then raise
                while pending:
                    _collect_some(pending, collect, None)
            raise
        except BaseException:
            # Ctrl-C and the like: keep what finished, never wait on in-flight calls (a re-run resumes them).
            interrupted = True
            pool.stop()
            _collect_finished(pending, collect)
            raise
        finally:
            pool.close(cancel=interrupted)
        return direct is not None


def _collect_some(pending: dict[Future[Verdict], RunItem], collect: Callable[[RunItem, Verdict], None],
                  check: Callable[[], None] | None) -> None:
    finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
    for future in finished:
        collect(pending.pop(future), future.result())
    if check is not None:
        check()


def _collect_finished(pending: dict[Future[Verdict], RunItem], collect: Callable[[RunItem, Verdict], None]) -> None:
    for future in [f for f in list(pending) if f.done() and not f.cancelled() and f.exception() is None]:
        collect(pending.pop(future), future.result())
