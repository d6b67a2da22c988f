"""The Goodhart audit: is the judge being gamed by the agent it rewards?

An optimizer that uses the judge as its reward (`rubricforge_dspy.judge.metric.as_metric`) pushes the agent
towards whatever the judge over-credits. Its failures then concentrate where the judge is blind, and
the judge's false-pass rate on the agent's *new* trajectories rises above the rate measured when the
judge was frozen. The audit re-scores a small set of the agent's trajectories with true labels and
compares:

    report = audit(judge, labeled)            # baseline: the program's certificate (else validation)
    print(report.format())                    # a GoodhartWarning was issued if report.drifted

Baseline: the false-pass rate of the manifest's ``certificate`` (measured on labeled data the program
never trained or selected on: ``false_pass_rate``, ``n_negatives``, ``false_passes``); without one,
the validation false-pass rate recorded at freeze (``metrics.false_pass_rate``, from the split GEPA
selected on, so optimistic), with a note. Drift: a one-sided exact binomial test that the rate on the
new trajectories exceeds the baseline (``scipy.stats.binomtest(false_passes, n_failed, baseline,
alternative="greater")``), significant at ``alpha``; not a fixed threshold.

No labels yet? `sample_for_labeling` writes a JSONL sample for a person to fill in (``"label": 1`` when
the agent accomplished the task, ``0`` when it did not); `load_labeled` reads it back.

An abstention counts as a fail verdict, as at freeze time (`rubricforge_dspy.induction.inducer.validation_metrics`).
"""

from __future__ import annotations

import json
import math
import random
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import dspy
from scipy import stats

from rubricforge_dspy.core.errors import InputError, MissingFileError, RubricForgeWarning
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.rubric import rubric_sha256
from rubricforge_dspy.core.trajectory import STEP_KINDS, Source, Step, Trajectory, TrajectoryFormatError, require_labels
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.judge.contract import BaseJudge
from rubricforge_dspy.lm.copies import resolve_lm
from rubricforge_dspy.metrics.agreement import accuracy
from rubricforge_dspy.metrics.intervals import proportion_ci

__all__ = ["GoodhartWarning", "AuditReport", "audit", "baseline_from_manifest", "sample_for_labeling",
           "load_labeled", "drift_p_value", "DEFAULT_ALPHA"]

DEFAULT_ALPHA = 0.05
FEW_FAILURES = 10
_FULL = RenderConfig(max_tokens=10**9, max_step_chars=10**9)  # the labeler reads everything
# True/False hash and compare equal to 1/0, so the int keys cover bool labels too.
_LABELS: dict[object, int] = {1: 1, 0: 0, "1": 1, "0": 0, "pass": 1, "fail": 0, "passed": 1, "failed": 0}


class GoodhartWarning(RubricForgeWarning):
    """The judge passes the agent's failures more often than when it was frozen: it is being gamed."""


@dataclass
class AuditReport:
    """A Goodhart audit: the judge's false-pass rate on freshly labeled trajectories against its rate at
    freeze, with counts and the test's alpha."""

    n: int
    n_failed: int  # trajectories labeled 0: the false-pass rate's denominator
    n_abstained: int
    accuracy: float
    false_pass_rate: float | None  # None when no labeled trajectory failed
    baseline_false_pass_rate: float | None
    baseline_source: str  # "argument", "certificate", "validation" or "none"
    alpha: float
    p_value: float | None  # one-sided exact binomial test of "rate now > baseline"; None when untestable
    drifted: bool
    false_pass_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rubric_sha256: str | None = None
    judge_lm: str | None = None

    @property
    def delta(self) -> float | None:
        """False-pass rate now minus at freeze (None when either is unknown)."""
        if self.false_pass_rate is None or self.baseline_false_pass_rate is None:
            return None
        return self.false_pass_rate - self.baseline_false_pass_rate

    @property
    def interval(self) -> tuple[float, float] | None:
        """Exact (Clopper-Pearson) 1 - alpha interval of the false-pass rate now."""
        if self.false_pass_rate is None:
            return None
        return proportion_ci(len(self.false_pass_ids), self.n_failed, self.alpha)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta": self.delta, "interval": self.interval}

    def format(self) -> str:
        def rate(x: float | None) -> str:
            return "undefined" if x is None else f"{x:.3f}"

        delta = "" if self.delta is None else f" ({self.delta:+.3f})"
        interval = "" if self.interval is None else " [{:.3f}, {:.3f}]".format(*self.interval)
        test = ("" if self.p_value is None else
                f"  one-sided exact binomial test (rate now > at freeze): p = {self.p_value:.4f}, alpha {self.alpha:g}")
        verdict = "DRIFTED: the judge is passing failures it used to catch" if self.drifted else "no drift detected"
        lines = [
            f"Goodhart audit: {verdict}",
            f"  labeled trajectories: {self.n} ({self.n_failed} failed), judge abstained on {self.n_abstained}",
            f"  accuracy: {self.accuracy:.3f}",
            f"  false-pass rate now: {rate(self.false_pass_rate)}{interval}, at freeze: "
            f"{rate(self.baseline_false_pass_rate)} [{self.baseline_source}]{delta}",
        ] + ([test] if test else [])
        if self.false_pass_ids:
            shown = ", ".join(self.false_pass_ids[:10]) + (" ..." if len(self.false_pass_ids) > 10 else "")
            lines.append(f"  false passes: {shown}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def baseline_from_manifest(judge: BaseJudge) -> tuple[float | None, str]:
    """(baseline false-pass rate, source) from the program's manifest: its certificate's
    ``false_pass_rate`` (checked against ``false_passes / n_negatives`` when both are given) as
    ``"certificate"``, else ``metrics.false_pass_rate`` recorded at freeze as ``"validation"``, else
    ``(None, "none")``."""
    manifest = getattr(judge, "manifest", None) or {}
    certificate = manifest.get("certificate") or {}
    value = certificate.get("false_pass_rate")
    if value is not None and not (isinstance(value, float) and math.isnan(value)):
        n, k = certificate.get("n_negatives"), certificate.get("false_passes")
        if isinstance(n, int) and isinstance(k, int) and n > 0 and abs(k / n - float(value)) > 1e-9:
            raise InputError(f"the program's certificate is inconsistent: false_pass_rate {value} but "
                             f"false_passes / n_negatives = {k}/{n}; re-certify the program")
        return _check_rate("certificate false_pass_rate", value), "certificate"
    value = (manifest.get("metrics") or {}).get("false_pass_rate")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, "none"
    return _check_rate("manifest metrics.false_pass_rate", value), "validation"


def drift_p_value(false_passes: int, n_failed: int, baseline: float) -> float:
    """One-sided exact binomial test of H0 "false-pass rate <= baseline" against "greater":
    ``P(X >= false_passes)`` for ``X ~ Binomial(n_failed, baseline)`` (``scipy.stats.binomtest``)."""
    if baseline >= 1.0:
        return 1.0
    return float(stats.binomtest(false_passes, n_failed, baseline, alternative="greater").pvalue)


def _check_rate(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise InputError(f"{name} must be in [0, 1], got {value!r}")
    return value


def audit(judge: BaseJudge, labeled: Sequence[Trajectory], *, baseline_false_pass_rate: float | None = None,
          alpha: float = DEFAULT_ALPHA, lm: dspy.BaseLM | None = None) -> AuditReport:
    """Re-score `labeled` with `judge` and compare its false-pass rate with the rate at freeze.

    baseline_false_pass_rate: default the program's certificate, else its validation rate (see
    `baseline_from_manifest`).
    alpha: ``drifted`` when the one-sided exact binomial test (`drift_p_value`) rejects "no rise" at
    this level; a `GoodhartWarning` is issued.
    lm: the judge's LM (run under ``dspy.context(lm=lm)``); default: the judge's own or the configured one.
    """
    labeled = require_labels(labeled, "the audit")
    if not labeled:
        raise InputError("the audit needs at least one labeled trajectory")
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must be in (0, 1), got {alpha!r}")
    baseline: float | None
    if baseline_false_pass_rate is not None:
        baseline, source = _check_rate("baseline_false_pass_rate", baseline_false_pass_rate), "argument"
    else:
        baseline, source = baseline_from_manifest(judge)

    with dspy.context(**({"lm": lm} if lm is not None else {})):
        verdicts = list(judge.batch(labeled))  # the one in-memory engine: a bounded window, the dead-server circuit
        used_lm = resolve_lm(judge, lm)
    y_true = [int(t.label) for t in labeled if t.label is not None]  # every one labeled (require_labels above)
    y_pred = [int(bool(v.passed) and not v.abstained) for v in verdicts]
    n_failed = y_true.count(0)
    false_pass_ids = [t.id for t, y, p in zip(labeled, y_true, y_pred, strict=True) if y == 0 and p == 1]
    rate = len(false_pass_ids) / n_failed if n_failed else None

    notes = []
    if rate is None:
        notes.append("no labeled trajectory failed, so the false-pass rate is undefined: label some failures")
    elif n_failed < FEW_FAILURES:
        notes.append(f"only {n_failed} failed trajectories: one false pass moves the rate by {1 / n_failed:.2f}")
    if baseline is None:
        notes.append("no baseline false-pass rate (none given, none in the manifest): drift cannot be judged")
    elif source == "validation":
        notes.append("baseline from the validation split induction selected on (optimistic, few items): "
                     "certify the program on held-out labeled data for a sound baseline")
    p_value = drift_p_value(len(false_pass_ids), n_failed, baseline) \
        if rate is not None and baseline is not None else None
    drifted = p_value is not None and p_value < alpha
    n_abstained = sum(bool(v.abstained) for v in verdicts)
    if n_abstained:
        notes.append(f"{n_abstained} abstentions counted as fail verdicts")

    report = AuditReport(
        n=len(labeled), n_failed=n_failed, n_abstained=n_abstained, accuracy=accuracy(y_true, y_pred),
        false_pass_rate=rate, baseline_false_pass_rate=baseline, baseline_source=source, alpha=alpha,
        p_value=p_value, drifted=drifted, false_pass_ids=false_pass_ids, notes=notes,
        rubric_sha256=rubric_sha256(judge.rubric) if hasattr(judge, "rubric") else None,
        judge_lm=str(getattr(used_lm, "model", None) or "") or None,
    )
    if drifted:
        warnings.warn(GoodhartWarning(
            f"Goodhart audit: the judge's false-pass rate rose from {baseline:.3f} at freeze to {rate:.3f} "
            f"on {n_failed} failed trajectories (one-sided exact binomial test p = {p_value:.4f} < {alpha:g}); "
            "the agent optimizer may be gaming "
            "the judge: re-induce or re-freeze it on fresh labeled trajectories"), stacklevel=2)
    return report


# --------------------------------------------------------------------------------------------
# Labeling round trip


def _step_dict(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": step.kind, "content": step.content}
    if step.tool_name is not None:
        out["tool_name"] = step.tool_name
    if step.arguments is not None:
        out["arguments"] = step.arguments
    if step.call_id is not None:
        out["call_id"] = step.call_id
    if step.is_error:
        out["is_error"] = True
    return out


def sample_for_labeling(trajectories: Sequence[Trajectory], k: int, seed: int = 0, *, path: PathArg) -> Path:
    """Write a random sample of `k` trajectories (all when fewer) to the JSONL file `path` for labeling.

    Each line: ``id, task_id, domain, agent, trial, label (null: fill in 1 = accomplished, 0 = not),
    transcript (the full rendered episode, to read), steps (the observable steps, read back by
    `load_labeled`)``. Rewards, labels and hidden fields of the input are never written.
    """
    trajectories = list(trajectories)
    if k < 1:
        raise InputError(f"k must be >= 1, got {k!r}")
    ids = [t.id for t in trajectories]
    if len(set(ids)) != len(ids):
        raise InputError("trajectory ids must be unique to be labeled and read back")
    sample = random.Random(seed).sample(trajectories, min(k, len(trajectories)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for t in sample:
            record = {"id": t.id, "task_id": t.task_id, "domain": t.domain, "agent": t.agent, "trial": t.trial,
                      "label": None, "transcript": render_trajectory(t, _FULL),
                      "steps": [_step_dict(s) for s in t.steps]}
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    return path


def _parse_label(value: object, where: str) -> int:
    key = value.strip().lower() if isinstance(value, str) else value
    try:
        return _LABELS[key]
    except (KeyError, TypeError):
        raise InputError(f"{where}: label must be 1 (accomplished) or 0 (not), got {value!r}") from None


def _parse_steps(raw: object, where: str) -> tuple[Step, ...]:
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{where}: 'steps' must be a non-empty list")
    steps = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or item.get("kind") not in STEP_KINDS:
            raise InputError(f"{where}: step {i} must be an object whose 'kind' is one of {STEP_KINDS}")
        unknown = set(item) - {"kind", "content", "tool_name", "arguments", "call_id", "is_error"}
        if unknown:
            raise InputError(f"{where}: step {i} has unknown fields {sorted(unknown)}")
        steps.append(Step(**{**item, "content": str(item.get("content") or "")}))
    return tuple(steps)


def load_labeled(path: PathArg) -> list[Trajectory]:
    """Read a labeled sample written by `sample_for_labeling`.

    Raises `TrajectoryFormatError` naming the file and record (0-based index; the message also gives the
    line and id) for malformed JSON, missing fields, bad labels or steps, duplicate ids, and, in one error
    listing them, records still unlabeled.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such labeled sample")
    out: list[Trajectory] = []
    seen: set[str] = set()
    unlabeled: list[tuple[int, str]] = []
    with open(path, encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TrajectoryFormatError(str(path), index, f"malformed JSON (line {index + 1}, column "
                                                              f"{exc.colno}): {exc.msg}") from None
            if not isinstance(record, dict):
                raise TrajectoryFormatError(str(path), index, f"line {index + 1} is not a JSON object")
            rid = record.get("id")
            where = f"line {index + 1}, id {rid!r}"
            if not isinstance(rid, str) or not rid:
                raise TrajectoryFormatError(str(path), index, f"line {index + 1}: missing or empty 'id'")
            if rid in seen:
                raise TrajectoryFormatError(str(path), index, f"{where}: duplicate id")
            seen.add(rid)
            if "label" not in record:
                raise TrajectoryFormatError(str(path), index, f"{where}: no 'label' field")
            if record["label"] is None:
                unlabeled.append((index, rid))
                continue
            try:
                label = _parse_label(record["label"], where)
                steps = _parse_steps(record.get("steps"), where)
            except ValueError as error:
                raise TrajectoryFormatError(str(path), index, str(error)) from None
            trial = record.get("trial")
            out.append(Trajectory(
                id=rid, task_id=str(record.get("task_id") or rid), domain=str(record.get("domain") or "labeled"),
                agent=str(record.get("agent") or "unknown"), steps=steps, reward=float(label), label=label,
                source=Source(str(path), index), trial=trial if isinstance(trial, int) else None,
            ))
    if unlabeled:
        first_index = unlabeled[0][0]
        shown = ", ".join(f"{rid} (line {i + 1})" for i, rid in unlabeled[:5]) + (" ..." if len(unlabeled) > 5 else "")
        raise TrajectoryFormatError(str(path), first_index,
                                    f"{len(unlabeled)} record(s) still unlabeled: {shown}; set \"label\" to 1 "
                                    "(the agent accomplished the task) or 0 (it did not)")
    if not out:
        raise TrajectoryFormatError(str(path), None, "no records")
    return out
