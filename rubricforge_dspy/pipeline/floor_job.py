"""`rubricforge floor` as a job: the floor by task-grouped cross-validation and, with a judge, the hybrid stage.

The data (a `data.spec.DataSpec`) are read **once**, as a stream (`read_floor_data`): each labeled trajectory's
features go into a `FeatureTable` (a few hundred bytes per item), and, when a live judge will read them, the
labeled trajectories are kept for it. The floor report (`trust.floor_cv.floor_report`) is computed from the table.

A judge's verdicts add two rows (`trust.hybrid_cv.hybrid_rows`): recorded ones (``judge_verdicts``: any tool's
verdict file, read and checked before any work) or a live judge (``judge``: a frozen program). The live judge
runs through the job path of ``rubricforge judge`` (`apply.stream.judge_stream`): its verdicts go to a verdict
file beside the floor's output (``<stem>.judge-verdicts.jsonl`` of ``save_floor``, else of ``out``; `judge_out`),
with the verdict cache beside it, the job file binding it to the judge and to the judged items, and resume after
any interruption. A second run (or a run after a dead server stopped the first: `JudgeUnavailableError`, exit 3,
every verdict written so far kept) asks the LM only for the items not in the file; the hybrid is then fit on the
file's verdicts, read back by id.

    spec = DataSpec(paths=("fit.jsonl",), label_rule=">0")
    result = run_floor_job(spec, FloorOptions(judge="programs/airline.json", save_floor="hybrid.json"), lm=lm)
    result.report["rows"]        # floor, length-only, Heuristic, judge, hybrid
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rubricforge_dspy.apply.options import JobOptions
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg, writable_file
from rubricforge_dspy.core.judge_names import FLOOR_FOLDS, FLOOR_RESAMPLES
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.spec import DataSpec

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.apply.summary import BatchSummary
    from rubricforge_dspy.core.verdict import Verdict
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.label_checks import LabelTally
    from rubricforge_dspy.data.labels import JoinReport
    from rubricforge_dspy.data.sessions import SessionReport
    from rubricforge_dspy.evidence.features import FeatureTable
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.judge.hybrid import HybridJudge
    from rubricforge_dspy.lm.config import LMConfig

__all__ = ["FloorOptions", "FloorData", "FloorJobResult", "JUDGE_VERDICTS_SUFFIX", "judge_verdicts_path",
           "read_floor_data", "run_floor_job"]

JUDGE_VERDICTS_SUFFIX = ".judge-verdicts.jsonl"  # the live judge's verdict file, beside the floor's output


def _file_options() -> JobOptions:
    return JobOptions(cache=True)  # the verdict cache in .rubricforge_cache/ beside the verdict file


@dataclass(frozen=True)
class FloorOptions:
    """What `run_floor_job` computes and writes (frozen).

    Attributes:
        folds: task-grouped cross-validation folds.
        seed: fold shuffling and bootstrap seed.
        resamples: bootstrap resamples for kappa and AUC.
        judge_verdicts: a verdict file of any tool (the verdict-line schema): the judge of the hybrid, recorded.
        judge: a frozen judge program (a plain `TrajectoryJudge`), run live on the labeled items instead.
        judge_out: the live judge's verdict file (default: `judge_verdicts_path` of `save_floor`, else of `out`).
        job: how the live judge's job runs (`apply.options.JobOptions`: concurrency, retries, the verdict cache,
            the circuit breaker; default ``JobOptions(cache=True)``); its `limit` is refused (the floor uses
            every labeled item).
        save_floor: write the floor fit on all the data here (plain JSON); with a judge, the hybrid stage.
        out: write the report as JSON here.
        verdicts_dir: write the out-of-fold verdict files ``floor.jsonl``, ``length_only.jsonl``,
            ``heuristic.jsonl`` here.

    Raises:
        InputError: both a judge and a verdict file, a job limit, or a live judge with no place for its verdicts
            (no `judge_out`, `save_floor` or `out`).
    """

    folds: int = FLOOR_FOLDS
    seed: int = 0
    resamples: int = FLOOR_RESAMPLES
    judge_verdicts: str | None = None
    judge: str | None = None
    judge_out: str | None = None
    job: JobOptions = field(default_factory=_file_options)
    save_floor: str | None = None
    out: str | None = None
    verdicts_dir: str | None = None

    def __post_init__(self) -> None:
        if self.judge_verdicts and self.judge:
            raise InputError("give --judge-verdicts or --judge, not both")
        if self.judge:
            self.job.check()  # a bad concurrency or duplicate policy: refused before any work
        if self.job.limit is not None:
            raise InputError("the floor judges every labeled item: a job limit is not taken (JobOptions.limit)")
        if self.judge and self.verdicts_out is None:
            raise InputError(f"--judge {self.judge}: the judge's verdicts are kept in a file beside the floor's "
                             "output (resumed and cached on the next run): give --save-floor FILE or --out FILE")

    @property
    def verdicts_out(self) -> Path | None:
        """Where the live judge's verdicts go (None without a live judge, or with no output to put them beside)."""
        if not self.judge:
            return None
        if self.judge_out:
            return Path(self.judge_out)
        beside = self.save_floor or self.out
        return judge_verdicts_path(beside) if beside else None


def judge_verdicts_path(output: PathArg) -> Path:
    """The live judge's verdict file beside the floor's output `output`: ``hybrid.json`` ->
    ``hybrid.judge-verdicts.jsonl``."""
    path = Path(output)
    return path.with_name(path.stem + JUDGE_VERDICTS_SUFFIX)


@dataclass
class FloorData:
    """The data of one floor job, read in one streaming pass (`read_floor_data`).

    Attributes:
        table: the labeled trajectories' features, labels and Heuristic verdicts (no `Trajectory` kept).
        trajectories: the labeled trajectories themselves (each id once), kept only for a live judge, else empty.
        fingerprint: sha256 over what a judge reads of those trajectories (never their labels or rewards): the
            job file binds the live judge's verdict file to it (None when they were not kept).
        report: the load's skipped records and ignored files.
        join: the labels file's join report (None without one).
        tally: the labels' counts (`data.label_checks.LabelTally`).
        sessions: what `--session-key` grouped (None without it).
        seen: trajectories read.
        first: the first trajectory read (named when none is labeled).
    """

    table: FeatureTable
    trajectories: list[Trajectory]
    fingerprint: str | None
    report: LoadReport
    join: JoinReport | None
    tally: LabelTally
    sessions: SessionReport | None
    seen: int
    first: Trajectory | None = None

    @property
    def left_out(self) -> int:
        """Unlabeled trajectories left out."""
        return self.seen - len(self.table)

    @property
    def dropped(self) -> dict[str, int]:
        """What was dropped, counted: malformed records skipped, unlabeled trajectories left out, label ids
        unmatched (the report's keys)."""
        join = self.join.to_dict() if self.join is not None else None
        return {"skipped_records": len(self.report.skipped), "unlabeled_left_out": self.left_out,
                "labels_not_in_data": join["label_ids_without_trajectory"] if join else 0}

    def check(self, spec: DataSpec) -> None:
        """Refuse data without any trajectory (`EmptyInputError` naming it) or without any label (exit 2)."""
        from rubricforge_dspy.data.label_checks import no_labels_error
        from rubricforge_dspy.data.scan import require_trajectories

        require_trajectories(self.seen, list(spec.paths), self.report)
        if not len(self.table):
            raise no_labels_error("floor", self.seen, self.first)


def _judged_text(trajectory: Trajectory) -> bytes:
    """What a judge may read of `trajectory` (never its label, reward, source or hidden fields), as bytes."""
    return orjson.dumps({"id": trajectory.id, "task_id": trajectory.task_id, "domain": trajectory.domain,
                         "agent": trajectory.agent, "trial": trajectory.trial, "steps": trajectory.steps},
                        option=orjson.OPT_SORT_KEYS, default=str)


def read_floor_data(spec: DataSpec, *, keep_trajectories: bool = False) -> FloorData:
    """Read `spec`'s data once, as a stream: the labeled trajectories' `FeatureTable` (labels joined, tallied;
    unlabeled ones counted and left out) and, with `keep_trajectories`, the labeled trajectories (each id once)
    with their `fingerprint`. Nothing is checked here but each record (`FloorData.check` says what is missing).

    Raises:
        InputError: the spec names no data; a malformed record with ``on_error="raise"`` (`TrajectoryFormatError`,
            naming the file and record); a labels file that cannot be read.
    """
    from rubricforge_dspy.data.formats import LoadReport, iter_trajectories
    from rubricforge_dspy.data.label_checks import LabelTally
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.evidence.features import FeatureTableBuilder

    if not spec.paths:
        raise InputError("floor: the DataSpec names no data (paths is empty)")
    report, tally = LoadReport(), LabelTally()
    labels = spec.labels_path
    joiner = LabelJoin(labels, spec.label_rule) if labels is not None else None
    stream: Iterator[Trajectory] = iter_trajectories(spec.paths, **spec.read_options(), report=report)
    sessions = None
    if spec.session_key is not None:  # a session's traces may lie anywhere in the input: all read, then grouped
        from rubricforge_dspy.data.sessions import SessionReport, group_sessions

        sessions = SessionReport(key=spec.session_key)
        stream = iter(group_sessions(list(stream), spec.session_key, sessions))
    if spec.limit is not None:
        stream = itertools.islice(stream, spec.limit)
    builder, kept, digests, seen, first = FeatureTableBuilder(), {}, [], 0, None
    for trajectory in stream:
        if joiner is not None:
            trajectory = joiner.apply(trajectory)
        tally.add(trajectory)
        seen += 1
        if first is None:
            first = trajectory
        if trajectory.label is None:
            continue
        builder.add(trajectory)
        if keep_trajectories and trajectory.id not in kept:
            kept[trajectory.id] = trajectory
            digests.append(hashlib.sha256(_judged_text(trajectory)).hexdigest())
    fingerprint = None
    if keep_trajectories:
        fingerprint = hashlib.sha256("\n".join(sorted(digests)).encode()).hexdigest()
    return FloorData(table=builder.finish(), trajectories=list(kept.values()), fingerprint=fingerprint,
                     report=report, join=joiner.finish() if joiner is not None else None, tally=tally,
                     sessions=sessions, seen=seen, first=first)


@dataclass
class FloorJobResult:
    """What one floor job computed and wrote.

    Attributes:
        report: every number, JSON-ready (``rows``: floor, length-only, Heuristic and, with a judge, judge and
            hybrid; the dropped counts; ``judge``: what the judge graded; the data and label rule).
        data: the data read (`FloorData`: its load report, label join and tally for the caller to say).
        hybrid: the hybrid stage fit on all the items (None without a judge).
        judge_run: the live judge's run (`apply.summary.BatchSummary`: judged, cached, resumed, LM calls), or None.
        judge_out: the live judge's verdict file, or None.
    """

    report: dict[str, Any]
    data: FloorData
    hybrid: HybridJudge | None = None
    judge_run: BatchSummary | None = None
    judge_out: Path | None = None


def _judge_part(options: FloorOptions) -> BaseJudge | None:
    """The judge of ``judge_verdicts`` (a recorded stage, read and checked now: exit 2 naming a bad line) or
    ``judge`` (a plain frozen program), or None."""
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.judge.recorded import RecordedJudge

    if options.judge_verdicts:
        return RecordedJudge.from_file(options.judge_verdicts)
    if options.judge:
        judge = load_judge(options.judge)
        if type(judge) is not TrajectoryJudge:
            raise InputError(f"--judge {options.judge}: the hybrid's judge is a plain frozen program, got a "
                             f"{type(judge).__name__} (a floor, hybrid or cascade file)")
        return judge
    return None


def _live_verdicts(judge: BaseJudge, data: FloorData, out: Path, options: JobOptions,
                   lm: dspy.BaseLM | LMConfig | None) -> tuple[list[Verdict | None], BatchSummary]:
    """The live judge's verdicts on the labeled items, through the job path (`apply.stream.judge_stream`: the
    items already in `out` skipped, the verdict cache asked first, a dead server stopping the run with
    `JudgeUnavailableError` and every line written kept), then read back from `out` in the table's order."""
    from contextlib import nullcontext

    from rubricforge_dspy.apply.stream import judge_stream
    from rubricforge_dspy.core.verdict import Verdict, read_verdicts
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError
    from rubricforge_dspy.lm.config import LMConfig

    if isinstance(lm, LMConfig):
        from rubricforge_dspy.serve import open_lm

        opened: Any = open_lm(lm)  # the embedded server, started for this run and stopped after it
    else:
        opened = nullcontext(lm)
    with opened as model:
        summary = judge_stream(judge, data.trajectories, out, options, lm=model, data=data.fingerprint)
    lines = read_verdicts(out)
    verdicts = [Verdict.from_dict(lines[i]) if i in lines else None for i in data.table.ids]
    if not any(v is not None and not v.abstained for v in verdicts):
        kinds = sorted({v.error_kind or "abstained" for v in verdicts if v is not None})
        raise JudgeUnavailableError(
            f"no verdict was produced: every call of the judge failed on the {len(data.trajectories)} labeled "
            f"item(s) ({', '.join(kinds) or 'no line'}); the lines are in {out}. Fix the server or the judge's "
            "settings and run again (LM errors are asked again)")
    return verdicts, summary


def _hybrid(judge: BaseJudge, data: FloorData, options: FloorOptions, report: dict[str, Any],
            lm: dspy.BaseLM | LMConfig | None) -> tuple[HybridJudge, BatchSummary | None]:
    """Add the judge's and the hybrid's rows to `report`; return the hybrid fit on all the items (and the live
    judge's run)."""
    from rubricforge_dspy.judge.hybrid import HybridJudge
    from rubricforge_dspy.judge.recorded import RecordedJudge
    from rubricforge_dspy.trust.hybrid_cv import fit_hybrid_stack, hybrid_rows

    table, run = data.table, None
    verdicts: list[Verdict | None]
    if isinstance(judge, RecordedJudge):
        verdicts, source = [judge.verdicts.get(i) for i in table.ids], str(options.judge_verdicts)
    else:
        out = options.verdicts_out
        if out is None:  # refused by FloorOptions; said again for a caller that built one by hand
            raise InputError("a live judge needs a verdict file (FloorOptions.judge_out, save_floor or out)")
        verdicts, run = _live_verdicts(judge, data, out, options.job, lm)
        source = f"the program {options.judge}"
    extra = hybrid_rows(table, verdicts, source, n_splits=options.folds, seed=options.seed,
                        n_resamples=options.resamples)
    report["rows"] = [*report["rows"], *extra["rows"]]
    report["notes"] = [*report["notes"], *extra["notes"]]
    report["judge"] = extra["judge"]
    return HybridJudge(judge, fit_hybrid_stack(verdicts, table, source)), run


def run_floor_job(spec: DataSpec, options: FloorOptions | None = None, *, lm: dspy.BaseLM | LMConfig | None = None,
                  on_read: Callable[[FloorData], None] | None = None) -> FloorJobResult:
    """`rubricforge floor`: the floor report of `spec`'s labeled data, with the judge's and the hybrid's rows when
    `options` give a judge, and the files `options` name written.

    Args:
        spec: the labeled data (read once, as a stream).
        options: what to compute and write (`FloorOptions`; default: the report only).
        lm: the live judge's LM: a `dspy.LM`, or an `LMConfig` (opened here, its embedded server started only
            for the judge's run); default the program's own, else `dspy.settings.lm`.
        on_read: called with the data once read, before they are checked and before any LM call (the command
            line says the load's problems here).

    Returns:
        A `FloorJobResult`: the report, the data read, the hybrid, the live judge's run and verdict file.

    Raises:
        InputError: an output that cannot be written, a bad verdict line (`VerdictLineError`) or program, bad data
            or no labeled item, all before any work; `BatchOutputError` for a verdict file of another judge or of
            other items.
        JudgeUnavailableError: the live judge's LM failed too many times in a row (its verdicts so far are kept;
            the same call resumes), or produced no verdict at all.
    """
    from rubricforge_dspy.judge.floor import SymptomFloor
    from rubricforge_dspy.trust.floor_cv import floor_report, write_cv_verdicts

    options = options if options is not None else FloorOptions()
    live_out = options.verdicts_out
    for path, what in ((options.save_floor, "floor"), (options.out, "floor report"),
                       (live_out, "judge verdict file")):
        if path:  # a missing folder is made, an unwritable path is exit 2, before any work
            writable_file(path, what)
    judge = _judge_part(options)  # a bad verdict line or program stops here, before any work
    data = read_floor_data(spec, keep_trajectories=live_out is not None)  # the one pass over the data
    if on_read is not None:
        on_read(data)
    data.check(spec)
    table = data.table
    report = floor_report(table, n_splits=options.folds, seed=options.seed, n_resamples=options.resamples)
    hybrid, run = _hybrid(judge, data, options, report, lm) if judge is not None else (None, None)
    report = {"data": list(spec.paths), "labels": spec.labels,
              "label_threshold": None if spec.label_rule is None else str(spec.label_rule),
              **data.dropped, **report}
    if live_out is not None:
        report["judge_verdicts_out"] = str(live_out)
    if options.verdicts_dir:
        write_cv_verdicts(table, options.verdicts_dir, n_splits=options.folds, seed=options.seed)
        report["verdicts_dir"] = str(options.verdicts_dir)
    if options.save_floor and hybrid is not None:
        hybrid.save(options.save_floor)
    elif options.save_floor:
        Path(options.save_floor).write_text(SymptomFloor.fit(table).to_json(), encoding="utf-8")
    if options.out:
        Path(options.out).parent.mkdir(parents=True, exist_ok=True)
        Path(options.out).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return FloorJobResult(report=report, data=data, hybrid=hybrid, judge_run=run, judge_out=live_out)
