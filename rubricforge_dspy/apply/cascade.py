"""Judge a file with a certified cascade (`judge.cascade.Cascade`): the Python side of
``rubricforge judge --cascade``; crash-safe and resumable, as `apply.stream.run_judge_file` is.

The cascade runs stage by stage (`apply.cascade_job`), so a later (LLM) stage is called only on what the
earlier ones left: a trajectory the floor decides costs no LM request. Each verdict line is written as soon
as a stage settles its item, through the package's crash-safe writer (`apply.writer.VerdictWriter`, one
unbuffered write per line, the done index kept current) under the output's lock (`apply.job.output_lock`),
with the job claimed first (`apply.job.claim_job`: ``OUT.job.json``, whose judge fingerprint covers the
cascade's stages, thresholds, LM and the cascade file's sha256, and whose data fingerprint covers the
input): a kill, or an LM failure of a later stage, keeps every line the earlier stages decided, and running
the same command again resumes: ids already in the file are not judged again (an LM-error abstention is
asked again, from the first stage), a different cascade or other data is refused.

Each verdict line is the contract's (`core.verdict.verdict_line`) plus ``stage`` (the deciding stage's name,
``"escalated"``, or the stage whose LM failed), ``stage_index`` (None when escalated), ``lm_stages_run``
(the LLM stages that were run on the item: its LM requests before retries; 0 for a floor-decided one) and
``lm_tokens`` (per LLM stage run on it, the prompt and completion tokens its LM reported; ``{}`` without);
an escalated line (an abstention of kind ``"escalated"``) also carries ``escalated_by`` and
``escalation_confidence``: the last stage that handed it on with a confidence, and that confidence (also its
``score_calibrated``; None when no stage gave one), by which a person's queue takes the nearest first.
The escalated items are written as a labeling queue: generic JSONL (docs/FORMAT.md), ``label`` and
``reward`` null, beside the verdicts (``OUT.escalated.jsonl``) unless told where; it is rebuilt from the
verdict file at the end of every run (also one stopped by an LM failure), so it always lists every
escalated line of the file, and a resumed run counts them all (``escalated_in_file``). Each run's LM spend
(requests, tokens of every call, how it ended), the cascade's stages, LLM stages and guarantee, and the cascade
and data files are appended to ``cascade_runs`` in ``OUT.job.json`` (the report reads them). A cascade without
an LLM stage resolves no LM: none is needed, and a configured one is not part of its job.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import orjson

from rubricforge_dspy.apply.job import checked_output, job_path, replace_file
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.formats.jsonl import to_record, write_records
from rubricforge_dspy.judge.cascade import ESCALATED
from rubricforge_dspy.judge.contract import DEFAULT_MAX_CONSECUTIVE_LM_ERRORS
from rubricforge_dspy.judge.execution import RetryPolicy
from rubricforge_dspy.judge.fingerprint import Fingerprint, digest, judge_parts
from rubricforge_dspy.report.cascade import format_token_spend, token_spend

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.judge.cascade import Cascade

__all__ = ["CascadeRun", "run_cascade", "escalated_path", "check_outputs", "cascade_fingerprint", "count_escalated",
           "RUNS_KEY"]

logger = logging.getLogger(__name__)

RUNS_KEY = "cascade_runs"  # in ``OUT.job.json``: one record per run of the job (`CascadeRun.record`)


def escalated_path(out_path: PathArg) -> Path:
    """Where the labeling queue of a cascade run goes by default: ``OUT.escalated.jsonl`` beside ``OUT``."""
    out_path = Path(out_path)
    return out_path.with_name(f"{out_path.name}.escalated.jsonl")


def _add_tokens(into: dict, usage: dict | None) -> None:
    for key in ("prompt_tokens", "completion_tokens"):
        into[key] = into.get(key, 0) + int((usage or {}).get(key) or 0)


@dataclass
class CascadeRun:
    """What one cascade run did (the fields a judging run's epilogue reads, as `apply.summary.BatchSummary`).

    Attributes:
        judged: verdict lines this run wrote; ``resumed``: input items already in the file (not judged
            again); ``decided_by``: stage name (or ``"escalated"``) -> items this run; ``stage_calls``: items
            each stage was run on this run; ``lm_stages``: the LLM stages' names; ``lm_requests``: LM
            requests made, retries included; ``tokens``: prompt/completion tokens of every LM call of this
            run (None: no usage reported); ``lm_items`` / ``item_tokens``: the written LM-judged items that
            reported usage and their tokens (the basis of the estimate); ``unreported``: written LM-judged
            items without usage; ``abstained`` / ``errors``: abstentions by kind (escalations included) and
            one message per kind; ``outcome``: ``"complete"``, ``"LM failure"`` or ``"interrupted"``;
            ``verdicts``: the `CascadeVerdicts` of this run's items in input order (a complete run only);
            ``escalated_in_file``: the escalated lines of the whole verdict file after this run (the earlier
            runs' of a resumed job included: what the labeling queue holds), None before it is counted;
            ``stages``: the cascade's stage names; ``guarantee``: the cascade's certificate (None: hand-set);
            ``cascade_file`` / ``data_files``: what was judged with what (for the report's title).
    """

    out_path: str
    escalated_path: str
    judged: int = 0
    decided_by: dict = field(default_factory=dict)
    stage_calls: dict = field(default_factory=dict)
    lm_stages: list = field(default_factory=list)
    abstained: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    resumed: int = 0
    lm_requests: int = 0
    tokens: dict | None = None
    item_tokens: dict = field(default_factory=dict)
    lm_items: int = 0
    unreported: int = 0
    outcome: str = "complete"
    verdicts: Any = field(default=None, repr=False)
    escalated_in_file: int | None = None
    stages: list = field(default_factory=list)
    guarantee: dict | None = None
    cascade_file: str | None = None
    data_files: list | None = None

    @property
    def n_abstained(self) -> int:
        return sum(self.abstained.values())

    @property
    def escalated(self) -> int:
        return self.abstained.get(ESCALATED, 0)

    @property
    def lm_calls(self) -> int:
        """Items the LLM stages were run on this run (LM requests before retries)."""
        return sum(self.stage_calls.get(name, 0) for name in self.lm_stages)

    def add_usage(self, usage: dict | None) -> None:
        """Count the usage of one LM call (every call's, written or not)."""
        if usage:
            self.tokens = self.tokens or {}
            _add_tokens(self.tokens, usage)

    def token_spend(self) -> dict:
        """`report.cascade.token_spend` of this run: the written LM-judged items' tokens, and the estimate of
        judging every item of the job (this run's and the resumed ones) with the last stage."""
        return token_spend(self.item_tokens if self.lm_items else None, self.lm_items, self.judged + self.resumed,
                           self.unreported)

    def record(self) -> dict:
        """The run as recorded in ``OUT.job.json`` (``cascade_runs``)."""
        return {"outcome": self.outcome, "judged": self.judged, "resumed": self.resumed,
                "decided_by": self.decided_by, "stage_calls": self.stage_calls, "lm_calls": self.lm_calls,
                "lm_requests": self.lm_requests, "tokens": self.tokens, "escalated_out": self.escalated_path,
                "escalated_in_file": self.escalated_in_file, "stages": self.stages, "lm_stages": self.lm_stages,
                "guarantee": self.guarantee, "cascade_file": self.cascade_file, "data_files": self.data_files}

    def format(self) -> str:
        """The run in a few lines: per stage what it decided and what it cost, the queue for a person."""
        resumed = f" ({self.resumed} already in the file, not judged again)" if self.resumed else ""
        lines = [f"cascade: {self.judged} judged{resumed} -> {self.out_path}"]
        for name, calls in self.stage_calls.items():
            cost = f"{calls} LM call(s)" if name in self.lm_stages else "no LM call"
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
        if self.lm_stages:
            lines.append(f"  LM calls: {self.lm_calls} ({self.lm_requests} request(s) with retries), against "
                         f"{self.judged + self.resumed} judging everything with the last stage")
            tokens = self.tokens
            if tokens:
                lines.append(f"  tokens of this run's LM calls: prompt {tokens['prompt_tokens']:,}, completion "
                             f"{tokens['completion_tokens']:,}")
            lines.append("  " + format_token_spend(self.token_spend(), self.lm_calls))
        else:
            lines.append("  LM calls: 0 (no LLM stage)")
        return "\n".join(lines)


def cascade_fingerprint(cascade: Cascade, lm: dspy.BaseLM | None, cascade_file: PathArg | None = None) -> Fingerprint:
    """The judge fingerprint of a cascade job: `judge.fingerprint.judge_parts` of the cascade (its LLM stages'
    programs, the LM, every stage's operating point and the thresholds), its ``rubric_sha256``, and the sha256
    of the cascade file it was loaded from (when given): a resumed job with another cascade is refused."""
    parts = {**judge_parts(cascade, lm), "cascade": {
        "rubric_sha256": cascade.rubric_sha256,
        "file_sha256": None if cascade_file is None else hashlib.sha256(Path(cascade_file).read_bytes()).hexdigest()}}
    return Fingerprint(digest(parts), parts)


def _job(out_path: Path) -> dict | None:
    try:
        job = orjson.loads(job_path(out_path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return job if isinstance(job, dict) else None


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


def _escalated_lines(out_path: Path):
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


def write_queue(out_path: Path, queue: Path, trajectories: Sequence[Trajectory]) -> int:
    """Rebuild the labeling queue from the verdict file: one generic JSONL record (label and reward null) per
    escalated line, in the file's order, written beside it and renamed into place. Returns the count; an
    escalated id that is not among `trajectories` (a run with a smaller --limit) is logged and left out."""
    by_id = {t.id: t for t in trajectories}
    records, missing = [], 0
    for line in _escalated_lines(out_path):
        trajectory = by_id.get(line["id"])
        if trajectory is None:
            missing += 1
            continue
        records.append(to_record(trajectory, reward=None, label=None,
                                 metadata={"cascade": {"escalated": True, "why": line.get("error"),
                                                       "escalated_by": line.get("escalated_by"),
                                                       "confidence": line.get("escalation_confidence")}}))
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


def run_cascade(cascade: Cascade, trajectories: Sequence[Trajectory], out_path: PathArg, *,
                escalated_out: PathArg | None = None, lm: dspy.BaseLM | None = None,
                concurrency: int = 4, policy: RetryPolicy = RetryPolicy(),
                max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS,
                data: str | None = None, cascade_file: PathArg | None = None,
                data_files: Sequence[PathArg] | None = None) -> CascadeRun:
    """Judge `trajectories` with `cascade` into the verdict JSONL `out_path` and the labeling queue; resumable.

    Args:
        cascade: the cascade (`judge.loading.load_judge` of a cascade file).
        trajectories: the trajectories (labels, when present, are written into the lines, never shown); ids
            must differ.
        out_path: the verdict file; an existing one of the same job is resumed (see the module docstring).
        escalated_out: the labeling queue (default `escalated_path`); rebuilt at the end of each run.
        lm: the LM of the LLM stages (default: theirs, else `dspy.settings.lm`); a cascade without an LLM
            stage needs none and resolves none.
        concurrency: calls in flight at once in each stage.
        policy, max_consecutive_lm_errors: as `BaseJudge.batch` (the dead-server circuit is per LLM stage;
            None: never stop).
        data: the input's fingerprint (`apply.job.files_fingerprint`), recorded in ``OUT.job.json``; a resume
            on other data is refused.
        cascade_file: the file the cascade was loaded from; its sha256 is part of the job's fingerprint.
        data_files: the input files, recorded with the run (the report's title names them).

    Returns:
        The `CascadeRun`.

    Raises:
        InputError: the queue is not the job's, two items share an id, a bad concurrency.
        BatchOutputError: `out_path` belongs to another job (another cascade, LM or data).
        OutputLockedError: another process is writing `out_path`.
        JudgeUnavailableError: an LLM stage's circuit opened; every line settled so far is kept in `out_path`
            (the message says how many), the queue and the run's record are written; run again to resume.
    """
    from rubricforge_dspy.apply.cascade_job import CascadeJob

    return CascadeJob(cascade, out_path, escalated_out=escalated_out, lm=lm, concurrency=concurrency,
                      policy=policy, max_consecutive_lm_errors=max_consecutive_lm_errors, data=data,
                      cascade_file=cascade_file, data_files=data_files).run(trajectories)
