"""How MLflow HUMAN feedback becomes a label: one trace's assessments read as a labels file's rows (each source id a
labeler), resolved by the labels files' own rule (`data.labels.resolve_ratings`). Split from
`integrations.mlflow` (one path for ``--from-mlflow`` and `integrations.mlflow_labels.read_mlflow_labels`);
importing it imports MLflow."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.labels import LabelFile, LabelReading, resolve_ratings

try:
    from mlflow.entities import AssessmentSourceType
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    raise ImportError('rubricforge_dspy.integrations.mlflow_assessments needs MLflow 3: '
                      'pip install "rubricforge-dspy[mlflow]"') from _missing

__all__ = ["RESOLVED_BY", "assessment_reading", "is_human_feedback", "label_value", "trace_label"]

_TRUE = {"true", "yes", "pass", "passed", "correct", "c", "1", "success", "good"}
_FALSE = {"false", "no", "fail", "failed", "incorrect", "i", "0", "failure", "bad"}

# what a rule did with a disagreement, said beside the count (`MlflowLoadReport.summary`)
RESOLVED_BY = {
    "first": "each took the label of its earliest feedback; --label-resolve majority, unanimous or adjudicated "
             "--adjudicator NAME to decide otherwise",
    "majority": "the label most sources gave; a tie gives no label",
    "unanimous": "a disagreement gives no label",
    "adjudicated": "the adjudicator's label; without it a disagreement gives no label",
}


def is_human_feedback(assessment: Any, name: str) -> bool:
    return (assessment.name == name and getattr(assessment, "feedback", None) is not None
            and assessment.valid is not False and assessment.source.source_type == AssessmentSourceType.HUMAN)


def label_value(value: Any, where: str) -> int:
    """A human feedback value as a 0/1 label: a bool, 0/1, or a word (pass/fail, yes/no, correct/incorrect)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return int(value.strip().lower() in _TRUE)
    raise InputError(f"{where}: label value {value!r} is not a 0/1 label; give the assessment a bool, 0/1, or "
                     "pass/fail, yes/no, correct/incorrect")


def assessment_reading(reading: LabelReading | None) -> LabelReading:
    """How HUMAN feedback values are read: `reading` with its column set to ``value`` (an assessment's value is its
    label; the labeler is its source id), default the 0/1 words and the rule ``first``."""
    if reading is None:
        return LabelReading(column="value")
    if reading.column != "value":
        reading = replace(reading, column="value")
    return reading


def trace_label(labels: LabelFile, info: Any, label_name: str, reading: LabelReading, where: str) -> tuple[int | None,
                                                                                                        int]:
    """Resolve one trace's label from its HUMAN feedback named `label_name` into `labels` and return ``(label or
    None, the non-human assessments of that name)``.

    Each source id is a labeler; only valid feedback counts (an overridden one is history) and of several valid
    ones of one source the latest. Values are read by ``reading.values`` when given (``{"value": ..., "labeler":
    ...}`` is the row: the word map reads ``value``, an expression may read both), else as 0/1 words
    (`label_value`). The sources are ordered by the time of their feedback (``first`` is the earliest) and the
    label resolved by ``reading.resolve`` (`data.labels.resolve_ratings`, which files the trace's ``ratings``,
    a disagreement and an unresolved trace in `labels`). One path for `load_mlflow_traces` (``--from-mlflow``)
    and `integrations.mlflow_labels.read_mlflow_labels`.

    Raises:
        InputError: a value that is not a label (the message names the trace and the assessment).
    """
    assessments = list(getattr(info, "assessments", None) or [])
    not_human = sum(a.name == label_name and a.source.source_type != AssessmentSourceType.HUMAN for a in assessments)
    latest: dict[str, Any] = {}
    for a in assessments:
        if is_human_feedback(a, label_name):
            who = str(a.source.source_id)
            if who not in latest or (a.create_time_ms or 0) >= (latest[who].create_time_ms or 0):
                latest[who] = a
    trace_id = str(info.trace_id)
    rows: list[tuple[str, str, int | None, bool, int | str]] = []
    for who, a in sorted(latest.items(), key=lambda item: (item[1].create_time_ms or 0, item[0])):
        at = f"{where}, assessment {a.assessment_id}"
        label: int | None
        if reading.values is None:
            label, skipped = label_value(a.feedback.value, at), False
        else:
            label, skipped = reading.label_of({"value": a.feedback.value, "labeler": who}, at)
        rows.append((trace_id, who, label, skipped, f"trace {trace_id}, assessment {a.assessment_id}"))
    resolve_ratings(labels, rows, reading)
    entry = labels.entries.get(trace_id)
    return (entry.label if entry is not None else None), not_human
