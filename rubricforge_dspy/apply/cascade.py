"""Judge a file with a certified cascade (`judge.cascade.Cascade`): the Python side of
``rubricforge judge --cascade``.

The cascade's own ``batch`` runs stage by stage, so a later (LLM) stage is called only on what the
earlier ones left: a trajectory the floor decides costs no LM request. Each verdict line is the contract's
(`core.verdict.verdict_line`) plus ``stage`` (the deciding stage's name, ``"escalated"``, or the stage
whose LM failed), ``stage_index`` (None when escalated) and ``lm_stages_run`` (the LLM stages that were run
on the item: its LM requests before retries; 0 for a floor-decided one). The escalated items are written as a labeling
queue: generic JSONL (docs/FORMAT.md), ``label`` and ``reward`` null, beside the verdicts
(``OUT.escalated.jsonl``) unless told where.

A cascade run is not resumable: it judges the whole input in one batch and writes the verdict file at the
end, atomically (a temporary file renamed into place, so a kill leaves no partial file, and no verdict is
written twice); an existing output is refused rather than appended to.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import orjson

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import verdict_line
from rubricforge_dspy.data.formats.jsonl import to_record, write_records
from rubricforge_dspy.judge.cascade import ESCALATED, Cascade
from rubricforge_dspy.judge.contract import DEFAULT_MAX_CONSECUTIVE_LM_ERRORS
from rubricforge_dspy.judge.execution import RetryPolicy
from rubricforge_dspy.lm.circuit import JudgeUnavailableError

if TYPE_CHECKING:
    import dspy

__all__ = ["CascadeRun", "run_cascade", "escalated_path", "check_outputs"]


def escalated_path(out_path: PathArg) -> Path:
    """Where the labeling queue of a cascade run goes by default: ``OUT.escalated.jsonl`` beside ``OUT``."""
    out_path = Path(out_path)
    return out_path.with_name(f"{out_path.name}.escalated.jsonl")


@dataclass
class CascadeRun:
    """What one cascade run did (the fields a judging run's epilogue reads, as `apply.summary.BatchSummary`).

    Attributes:
        judged: items judged; ``decided_by``: stage name (or ``"escalated"``) -> items;
        stage_calls: items each stage was run on; ``lm_calls``: items the LLM stages were run on (the
        LM requests, before retries); ``escalated``: items no stage decided (the labeling queue);
        ``abstained`` / ``errors``: abstentions by kind (escalations included) and one message per kind.
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
    verdicts: Any = field(default=None, repr=False)  # the `CascadeVerdicts`, in input order

    @property
    def n_abstained(self) -> int:
        return sum(self.abstained.values())

    @property
    def escalated(self) -> int:
        return self.abstained.get(ESCALATED, 0)

    @property
    def lm_calls(self) -> int:
        return sum(self.stage_calls.get(name, 0) for name in self.lm_stages)

    def format(self) -> str:
        """The run in a few lines: per stage what it decided and what it cost, the queue for a person."""
        lines = [f"cascade: {self.judged} judged -> {self.out_path}"]
        for name, calls in self.stage_calls.items():
            cost = f"{calls} LM call(s)" if name in self.lm_stages else "no LM call"
            lines.append(f"  {name}: ran on {calls}, decided {self.decided_by.get(name, 0)} ({cost})")
        failed = self.n_abstained - self.escalated
        lines.append(f"  escalated to a person: {self.escalated} -> {self.escalated_path}")
        if failed:
            kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.abstained.items()) if k != ESCALATED)
            lines.append(f"  failed (no verdict, not escalated): {failed} ({kinds})")
        if self.lm_stages:
            lines.append(f"  LM calls: {self.lm_calls}, against {self.judged} judging everything with the last stage")
        else:
            lines.append("  LM calls: 0 (no LLM stage)")
        return "\n".join(lines)


def _check_new(path: Path, what: str) -> None:
    if path.exists():
        raise InputError(f"{path} exists: a cascade run is not resumable ({what} is written whole at the end); "
                         "give a new path or remove it")


def _write_atomic(path: Path, lines: Sequence[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            for line in lines:
                handle.write(orjson.dumps(line) + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_outputs(out_path: PathArg, escalated_out: PathArg | None = None) -> tuple[Path, Path]:
    """The verdict file and the labeling queue of a cascade run, once neither exists (a cascade run is not
    resumable); raises `InputError` naming the one that does."""
    out_path = Path(out_path)
    queue = Path(escalated_out) if escalated_out is not None else escalated_path(out_path)
    _check_new(out_path, "the verdict file")
    _check_new(queue, "the labeling queue")
    return out_path, queue


def run_cascade(cascade: Cascade, trajectories: Sequence[Trajectory], out_path: PathArg, *,
                escalated_out: PathArg | None = None, lm: dspy.BaseLM | None = None,
                concurrency: int = 4, policy: RetryPolicy = RetryPolicy(),
                max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS) -> CascadeRun:
    """Judge `trajectories` with `cascade` into the verdict JSONL `out_path` and the labeling queue.

    Args:
        cascade: the cascade (`judge.loading.load_judge` of a cascade file).
        trajectories: the trajectories (labels, when present, are written into the lines, never shown).
        out_path: the verdict file; must not exist (a cascade run is not resumable).
        escalated_out: the labeling queue (default `escalated_path`); must not exist.
        lm: the LM of the LLM stages (default: theirs, else `dspy.settings.lm`).
        concurrency: threads of each stage's batch.
        policy, max_consecutive_lm_errors: as `BaseJudge.batch`.

    Returns:
        The `CascadeRun`.

    Raises:
        InputError: an output exists. JudgeUnavailableError: an LLM stage's circuit opened (nothing is written).
    """
    out_path, queue = check_outputs(out_path, escalated_out)
    if concurrency < 1:
        raise InputError(f"concurrency must be >= 1, got {concurrency}")
    if lm is not None:
        cascade.set_lm(lm)
    try:
        verdicts = cascade.batch(list(trajectories), concurrency, policy=policy,
                                 max_consecutive_lm_errors=max_consecutive_lm_errors)
    except JudgeUnavailableError as error:
        raise JudgeUnavailableError(f"{error} (a cascade run writes its verdicts when it ends: nothing was written to "
                                    f"{out_path}; run the same command again once the server answers)") from error
    names = [rule.name for rule in cascade.rules]
    model = getattr(lm, "model", None)
    lines, escalated = [], []
    run = CascadeRun(str(out_path), str(queue), judged=len(verdicts), decided_by=verdicts.decided_by,
                     stage_calls=verdicts.stage_calls, verdicts=verdicts,
                     lm_stages=[rule.name for stage, rule in zip(cascade.stages, cascade.rules, strict=True)
                                if stage.predictors()])
    for trajectory, verdict, stage in zip(trajectories, verdicts, verdicts.stages, strict=True):
        line = verdict_line(trajectory, verdict, attempts=verdict.attempts or 0, program_sha256=cascade.rubric_sha256,
                            model=model)
        index = names.index(stage) if stage in names else None
        reached = names if index is None else names[: index + 1]
        line["stage"], line["stage_index"] = stage, None if stage == ESCALATED else index
        line["lm_stages_run"] = sum(name in run.lm_stages for name in reached)
        lines.append(line)
        if verdict.abstained:
            run.abstained[verdict.error_kind] = run.abstained.get(verdict.error_kind, 0) + 1
            run.errors.setdefault(verdict.error_kind, verdict.error or "")
        if stage == ESCALATED:
            escalated.append(to_record(trajectory, reward=None, label=None,
                                       metadata={"cascade": {"escalated": True, "why": verdict.error}}))
    _write_atomic(out_path, lines)
    write_records(escalated, queue)
    return run
