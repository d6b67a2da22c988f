"""The cascade's part of a judging run: what the one runner (`apply.stream`) asks of a cascade when the judge it
runs is a `judge.cascade.Cascade`.

The runner runs the cascade stage by stage over each chunk of the input (a later stage sees only what the earlier
ones left); this module says what a stage's verdict makes of an item (`CascadeJob.settle`: decided, or handed on,
or escalated by the last stage), what a cascade's verdict line adds to the contract's (``stage``, ``stage_index``,
``lm_stages_run``, ``lm_tokens``; ``escalated_by`` and ``escalation_confidence`` on an escalated line), how the run
is tallied (`CascadeRun`, a `apply.summary.BatchSummary` with the stages' counts and the LM spend), the job's
fingerprint (`cascade_fingerprint`), and what ends the run: the labeling queue rebuilt from the verdict file
(``OUT.escalated.jsonl``, `write_queue`) and the run's record appended to ``cascade_runs`` in ``OUT.job.json``
(`record_run`). It imports nothing of the runner: the runner imports it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol

import orjson

from rubricforge_dspy.apply.job import BatchOutputError, checked_output, job_path, replace_file
from rubricforge_dspy.apply.summary import BatchSummary
from rubricforge_dspy.apply.writer import Spilled
from rubricforge_dspy.core.cascade import format_judge_verdicts, format_token_spend, token_spend
from rubricforge_dspy.core.errors import InputError, RubricForgeError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.data.formats.jsonl import to_record, write_records
from rubricforge_dspy.judge.cascade import ESCALATED, Cascade, CascadeVerdicts
from rubricforge_dspy.judge.fingerprint import Fingerprint, digest, judge_parts

if TYPE_CHECKING:
    import dspy

__all__ = ["CascadeRun", "CascadeJob", "escalated_path", "check_outputs", "cascade_fingerprint", "count_escalated",
           "write_queue", "record_run", "RUNS_KEY", "gives_judge_verdicts"]

logger = logging.getLogger(__name__)

RUNS_KEY = "cascade_runs"  # in ``OUT.job.json``: one record per run of the job (`CascadeRun.record`)


def gives_judge_verdicts(stage: Any) -> bool:
    """Whether each item a cascade stage runs on costs one judge verdict a user pays for: an LLM stage (an LM
    call), a recorded stage (another tool's verdict: RecordedJudge, MLflow assessments, Inspect scores, each paid
    for when that tool judged, and again for every new item), a hybrid over either, a Python stage
    (`judge.recorded.CallableJudge`); not a floor (free). A stage that declares ``cost_per_item`` is one when
    that cost is above 0 (the fit's tie-break, `trust.cascade.stage_cost`, reads the same attribute)."""
    return bool(stage.gives_judge_verdicts)


class CascadeItem(Protocol):
    """What the cascade reads and keeps of the runner's item (`apply.runner`'s, which this module does not
    import): its place in the input, its trajectory, the LLM stages run on it and their tokens (stage name ->
    ``prompt_tokens``/``completion_tokens``), and the ``(stage, confidence)`` it was last handed on with."""

    index: int
    lm_stages: int
    tokens: dict[str, dict[str, int]]
    last: tuple[str, float] | None

    @property
    def trajectory(self) -> Trajectory | Spilled: ...


def escalated_path(out_path: PathArg) -> Path:
    """Where the labeling queue of a cascade run goes by default: ``OUT.escalated.jsonl`` beside ``OUT``."""
    out_path = Path(out_path)
    return out_path.with_name(f"{out_path.name}.escalated.jsonl")


@dataclass
class CascadeRun(BatchSummary):
    """What one cascade run did: the `BatchSummary` of every run (``judged``, ``resumed``, ``cached``,
    ``abstained`` by kind with escalations, ``lm_calls``: LM requests made, retries included; ``tokens``: of every
    LM call of this run, None when none was reported) plus the stages.

    Attributes:
        escalated_path: the labeling queue's file.
        decided_by: stage name (or ``"escalated"``) -> items this run; ``stage_calls``: items each stage was run
            on this run (a verdict-cache answer included); ``lm_stages``: the LLM stages' names; ``lm_asked``:
            calls the LLM stages made to the LM (items, before retries; cache answers are not calls);
            ``lm_items`` / ``item_tokens``: the written LM-judged items that reported usage and their tokens (the
            basis of the estimate); ``unreported``: written LM-judged items without usage; ``outcome``:
            ``"complete"``, ``"LM failure"`` or ``"interrupted"``; ``verdicts``: the `CascadeVerdicts` of this
            run's items in input order (a complete run of `apply.cascade.run_cascade` only); ``escalated_in_file``:
            the escalated lines of the whole verdict file after this run (the earlier runs' of a resumed job
            included: what the labeling queue holds), None before it is counted; ``stages``: the cascade's stage
            names; ``guarantee``: the cascade's certificate (None: hand-set); ``cascade_file`` / ``data_files``:
            what was judged with what (for the report's title); ``judge_stages``: the stages whose every item
            is a judge verdict a user pays for (`gives_judge_verdicts`: LLM, recorded and Python stages).
    """

    escalated_path: str = ""
    decided_by: dict[str, int] = field(default_factory=dict)
    stage_calls: dict[str, int] = field(default_factory=dict)
    lm_stages: list[str] = field(default_factory=list)
    lm_asked: int = 0
    item_tokens: dict[str, int] = field(default_factory=dict)
    lm_items: int = 0
    unreported: int = 0
    outcome: str = "complete"
    verdicts: CascadeVerdicts | None = field(default=None, repr=False)
    escalated_in_file: int | None = None
    stages: list[str] = field(default_factory=list)
    guarantee: dict[str, Any] | None = None
    cascade_file: str | None = None
    data_files: list[str] | None = None
    judge_stages: list[str] = field(default_factory=list)

    @property
    def escalated(self) -> int:
        return self.abstained.get(ESCALATED, 0)

    @property
    def lm_requests(self) -> int:
        """LM requests made, retries included (``lm_calls``)."""
        return self.lm_calls

    def token_spend(self) -> dict[str, Any]:
        """`report.cascade.token_spend` of this run: the written LM-judged items' tokens, and the estimate of
        judging every item of the job (this run's and the resumed ones) with the last stage."""
        return token_spend(self.item_tokens if self.lm_items else None, self.lm_items, self.judged + self.resumed,
                           self.unreported)

    def record(self) -> dict[str, Any]:
        """The run as recorded in ``OUT.job.json`` (``cascade_runs``)."""
        return {"outcome": self.outcome, "judged": self.judged, "resumed": self.resumed, "cached": self.cached,
                "decided_by": self.decided_by, "stage_calls": self.stage_calls, "lm_calls": self.lm_asked,
                "lm_requests": self.lm_calls, "tokens": self.tokens, "escalated_out": self.escalated_path,
                "escalated_in_file": self.escalated_in_file, "stages": self.stages, "lm_stages": self.lm_stages,
                "guarantee": self.guarantee, "cascade_file": self.cascade_file, "data_files": self.data_files,
                "judge_stages": self.judge_stages, "judge_verdicts": self.judge_verdicts}

    @property
    def judge_verdicts(self) -> int:
        """Judge verdicts this run needed: the items each judge stage (`gives_judge_verdicts`) ran on."""
        return sum(self.stage_calls.get(name, 0) for name in self.judge_stages)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **self.record()}

    def format(self) -> str:
        """The run in a few lines: per stage what it decided and what it cost, the queue for a person."""
        resumed = f" ({self.resumed} already in the file, not judged again)" if self.resumed else ""
        lines = [f"cascade: {self.judged} judged{resumed} -> {self.out_path}"]
        for name, calls in self.stage_calls.items():
            cost = ("LM" if name in self.lm_stages else "judge verdicts, no LM call" if name in self.judge_stages
                    else "no LM call")
            lines.append(f"  {name}: ran on {calls}, decided {self.decided_by.get(name, 0)} ({cost})")
        failed = self.n_abstained - self.escalated
        total = self.escalated_in_file
        if total is not None and total != self.escalated:
            lines.append(f"  escalated to a person: {self.escalated} this run, {total} in all in {self.out_path} "
                         f"(earlier runs' included) -> {self.escalated_path}")
        else:
            lines.append(f"  escalated to a person: {self.escalated} -> {self.escalated_path}")
        if failed:
            kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.abstained.items()) if k != ESCALATED)
            lines.append(f"  failed (no verdict, not escalated): {failed} ({kinds})")
        if self.judge_stages:
            lines.append(f"  {format_judge_verdicts(self.judge_verdicts, self.judged)}, by the judge stage(s) "
                         f"{', '.join(self.judge_stages)}")
        if self.lm_stages:
            cached = f"; {self.cached} item(s) answered by the verdict cache" if self.cached else ""
            lines.append(f"  LM calls: {self.lm_asked} ({self.lm_calls} request(s) with retries{cached}), against "
                         f"{self.judged + self.resumed} judging everything with the last stage")
            tokens = self.tokens
            if tokens:
                lines.append(f"  tokens of this run's LM calls: prompt {tokens['prompt_tokens']:,}, completion "
                             f"{tokens['completion_tokens']:,}")
            lines.append("  " + format_token_spend(self.token_spend(), self.lm_asked))
            lines.extend("  " + line for line in self.cost_lines())
        elif self.judge_stages:  # recorded or Python stages: verdicts paid for elsewhere, none asked of an LM here
            lines.append(f"  LM calls: none made by this run ({', '.join(self.judge_stages)}: verdicts recorded by "
                         "another tool or computed, not asked of an LM here)")
        else:
            lines.append("  LM calls: 0 (no LLM stage)")
        lines.append(f"  {self.wall_time:.1f}s")
        return "\n".join(lines)


def cascade_fingerprint(cascade: Cascade, lm: dspy.BaseLM | None, cascade_file: PathArg | None = None) -> Fingerprint:
    """The judge fingerprint of a cascade job: `judge.fingerprint.judge_parts` of the cascade (its LLM stages'
    programs, the LM, every stage's operating point and the thresholds), its ``rubric_sha256``, and the sha256
    of the cascade file it was loaded from (when given): a resumed job with another cascade is refused."""
    parts = {**judge_parts(cascade, lm), "cascade": {
        "rubric_sha256": cascade.rubric_sha256,
        "file_sha256": None if cascade_file is None else hashlib.sha256(Path(cascade_file).read_bytes()).hexdigest()}}
    return Fingerprint(digest(parts), parts)


def _job(out_path: Path) -> dict[str, Any] | None:
    try:
        job = orjson.loads(job_path(out_path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return job if isinstance(job, dict) else None


def check_bound(out_path: PathArg, cascade_file: PathArg) -> None:
    """Refuse, before anything is read or started, an output whose job file (``OUT.job.json``) was written by
    another cascade file (its sha256 in the job's fingerprint parts) or by a plain judge: a run's output is
    bound to the cascade that wrote it, so an edited cascade never finds it "done".

    Raises:
        BatchOutputError: the job names another cascade file (both digests said) or none.
    """
    job = _job(Path(out_path))
    if job is None:
        return
    parts = job.get("judge_parts")
    recorded = parts.get("cascade") if isinstance(parts, dict) else None
    ours = hashlib.sha256(Path(cascade_file).read_bytes()).hexdigest()
    theirs = recorded.get("file_sha256") if isinstance(recorded, dict) else None
    if theirs != ours:
        wrote = "no cascade (a plain judge)" if theirs is None else f"another cascade file (sha256 {theirs})"
        raise BatchOutputError(f"{out_path}: belongs to another job (another judge configuration: written by "
                               f"{wrote}, not by {cascade_file} (sha256 {ours})); its verdicts are not this "
                               "cascade's. Use a new --out.")


def check_outputs(out_path: PathArg, escalated_out: PathArg | None = None) -> tuple[Path, Path]:
    """The verdict file and the labeling queue of a cascade run, checked before anything is paid: the verdict
    file may be resumed (its job is checked when it is claimed), the queue is the job's own (rebuilt at the end
    of each run) or new.

    Raises:
        InputError: the output cannot be written (`apply.job.checked_output`); the queue is the verdict file;
            or the queue exists but this job did not write it (no job file beside the output, or the job's
            runs wrote their queue elsewhere): it is never overwritten.
    """
    checked_output(out_path)
    out_path = Path(out_path)
    queue = Path(escalated_out) if escalated_out is not None else escalated_path(out_path)
    if queue.exists() and queue.resolve() == out_path.resolve():
        raise InputError(f"{queue}: the labeling queue cannot be the verdict file; give another --escalated-out")
    if queue.exists():
        runs = (_job(out_path) or {}).get(RUNS_KEY) or []
        written = {str(Path(r.get("escalated_out", "")).resolve()) for r in runs if isinstance(r, dict)}
        if str(queue.resolve()) not in written:
            raise InputError(f"{queue} exists and is not the labeling queue of the cascade job of {out_path}; it is "
                             "never overwritten: give a new --escalated-out (or --out), or remove it")
    return out_path, queue


def _escalated_lines(out_path: Path) -> Iterator[dict[str, Any]]:
    """The escalated verdict lines of `out_path`, in file order (a torn last line is skipped)."""
    if not out_path.exists():
        return
    with out_path.open("rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n") or ESCALATED.encode() not in raw:
                continue
            line = orjson.loads(raw)
            if line.get("stage") == ESCALATED:
                yield line


def count_escalated(out_path: PathArg) -> int:
    """The escalated lines of a cascade's verdict file: of every run of its job (what its labeling queue lists)."""
    return sum(1 for _ in _escalated_lines(Path(out_path)))


def write_queue(out_path: Path, queue: Path, trajectories: Iterable[Trajectory]) -> int:
    """Rebuild the labeling queue from the verdict file: one generic JSONL record (label and reward null) per
    escalated line, in the file's order, written beside it and renamed into place. `trajectories` is read once,
    as a stream: only the escalated ones are kept. Returns the count; an escalated id that is not among
    `trajectories` (a run with a smaller --limit) is logged and left out."""
    lines = {line["id"]: line for line in _escalated_lines(out_path)}
    found: dict[str, dict[str, Any]] = {}
    for trajectory in trajectories:
        line = lines.get(trajectory.id)
        if line is None or trajectory.id in found:
            continue
        found[trajectory.id] = to_record(trajectory, reward=None, label=None, metadata={"cascade": {
            "escalated": True, "why": line.get("error"), "escalated_by": line.get("escalated_by"),
            "confidence": line.get("escalation_confidence")}})
    records = [found[ident] for ident in lines if ident in found]
    missing = len(lines) - len(records)
    if missing:
        logger.warning("%d escalated item(s) of %s are not in this run's input: left out of %s", missing, out_path,
                       queue)
    queue.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{queue.name}.", suffix=".tmp", dir=queue.parent)
    os.close(fd)
    os.unlink(name)  # `write_records` writes a new file only
    try:
        write_records(records, name)
        os.replace(name, queue)
    finally:
        Path(name).unlink(missing_ok=True)
    return len(records)


def record_run(out_path: Path, run: CascadeRun) -> None:
    """Append the run's record to ``cascade_runs`` in the job file (rewritten atomically); nothing when the job
    file is missing (an output written before jobs were recorded)."""
    job = _job(out_path)
    if job is None:
        return
    job[RUNS_KEY] = [*(job.get(RUNS_KEY) or []), run.record()]
    replace_file(job_path(out_path), orjson.dumps(job, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


class CascadeJob:
    """The cascade's side of one run of the runner (see the module docstring).

    Args:
        cascade: the cascade the runner runs (its copy on the run's LM).
        out_path: the verdict file; `escalated_out`: the labeling queue (default `escalated_path`), both checked
            at once (`check_outputs`).
        cascade_file: the file the cascade was loaded from (its sha256 is part of the job's fingerprint).
        data_files: the input files, recorded with the run.
        reread: the input again, as a stream (for the labeling queue at the end of the run); None: the queue is
            rebuilt from the trajectories this run escalated (kept as they are written).
        keep_verdicts: keep this run's verdicts for `CascadeRun.verdicts` (one small record per item).
    """

    def __init__(self, cascade: Cascade, out_path: PathArg, *, escalated_out: PathArg | None = None,
                 cascade_file: PathArg | None = None, data_files: Iterable[PathArg] | None = None,
                 reread: Callable[[], Iterable[Trajectory]] | None = None, keep_verdicts: bool = False) -> None:
        self.out_path, self.queue = check_outputs(out_path, escalated_out)
        self.cascade, self.cascade_file, self.reread = cascade, cascade_file, reread
        self.names = [rule.name for rule in cascade.rules]
        self.last = len(self.names) - 1
        self.data_files = None if data_files is None else [str(f) for f in data_files]
        self.settled: dict[int, tuple[Verdict, str]] | None = {} if keep_verdicts else None
        self.escalated_now: list[Trajectory] = []  # without `reread`: this run's escalated trajectories

    def summary(self, **fields: Any) -> CascadeRun:
        """The run's `CascadeRun`, with the `BatchSummary` `fields` the runner sets."""
        cascade = self.cascade
        return CascadeRun(**fields, escalated_path=str(self.queue), stages=list(self.names),
                          lm_stages=[r.name for s, r in zip(cascade.stages, cascade.rules, strict=True)
                                     if s.predictors()],
                          judge_stages=[r.name for s, r in zip(cascade.stages, cascade.rules, strict=True)
                                        if gives_judge_verdicts(s)],
                          guarantee=cascade.guarantee,
                          cascade_file=None if self.cascade_file is None else str(self.cascade_file),
                          data_files=self.data_files)

    def settle(self, k: int, item: CascadeItem, verdict: Verdict) -> tuple[Verdict, str, int | None] | None:
        """What stage `k`'s `verdict` makes of `item`: ``(the cascade's verdict, the stage's name, k)`` when the
        stage settles it (it decided, or its LM failed: never an escalation), the escalation when the last stage
        hands it on, None when it goes to the next stage (``item.last`` keeps the confidence it was handed on
        with)."""
        settled = self.cascade.settle(k, verdict)
        if settled is not None:
            return settled, self.names[k], k
        item.last = self.cascade.escalating(k, verdict) or item.last
        if k == self.last:
            return self.cascade.escalation(item.last), ESCALATED, None
        return None

    def line_fields(self, item: CascadeItem, stage: str, index: int | None) -> dict[str, Any]:
        """What a cascade's verdict line adds to the contract's (see the module docstring)."""
        fields: dict[str, Any] = {"stage": stage, "stage_index": index, "lm_stages_run": item.lm_stages,
                                  "lm_tokens": item.tokens}
        if stage == ESCALATED:  # who escalated it, at what confidence (also its score_calibrated; None: none gave one)
            fields.update(escalated_by=item.last[0] if item.last else None,
                          escalation_confidence=item.last[1] if item.last else None)
        return fields

    def count(self, run: CascadeRun, item: CascadeItem, verdict: Verdict, stage: str) -> None:
        """Tally one written line of the cascade (the `BatchSummary` counts it too)."""
        if self.settled is not None:
            self.settled[item.index] = (verdict, stage)
        if stage == ESCALATED and self.reread is None:
            if not isinstance(item.trajectory, Trajectory):  # a cascade's input is never spilled (`apply.stream`)
                raise RubricForgeError("a cascade's escalated item is a trajectory, never a spilled one")
            self.escalated_now.append(item.trajectory)
        if not verdict.abstained or verdict.error_kind == ESCALATED:
            run.decided_by[stage] = run.decided_by.get(stage, 0) + 1
        if item.lm_stages:
            if item.tokens:
                run.lm_items += 1
                for used in item.tokens.values():
                    for key, value in used.items():
                        run.item_tokens[key] = run.item_tokens.get(key, 0) + value
            else:
                run.unreported += 1

    def kept(self, run: CascadeRun) -> str:
        """What an LM failure leaves, for its message."""
        kept = ", ".join(f"{name} {n}" for name, n in run.decided_by.items()) or "none"
        return (f"{run.judged} verdict line(s) of this run are kept in {self.out_path} (decided: {kept}; "
                f"{run.n_abstained - run.escalated} LM-error abstention(s), asked again on resume), "
                f"{run.resumed} were there already. Run the same command again to resume: the items in the file "
                "are not judged again.")

    def close(self, run: CascadeRun, items: int) -> None:
        """After the writer closed: count the file's escalations, record the run (first: a queue on disk is then
        always one the job's record names), rebuild the queue; `items`: this run's items (its verdicts are kept
        when every one was settled)."""
        try:
            run.escalated_in_file = count_escalated(self.out_path)
            record_run(self.out_path, run)
            write_queue(self.out_path, self.queue, self.reread() if self.reread is not None else self.escalated_now)
        finally:
            if self.settled is not None and len(self.settled) == items and run.outcome == "complete":
                order = sorted(self.settled)
                run.verdicts = CascadeVerdicts([self.settled[i][0] for i in order],
                                               [self.settled[i][1] for i in order], run.stage_calls)
