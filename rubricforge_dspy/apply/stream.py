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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from rubricforge_dspy.apply.job import ResumeState, checked_input, output_lock, read_done
from rubricforge_dspy.apply.options import (
    DEFAULT_FSYNC_EVERY,
    DEFAULT_MAX_CONSECUTIVE_LM_ERRORS,
    JobOptions,
    job_options,
)
from rubricforge_dspy.apply.summary import BatchSummary, UsageTotals
from rubricforge_dspy.apply.writer import Spill, Spilled
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.judge.loading import judge_from

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.apply.cascade_job import CascadeJob
    from rubricforge_dspy.core.trajectory import LabelRule
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.data.spec import DataSpec
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.lm.config import LMConfig

from rubricforge_dspy.apply.runner import (  # noqa: F401 - re-exported (__all__)
    CASCADE_CHUNK,
    DuplicateIdError,
    JobRun,
    LocalCalls,
    Stage,
    StageCalls,
    distinct,
    is_cascade,
    progress_bar,
)

__all__ = ["judge_stream", "run_judge_file", "DuplicateIdError", "BatchSummary", "UsageTotals", "JobOptions",
           "LocalCalls", "Stage", "CASCADE_CHUNK", "run_job", "judged_already",
           "DEFAULT_FSYNC_EVERY", "DEFAULT_MAX_CONSECUTIVE_LM_ERRORS"]

logger = logging.getLogger(__name__)


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
        if is_cascade(judge):  # stage by stage; the labeling queue from a list, or this run's escalations
            from rubricforge_dspy.apply.cascade_job import CascadeJob

            again = (lambda: trajectories) if isinstance(trajectories, (list, tuple)) else None
            cascade = CascadeJob(judge, out_path, reread=again)
        return run_job(judge, trajectories, Path(out_path), options, lm=lm, data=data, cascade=cascade)


def run_job(judge: Any, trajectories: Iterable[Trajectory | Spilled], out_path: Path, options: JobOptions, *,
            lm: dspy.BaseLM | None, data: str | None, done: ResumeState | None = None, calls: StageCalls | None = None,
            cascade: CascadeJob | None = None, chunk: int | None = None) -> BatchSummary:
    """The job runner every run goes through: `judge_stream` with the output's lock held; `done`: what
    `read_done` already returned for `out_path`;
    `calls`: how each stage's calls are made (default `LocalCalls`); `cascade`: the cascade's side of the run when
    `judge` is a cascade (`apply.cascade_job.CascadeJob`); `chunk`: a cascade's items per chunk."""
    started = time.perf_counter()
    run = JobRun(judge, lm, out_path, options, data, done, calls=calls, cascade=cascade, chunk=chunk)
    return run.run(trajectories, started)


def _as_lm(lm: dspy.BaseLM | LMConfig | None) -> dspy.BaseLM | None:
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm

    return make_lm(lm) if isinstance(lm, LMConfig) else lm


_FILE_OPTIONS = JobOptions(cache=True)  # a file's run keeps a verdict cache by default


def run_judge_file(program: PathArg | BaseJudge | None = None,
                   data_path: PathArg | Iterable[PathArg] | DataSpec | None = None,
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
        data_path: a trajectory file or directory, or a list of them; or a `data.spec.DataSpec` (paths, format
            or mapping, label rule, labels file with its key and reading, limit, error policy): then
            `on_error`, `format`, `label_threshold` and `labels` come from it (giving them too is an
            `InputError`), and its limit is the job's (`options` may only repeat it).
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

    judge, options, paths, join, reading = _resolve_arguments(
        program, data_path, options, overrides, render_config, on_error=on_error, format=format,
        label_threshold=label_threshold, labels=labels)
    out_path = Path(out_path)
    report = load_report if load_report is not None else LoadReport()
    if escalated_out is not None and not is_cascade(judge):
        raise InputError("an escalated-items queue (--escalated-out) goes with a cascade")
    with output_lock(out_path):  # taken before anything else: a second run is refused at once
        summary = _judge_locked(judge, out_path, options, paths=paths, reading=reading, join=join, report=report,
                                on_trajectory=on_trajectory, lm=lm, calls=calls,
                                cascade=_cascade_job(judge, program, out_path, options, paths, reading, join,
                                                     escalated_out, cascade_file))
    summary.skipped = len(report.skipped)
    return summary


def _resolve_arguments(program: PathArg | BaseJudge | None, data_path: PathArg | Iterable[PathArg] | DataSpec,
                       options: JobOptions | None, overrides: dict[str, Any], render_config: RenderConfig | None, *,
                       on_error: str, format: str, label_threshold: float | str | LabelRule | None,
                       labels: str | Path | LabelJoin | None
                       ) -> tuple[BaseJudge, JobOptions, list[PathArg], LabelJoin | None, dict[str, Any]]:
    """`run_judge_file`'s arguments resolved, in this order: a `DataSpec`'s reading (`_from_spec`), the job
    options, the judge (with `render_config` set on it), the input paths, the label join (its file read now) and
    the reading options. Returns ``(judge, options, paths, join, reading)``."""
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.data.spec import DataSpec

    if isinstance(data_path, DataSpec):
        data_path, on_error, format, label_threshold, labels = _from_spec(
            data_path, options, overrides, on_error=on_error, format=format, label_threshold=label_threshold,
            labels=labels)
    options = _file_options(options, overrides, on_error)
    judge = judge_from(program)
    if render_config is not None:
        judge.render_config = render_config
    paths = [data_path] if isinstance(data_path, (str, os.PathLike)) else list(data_path)
    join = LabelJoin(labels, label_threshold) if isinstance(labels, (str, os.PathLike)) else labels
    reading: dict[str, Any] = {"format": format, "label_threshold": label_threshold, "on_error": on_error}
    return judge, options, paths, join, reading


def _from_spec(spec: DataSpec, options: JobOptions | None, overrides: dict[str, Any], **given: Any
               ) -> tuple[list[str], str, str, LabelRule | None, str | None]:
    """What a `DataSpec` says of `run_judge_file`'s reading: ``(paths, on_error, format, label_threshold,
    labels)``; its limit goes into `overrides`. A reading option given beside the spec is refused."""
    defaults = {"on_error": "raise", "format": "auto", "label_threshold": None, "labels": None}
    clash = [name for name, value in given.items() if value != defaults[name]]
    if clash:
        raise InputError(f"run_judge_file: {', '.join(clash)} come from the DataSpec given as data_path: set them "
                         "there (DataSpec.replace), not beside it")
    if spec.session_key is not None:
        raise InputError("a DataSpec with a session key is judged from its sessions' spool (data.sessions): "
                         "give run_judge_file the spooled spec")
    if not spec.paths:
        raise InputError("run_judge_file: the DataSpec names no data (paths is empty)")
    if spec.limit is not None:
        for limit in (overrides.get("limit"), options.limit if options is not None else None):
            if limit is not None and limit != spec.limit:
                raise InputError(f"run_judge_file: the DataSpec's limit is {spec.limit}, the job options' {limit}: "
                                 "give one")
        overrides["limit"] = spec.limit
    return list(spec.paths), spec.on_error, spec.format, spec.label_rule, spec.labels_path


def _cascade_job(judge: Any, program: PathArg | BaseJudge | None, out_path: Path, options: JobOptions,
                 paths: list[PathArg], reading: dict[str, Any], join: LabelJoin | None, escalated_out: PathArg | None,
                 cascade_file: PathArg | None) -> CascadeJob | None:
    """The cascade's side of the run (`apply.cascade_job.CascadeJob`), or None for a plain judge."""
    if not is_cascade(judge):
        return None
    from rubricforge_dspy.apply.cascade_job import CascadeJob

    # its stages read the trajectories (a floor): no spill, the input is read again
    return CascadeJob(judge, out_path, escalated_out=escalated_out, data_files=paths,
                      cascade_file=program if isinstance(program, (str, os.PathLike)) else cascade_file,
                      reread=lambda: _read_again(paths, reading, options.limit, join))


def _judge_locked(judge: Any, out_path: Path, options: JobOptions, *, paths: list[PathArg], reading: dict[str, Any],
                  join: LabelJoin | None, report: LoadReport, on_trajectory: Callable[[Trajectory], Any] | None,
                  lm: dspy.BaseLM | LMConfig | None, calls: StageCalls | None, cascade: CascadeJob | None
                  ) -> BatchSummary:
    """`run_judge_file` once the output is locked: resume state, one checking pass over the input (rendering
    a plain judge's items into a spill), then the runner."""
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
        stream: Iterable[Trajectory | Spilled] = (spill.items() if spill is not None and spill.usable
                                                  else _read_again(paths, reading, options.limit, join))
        return run_job(judge, stream, out_path, options, lm=_as_lm(lm), data=data, done=done, calls=calls,
                       cascade=cascade)
    finally:
        if spill is not None:
            spill.remove()


def judged_already(spec: DataSpec, out_path: PathArg) -> int | None:
    """How many items a run of `spec` into `out_path` would judge when `out_path` already holds a verdict for every one
    of them, from the same input (its job file's data fingerprint; `apply.job.checked_input`, the pass judging makes
    anyway): then no LM need start. None when something is left (abstentions for LM errors are asked again), when the
    output or its job file is missing, or when the input is another (the judging run then says what is wrong).
    Nothing is written or locked: the run that judges repairs and locks."""
    import json

    from rubricforge_dspy.apply.job import job_path
    from rubricforge_dspy.data.labels import LabelJoin

    out = Path(out_path)
    if not spec.paths or not out.is_file() or not job_path(out).is_file():
        return None
    try:
        job = json.loads(job_path(out).read_text(encoding="utf-8"))
        done = read_done(out, repair=False).ids  # read only
        if not done:
            return None
        ids: list[str] = []
        labels = spec.labels_path
        join = LabelJoin(labels, spec.label_rule) if labels is not None else None  # its own: counts nothing twice
        _, data = checked_input(list(spec.paths), **spec.read_options(), limit=spec.limit, labels=join,
                                each=lambda trajectory: ids.append(trajectory.id))
    except (InputError, OSError, ValueError):
        return None  # the judging run reads it again and reports the problem
    if not isinstance(job, dict) or job.get("data_fingerprint") != data or not ids or not set(ids) <= done:
        return None
    return len(ids)


def _file_options(options: JobOptions | None, overrides: dict[str, Any], on_error: str) -> JobOptions:
    """`run_judge_file`'s options, checked: a repeated id is skipped (counted) when bad records are, unless told."""
    options = job_options(options, overrides, _FILE_OPTIONS)
    if options.on_duplicate is None:
        options = replace(options, on_duplicate="skip" if on_error == "skip" else "raise")
    options.check(limit=False)  # the limit: by `checked_input`, in the words of the CLI
    return options


def _read_again(data_path: list[PathArg], reading: dict[str, Any], limit: int | None, join: LabelJoin | None
                ) -> Iterator[Trajectory]:
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
