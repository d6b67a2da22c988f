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
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, replace
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

    from rubricforge_dspy.apply.cascade_job import CascadeJob
    from rubricforge_dspy.core.trajectory import LabelRule
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.lm.config import LMConfig

__all__ = ["judge_stream", "run_judge_file", "DuplicateIdError", "BatchSummary", "UsageTotals", "JobOptions",
           "LocalCalls", "Stage", "CASCADE_CHUNK", "run_job",
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
        judge: the judge to run (a `TrajectoryJudge`, a `HybridJudge`, a callable without predictors such as
            a baseline, or a `Cascade`: run stage by stage, its labeling queue beside `out_path`,
            `apply.cascade_job`); it is deep-copied onto a one-attempt copy of the LM.
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
        cascade = None
        if _is_cascade(judge):  # stage by stage; the labeling queue from a list, or this run's escalations
            from rubricforge_dspy.apply.cascade_job import CascadeJob

            again = (lambda: trajectories) if isinstance(trajectories, (list, tuple)) else None
            cascade = CascadeJob(judge, out_path, reread=again)
        return run_job(judge, trajectories, Path(out_path), options, lm=lm, data=data, cascade=cascade)


def run_job(judge, trajectories: Iterable[Trajectory], out_path: Path, options: JobOptions, *, lm, data,
                  done: ResumeState | None = None, calls=None, cascade: CascadeJob | None = None,
                  chunk: int | None = None) -> BatchSummary:
    """The job runner every run goes through: `judge_stream` with the output's lock held; `done`: what
    `read_done` already returned for `out_path`;
    `calls`: how each stage's calls are made (default `LocalCalls`); `cascade`: the cascade's side of the run when
    `judge` is a cascade (`apply.cascade_job.CascadeJob`); `chunk`: a cascade's items per chunk."""
    started = time.perf_counter()
    run = _Run(judge, lm, out_path, options, data, done, calls=calls, cascade=cascade, chunk=chunk)
    return run.run(trajectories, started)


def _is_cascade(judge) -> bool:
    """A `judge.cascade.Cascade` (whose module is then loaded: a plain run never imports the cascade's)."""
    module = sys.modules.get("rubricforge_dspy.judge.cascade")
    return module is not None and isinstance(judge, module.Cascade)


CASCADE_CHUNK = 2048  # a cascade's items per chunk: each stage runs over what the earlier left of one chunk


class _Item:
    """One trajectory on its way through the stages (one stage for a plain judge): its place in the input, its
    cache key, the LLM stages run on it and their tokens, the confidence it was last handed on with."""

    __slots__ = ("index", "trajectory", "text_hash", "lm_stages", "tokens", "last", "usage", "cached")

    def __init__(self, index: int, trajectory: Trajectory):
        self.index, self.trajectory = index, trajectory
        self.text_hash: str | None = None
        self.lm_stages = 0
        self.tokens: dict[str, dict] = {}
        self.last: tuple[str, float] | None = None
        self.usage: UsageTotals | None = None
        self.cached = False


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


class LocalCalls:
    """The local back end's calls of a stage (`apply.executors`): the fast path (`TrajectoryJudge.direct_call`)
    on one event loop's thread while the calling thread waits, else `concurrency` worker threads with at most
    ``2 * concurrency`` items in flight, collected (and written) by the calling thread."""

    def __init__(self, options: JobOptions, tracker: UsageTotals):
        self.options, self.tracker = options, tracker

    def run(self, stage: Stage, jobs: Iterator[tuple], collect, check, tracker_of=None) -> bool:
        """Judge every ``(item, inputs)`` of `jobs`, `collect(item, verdict)` each as it completes and `check()`
        after (the circuit); `tracker_of(item)`: the usage tracker of its call, or None. True on the fast path.

        On an LM failure (the circuit opens) or an interrupt, the finished calls are collected and the others
        abandoned; on an error of `jobs` (a bad input record) the calls in flight finish and are collected."""
        options = self.options
        direct = stage.judge.direct_call() if stage.lm is not None and hasattr(stage.judge, "direct_call") else None
        if direct is not None:  # the whole batch on the loop's thread; this thread waits
            pool = EventLoopExecutor(direct, options.policy, self.tracker, options.concurrency)
        else:
            pool = ThreadExecutor(stage.judge, options.policy, self.tracker, options.concurrency)
        pending: dict = {}
        interrupted = False
        try:
            if direct is not None:
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


def _collect_some(pending: dict, collect, check) -> None:
    finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
    for future in finished:
        collect(pending.pop(future), future.result())
    if check is not None:
        check()


def _collect_finished(pending: dict, collect) -> None:
    for future in [f for f in list(pending) if f.done() and not f.cancelled() and f.exception() is None]:
        collect(pending.pop(future), future.result())


class _Run:
    """One run of the job runner: the judge on its one-attempt LM, the job claimed, the writer, the verdict
    cache, the circuit breakers, the progress bar and the tally; a plain judge is one stage, a cascade its stages
    run chunk by chunk (a later stage over what the earlier left). The stages' calls are made by `calls`
    (`LocalCalls`, or a Ray or Batch API back end's)."""

    def __init__(self, judge, lm, out_path: Path, options: JobOptions, data: str | None,
                 done: ResumeState | None, *, calls=None, cascade: CascadeJob | None = None, chunk: int | None = None):
        self.options, self.out_path, self.cascade = options, out_path, cascade
        self.chunk = chunk or CASCADE_CHUNK
        self.predictors = judge.predictors() if hasattr(judge, "predictors") else []
        # A cascade whose stages make no LM call (floors) has no LM: none is resolved, and a configured one is
        # not part of its job (a resume under another configured LM is the same job).
        base_lm = resolve_lm(judge, lm) if self.predictors or cascade is None else None
        if base_lm is None and self.predictors:
            raise InputError("no LM to judge with: pass lm=..., call judge.set_lm(...), or dspy.configure(lm=...)")
        self.judge, the_lm = judge, base_lm
        if self.predictors and base_lm is not None:
            the_lm = one_attempt_lm(base_lm, options.timeout, connections=options.concurrency)
            self.judge = judge.deepcopy()
            self.judge.set_lm(the_lm)
        model = getattr(the_lm, "model", None)
        if cascade is None:
            fingerprint = judge_fingerprint(self.judge, the_lm)
            circuit = LMCircuit(options.max_consecutive_lm_errors, lm_name(the_lm), counted=" after retries",
                                advice=f"Stopped; {out_path} keeps every verdict so far: fix the server and "
                                       "re-run the same command to resume.")
            self.stages = [Stage(0, None, self.judge, the_lm if self.predictors else None, fingerprint.sha256,
                                 circuit)]
        else:
            from rubricforge_dspy.apply.cascade_job import cascade_fingerprint

            fingerprint = cascade_fingerprint(self.judge, base_lm, cascade.cascade_file)
            self.stages = [self._stage(k, name, stage, the_lm) for k, (name, stage)
                           in enumerate(zip(cascade.names, self.judge.stages, strict=True))]
        self.fingerprint = fingerprint.sha256
        self.line = {"judge_fingerprint": fingerprint.sha256, "program_sha256": getattr(judge, "rubric_sha256", None),
                     "model": model}
        self.done = done = read_done(out_path) if done is None else done
        claim_job(out_path, fingerprint, data, done)
        self.cache: VerdictCache | None = open_cache(options.cache, out_path)
        self.owns_cache = self.cache is not None and not isinstance(options.cache, VerdictCache)
        fields = {"out_path": str(out_path), "repaired_bytes": done.repaired_bytes, "retried": done.retried,
                  "program_sha256": self.line["program_sha256"], "judge_fingerprint": self.fingerprint,
                  "model": model}
        self.summary = BatchSummary(**fields) if cascade is None else cascade.summary(**fields)
        self.tracker = UsageTotals()
        self.calls = calls if calls is not None else LocalCalls(options, self.tracker)
        self.items = 0  # this run's items (not resumed)
        self._shown = None  # the counts the progress bar shows

    def _stage(self, k: int, name: str, judge, lm) -> Stage:
        """Stage `k` of a cascade: an LLM stage on the run's LM (its calls cached under its own fingerprint), or a
        stage without an LM (run locally, in one batch)."""
        options = self.options
        if not judge.predictors():
            return Stage(k, name, judge, None, "", LMCircuit(None, name, advice=""), local=True)
        circuit = LMCircuit(options.max_consecutive_lm_errors, lm_name(lm), counted=" after retries",
                            advice=f"Stopped at stage {name!r}.")
        return Stage(k, name, judge, lm, judge_fingerprint(judge, lm).sha256, circuit)

    def run(self, trajectories: Iterable[Trajectory], started: float) -> BatchSummary:
        """Judge `trajectories` into the output; the summary of the run."""
        options = self.options
        self.writer = VerdictWriter(self.out_path, options.fsync_every, self.done, self.fingerprint)
        self.bar = _progress_bar(options.progress, options.limit)
        items = self._todo(trajectories)
        try:
            if self.cascade is None:
                self._run_stage(self.stages[0], items)
            else:
                while chunk := list(itertools.islice(items, self.chunk)):  # the input is read chunk by chunk
                    for stage in self.stages:
                        if not chunk:
                            break
                        chunk = self._run_stage(stage, chunk)
        except JudgeUnavailableError as error:
            if self.cascade is None:
                raise
            self.summary.outcome = "LM failure"
            raise JudgeUnavailableError(f"{error} {self.cascade.kept(self.summary)}") from error
        except BaseException:
            if self.cascade is not None:
                self.summary.outcome = "interrupted"
            raise
        finally:
            self._close(started)
        return self.summary

    def _close(self, started: float) -> None:
        try:
            self.writer.close()
        finally:
            if self.bar is not None:
                self.bar.close()
            if self.owns_cache:
                self.cache.close()
            self.summary.tokens = self.tracker.totals()
            self.summary.wall_time = time.perf_counter() - started
            if self.cascade is not None:
                self.cascade.close(self.summary, self.items)

    def _todo(self, trajectories: Iterable[Trajectory]) -> Iterator[_Item]:
        """The items to judge, lazily: the first `limit` distinct ids, those already in the output counted as
        resumed and skipped."""
        options = self.options
        for trajectory in _distinct(trajectories, options.limit, options.duplicates, self.summary):
            if trajectory.id in self.done.ids:
                self.summary.resumed += 1
                continue
            self.items += 1
            yield _Item(self.items - 1, trajectory)

    def _run_stage(self, stage: Stage, items: Iterable[_Item]) -> list[_Item]:
        """Run `stage` over `items`; the items it handed on, in input order (none for a plain judge or the last
        stage of a cascade: what it hands on is escalated)."""
        left: list[_Item] = []
        if stage.local:  # a floor: one batch, settled in input order
            items = list(items)
            self.summary.stage_calls[stage.name] = self.summary.stage_calls.get(stage.name, 0) + len(items)
            verdicts = stage.judge.batch([item.trajectory for item in items], self.options.concurrency,
                                         policy=self.options.policy, max_consecutive_lm_errors=None)
            return [item for item, verdict in zip(items, verdicts, strict=True)
                    if not self._settle(stage, item, verdict)]

        def collect(item: _Item, verdict: Verdict) -> None:
            self._called(stage, item, verdict, left)

        tracker_of = (lambda item: item.usage) if self.cascade is not None else None
        fast = self.calls.run(stage, self._jobs(stage, items, left), collect, stage.circuit.raise_if_open, tracker_of)
        if self.cascade is None:
            self.summary.fast_path = bool(fast)
        return sorted(left, key=lambda item: item.index)

    def _jobs(self, stage: Stage, items: Iterable[_Item], left: list) -> Iterator[tuple]:
        """``(item, inputs)`` of each item to ask `stage`; the verdict cache's answers are settled here."""
        cache, cascade, summary = self.cache, self.cascade, self.summary
        for item in items:
            if cascade is not None:
                summary.stage_calls[stage.name] = summary.stage_calls.get(stage.name, 0) + 1
            inputs = judge_inputs(stage.judge, item.trajectory)
            text_hash = input_sha256(inputs) if cache is not None else None
            hit = cache.get(stage.fingerprint, text_hash) if cache is not None else None
            if hit is not None:
                item.cached = True
                if not self._settle(stage, item, hit, cached=True):
                    left.append(item)
                continue
            item.text_hash = text_hash
            if cascade is not None:
                item.usage = UsageTotals(self.tracker)  # this call's tokens, for its line (and the run's)
            yield item, inputs

    def _called(self, stage: Stage, item: _Item, verdict: Verdict, left: list) -> None:
        """Account one finished call of `stage` and settle its item (or keep it for the next stage)."""
        summary = self.summary
        summary.lm_calls += verdict.attempts
        summary.retries += max(0, verdict.attempts - 1)
        if self.cascade is not None:
            item.lm_stages += 1
            summary.lm_asked += 1
            usage = item.usage.totals() if item.usage is not None else None
            item.usage = None
            if usage:
                item.tokens[stage.name] = {key: int(usage.get(key) or 0)
                                           for key in ("prompt_tokens", "completion_tokens")}
        settled = self._settle(stage, item, verdict)
        # (a calibrated verdict is not cached: the cache keeps the LM's answer, and a stage decides on its calibration)
        if (self.cache is not None and item.text_hash is not None and not verdict.abstained
                and (self.cascade is None or verdict.score_calibrated is None)):
            self.cache.put(stage.fingerprint, item.text_hash, verdict)
        count_verdict(stage.circuit, verdict)
        if not settled:
            left.append(item)

    def _settle(self, stage: Stage, item: _Item, verdict: Verdict, cached: bool = False) -> bool:
        """Write the item's line when `stage` settles it (True); False when it hands it on."""
        if self.cascade is None:
            self._write(item, verdict, cached, 0 if cached else verdict.attempts)
            return True
        found = self.cascade.settle(stage.index, item, verdict)
        if found is None:
            return False
        final, name, index = found
        self._write(item, final, item.cached, final.attempts or 0, self.cascade.line_fields(item, name, index))
        self.cascade.count(self.summary, item, final, name)
        return True

    def _write(self, item: _Item, verdict: Verdict, cached: bool, attempts: int, extra: dict | None = None) -> None:
        line = verdict_line(item.trajectory, verdict, cached=cached, attempts=attempts, **self.line)
        if extra:
            line.update(extra)
        self.writer.write(line)
        self.summary.count(verdict, cached)
        if self.bar is not None:
            self.bar.update(1)
            summary = self.summary
            counts = (summary.n_abstained, summary.cached, summary.resumed)
            if counts != self._shown:  # the postfix is rebuilt only when a count changed
                self._shown = counts
                self.bar.set_postfix(abstained=counts[0], cached=counts[1], resumed=counts[2], refresh=False)


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
                   on_trajectory: Callable[[Trajectory], Any] | None = None, escalated_out: PathArg | None = None,
                   cascade_file: PathArg | None = None, calls: Any = None, **overrides: Any) -> BatchSummary:
    """Judge the trajectory file `data_path` into `out_path` (resumable); the Python API of `rubricforge judge`.

    The input is read once (`data.scan.scan_input`), before the first LM call: every record is checked,
    the labels joined, `on_trajectory` called, and each trajectory within the limit rendered into a
    temporary spill file beside `out_path` (`writer.Spill`: orjson lines, removed at the end; ids already
    done are not rendered), which the judging pass (`judge_stream`'s) then reads. A judge whose inputs are
    not plain data (a `FloorJudge`) reads the input a second time instead. The job's data fingerprint
    covers the input files, the label file, the format and the label threshold.

    A cascade (a cascade file, or a `Cascade`) is run by the same runner stage by stage, chunk by chunk of the
    input (`apply.cascade_job`): its summary is a `CascadeRun`, its labeling queue is rebuilt at the end of
    the run from the verdict file and the input read again (never held whole).

    Args:
        program: a frozen program path (`judge.loading.load_judge`), a cascade file, a judge, or None for the
            seed judge.
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
        escalated_out: a cascade's labeling queue (default ``OUT.escalated.jsonl``).
        cascade_file: the file a given `Cascade` was loaded from (its sha256 is part of the job's fingerprint; a
            cascade given by its path is its own file).
        calls: how each stage's calls are made: None for this machine (`LocalCalls`), or a back end's
            (`apply.ray.RayCalls`, `apply.openai_batch.BatchCalls`).
        **overrides: `JobOptions` fields, replacing those of `options` (``limit=100``).

    Returns:
        The `BatchSummary` of the run (a `CascadeRun` for a cascade), with ``skipped`` set to the records the
        loader skipped.

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
    if escalated_out is not None and not _is_cascade(judge):
        raise InputError("an escalated-items queue (--escalated-out) goes with a cascade")
    with output_lock(out_path):  # taken before anything else: a second run is refused at once
        cascade = None
        if _is_cascade(judge):  # its stages read the trajectories (a floor): no spill, the input read again
            from rubricforge_dspy.apply.cascade_job import CascadeJob

            cascade = CascadeJob(judge, out_path, escalated_out=escalated_out, data_files=paths,
                                 cascade_file=program if isinstance(program, (str, os.PathLike)) else cascade_file,
                                 reread=lambda: _read_again(data_path, reading, options.limit, join))
        done = read_done(out_path)
        spill = Spill(judge, out_path, done.ids) if cascade is None else None

        def each(trajectory: Trajectory) -> None:  # every trajectory within the limit, in input order
            if join is not None:
                trajectory = join.apply(trajectory)
            if on_trajectory is not None:
                on_trajectory(trajectory)
            if spill is not None:
                spill.add(trajectory)

        try:
            # One pass over the whole input before the first LM call (a bad record, a repeated id or an empty input
            # costs seconds); it joins the labels, tallies, and renders each trajectory into the judged spill.
            scan, data = checked_input(paths, limit=options.limit, labels=join, report=report, each=each, **reading)
            usable = spill is not None and spill.usable
            stream = spill.items() if usable else _read_again(data_path, reading, options.limit, join)
            summary = run_job(judge, stream, out_path, options, lm=_as_lm(lm), data=data, done=done,
                                    calls=calls, cascade=cascade)
        finally:
            if spill is not None:
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
