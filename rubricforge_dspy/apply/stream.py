"""Judge a stream of trajectories into an append-only JSONL of verdicts: bounded memory, retries,
a verdict cache, and resume after any kill.

`judge_stream` pulls trajectories lazily and keeps at most ``2 * concurrency`` of them in flight.
The judge is called through the execution layer (`rubricforge_dspy.judge.execution`: retries of transient
errors by exception type, every failure recorded as an abstention), by an executor (`apply.executors`). A
`TrajectoryJudge` on an LM built by `lm.make_lm` takes the fast path: `TrajectoryJudge.direct_call` (the
request body built once per rubric, each item's text templated in, the answer parsed by the strict adapter)
awaited through `ajudge_verdict`, the whole batch (reading, calls, writing) on one event loop's thread
(`EventLoopExecutor`, at most `concurrency` requests at once over one keep-alive pool) while the calling
thread waits; any other judge or LM runs on `concurrency` worker threads through `judge_verdict`
(`ThreadExecutor`), the calling thread writing. Either way one thread alone writes the output
(`apply.writer.VerdictWriter`: one verdict line per trajectory id, `core.verdict.verdict_line`, in
completion order, each line a single unbuffered ``write``), so a SIGKILL at any moment leaves complete
lines plus at most one partial final line. On start, the existing output is read, a partial final line is
truncated away, and ids already there are skipped: re-running the same command after a kill ends with
exactly one line per id. How the job runs (concurrency, retries, cache, limit, ...) is one `JobOptions`.

An output file belongs to one job (`rubricforge_dspy.apply.job`): beside ``OUT`` the batch keeps
``OUT.job.json`` with the judge's and the input's fingerprints. A run whose judge or data differ is
refused with a message saying what differs; the same job resumes automatically.

Line schema: ``rubricforge_dspy/core/schemas/verdict.schema.json``.
"""
from __future__ import annotations

import itertools
import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from rubricforge_dspy.apply.executors import EventLoopExecutor, ThreadExecutor
from rubricforge_dspy.apply.job import ResumeState, checked_input, claim_job, output_lock, read_done
from rubricforge_dspy.apply.options import (
    DEFAULT_FSYNC_EVERY,
    DEFAULT_MAX_CONSECUTIVE_LM_ERRORS,
    JobOptions,
    job_options,
)
from rubricforge_dspy.apply.summary import BatchSummary, UsageTotals
from rubricforge_dspy.apply.writer import Spill, VerdictWriter, judge_inputs
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory, TrajectoryFormatError
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.judge.cache import VerdictCache, input_sha256, open_cache
from rubricforge_dspy.judge.execution import count_verdict
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.judge.loading import judge_from
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.copies import one_attempt_lm, resolve_lm

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.core.trajectory import LabelRule
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.lm.config import LMConfig

__all__ = ["judge_stream", "run_judge_file", "DuplicateIdError", "BatchSummary", "UsageTotals", "JobOptions",
           "DEFAULT_FSYNC_EVERY", "DEFAULT_MAX_CONSECUTIVE_LM_ERRORS"]

logger = logging.getLogger(__name__)


class DuplicateIdError(TrajectoryFormatError):
    """Two input trajectories share an id; the message names the file and record of the second."""


def judge_stream(judge: BaseJudge | Callable[..., Any], trajectories: Iterable[Trajectory], out_path: PathArg,
                 options: JobOptions | None = None, *, lm: dspy.BaseLM | None = None, data: str | None = None,
                 **overrides: Any) -> BatchSummary:
    """Judge `trajectories` (any iterable, consumed lazily) into the JSONL `out_path`; resumable.

    Ids already in `out_path` are skipped (resumed); a torn last line is repaired, and abstentions for
    LM errors left by an earlier run are asked again.

    Args:
        judge: the judge to run (a `TrajectoryJudge`, a `HybridJudge`, or a callable without
            predictors such as a baseline); it is deep-copied onto a one-attempt copy of the LM.
        trajectories: the `Trajectory` records to judge.
        out_path: the verdict file (JSON Lines, one verdict line per trajectory); its job is recorded
            in ``OUT.job.json``.
        options: how the job runs (`JobOptions`: concurrency, retries, timeout, cache, limit, ...);
            default ``JobOptions()`` (no verdict cache).
        lm: the LM to judge with (default: the judge's own, else `dspy.settings.lm`).
        data: the input data's fingerprint (`data_fingerprint`), recorded in ``OUT.job.json``; a later run
            on other data is refused.
        **overrides: `JobOptions` fields, replacing those of `options` (``concurrency=8``).

    Returns:
        The `BatchSummary` of this run (judged, passed, abstained by kind, cached, resumed, LM calls,
        retries, tokens, wall time, the judge's fingerprint).

    Raises:
        InputError: a bad `on_duplicate`, `limit` or `concurrency`, or no LM to judge with.
        BatchOutputError: `out_path` holds verdicts of another judge configuration or other input data.
        OutputLockedError: another process is writing `out_path` (`rubricforge_dspy.apply.job.output_lock`).
        DuplicateIdError: two trajectories share an id and `on_duplicate` is "raise".
        JudgeUnavailableError: the circuit breaker opened; every verdict so far is kept in `out_path`.
        An error raised by `trajectories` itself (a bad input record) propagates after the verdicts in
        flight are written.
    """
    options = job_options(options, overrides)
    options.check()
    with output_lock(out_path):  # one writer per output file, for the whole run
        return _judge_stream(judge, trajectories, Path(out_path), options, lm=lm, data=data)


def _judge_stream(judge, trajectories: Iterable[Trajectory], out_path: Path, options: JobOptions, *, lm, data,
                  done: ResumeState | None = None) -> BatchSummary:
    """`judge_stream` with the output's lock held; `done`: what `read_done` already returned for `out_path`."""
    started = time.perf_counter()
    run = _LocalRun(judge, lm, out_path, options, data, done)
    return run.run(trajectories, started)


class _LocalRun:
    """One run of the local back end: the judge on its one-attempt LM, the job claimed, the writer, the
    verdict cache, the circuit breaker, the progress bar and the tally."""

    def __init__(self, judge, lm, out_path: Path, options: JobOptions, data: str | None,
                 done: ResumeState | None):
        self.options, self.out_path = options, out_path
        base_lm = resolve_lm(judge, lm)
        self.predictors = judge.predictors() if hasattr(judge, "predictors") else []
        if base_lm is None and self.predictors:
            raise InputError("no LM to judge with: pass lm=..., call judge.set_lm(...), or dspy.configure(lm=...)")
        self.judge, the_lm = judge, base_lm
        if self.predictors and base_lm is not None:
            the_lm = one_attempt_lm(base_lm, options.timeout, connections=options.concurrency)
            self.judge = judge.deepcopy()
            self.judge.set_lm(the_lm)
        fingerprint = judge_fingerprint(self.judge, the_lm)
        self.fingerprint = fingerprint.sha256
        self.line = {"judge_fingerprint": fingerprint.sha256, "program_sha256": getattr(judge, "rubric_sha256", None),
                     "model": getattr(the_lm, "model", None)}
        self.done = done = read_done(out_path) if done is None else done
        claim_job(out_path, fingerprint, data, done)
        self.cache: VerdictCache | None = open_cache(options.cache, out_path)
        self.owns_cache = self.cache is not None and not isinstance(options.cache, VerdictCache)
        self.summary = BatchSummary(out_path=str(out_path), repaired_bytes=done.repaired_bytes, retried=done.retried,
                                    program_sha256=self.line["program_sha256"], judge_fingerprint=self.fingerprint,
                                    model=self.line["model"])
        self.tracker = UsageTotals()
        self.circuit = LMCircuit(options.max_consecutive_lm_errors, lm_name(the_lm), counted=" after retries",
                                 advice=f"Stopped; {out_path} keeps every verdict so far: fix the server and "
                                        "re-run the same command to resume.")
        self._shown = None  # the counts the progress bar shows

    def run(self, trajectories: Iterable[Trajectory], started: float) -> BatchSummary:
        """Judge `trajectories` into the output; the summary of the run."""
        options = self.options
        self.writer = VerdictWriter(self.out_path, options.fsync_every, self.done, self.fingerprint)
        self.bar = _progress_bar(options.progress, options.limit)
        direct = self.judge.direct_call() if self.predictors and hasattr(self.judge, "direct_call") else None
        if direct is not None:  # the whole batch on the loop's thread; this thread waits
            pool = EventLoopExecutor(direct, options.policy, self.tracker, options.concurrency)
        else:
            pool = ThreadExecutor(self.judge, options.policy, self.tracker, options.concurrency)
        self.summary.fast_path = direct is not None
        jobs, pending, interrupted = self._jobs(trajectories), {}, False
        try:
            if direct is not None:
                pool.drive(jobs, self._collect, self.circuit.raise_if_open)
            else:
                self._run_threads(pool, jobs, pending)
        except Exception as error:
            if isinstance(error, JudgeUnavailableError):
                interrupted = True  # in-flight calls stop retrying; the ones that finished are kept
                pool.stop()
                self._collect_finished(pending)
            else:  # a bad input record or a duplicate id: finish and keep the verdicts in flight, then raise
                while pending:
                    self._collect_some(pending, check=False)
            raise
        except BaseException:
            # Ctrl-C and the like: keep what finished, never wait on in-flight calls (a re-run resumes them).
            interrupted = True
            pool.stop()
            self._collect_finished(pending)
            raise
        finally:
            pool.close(cancel=interrupted)
            self._close(started)
        return self.summary

    def _close(self, started: float) -> None:
        self.writer.close()
        if self.bar is not None:
            self.bar.close()
        if self.owns_cache:
            self.cache.close()
        self.summary.tokens = self.tracker.totals()
        self.summary.wall_time = time.perf_counter() - started

    def _run_threads(self, pool: ThreadExecutor, jobs: Iterator[tuple], pending: dict) -> None:
        """The thread path: at most ``2 * concurrency`` items in flight, collected as they finish."""
        window = 2 * self.options.concurrency
        for item, inputs in jobs:
            pending[pool.submit(inputs)] = item
            if len(pending) >= window:
                self._collect_some(pending)
        while pending:
            self._collect_some(pending)

    def _collect_some(self, pending: dict, check: bool = True) -> None:
        finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for future in finished:
            self._collect(pending.pop(future), future.result())
        if check:
            self.circuit.raise_if_open()

    def _collect_finished(self, pending: dict) -> None:
        for future in [f for f in list(pending) if f.done() and not f.cancelled() and f.exception() is None]:
            self._collect(pending.pop(future), future.result())

    def _collect(self, item: tuple, verdict: Verdict) -> None:
        trajectory, text_hash = item
        self.summary.lm_calls += verdict.attempts
        self.summary.retries += verdict.attempts - 1
        self._record(trajectory, verdict, False, verdict.attempts, text_hash)

    def _record(self, trajectory: Trajectory, verdict: Verdict, cached: bool, attempts: int,
                text_hash: str | None) -> None:
        self.writer.write(verdict_line(trajectory, verdict, cached=cached, attempts=attempts, **self.line))
        self.summary.count(verdict, cached)
        if not verdict.abstained and self.cache is not None and not cached and text_hash is not None:
            self.cache.put(self.fingerprint, text_hash, verdict)
        if not cached:  # a cached verdict is never an abstention, and no call was made
            count_verdict(self.circuit, verdict)
        if self.bar is not None:
            self.bar.update(1)
            summary = self.summary
            counts = (summary.n_abstained, summary.cached, summary.resumed)
            if counts != self._shown:  # the postfix is rebuilt only when a count changed
                self._shown = counts
                self.bar.set_postfix(abstained=counts[0], cached=counts[1], resumed=counts[2], refresh=False)

    def _jobs(self, trajectories: Iterable[Trajectory]) -> Iterator[tuple]:
        """``((trajectory, text_hash), inputs)`` of each item to ask the judge; resumed ids and cache hits
        are counted and written here."""
        cache, options = self.cache, self.options
        for trajectory in _distinct(trajectories, options.limit, options.duplicates, self.summary):
            if trajectory.id in self.done.ids:
                self.summary.resumed += 1
                continue
            inputs = judge_inputs(self.judge, trajectory)
            text_hash = input_sha256(inputs) if cache is not None else None
            hit = cache.get(self.fingerprint, text_hash) if cache is not None else None
            if hit is not None:
                self._record(trajectory, hit, True, 0, text_hash)
                continue
            yield (trajectory, text_hash), inputs


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

def _as_lm(lm):
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm

    return make_lm(lm) if isinstance(lm, LMConfig) else lm


_FILE_OPTIONS = JobOptions(cache=True)  # a file's run keeps a verdict cache by default


def run_judge_file(program: PathArg | BaseJudge | None = None, data_path: PathArg | Iterable[PathArg] | None = None,
                   out_path: PathArg | None = None, options: JobOptions | None = None, *, on_error: str = "raise",
                   lm: dspy.BaseLM | LMConfig | None = None, render_config: RenderConfig | None = None,
                   label_threshold: float | str | LabelRule | None = None, format: str = "auto",
                   labels: str | Path | LabelJoin | None = None, load_report: LoadReport | None = None,
                   on_trajectory: Callable[[Trajectory], Any] | None = None, **overrides: Any) -> BatchSummary:
    """Judge the trajectory file `data_path` into `out_path` (resumable); the Python API of `rubricforge judge`.

    The input is read once (`data.scan.scan_input`), before the first LM call: every record is checked,
    the labels joined, `on_trajectory` called, and each trajectory within the limit rendered into a
    temporary spill file beside `out_path` (`writer.Spill`: orjson lines, removed at the end; ids already
    done are not rendered), which the judging pass (`judge_stream`'s) then reads. A judge whose inputs are
    not plain data (a `FloorJudge`) reads the input a second time instead. The job's data fingerprint
    covers the input files, the label file, the format and the label threshold.

    Args:
        program: a frozen program path (`judge.loading.load_judge`), a judge, or None for the seed judge.
        data_path: a trajectory file or directory, or a list of them.
        out_path: the verdict file (see `judge_stream`).
        options: how the job runs (`JobOptions`; default ``JobOptions(cache=True)``: the verdict cache in
            ``.rubricforge_cache/`` next to `out_path`). Its `on_duplicate` defaults to "skip" when
            `on_error` is "skip", else "raise".
        lm: a `dspy.LM` or an `LMConfig` (default: the program's LM, else `dspy.settings.lm`).
        render_config: overrides the judge's own (a program's is the one it was induced with).
        on_error: the loader's policy for bad records ("raise" or "skip"; skipped records are counted
            in ``summary.skipped``).
        format: the input format, or "auto" to detect it per file.
        label_threshold: None = each format's own rule (`default_label_rule`).
        labels: a label file path or a `labels.LabelJoin` joined onto the stream (call its
            ``finish()`` afterwards for the join report).
        load_report: a `LoadReport` to fill (the skipped records with their reasons).
        on_trajectory: called with each trajectory read (e.g. a `label_checks.LabelTally`'s ``add``).
        **overrides: `JobOptions` fields, replacing those of `options` (``limit=100``).

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
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.labels import LabelJoin

    options = _file_options(options, overrides, on_error)
    judge = judge_from(program)
    if render_config is not None:
        judge.render_config = render_config
    paths = [data_path] if isinstance(data_path, (str, os.PathLike)) else list(data_path)
    join = LabelJoin(labels, label_threshold) if isinstance(labels, (str, os.PathLike)) else labels
    out_path = Path(out_path)
    report = load_report if load_report is not None else LoadReport()
    reading: dict[str, Any] = {"format": format, "label_threshold": label_threshold, "on_error": on_error}
    with output_lock(out_path):  # taken before anything else: a second run is refused at once
        done = read_done(out_path)
        spill = Spill(judge, out_path, done.ids)

        def each(trajectory: Trajectory) -> None:  # every trajectory within the limit, in input order
            if join is not None:
                trajectory = join.apply(trajectory)
            if on_trajectory is not None:
                on_trajectory(trajectory)
            spill.add(trajectory)

        try:
            # One pass over the whole input before the first LM call (a bad record, a repeated id or an empty input
            # costs seconds); it joins the labels, tallies, and renders each trajectory into the judged spill.
            scan, data = checked_input(paths, limit=options.limit, labels=join, report=report, each=each, **reading)
            stream = spill.items() if spill.usable else _read_again(data_path, reading, options.limit, join)
            summary = _judge_stream(judge, stream, out_path, options, lm=_as_lm(lm), data=data, done=done)
        finally:
            spill.remove()
    summary.skipped = len(report.skipped)
    return summary


def _file_options(options: JobOptions | None, overrides: dict, on_error: str) -> JobOptions:
    """`run_judge_file`'s options, checked: a repeated id is skipped (counted) when bad records are, unless told."""
    options = job_options(options, overrides, _FILE_OPTIONS)
    if options.on_duplicate is None:
        options = replace(options, on_duplicate="skip" if on_error == "skip" else "raise")
    options.check(limit=False)  # the limit: by `checked_input`, in the words of the CLI
    return options


def _read_again(data_path, reading: dict, limit: int | None, join) -> Iterator[Trajectory]:
    """The input read a second time, for a judge whose inputs are not plain data (no spill)."""
    from rubricforge_dspy.data.formats import LoadReport, iter_trajectories
    from rubricforge_dspy.data.labels import LabelJoin

    stream = iter_trajectories(data_path, report=LoadReport(), **reading)
    if limit is not None:
        stream = itertools.islice(stream, limit)  # ids are unique here: the first `limit` distinct ids
    if join is not None:  # the same labels; the join was reported by the checking pass
        again = LabelJoin(join.file, join.rule)
        stream = (again.apply(t) for t in stream)
    return stream
