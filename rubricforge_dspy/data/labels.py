"""Labels kept apart from the trajectories: read a label file and join it onto trajectories by id.

Label files (`read_label_file`, chosen by content):

* **CSV** with a header naming an ``id`` column (or ``instance_id``) and a ``label`` and/or
  ``reward`` column;
* **JSONL**, one ``{"id": ..., "label": 0|1, "reward": number}`` per line (either of label/reward;
  other keys are ignored, so a filled-in generic trajectory file works as a label file);
* **SWE-bench results JSON**: lists of instance ids by outcome, either the harness run report
  (``resolved_ids``, ``unresolved_ids``, ``empty_patch_ids``, ``error_ids``, ``completed_ids``,
  ``incomplete_ids``, ``submitted_ids``) or the older ``results.json`` (``resolved``, ``applied``,
  ``generated``, ``no_generation``, ``no_apply``, ``install_fail``, ``test_errored``, ...), or a map
  ``{instance_id: {"resolved": true|false, ...}}``. Resolved -> label 1 (reward 1). Listed as
  unresolved, failed, empty patch / no generation, not applied, or only as a stage the run reached
  (applied, generated, completed) -> 0: the agent produced no fix. Listed only in an error list
  (harness error, install/reset failure, test error or timeout, incomplete) or only as submitted -> NO
  label: the harness could not evaluate the patch, so its outcome is unknown; these ids are counted
  in ``LabelFile.unlabeled`` and reported, never silently given a 0.

A label file whose records are not keyed by the trajectory id is read with a **key expression**
(``read_label_file(path, key=EXPR)``; the command line's ``--labels-key EXPR``): a JMESPath expression,
with the mapping functions (docs/MAPPING.md), evaluated on each JSONL record or CSV row (its columns by
their lower-cased header) gives that record's id, e.g. ``join(':', [model, to_string(task.id)])``.
A record on which it gives nothing is an error naming the file and line. (`LabelsPath`: a path that carries
its key expression, so every reader of ``--labels`` uses it.)

Rows with neither a label nor a reward (blank cells, ``null``) are counted as blank, not joined. A
repeated id is an error naming the file and both lines (or lists).

Join (`LabelJoin`, streaming, or `join_labels`): a label file entry sets the trajectory's label and,
when given, its reward (a label without a reward keeps the trajectory's own reward, or takes the
label as reward on an unlabeled trajectory); a reward without a label is turned into a label by the
trajectory's label rule (its loader's default or the ``--label-threshold`` given). Trajectories
without an entry keep what their loader gave them; label ids without a trajectory are listed too:
`JoinReport` counts and lists both sides.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, TypeVar

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.core.trajectory import ANY_POSITIVE_REWARD, LabelRule, Trajectory, parse_label_rule
from rubricforge_dspy.data.label_ratings import (
    RESOLVE_RULES,
    LabelReading,
    ValueReader,
    label_value,
    labeler_name,
    resolve_ratings,
    row_id,
)
from rubricforge_dspy.data.label_records import LISTED, LabelEntry, LabelFile, LabelFileError

if TYPE_CHECKING:
    from rubricforge_dspy.data.formats._records import TrajectoryCounts
    from rubricforge_dspy.data.formats.mapping.spec import Expr

# what a join labels: a loaded trajectory, or the counts of one (`rubricforge stats --labels`)
_Joined = TypeVar("_Joined", bound="Trajectory | TrajectoryCounts")

__all__ = ["LabelEntry", "LabelFile", "LabelFileError", "JoinReport", "Joined", "LabelJoin", "LabelsPath",
           "LabelReading", "RESOLVE_RULES", "resolve_ratings",  # defined in data.label_ratings
           "read_label_file",
           "join_labels", "SWEBENCH_POSITIVE", "SWEBENCH_NEGATIVE", "SWEBENCH_ERROR", "SWEBENCH_NEUTRAL"]

ID_COLUMNS = ("id", "instance_id")
SWEBENCH_POSITIVE = ("resolved", "resolved_ids")
SWEBENCH_NEGATIVE = ("unresolved", "unresolved_ids", "failed", "failed_ids", "empty_patch", "empty_patch_ids",
                     "no_generation", "no_apply")
SWEBENCH_STAGES = ("applied", "generated", "with_logs", "completed_ids")  # not resolved there -> 0
SWEBENCH_ERROR = ("error", "error_ids", "errors", "install_fail", "reset_failed", "test_errored", "test_timeout",
                  "incomplete_ids")
SWEBENCH_NEUTRAL = ("submitted_ids",)


def _number(value: Any, what: str, where: str) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise LabelFileError(f"{where}: {what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LabelFileError(f"{where}: {what} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise LabelFileError(f"{where}: {what} must be finite, got {value!r}")
    return number


def _add(out: LabelFile, rid: Any, label: Any, reward: Any, line: int, where: str, seen: dict[str, Any]) -> None:
    if rid is None or (isinstance(rid, str) and not rid.strip()):
        raise LabelFileError(f"{where}: missing id")
    rid = str(rid).strip()
    if rid in seen:
        raise LabelFileError(f"{out.path}: id {rid!r} appears twice (lines {seen[rid]} and {line}); "
                             "keep one row per id")
    seen[rid] = line
    entry = LabelEntry(label_value(label, where), _number(reward, "reward", where), line)
    if entry.label is None and entry.reward is None:
        out.blank.append(rid)
    else:
        out.entries[rid] = entry


class LabelsPath(str):
    """A labels file's path that carries the key expression its records are read with (``--labels-key``):
    a `str`, so it goes wherever a path goes, and `read_label_file` reads ``.key`` from it.

    Attributes:
        key: the JMESPath expression giving each record's id (None: the ``id`` column or member).
        rule: the reward rule for the file's rewards when the data have no reward to carry one (``--label-threshold``
            with a mapping that gives none); `LabelJoin` uses it when given no rule.
    """

    key: str | None
    rule: LabelRule | None
    reading: "LabelReading | None"

    def __new__(cls, path: PathArg, key: str | None = None, rule: LabelRule | str | float | None = None,
                reading: "LabelReading | None" = None) -> "LabelsPath":
        made = super().__new__(cls, str(path))
        made.key = key
        made.rule = None if rule is None else parse_label_rule(rule)
        made.reading = reading if reading is not None else getattr(path, "reading", None)
        return made


def _key_expression(text: str | None) -> Expr | None:
    """The compiled key expression (the mapping compiler: its limits and functions), or None."""
    if text is None:
        return None
    from rubricforge_dspy.data.formats.mapping.spec import compile_field

    return compile_field(text, "--labels-key", "key")


def _keyed_id(key: Expr, record: Any, where: str) -> Any:
    """The id `key` gives on `record`; an error naming the line when it gives nothing or not a scalar."""
    try:
        rid = key(record)
    except InputError as exc:
        raise LabelFileError(f"{where}: --labels-key {key.text!r}: {exc}") from None
    if rid is None or isinstance(rid, (bool, list, dict)) or (isinstance(rid, str) and not rid.strip()):
        raise LabelFileError(f"{where}: --labels-key {key.text!r} gives {rid!r} here, not an id (a string or "
                             "a number)")
    return rid


def _read_csv(path: Path, text: str, key: Expr | None = None, reading: LabelReading | None = None) -> LabelFile:
    reading = reading or LabelReading()
    values = ValueReader(reading)
    out = LabelFile(str(path), "csv", {}, resolve=reading.resolve)
    reader = csv.DictReader(io.StringIO(text))
    columns = [c.strip().lower() for c in reader.fieldnames or []]
    id_col = next((c for c in ID_COLUMNS if c in columns), None)
    has_label = values.expression is not None or values.column in columns
    if (id_col is None and key is None) or not (has_label or "reward" in columns):
        raise LabelFileError(f"{path}:1: a CSV label file needs a header with an 'id' column and a "
                             f"{values.column!r} (--label-column) and/or 'reward' column; found {reader.fieldnames}")
    labeler_col = _labeler_column(reading, columns, path)
    if labeler_col is not None and "reward" in columns:
        import warnings

        warnings.warn(f"{path}: a labels file with a labeler column ({labeler_col!r}) gives labels; its 'reward' "
                      "column is not read", stacklevel=3)
    seen: dict[str, int] = {}
    rows: list[tuple[str, str, int | None, bool, int]] = []
    for row in reader:
        row = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
        line = reader.line_num
        where = f"{path}:{line}"
        rid = row.get(id_col) if key is None else _keyed_id(key, row, where)
        if labeler_col is None and not values.custom:
            _add(out, rid, row.get("label"), row.get("reward"), line, where, seen)
            continue
        label, skipped = values.read(row, where)
        if labeler_col is None:
            _add(out, rid, label, row.get("reward"), line, where, seen)
            out.skipped_values += skipped
            continue
        rows.append((row_id(rid, where), labeler_name(row.get(labeler_col), labeler_col, where), label, skipped, line))
    if labeler_col is not None:
        resolve_ratings(out, rows, reading)
    return out


def _labeler_column(reading: LabelReading, columns: list[str], path: Path) -> str | None:
    if reading.labeler_column is not None:
        column = reading.labeler_column.strip().lower()
        if column not in columns:
            raise LabelFileError(f"{path}:1: --labeler-column {reading.labeler_column!r}: no such column "
                                 f"(columns: {', '.join(columns)})")
        return column
    return "labeler" if "labeler" in columns else None


def _read_jsonl(path: Path, text: str, key: Expr | None = None, reading: LabelReading | None = None) -> LabelFile:
    reading = reading or LabelReading()
    values = ValueReader(reading)
    out = LabelFile(str(path), "jsonl", {}, resolve=reading.resolve)
    labeler_key = reading.labeler_column
    rows: list[tuple[str, str, int | None, bool, int]] = []
    label_key = values.column if values.expression is None else None
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise LabelFileError(f"{where}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise LabelFileError(f"{where}: JSON nested too deeply to be a label") from None
        if not isinstance(record, dict) or ("id" not in record and key is None) \
                or not ((label_key is None or label_key in record) or "reward" in record):
            raise LabelFileError(f"{where}: expected {{\"id\": ..., \"{label_key or 'label'}\": 0|1 and/or "
                                 "\"reward\": number}"
                                 + ("" if key is not None else " (records keyed otherwise: --labels-key EXPR)"))
        rid = record["id"] if key is None else _keyed_id(key, record, where)
        who_key = labeler_key if labeler_key is not None else ("labeler" if "labeler" in record else None)
        if who_key is None and not values.custom:
            _add(out, rid, record.get("label"), record.get("reward"), number, where, seen)
            continue
        label, skipped = values.read(record, where)
        if who_key is None:
            _add(out, rid, label, record.get("reward"), number, where, seen)
            out.skipped_values += skipped
            continue
        rows.append((row_id(rid, where), labeler_name(record.get(who_key), who_key, where), label, skipped, number))
    if rows and len(rows) != sum(1 for r in text.splitlines() if r.strip()):
        raise LabelFileError(f"{path}: some records name a labeler and some do not; give every record a labeler "
                             f"({labeler_key or 'labeler'})")
    if rows:
        resolve_ratings(out, rows, reading)
    return out


def _read_swebench(path: Path, doc: Any) -> LabelFile:
    out = LabelFile(str(path), "swebench", {})
    if isinstance(doc, dict) and doc and all(isinstance(v, dict) and "resolved" in v for v in doc.values()):
        for rid, report in doc.items():  # per-instance reports: {instance_id: {"resolved": bool, ...}}
            out.entries[str(rid)] = LabelEntry(int(bool(report["resolved"])), float(bool(report["resolved"])),
                                               f"{rid}.resolved")
        return out
    lists = {k: v for k, v in doc.items() if isinstance(v, list)} if isinstance(doc, dict) else {}
    known = (*SWEBENCH_POSITIVE, *SWEBENCH_NEGATIVE, *SWEBENCH_STAGES, *SWEBENCH_ERROR, *SWEBENCH_NEUTRAL)
    unknown = sorted(set(lists) - set(known))
    if unknown or not lists:
        raise LabelFileError(f"{path}: not a SWE-bench results file: "
                             + (f"unknown list(s) {unknown}; " if unknown else "no id lists; ")
                             + f"known lists: {', '.join(known)}. For other JSON, write JSONL or CSV labels")
    member: dict[str, list[str]] = {}
    for key, ids in lists.items():
        for rid in ids:
            if not isinstance(rid, str):
                raise LabelFileError(f"{path}: list {key!r} holds {rid!r}, not an instance id string")
            member.setdefault(rid, []).append(key)
    for rid, keys in member.items():
        pos = [k for k in keys if k in SWEBENCH_POSITIVE]
        neg = [k for k in keys if k in SWEBENCH_NEGATIVE]
        if pos and neg:
            raise LabelFileError(f"{path}: id {rid!r} is listed as resolved ({pos[0]}) and as not ({neg[0]})")
        if pos:
            out.entries[rid] = LabelEntry(1, 1.0, pos[0])
        elif neg:
            out.entries[rid] = LabelEntry(0, 0.0, neg[0])
        elif any(k in SWEBENCH_ERROR for k in keys):
            out.unlabeled[rid] = next(k for k in keys if k in SWEBENCH_ERROR)
        elif any(k in SWEBENCH_STAGES for k in keys):
            out.entries[rid] = LabelEntry(0, 0.0, next(k for k in keys if k in SWEBENCH_STAGES))
        else:
            out.unlabeled[rid] = keys[0]
    return out


def read_label_file(path: PathArg, key: str | None = None, reading: LabelReading | None = None) -> LabelFile:
    """Read a CSV, JSONL or SWE-bench results label file (see the module docstring).

    Args:
        path: the labels file (a `LabelsPath` brings its key expression).
        key: a JMESPath expression giving each JSONL record's or CSV row's id (None: the ``id`` member or
            column; a SWE-bench results file and a labels journal are keyed by id and take none).
        reading: how a CSV's or JSONL's label values are read: text values, several labelers per id and the
            rule resolving them (`LabelReading`; None: a `LabelsPath`'s own, else 0/1-like labels, one row per id).

    Raises:
        LabelFileError: the file cannot be read or parsed, or the key gives no id on a record (named by line).
        MappingError: the key expression does not compile or is past a limit.
    """
    key = key if key is not None else getattr(path, "key", None)
    reading = reading if reading is not None else getattr(path, "reading", None)
    compiled = _key_expression(key)
    path = Path(path)
    try:
        text = regular_file(path, "labels file").read_text(encoding="utf-8-sig")  # never opens a FIFO
    except FileNotFoundError:
        raise LabelFileError(f"{path}: labels file not found") from None
    except UnicodeDecodeError as exc:
        raise LabelFileError(f"{path}: not UTF-8 text (byte {exc.start}); label files are CSV, JSONL or JSON") from None
    except OSError as exc:
        raise LabelFileError(f"{path}: cannot read labels file: {exc}") from None
    head = text.lstrip()
    if not head:
        raise LabelFileError(f"{path}: empty labels file")
    if head.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None  # several objects: JSON Lines
        except RecursionError:
            raise LabelFileError(f"{path}: JSON nested too deeply to be a label file") from None
        if isinstance(doc, dict) and "id" not in doc and compiled is None:
            result = _read_swebench(path, doc)
        elif _starts_a_journal(head) and compiled is None:  # the review page's labels journal: a changed mind
            from rubricforge_dspy.data.label_journal import read_journal  # is a new line that wins

            return read_journal(path)
        else:
            result = _read_jsonl(path, text, compiled, reading)
    elif head.startswith("["):
        raise LabelFileError(f"{path}: a JSON array is not a label file; write one {{\"id\", \"label\"}} object per "
                             "line (JSONL), a CSV with id,label columns, or a SWE-bench results.json")
    else:
        result = _read_csv(path, text, compiled, reading)
    if not result.entries and not result.unlabeled:
        raise LabelFileError(f"{path}: no labels (every row lacks a label and a reward)")
    return result


@dataclass
class JoinReport:
    """What a join did; both kinds of unmatched ids are counted and listed."""

    file: str
    labels: int = 0
    matched: int = 0
    changed: int = 0  # matched trajectories whose label differs from what their loader gave
    without_label: list[str] = field(default_factory=list)  # trajectory ids with no entry in the file
    without_trajectory: list[str] = field(default_factory=list)  # label ids matching no trajectory
    blank: int = 0
    outcome_unknown: int = 0
    beyond_limit: int = 0  # labels of trajectories a --limit left out (neither joined nor unmatched)
    torn: int = 0  # torn lines of a labels journal (a write cut short): text not read

    def summary(self) -> str:
        text = (f"labels {self.file}: {self.matched} of {self.labels} labels joined ({self.changed} changed a "
                f"label); {len(self.without_label)} trajectories without a label")
        if self.without_label:
            text += f" (e.g. {', '.join(self.without_label[:3])})"
        text += f"; {len(self.without_trajectory)} label ids without a trajectory"
        if self.without_trajectory:
            text += f" (e.g. {', '.join(self.without_trajectory[:3])})"
        if self.beyond_limit:
            text += f"; {self.beyond_limit} labels of trajectories past --limit not used"
        if self.blank or self.outcome_unknown:
            text += f"; {self.blank} blank rows, {self.outcome_unknown} ids with unknown outcome not joined"
        if self.torn:
            text += f"; WARNING: {self.torn} torn lines in the labels file (a write cut short there) not read"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "labels": self.labels, "matched": self.matched, "changed": self.changed,
                "trajectories_without_label": len(self.without_label),
                "label_ids_without_trajectory": len(self.without_trajectory),
                "blank_rows": self.blank, "outcome_unknown": self.outcome_unknown,
                "beyond_limit": self.beyond_limit, "torn_lines": self.torn,
                "examples": {"trajectories_without_label": self.without_label[:LISTED],
                             "label_ids_without_trajectory": self.without_trajectory[:LISTED]}}


class Joined(list[Trajectory]):
    """The trajectories of a label join: a plain ``list[Trajectory]`` (pass it to a judge or a loop) that
    also carries the `JoinReport` as ``.report``. Not a tuple: ``joined, report = join_labels(...)`` (the
    form before this type) no longer works; read ``joined.report``."""

    def __init__(self, items: Iterable[Trajectory], report: JoinReport):
        super().__init__(items)
        self.report = report

    def __repr__(self) -> str:
        return f"Joined({len(self)} trajectories; {self.report.summary()})"


class LabelJoin:
    """Join a label file onto a stream of trajectories: `apply` each, then `finish` for the report.

    ``rule``: the label rule for label-file rewards (None: each trajectory's own,
    ``hidden["label_rule"]``, else reward > 0)."""

    def __init__(self, labels: LabelFile | str | Path, rule: LabelRule | str | float | None = None):
        self.file = labels if isinstance(labels, LabelFile) else read_label_file(labels)
        rule = rule if rule is not None else getattr(labels, "rule", None)  # a `LabelsPath`'s own
        self.rule = None if rule is None else parse_label_rule(rule)
        self.report = JoinReport(self.file.path, labels=len(self.file.entries), blank=len(self.file.blank),
                                 outcome_unknown=len(self.file.unlabeled), torn=len(self.file.torn))
        self._seen: set[str] = set()
        self._left_out: set[str] = set()

    def apply(self, trajectory: _Joined) -> _Joined:
        self._seen.add(trajectory.id)
        entry = self.file.entries.get(trajectory.id)
        if entry is None:
            self.report.without_label.append(trajectory.id)
            return trajectory
        own = trajectory.hidden or {}  # a plugin's counts may carry none
        rule = self.rule or _reward_rule(own.get("label_rule"))
        label, reward = entry.resolve(rule)
        if reward is None:
            reward = float(label) if trajectory.reward is None else trajectory.reward
        self.report.matched += 1
        self.report.changed += int(label != trajectory.label)  # None -> 0/1 is a change
        hidden = {**own, "label_source": f"{self.file.path}:{entry.line}",
                  "label_rule": str(rule), "label_from_reward": entry.label is None}
        return replace(trajectory, label=label, reward=reward, hidden=hidden)

    def stream(self, trajectories: Iterable[Trajectory]) -> Iterator[Trajectory]:
        for trajectory in trajectories:
            yield self.apply(trajectory)
        self.finish()

    def leave_out(self, ids: Iterable[str]) -> None:
        """Note ids of trajectories a run left out by its ``--limit``: `finish` counts their labels
        apart (``beyond_limit``), not as label ids without a trajectory."""
        self._left_out.update(ids)

    def finish(self, beyond_limit: Iterable[str] = ()) -> JoinReport:
        """The join report; `beyond_limit` adds to the ids noted by `leave_out`."""
        left_out = (self._left_out | set(beyond_limit)) & set(self.file.entries)
        self.report.beyond_limit = len(left_out - self._seen)
        self.report.without_trajectory = sorted(set(self.file.entries) - self._seen - left_out)
        return self.report


def join_labels(trajectories: Iterable[Trajectory], labels: LabelFile | str | Path,
                rule: LabelRule | str | float | None = None) -> Joined:
    """All trajectories with the label file joined, with the `JoinReport`.

    Args:
        trajectories: the trajectories to label, matched to the file's entries by id.
        labels: a label file (CSV, JSONL or JSON; docs/FORMAT.md) or a `LabelFile` already read.
        rule: the label rule for label-file rewards (`parse_label_rule`); None applies each
            trajectory's own (``hidden["label_rule"]``), else reward > 0.

    Returns:
        `Joined`: the trajectories in order (a matched one with the file's label and reward, and its
        ``hidden["label_source"]``; an unmatched one unchanged, ``label=None`` if it had none), a
        ``list[Trajectory]`` whose ``.report`` is the `JoinReport` counting and listing trajectories
        without a label and labels without a trajectory. (Before, a ``(list, report)`` tuple.)

    Raises:
        LabelFileError: the label file cannot be read or parsed (the message names the file and line).
    """
    join = LabelJoin(labels, rule)
    joined = [join.apply(t) for t in trajectories]
    return Joined(joined, join.finish())


def _reward_rule(text: str | None) -> LabelRule:
    """The reward rule a trajectory was labeled by (``hidden["label_rule"]``), else reward > 0: a mapping that
    labels from a value set, or gives no label (``unlabeled``), has no reward rule for a labels file's rewards."""
    try:
        return parse_label_rule(text or ANY_POSITIVE_REWARD)
    except InputError:
        return ANY_POSITIVE_REWARD


def _starts_a_journal(head: str) -> bool:
    """True when the first line of a JSON Lines labels file is a labels-journal line, whole or torn
    (`data.label_journal.starts_a_journal`)."""
    from rubricforge_dspy.data.label_journal import starts_a_journal

    return starts_a_journal(head.split("\n", 1)[0].encode())
