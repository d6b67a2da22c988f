"""Labels from several labelers: how a labels file's label values are read (`LabelReading`: the column, the value
map or expression, the labeler column) and how one label per id is resolved from its labelers' (`resolve_ratings`,
by the rule ``first``, ``majority``, ``unanimous`` or ``adjudicated``; an id left without a label is counted and
listed, never guessed).

Used by the CSV and JSONL readers of `rubricforge_dspy.data.labels` (which re-exports `LabelReading`,
`RESOLVE_RULES` and `resolve_ratings`) and by the MLflow assessments reader (`integrations.mlflow_labels`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.label_records import LabelEntry, LabelFile, LabelFileError

__all__ = ["LabelReading", "RESOLVE_RULES", "resolve_ratings"]
# `label_value`, `ValueReader`, `row_id` and `labeler_name` are shared with data.labels, not public API.


_LABEL_WORDS = {"1": 1, "0": 0, "true": 1, "false": 0, "pass": 1, "fail": 0, "passed": 1, "failed": 0,
                "yes": 1, "no": 0, "1.0": 1, "0.0": 0}


def label_value(value: Any, where: str) -> int | None:
    """A 0/1 label from a 0/1-like value (1/0, true/false, pass/fail, yes/no); None when blank.

    Raises:
        LabelFileError: any other value (the message names `where`).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in _LABEL_WORDS:
        return _LABEL_WORDS[value.strip().lower()]
    raise LabelFileError(f"{where}: label must be 0 or 1 (or true/false, pass/fail), got {value!r}")


RESOLVE_RULES = ("first", "majority", "unanimous", "adjudicated")
SKIP = "skip"


@dataclass(frozen=True)
class LabelReading:
    """How the label values of a CSV or JSONL labels file are read (the command line's label flags).

    Attributes:
        column: the column (CSV, lower-cased) or member (JSONL) holding the label (``--label-column``; default
            ``label``).
        values: ``--label-values``: either a map of the file's words to labels, ``"Successful=1,Unsuccessful=0,
            Unsure=skip"`` (``skip``: no label, counted; matched after trimming, case-insensitively; a value
            outside the map is an error naming the line), or a JMESPath expression (the mapping functions,
            docs/MAPPING.md) evaluated on each row or record, giving 0/1/true/false (a label) or null (no label,
            counted). None: the 0/1-like words (1/0, true/false, pass/fail, yes/no).
        labeler_column: the column naming who labeled the row (``--labeler-column``; default ``labeler`` when
            the file has one). With it, an id may have one row per labeler.
        resolve: which label an id gets when its labelers disagree (``--label-resolve``): ``first`` (the first
            row with a label, in file order), ``majority`` (more than half of the labels given; a tie gives no
            label), ``unanimous`` (any disagreement gives no label) or ``adjudicated`` (the ``adjudicator``'s row
            wins; without one, labelers who agree give their label and a disagreement gives none). An id left
            without a label is counted and listed (``LabelFile.unresolved``), never guessed.
        adjudicator: the labeler name whose label wins under ``adjudicated`` (``--adjudicator NAME``); it is not
            counted among the labelers whose agreement is measured.
    """

    column: str = "label"
    values: str | None = None
    labeler_column: str | None = None
    resolve: str = "first"
    adjudicator: str | None = None

    def __post_init__(self) -> None:
        if self.resolve not in RESOLVE_RULES:
            raise LabelFileError(f"--label-resolve {self.resolve!r}: not one of {', '.join(RESOLVE_RULES)}")
        if self.resolve == "adjudicated" and not self.adjudicator:
            raise LabelFileError("--label-resolve adjudicated needs --adjudicator NAME (the labeler whose label wins)")
        if self.adjudicator and self.resolve != "adjudicated":
            raise LabelFileError(f"--adjudicator {self.adjudicator!r} only applies with --label-resolve adjudicated")

    def label_of(self, row: dict[str, Any], where: str) -> tuple[int | None, bool]:
        """``(label, skipped)`` of one row (or record) by this reading: its ``column``'s value through ``values``;
        ``skipped`` when a skip value (or an expression's null) gave no label.

        Raises:
            LabelFileError: a value outside the map, or not a 0/1 label (the message names `where`).
        """
        return ValueReader(self).read(row, where)


def _value_map(text: str) -> dict[str, int | None] | None:
    """``"A=1,B=0,C=skip"`` as ``{"a": 1, "b": 0, "c": None}``; None when `text` is not of that form (then it is
    a JMESPath expression)."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts or not all("=" in p and "==" not in p for p in parts):
        return None
    out: dict[str, int | None] = {}
    for part in parts:
        word, _, target = part.rpartition("=")
        target = target.strip().lower()
        if target not in ("1", "0", SKIP):
            raise LabelFileError(f"--label-values {text!r}: {part.strip()!r} maps to {target!r}; each value maps to "
                                 "1, 0 or skip")
        out[word.strip().lower()] = None if target == SKIP else int(target)
    return out


class ValueReader:
    """Reads one row's label by a `LabelReading`: ``(label, skipped)``; ``custom`` when a value map or expression
    is given."""

    def __init__(self, reading: LabelReading):
        self.column = reading.column.strip().lower()
        self.words = _value_map(reading.values) if reading.values else None
        self.expression = None
        if reading.values and self.words is None:
            from rubricforge_dspy.data.formats.mapping.spec import compile_field

            self.expression = compile_field(reading.values, "--label-values", "label")

    @property
    def custom(self) -> bool:
        return self.words is not None or self.expression is not None

    def read(self, row: dict[str, Any], where: str) -> tuple[int | None, bool]:
        if self.expression is not None:
            try:
                value = self.expression(row)
            except InputError as exc:
                raise LabelFileError(f"{where}: --label-values {self.expression.text!r}: {exc}") from None
            if value is None:
                return None, True
            if isinstance(value, bool) or value in (0, 1):
                return int(value), False
            raise LabelFileError(f"{where}: --label-values {self.expression.text!r} gives {value!r}; it must give "
                                 "0/1, true/false, or null (no label)")
        raw = row.get(self.column)
        if self.words is None:
            return label_value(raw, where), False
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None, False
        word = str(raw).strip().lower()
        if word not in self.words:
            shown = raw.strip() if isinstance(raw, str) else raw
            raise LabelFileError(f"{where}: {self.column} {raw!r} is not among --label-values "
                                 f"({', '.join(self.words)}); add it (e.g. {shown}=skip)")
        label = self.words[word]
        return label, label is None


def row_id(rid: Any, where: str) -> str:
    """A row's id as text; an error naming `where` when it has none."""
    if rid is None or (isinstance(rid, str) and not rid.strip()):
        raise LabelFileError(f"{where}: missing id")
    return str(rid).strip()


def labeler_name(name: Any, column: str, where: str) -> str:
    """A row's labeler (from `column`) as text; an error naming `where` when it has none."""
    if name is None or not str(name).strip():
        raise LabelFileError(f"{where}: no labeler in column {column!r}; every row of a file with a labeler column "
                             "names who labeled it")
    return str(name).strip()


def resolve_ratings(out: LabelFile, rows: Iterable[tuple[str, str, int | None, bool, int | str]],
                    reading: LabelReading) -> LabelFile:
    """File labels from several labelers into `out`: group the rows by id and resolve each id's label by
    ``reading.resolve`` (`LabelReading`), recording ``ratings``, ``disagreements``, ``unresolved`` (also in
    ``unlabeled``), ``blank`` (only skip values) and ``skipped_values``. Used by the CSV and JSONL readers and by
    the MLflow assessments reader (`integrations.mlflow_labels.read_mlflow_labels`).

    Args:
        out: the label file to fill (its ``path`` names it in errors).
        rows: ``(id, labeler, label or None, skipped, line)`` per row, in file order (``line``: a line number or
            any text saying where the row came from).
        reading: the resolution rule and the adjudicator.

    Returns:
        `out`, filled.

    Raises:
        LabelFileError: a labeler labels the same id twice.
    """
    out.resolve = reading.resolve
    by_id: dict[str, dict[str, tuple[int | None, int | str]]] = {}
    for rid, who, label, skipped, line in rows:
        labels = by_id.setdefault(rid, {})
        if who in labels:
            raise LabelFileError(f"{out.path}: labeler {who!r} labels id {rid!r} twice (lines {labels[who][1]} and "
                                 f"{line}); keep one row per labeler and id")
        labels[who] = (label, line)
        out.skipped_values += skipped
    for rid, labels in by_id.items():
        out.ratings[rid] = {who: label for who, (label, _) in labels.items() if who != reading.adjudicator}
        given = [(who, label, line) for who, (label, line) in labels.items() if label is not None]
        if not given:
            out.blank.append(rid)
            continue
        voters = [label for who, label, _ in given if who != reading.adjudicator]
        if len(set(voters)) > 1:
            out.disagreements.append(rid)
        chosen, why = _resolve(reading, given, voters)
        if chosen is None:
            out.unresolved[rid] = why
            out.unlabeled[rid] = f"unresolved: {why}"
        else:
            out.entries[rid] = LabelEntry(chosen[1], None, chosen[2])
    return out


def _resolve(reading: LabelReading, given: list[tuple[str, int, int | str]], voters: list[int]
             ) -> tuple[tuple[str, int, int | str] | None, str]:
    """The row that gives an id's label under the rule, or None with the reason."""
    rule = reading.resolve
    if rule == "adjudicated":
        for row in given:
            if row[0] == reading.adjudicator:
                return row, ""
        if len(set(voters)) > 1:
            return None, f"labelers disagree and {reading.adjudicator!r} did not adjudicate"
        return given[0], ""
    if rule == "first":
        return given[0], ""
    if rule == "unanimous":
        return (given[0], "") if len(set(voters)) == 1 else (None, "labelers disagree")
    ones = sum(voters)
    if 2 * ones == len(voters):
        return None, f"majority tie ({ones} of {len(voters)} say 1)"
    winner = int(2 * ones > len(voters))
    return next(row for row in given if row[1] == winner), ""
