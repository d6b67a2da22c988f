"""Judge a stream of trajectories into an append-only JSONL of verdicts: bounded memory, retries,
a verdict cache, and resume after any kill.

`judge_stream` pulls trajectories lazily and keeps at most ``2 * concurrency`` of them in flight.
The judge is called through the execution layer (`rubricforge_dspy.judge.execution`: retries of transient
errors by exception type, every failure recorded as an abstention). A `TrajectoryJudge` on an LM built by
`lm.make_lm` takes the fast path: `TrajectoryJudge.direct_call` (the request body built once per rubric,
each item's text templated in, the answer parsed by the strict adapter) awaited through `ajudge_verdict`,
the whole batch (reading, calls, writing) on one event loop's thread (`_EventLoop`, at most `concurrency`
requests at once over one keep-alive pool) while the calling thread waits; any other judge or LM runs on
`concurrency` worker threads through `judge_verdict`, the calling thread writing. Either way one thread
alone writes the output (one verdict line per trajectory id, `rubricforge_dspy.core.verdict.verdict_line`,
in completion order, each line a single unbuffered ``write``), so a SIGKILL at any moment leaves
complete lines plus at most one partial final line. On start, the existing output is read, a partial
final line is truncated away, and ids already there are skipped: re-running the same command after a
kill ends with exactly one line per id.

An output file belongs to one job (`rubricforge_dspy.apply.job`): beside ``OUT`` the batch keeps
``OUT.job.json`` with the judge's and the input's fingerprints. A run whose judge or data differ is
refused with a message saying what differs; the same job resumes automatically.

Line schema: ``rubricforge_dspy/core/schemas/verdict.schema.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import glob
import itertools
import logging
import os
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.judge.cache import VerdictCache, input_sha256, open_cache
from rubricforge_dspy.judge.execution import RetryPolicy, ajudge_verdict, count_verdict, judge_verdict
from rubricforge_dspy.lm.copies import one_attempt_lm, resolve_lm
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.apply.job import (BatchOutputError, DoneIndex, ResumeState, checked_input, claim_output,
                                        output_lock, read_done)
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.core.trajectory import Trajectory, TrajectoryFormatError
from rubricforge_dspy.core.verdict import Verdict, verdict_line

logger = logging.getLogger(__name__)

# Measured on ext4: a line write ~0.5 us, an fsync 0.2-4 ms. A SIGKILL loses nothing that was
# written (the page cache survives the process); fsync only guards against an OS crash, where at
# most `fsync_every` lines are re-judged on resume. Per-line fsync costs <1% at LM speed but cuts a
# cache replay from ~5,000 to ~250 lines/s; every 16 lines keeps ~2,700/s.
DEFAULT_FSYNC_EVERY = 16


DEFAULT_MAX_CONSECUTIVE_LM_ERRORS = 20


class DuplicateIdError(TrajectoryFormatError):
    """Two input trajectories share an id; the message names the file and record of the second."""


@dataclass
class BatchSummary:
    """What one `judge_stream` run did.

    judged: verdict lines written by this run (LM verdicts and cache hits); passed: of those, passes;
    abstained: abstentions by error kind; cached: lines served by the verdict cache; resumed: input
    ids skipped because the output already had them; duplicates: input ids seen twice (skipped);
    skipped: records the loader skipped (run_judge_file only); lm_calls/retries: judge calls made
    and how many were retries; tokens: prompt/completion tokens reported by the LM, or None.
    """

    out_path: str
    judged: int = 0
    passed: int = 0
    abstained: Counter = field(default_factory=Counter)
    cached: int = 0
    resumed: int = 0
    duplicates: int = 0
    skipped: int = 0
    lm_calls: int = 0
    retries: int = 0
    repaired_bytes: int = 0
    tokens: dict | None = None
    wall_time: float = 0.0
    program_sha256: str | None = None
    judge_fingerprint: str | None = None
    model: str | None = None
    contradictions: int = 0
    retried: int = 0  # abstentions for LM errors left by an earlier run, asked again
    fast_path: bool = False  # judged through `TrajectoryJudge.direct_call` on one event loop
    errors: dict = field(default_factory=dict)  # one example error message per abstention kind

    def count(self, verdict: Verdict, cached: bool) -> None:
        """Count one written verdict line (the one tally of online and Batch API judging)."""
        self.judged += 1
        self.passed += verdict.passed
        self.cached += cached
        self.contradictions += verdict.contradiction
        if verdict.abstained:
            self.abstained[verdict.error_kind] += 1
            self.errors.setdefault(verdict.error_kind, verdict.error)

    @property
    def n_abstained(self) -> int:
        return sum(self.abstained.values())

    @property
    def throughput(self) -> float:
        """Verdict lines written per second of wall time."""
        return self.judged / self.wall_time if self.wall_time > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "out_path": self.out_path, "judged": self.judged, "passed": self.passed,
            "abstained": dict(self.abstained), "n_abstained": self.n_abstained, "cached": self.cached,
            "resumed": self.resumed, "duplicates": self.duplicates, "skipped": self.skipped,
            "lm_calls": self.lm_calls, "retries": self.retries, "repaired_bytes": self.repaired_bytes,
            "tokens": self.tokens, "wall_time": round(self.wall_time, 3),
            "throughput": round(self.throughput, 3), "program_sha256": self.program_sha256,
            "judge_fingerprint": self.judge_fingerprint, "model": self.model,
            "contradictions": self.contradictions, "retried": self.retried, "errors": dict(self.errors),
        }

    def format(self) -> str:
        kinds = " ".join(f"{k}={v}" for k, v in sorted(self.abstained.items()))
        abstained = f"{self.n_abstained}" + (f" ({kinds})" if kinds else "")
        lines = [
            f"judged {self.judged}: passed {self.passed}, failed {self.judged - self.passed}, "
            f"abstained {abstained}, passed/score contradictions {self.contradictions} (counted as fails)",
            f"cached {self.cached} | resumed {self.resumed} (re-asked {self.retried} failed calls) | "
            f"duplicates {self.duplicates} | "
            f"loader skipped {self.skipped} | LM calls {self.lm_calls} (retries {self.retries})",
        ]
        if self.tokens:
            lines.append(f"tokens: prompt {self.tokens.get('prompt_tokens', 0):,} "
                         f"completion {self.tokens.get('completion_tokens', 0):,}")
        for kind, error in sorted(self.errors.items()):
            lines.append(f"  e.g. {kind}: {error[:200]}")
        lines.append(f"{self.wall_time:.1f}s, {self.throughput:.2f} verdicts/s -> {self.out_path}")
        return "\n".join(lines)


class UsageTotals:
    """A DSPy usage tracker (`dspy.context(usage_tracker=...)`) that keeps running sums only,
    so memory does not grow with the number of calls. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.seen = False

    def add_usage(self, lm: str, usage) -> None:
        if not usage:
            return
        if not isinstance(usage, dict):
            usage = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
        with self._lock:
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
            self.seen = True

    def totals(self) -> dict | None:
        if not self.seen:
            return None
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


# -- the batch -------------------------------------------------------------------------------------

class _Writer:
    """Appends verdict lines: one unbuffered write per line, fsync every `fsync_every` lines; each
    written id goes to the done index (`DoneIndex`, ``OUT.ids``) after its line, so the next resume
    reads the index only."""

    def __init__(self, path: Path, fsync_every: int, done: ResumeState, fingerprint: str | None):
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fsync_every = fsync_every
        self._unsynced = 0
        try:
            with self._named():
                self._index = DoneIndex(path, done, fingerprint)
        except BaseException:
            os.close(self._fd)
            raise

    @contextlib.contextmanager
    def _named(self):
        """An `OSError` of a write (a full disk: ENOSPC) names the output file: the command line's one
        line then says which file; the verdicts already written stay, and a re-run resumes after them."""
        try:
            yield
        except OSError as error:
            if error.filename is not None:
                raise
            raise OSError(error.errno, error.strerror, str(self._path)) from error

    def write(self, record: dict) -> None:
        data = orjson.dumps(record) + b"\n"
        view = memoryview(data)
        with self._named():
            while view:
                view = view[os.write(self._fd, view):]
            self._index.add(record["id"], len(data),
                            done=not (record["abstained"] and record.get("error_kind") in LM_ERROR_KINDS))
            self._unsynced += 1
            if self._fsync_every and self._unsynced >= self._fsync_every:
                os.fsync(self._fd)
                self._unsynced = 0

    def close(self) -> None:
        try:
            with self._named():
                self._index.close()
                os.fsync(self._fd)
        finally:
            os.close(self._fd)


def _inputs(judge, trajectory: Trajectory) -> dict:
    """What `judge` reads of `trajectory` (`BaseJudge.inputs_of`: the text, and the features of a judge that
    reads them); the rendered text for a baseline callable. A spilled item (`_Spilled`) carries them."""
    if type(trajectory) is _Spilled:
        return trajectory.inputs
    inputs_of = getattr(judge, "inputs_of", None)
    if inputs_of is not None:
        return inputs_of(trajectory)
    render = getattr(judge, "render", None)
    return {"trajectory": render(trajectory) if render is not None else render_trajectory(trajectory)}


class _Spilled:
    """One item of the judging pass, as the checking pass spilled it (`_Spill`): what the verdict line
    says of the trajectory and the judge's inputs (None for an id already done: it is skipped).
    ``steps`` is a range of the trajectory's step count (the verdict line reads its length only)."""

    __slots__ = ("id", "task_id", "domain", "agent", "steps", "label", "reward", "inputs")

    def __init__(self, id, task_id, domain, agent, n_steps, label, reward, inputs):
        self.id, self.task_id, self.domain, self.agent = id, task_id, domain, agent
        self.steps, self.label, self.reward, self.inputs = range(n_steps), label, reward, inputs


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _plain(value) -> bool:
    """True for what comes back from JSON as it went in, type for type: a string (a rendered text), or a
    dict of strings to builtin scalars (features). Not a `Trajectory` (orjson would write a dataclass as a
    dict) nor a numpy number."""
    if type(value) is str:
        return True
    return type(value) is dict and all(type(k) is str and type(v) in _SCALARS for k, v in value.items())


class _Spill:
    """The judging pass's input, written by the checking pass (`run_judge_file`): one orjson line per
    trajectory within the limit, with its judge inputs already computed (the render), in a temporary file
    beside the output (``.OUT.<random>.spill``, removed by `remove`, or by the next run on the same output
    after a kill). So the input is read, parsed and converted once, memory stays bounded, and every check
    still happens before the first LM call. It takes about as much disk as the rendered texts (of the order
    of the input's size) for the length of the run.

    A judge whose inputs are not plain data (a `FloorJudge` reads the `Trajectory` itself) cannot be
    spilled: `add` then returns False and the file is dropped (the caller reads the input again)."""

    def __init__(self, judge, out_path: Path, done: set):
        self.judge, self.done = judge, done
        out_path.parent.mkdir(parents=True, exist_ok=True)
        for stale in out_path.parent.glob(f".{glob.escape(out_path.name)}.*.spill"):
            stale.unlink(missing_ok=True)  # left by a killed run: spills are written under the output's lock
        fd, name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".spill", dir=out_path.parent)
        self.path = Path(name)
        self._file = os.fdopen(fd, "wb", buffering=1 << 20)
        self.usable = True

    def add(self, trajectory: Trajectory) -> bool:
        if not self.usable:
            return False
        done = trajectory.id in self.done
        inputs = None if done else _inputs(self.judge, trajectory)
        if inputs is not None and not all(map(_plain, inputs.values())):
            self.remove()
            return False
        try:
            line = orjson.dumps([trajectory.id, trajectory.task_id, trajectory.domain, trajectory.agent,
                                 len(trajectory.steps), trajectory.label, trajectory.reward, inputs])
        except orjson.JSONEncodeError:  # e.g. a label or reward of a type JSON does not hold
            self.remove()
            return False
        self._file.write(line + b"\n")
        return True

    def items(self) -> Iterator[_Spilled]:
        self._file.close()
        with self.path.open("rb") as handle:
            for line in handle:
                yield _Spilled(*orjson.loads(line))

    def remove(self) -> None:
        self.usable = False
        self._file.close()
        self.path.unlink(missing_ok=True)


class _EventLoop:
    """One asyncio event loop on its own thread, for the fast path (`TrajectoryJudge.direct_call`).

    `drive` runs the whole batch on that loop: it pulls the items to judge, keeps `concurrency` calls
    (`ajudge_verdict`: the same retry policy and recording rule as the thread path) in flight as tasks, and
    hands each finished verdict to the batch's writer as it completes, all on the loop's thread, while the
    calling thread waits. One thread does the work: no hand-off between threads per item (a self-pipe
    write and a condition wait each cost about as much CPU as the HTTP call). No DSPy history, trace or
    usage is kept but the running totals (`UsageTotals`), as on the thread path.

    `direct` is one `DirectCall`, or several (one per endpoint, as a Ray worker has them: `apply.ray`)
    dealt round-robin item by item from the `first`-th on; an item's retries stay on its endpoint."""

    def __init__(self, direct, policy: RetryPolicy, tracker: "UsageTotals", concurrency: int, first: int = 0):
        import dspy

        self.directs = list(direct) if isinstance(direct, (list, tuple)) else [direct]
        self.turn = itertools.count(first)
        self.policy, self.concurrency = policy, concurrency
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rubricforge-judge-loop", daemon=True)
        self.thread.start()
        self.stopped = asyncio.run_coroutine_threadsafe(self._made(), self.loop).result()
        self._task: asyncio.Task | None = None
        self._ended = threading.Event()
        with dspy.context(usage_tracker=tracker, disable_history=True, trace=None):
            self.context = contextvars.copy_context()  # what every call runs in (DSPy's settings are contextvars)

    @staticmethod
    async def _made():
        return asyncio.Event()

    def drive(self, jobs: Iterator[tuple], collect, check) -> None:
        """Judge every ``(item, inputs)`` of `jobs` (consumed on the loop's thread); `collect(item, verdict)`
        is called with each verdict as it completes, then `check()` (which may raise to stop the batch).

        An exception from `jobs` (a bad input record) lets the calls in flight finish and be collected, then
        propagates; one from `check` (the circuit breaker) or an interrupt of the waiting thread (Ctrl-C)
        stops retries, collects the calls already finished, cancels the rest, and propagates."""
        future = self.context.run(asyncio.run_coroutine_threadsafe, self._drive(jobs, collect, check), self.loop)
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

    async def _drive(self, jobs, collect, check) -> BaseException | None:
        """The batch (see `drive`); returns a KeyboardInterrupt or SystemExit raised by `jobs` or `collect`
        for the waiting thread to raise (raised in a task, it would stop the loop before anyone hears of it)."""
        self._task = asyncio.current_task()
        finished: asyncio.Queue = asyncio.Queue()
        pending: dict = {}

        def take(task) -> None:
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
                task = asyncio.ensure_future(ajudge_verdict(direct, inputs["trajectory"], self.policy, self.stopped))
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

    def _abandon(self, pending: dict, take) -> None:
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
        async def finish():
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


class _Threads:
    """The thread path: `concurrency` worker threads calling `judge_verdict` (any judge, any LM)."""

    def __init__(self, judge, policy: RetryPolicy, tracker: "UsageTotals", concurrency: int):
        self.judge, self.policy, self.tracker = judge, policy, tracker
        self.stopped = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rubricforge-judge")

    def submit(self, inputs: dict):
        context = contextvars.copy_context()
        return self.pool.submit(context.run, _judge_in_worker, self.judge, inputs, self.policy, self.tracker,
                                self.stopped)

    def stop(self) -> None:
        self.stopped.set()

    def close(self, cancel: bool) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=True)


def _judge_in_worker(judge, inputs: dict, policy: RetryPolicy, tracker: "UsageTotals", stop: threading.Event) -> Verdict:
    # No LM history and no DSPy trace: both would keep every prompt (up to 10,000 of them).
    import dspy

    inputs = dict(inputs)
    with dspy.context(usage_tracker=tracker, disable_history=True, trace=None):
        return judge_verdict(judge, inputs.pop("trajectory"), policy, stop, **inputs)


def judge_stream(judge, trajectories: Iterable[Trajectory], out_path, *, concurrency: int = 4,
                 max_retries: int = 2, backoff: float = 0.5, max_backoff: float = 8.0,
                 timeout: float | None = None, cache=None, lm=None, progress: bool = True,
                 limit: int | None = None, on_duplicate: str = "raise", fsync_every: int = DEFAULT_FSYNC_EVERY,
                 data: str | None = None,
                 max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS) -> BatchSummary:
    """Judge `trajectories` (any iterable, consumed lazily) into the JSONL `out_path`; resumable.

    Ids already in `out_path` are skipped (resumed); a torn last line is repaired, and abstentions for
    LM errors left by an earlier run are asked again.

    Args:
        judge: the judge to run (a `TrajectoryJudge`, a `HybridJudge`, or a callable without
            predictors such as a baseline); it is deep-copied onto a one-attempt copy of the LM.
        trajectories: the `Trajectory` records to judge.
        out_path: the verdict file (JSON Lines, one verdict line per trajectory); its job is recorded
            in ``OUT.job.json``.
        concurrency: calls in flight at once (worker threads off the fast path); at most
            ``2 * concurrency`` trajectories are held at once.
        max_retries: retries of transient errors (`execution.RetryPolicy`), with `backoff` and
            `max_backoff`.
        backoff: see `max_retries`.
        max_backoff: see `max_retries`.
        timeout: per-call LM timeout in seconds (None keeps the LM's own). The batch owns retries: the
            batch copy of the LM makes one attempt per call, with DSPy's response cache off.
        cache: None/False (no cache at all), True (``.rubricforge_cache/`` next to `out_path`), a
            directory, or a `VerdictCache`. Keyed by the judge's fingerprint; abstentions are never cached.
        lm: the LM to judge with (default: the judge's own, else `dspy.settings.lm`).
        progress: show a progress bar.
        limit: consider only the first `limit` distinct input ids (resumed ones included), so re-running
            with the same limit resumes the same slice.
        on_duplicate: "raise" (`DuplicateIdError` naming the file and record) or "skip" (counted).
        fsync_every: fsync the output every N lines (0: only at the end).
        data: the input data's fingerprint (`data_fingerprint`), recorded in ``OUT.job.json``; a later run
            on other data is refused.
        max_consecutive_lm_errors: stop with `JudgeUnavailableError` after this many verdicts in a row
            abstained for an LM or network error (after their retries): a dead server must not turn a
            whole batch into recorded fails (the circuit breaker, `rubricforge_dspy.lm.circuit`). None
            never stops. Format failures (parse, truncated, invalid) do not count; cache hits neither
            count nor reset.

    Returns:
        The `BatchSummary` of this run (judged, passed, abstained by kind, cached, resumed, LM calls,
        retries, tokens, wall time, the judge's fingerprint).

    Raises:
        InputError: a bad `on_duplicate` or `concurrency`, or no LM to judge with.
        BatchOutputError: `out_path` holds verdicts of another judge configuration or other input data.
        OutputLockedError: another process is writing `out_path` (`rubricforge_dspy.apply.job.output_lock`).
        DuplicateIdError: two trajectories share an id and `on_duplicate` is "raise".
        JudgeUnavailableError: the circuit breaker opened; every verdict so far is kept in `out_path`.
        An error raised by `trajectories` itself (a bad input record) propagates after the verdicts in
        flight are written.
    """
    _check_options(on_duplicate, limit, concurrency)
    with output_lock(out_path):  # one writer per output file, for the whole run
        return _judge_stream(judge, trajectories, out_path, concurrency=concurrency, max_retries=max_retries,
                             backoff=backoff, max_backoff=max_backoff, timeout=timeout, cache=cache, lm=lm,
                             progress=progress, limit=limit, on_duplicate=on_duplicate, fsync_every=fsync_every,
                             data=data, max_consecutive_lm_errors=max_consecutive_lm_errors)


def _check_options(on_duplicate: str, limit: int | None, concurrency: int) -> None:
    if on_duplicate not in ("raise", "skip"):
        raise InputError(f"on_duplicate must be 'raise' or 'skip', got {on_duplicate!r}")
    if limit is not None and limit < 1:
        raise InputError(f"limit must be at least 1 (or None for every item), got {limit!r}")
    if concurrency < 1:
        raise InputError(f"concurrency must be >= 1, got {concurrency}")


def _judge_stream(judge, trajectories: Iterable[Trajectory], out_path, *, concurrency: int, max_retries: int,
                  backoff: float, max_backoff: float, timeout: float | None, cache, lm, progress: bool,
                  limit: int | None, on_duplicate: str, fsync_every: int, data: str | None,
                  max_consecutive_lm_errors: int | None, done: ResumeState | None = None) -> BatchSummary:
    """`judge_stream` with the output's lock held; `done`: what `read_done` already returned for `out_path`."""
    policy = RetryPolicy(max_retries, backoff, max_backoff)
    started = time.perf_counter()
    out_path = Path(out_path)

    base_lm = resolve_lm(judge, lm)
    predictors = judge.predictors() if hasattr(judge, "predictors") else []
    if base_lm is None and predictors:
        raise InputError("no LM to judge with: pass lm=..., call judge.set_lm(...), or dspy.configure(lm=...)")
    batch_judge, the_lm = judge, base_lm
    if predictors and base_lm is not None:
        the_lm = one_attempt_lm(base_lm, timeout, connections=concurrency)
        batch_judge = judge.deepcopy()
        batch_judge.set_lm(the_lm)
    fingerprint = judge_fingerprint(batch_judge, the_lm)
    program = getattr(judge, "rubric_sha256", None)
    model = getattr(the_lm, "model", None)
    lm_label = lm_name(the_lm)

    done = read_done(out_path) if done is None else done
    claim_output(out_path, fingerprint, data, bool(done.ids))
    foreign = {f for f in done.fingerprints if f not in (None, fingerprint.sha256)}
    if done.ids and foreign:
        raise BatchOutputError(
            f"{out_path}: holds verdicts of another judge configuration (fingerprints {sorted(foreign)[:3]}); "
            f"this run is {fingerprint.sha256}. Use a new output path.")

    verdict_cache: VerdictCache | None = open_cache(cache, out_path)
    owns_cache = verdict_cache is not None and not isinstance(cache, VerdictCache)
    summary = BatchSummary(out_path=str(out_path), repaired_bytes=done.repaired_bytes, retried=done.retried,
                           program_sha256=program, judge_fingerprint=fingerprint.sha256, model=model)
    tracker = UsageTotals()
    writer = _Writer(out_path, fsync_every, done, fingerprint.sha256)
    bar = _progress_bar(progress, limit)
    window = 2 * concurrency
    pending: dict = {}
    circuit = LMCircuit(max_consecutive_lm_errors, lm_label, counted=" after retries",
                        advice=f"Stopped; {out_path} keeps every verdict so far: fix the server and re-run "
                               "the same command to resume.")

    shown: list = [None]  # the counts the progress bar shows

    def record(trajectory: Trajectory, verdict: Verdict, cached: bool, attempts: int, text_hash: str | None) -> None:
        writer.write(verdict_line(trajectory, verdict, cached=cached, attempts=attempts,
                                  judge_fingerprint=fingerprint.sha256, program_sha256=program, model=model))
        summary.count(verdict, cached)
        if not verdict.abstained and verdict_cache is not None and not cached and text_hash is not None:
            verdict_cache.put(fingerprint.sha256, text_hash, verdict)
        if not cached:  # a cached verdict is never an abstention, and no call was made
            count_verdict(circuit, verdict)
        if bar is not None:
            bar.update(1)
            counts = (summary.n_abstained, summary.cached, summary.resumed)
            if counts != shown[0]:  # the postfix is rebuilt only when a count changed
                shown[0] = counts
                bar.set_postfix(abstained=counts[0], cached=counts[1], resumed=counts[2], refresh=False)

    def collect_one(item: tuple, verdict: Verdict) -> None:
        trajectory, text_hash = item
        summary.lm_calls += verdict.attempts
        summary.retries += verdict.attempts - 1
        record(trajectory, verdict, False, verdict.attempts, text_hash)

    def collect(futures) -> None:
        for future in futures:
            collect_one(pending.pop(future), future.result())

    def jobs() -> Iterator[tuple]:
        """``((trajectory, text_hash), inputs)`` of each item to ask the judge; resumed ids and cache hits
        are counted and written here."""
        for trajectory in _distinct(trajectories, limit, on_duplicate, summary):
            if trajectory.id in done.ids:
                summary.resumed += 1
                continue
            inputs = _inputs(batch_judge, trajectory)
            text_hash = input_sha256(inputs) if verdict_cache is not None else None
            hit = verdict_cache.get(fingerprint.sha256, text_hash) if verdict_cache is not None else None
            if hit is not None:
                record(trajectory, hit, True, 0, text_hash)
                continue
            yield (trajectory, text_hash), inputs

    direct = batch_judge.direct_call() if predictors and hasattr(batch_judge, "direct_call") else None
    if direct is not None:
        pool = _EventLoop(direct, policy, tracker, concurrency)
    else:
        pool = _Threads(batch_judge, policy, tracker, concurrency)
    summary.fast_path = direct is not None
    interrupted = False
    try:
        if direct is not None:  # the whole batch on the loop's thread; this thread waits
            pool.drive(jobs(), collect_one, circuit.raise_if_open)
        for item, inputs in (jobs() if direct is None else ()):
            pending[pool.submit(inputs)] = item
            if len(pending) >= window:
                finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                collect(finished)
                circuit.raise_if_open()
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            collect(finished)
            circuit.raise_if_open()
    except JudgeUnavailableError:
        pool.stop()  # in-flight calls stop retrying; the ones that finish are kept
        interrupted = True
        collect([f for f in list(pending) if f.done() and not f.cancelled() and f.exception() is None])
        raise
    except Exception:
        # A bad input record or a duplicate id: finish and keep the verdicts in flight, then raise.
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            collect(finished)
        raise
    except BaseException:
        # Ctrl-C and the like: keep what finished, never wait on in-flight calls (a re-run resumes them).
        interrupted = True
        pool.stop()
        collect([f for f in list(pending) if f.done() and not f.cancelled() and f.exception() is None])
        raise
    finally:
        pool.close(cancel=interrupted)
        writer.close()
        if bar is not None:
            bar.close()
        if owns_cache:
            verdict_cache.close()
        summary.tokens = tracker.totals()
        summary.wall_time = time.perf_counter() - started
    return summary


def _distinct(trajectories: Iterable[Trajectory], limit: int | None, on_duplicate: str,
              summary: BatchSummary) -> Iterator[Trajectory]:
    """The first `limit` distinct ids of `trajectories`, lazily; duplicates raise or are counted."""
    seen: set[str] = set()
    for trajectory in trajectories:
        if trajectory.id in seen:
            if on_duplicate == "raise":
                raise DuplicateIdError(trajectory.source.file, trajectory.source.index,
                                       f"duplicate trajectory id {trajectory.id!r}")
            summary.duplicates += 1
            continue
        seen.add(trajectory.id)
        yield trajectory
        if limit is not None and len(seen) >= limit:
            return  # never pull one more: the input stream (and a label join on it) stops at the limit


def _progress_bar(enabled: bool, total: int | None):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="verdict", desc="judging", dynamic_ncols=True, smoothing=0.1)


# -- the Python API behind `rubricforge judge` ----------------------------------------------------

def load_judge(program):
    """The judge a `program` argument names: a path (loaded), a judge (as is), or None (the seed judge)."""
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.judge import loading

    if program is None:
        return TrajectoryJudge()
    if isinstance(program, (str, os.PathLike)):
        return loading.load_judge(program)
    return program


def _as_lm(lm):
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm

    return make_lm(lm) if isinstance(lm, LMConfig) else lm


def run_judge_file(program=None, data_path=None, out_path=None, *, limit: int | None = None, lm=None,
                   render_config=None,
                   concurrency: int = 4, on_error: str = "raise", on_duplicate: str | None = None,
                   format: str = "auto", label_threshold=None, cache=True,
                   max_retries: int = 2, backoff: float = 0.5, timeout: float | None = None,
                   progress: bool = True, fsync_every: int = DEFAULT_FSYNC_EVERY,
                   max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS,
                   labels=None, load_report=None, on_trajectory=None) -> BatchSummary:
    """Judge the trajectory file `data_path` into `out_path` (resumable); the Python API of `rubricforge judge`.

    The input is read once (`data.scan.scan_input`), before the first LM call: every record is checked,
    the labels joined, `on_trajectory` called, and each trajectory within `limit` rendered into a temporary
    spill file beside `out_path` (orjson lines, removed at the end; ids already done are not rendered),
    which the judging pass (`judge_stream`'s) then reads. A judge whose inputs are not plain data (a
    `FloorJudge`) reads the input a second time instead. The job's data fingerprint covers the input
    files, the label file, the format and the label threshold.

    Args:
        program: a frozen program path (`load_judge`), a judge, or None for the seed judge.
        data_path: a trajectory file or directory, or a list of them.
        out_path: the verdict file (see `judge_stream`).
        limit: see `judge_stream`.
        lm: a `dspy.LM` or an `LMConfig` (default: the program's LM, else `dspy.settings.lm`).
        render_config: overrides the judge's own (a program's is the one it was induced with).
        concurrency: see `judge_stream`.
        on_error: the loader's policy for bad records ("raise" or "skip"; skipped records are counted
            in ``summary.skipped``).
        on_duplicate: defaults to "skip" when `on_error` is "skip", else "raise".
        format: the input format, or "auto" to detect it per file.
        label_threshold: None = each format's own rule (`default_label_rule`).
        cache: see `judge_stream` (default: ``.rubricforge_cache/`` next to `out_path`).
        max_retries: see `judge_stream`.
        backoff: see `judge_stream`.
        timeout: see `judge_stream`.
        progress: see `judge_stream`.
        fsync_every: see `judge_stream`.
        max_consecutive_lm_errors: see `judge_stream`.
        labels: a label file path or a `labels.LabelJoin` joined onto the stream (call its
            ``finish()`` afterwards for the join report).
        load_report: a `LoadReport` to fill (the skipped records with their reasons).
        on_trajectory: called with each trajectory read (e.g. a `label_checks.LabelTally`'s ``add``).

    Returns:
        The `BatchSummary` of the run, with ``skipped`` set to the records the loader skipped.

    Raises:
        InputError: `data_path` or `out_path` is missing, a bad option; `TrajectoryFormatError` for a bad
            record or a repeated id with ``on_error="raise"`` and `EmptyInputError` for an input without
            trajectories, both found by one streaming pass over the whole input before the first LM
            call (`rubricforge_dspy.data.scan`); `ProgramError` for a bad program file.
        OutputLockedError: another process is writing `out_path`.
        BatchOutputError, DuplicateIdError, JudgeUnavailableError: as in `judge_stream`.
    """
    if data_path is None or out_path is None:
        raise InputError("run_judge_file needs data_path and out_path")
    from rubricforge_dspy.data.formats import LoadReport, iter_trajectories

    judge = load_judge(program)
    if render_config is not None:
        judge.render_config = render_config
    from rubricforge_dspy.data.labels import LabelJoin

    paths = [data_path] if isinstance(data_path, (str, os.PathLike)) else list(data_path)
    join = LabelJoin(labels, label_threshold) if isinstance(labels, (str, os.PathLike)) else labels
    on_duplicate = on_duplicate or ("skip" if on_error == "skip" else "raise")
    _check_options(on_duplicate, None, concurrency)  # the limit: by `checked_input`, in the words of the CLI
    out_path = Path(out_path)
    report = load_report if load_report is not None else LoadReport()
    with output_lock(out_path):  # taken before anything else: a second run is refused at once
        done = read_done(out_path)
        spill = _Spill(judge, out_path, done.ids)

        def each(trajectory: Trajectory) -> None:  # every trajectory within the limit, in input order
            if join is not None:
                trajectory = join.apply(trajectory)
            if on_trajectory is not None:
                on_trajectory(trajectory)
            spill.add(trajectory)

        try:
            # One pass over the whole input before the first LM call: a bad record, a repeated id or an
            # empty input costs seconds, not the verdicts paid before the judge reaches it; the same pass
            # joins the labels, tallies, and renders each trajectory into the spill the judging pass reads.
            scan, data = checked_input(paths, format=format, label_threshold=label_threshold, on_error=on_error,
                                       limit=limit, labels=join, report=report, each=each)
            if spill.usable:
                stream = spill.items()
            else:  # a judge whose inputs are not plain data: the judging pass reads the input again
                stream = iter_trajectories(data_path, format=format, label_threshold=label_threshold,
                                           on_error=on_error, report=LoadReport())
                if limit is not None:
                    stream = itertools.islice(stream, limit)  # ids are unique here: the first `limit` distinct ids
                if join is not None:  # the same labels; the join was reported by the checking pass
                    again = LabelJoin(join.file, join.rule)
                    stream = (again.apply(t) for t in stream)
            summary = _judge_stream(judge, stream, out_path, concurrency=concurrency, max_retries=max_retries,
                                    backoff=backoff, max_backoff=8.0,
                                    timeout=timeout, cache=cache, lm=_as_lm(lm), progress=progress, limit=limit,
                                    on_duplicate=on_duplicate, fsync_every=fsync_every, data=data,
                                    max_consecutive_lm_errors=max_consecutive_lm_errors, done=done)
        finally:
            spill.remove()
    summary.skipped = len(report.skipped)
    return summary
