"""The report's records: items, one judge's predictions, ablations, and reading verdict files.

A predictions file is a verdict JSONL; every line is validated against the verdict line schema by
:func:`rubricforge_dspy.core.verdict.check_line` (the one definition of a verdict line). The report
reads each file into columns (:func:`read_columns`: numpy arrays and category codes, about a hundred
bytes per line instead of a dict per line), so a million-line file fits in a few hundred MB; the free
text of a line (``reason``, ``error``) is read back from the file only for the lines a table shows
(:class:`LineFields`). :func:`read_predictions` is the ``{id: record}`` index of
:func:`rubricforge_dspy.core.verdict.read_verdicts`, for callers that want whole records.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, overload

import numpy as np

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.verdict import VerdictLineError, read_lines, read_verdicts

__all__ = ["RunError", "Items", "Predictions", "Ablation", "VerdictColumns", "LineFields", "read_columns",
           "read_json", "read_predictions", "id_list", "relative"]


class RunError(InputError):
    """Report input that does not satisfy the layout of docs/REPORT.md; the message names the file."""


@dataclass(frozen=True)
class Items:
    """The test items (ground truth and metadata), aligned by sorted id. ``n_steps`` is None when
    the predictions do not carry it."""

    ids: tuple[str, ...]
    task_id: tuple[str, ...]
    domain: tuple[str, ...]
    agent: tuple[str, ...]
    n_steps: np.ndarray | None  # int64
    label: np.ndarray  # int64, 1 = passed
    reward: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Predictions:
    """One judge's verdicts, aligned to :class:`Items`. ``passed`` is False wherever ``abstained``
    (the verdict schema refuses an abstained pass). ``score_calibrated`` is None unless every
    verdict carries one. ``escalated``: the items a cascade escalated to a person (`run.decided_run` leaves
    them out of the metrics)."""

    judge: str
    path: Path
    passed: np.ndarray  # bool
    score: np.ndarray  # float64
    abstained: np.ndarray  # bool
    contradiction: np.ndarray  # bool
    score_calibrated: np.ndarray | None
    reason: Sequence[str]  # whitespace-collapsed, "" when absent (a LineFields, read back when indexed)
    error: Sequence[str | None]
    escalated: np.ndarray | None = None  # bool: escalated by a cascade (neither a pass nor a fail)
    # int8 per item: 1 the judge read the whole episode, 0 its evidence was cut, -1 unknown (no ``evidence``)
    evidence: np.ndarray | None = None

    @property
    def verdict(self) -> np.ndarray:
        return self.passed.astype(np.int64)


@dataclass(frozen=True)
class Ablation:
    """The verdicts of the judge with one rubric criterion removed: the criterion's number and name, and
    the predictions (the report's ablation table compares them with the full judge's)."""

    number: int
    name: str
    predictions: Predictions


def relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def id_list(ids: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > limit else "")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunError(f"{path}: not valid JSON ({error})") from None


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """``{id: record}`` of a verdict JSONL, each line schema-checked; ``_line`` holds its line number."""
    try:
        index = read_verdicts(path)
    except FileNotFoundError:
        raise RunError(f"{path}: file not found") from None
    except VerdictLineError as error:
        raise RunError(str(error)) from None
    if not index:
        raise RunError(f"{path}: no predictions (empty file)")
    return {ident: {**record, "_line": index.lines[ident]} for ident, record in index.items()}


# -- the columnar reader -------------------------------------------------------------------------------

@dataclass(frozen=True)
class VerdictColumns:
    """One verdict file as columns, in file order (see :func:`read_columns`).

    Missing values: ``label`` -1, ``reward`` / ``score_calibrated`` nan, ``n_steps`` -1, and code -1 in
    ``task_id`` / ``domain`` / ``agent`` (codes into ``categories[field]``, which ends with None so that
    code -1 reads as None). ``row`` maps each id to its row; ``line`` is each row's line number.
    """

    path: Path
    ids: list[str]
    row: dict[str, int]
    line: np.ndarray  # int64
    passed: np.ndarray  # bool
    score: np.ndarray  # float64
    abstained: np.ndarray  # bool
    contradiction: np.ndarray  # bool
    score_calibrated: np.ndarray  # float64
    label: np.ndarray  # int8
    reward: np.ndarray  # float64
    n_steps: np.ndarray  # int64
    codes: dict[str, np.ndarray]  # int32, per categorical field
    categories: dict[str, np.ndarray]  # object arrays of str, then None
    models: tuple[str, ...] = ()  # the lines' judge models (``model``), distinct, in file order
    escalated: np.ndarray | None = None  # bool: a cascade's escalation (an abstention of kind "escalated")
    evidence: np.ndarray | None = None  # int8: 1 complete evidence, 0 cut, -1 unknown (`evidence_code`)

    def __len__(self) -> int:
        return len(self.ids)

    def strings(self, field: str, rows: np.ndarray) -> np.ndarray:
        """The values of a categorical field at ``rows`` (object array; None where absent)."""
        values: np.ndarray = self.categories[field][self.codes[field][rows]]
        return values


CATEGORICAL = ("task_id", "domain", "agent")


def read_columns(path: Path) -> VerdictColumns:
    """Read a verdict JSONL into columns, streaming it line by line.

    Every line is validated by :func:`rubricforge_dspy.core.verdict.read_lines` (the verdict line
    schema). Memory: the ids, their index and about 60 bytes of numbers per line, never a dict per line.

    Args:
        path: a verdict JSONL (``rubricforge judge --out``, a run's ``predictions/<judge>.jsonl``).

    Returns:
        The file's :class:`VerdictColumns`, in file order.

    Raises:
        RunError: the file is missing or empty, a line is not a verdict, or an id repeats (naming the
            file and line, and for a repeat the first line of the id).
    """
    path = Path(path)
    ids: list[str] = []
    row: dict[str, int] = {}
    lines, steps, codes = array("q"), array("q"), {f: array("i") for f in CATEGORICAL}
    flags = {f: bytearray() for f in ("passed", "abstained", "contradiction", "escalated")}
    label, evidence = array("b"), array("b")
    floats = {f: array("d") for f in ("score", "score_calibrated", "reward")}
    index: dict[str, dict[str, int]] = {f: {} for f in CATEGORICAL}
    models: dict[str, None] = {}
    nan = float("nan")
    try:
        for number, r in read_lines(path):
            ident = r["id"]
            if ident in row:
                raise RunError(f"{path}:{number}: duplicate id {ident!r} (first on line {lines[row[ident]]})")
            row[ident] = len(ids)
            ids.append(ident)
            lines.append(number)
            flags["passed"].append(r["passed"])
            flags["abstained"].append(r["abstained"])
            flags["contradiction"].append(bool(r.get("contradiction", False)))
            flags["escalated"].append(bool(r["abstained"]) and r.get("error_kind") == "escalated")
            floats["score"].append(r["score"])
            calibrated, reward = r.get("score_calibrated"), r.get("reward")
            floats["score_calibrated"].append(nan if calibrated is None else calibrated)
            floats["reward"].append(nan if reward is None else reward)
            value = r.get("label")
            label.append(-1 if value is None else int(value))
            steps.append(r.get("n_steps", -1))
            evidence.append(evidence_code(r))
            if r.get("model"):
                models.setdefault(str(r["model"]), None)
            for field in CATEGORICAL:
                value = r.get(field)
                codes[field].append(-1 if value is None else index[field].setdefault(value, len(index[field])))
    except FileNotFoundError:
        raise RunError(f"{path}: file not found") from None
    except VerdictLineError as error:
        raise RunError(str(error)) from None
    if not ids:
        raise RunError(f"{path}: no predictions (empty file)")

    def flag(name: str) -> np.ndarray:
        return np.frombuffer(flags[name], dtype=np.uint8).astype(bool)

    return VerdictColumns(
        path=path, ids=ids, row=row, line=np.frombuffer(lines, dtype=np.int64).copy(),
        passed=flag("passed"), score=np.frombuffer(floats["score"]).copy(), abstained=flag("abstained"),
        contradiction=flag("contradiction"), score_calibrated=np.frombuffer(floats["score_calibrated"]).copy(),
        label=np.frombuffer(label, dtype=np.int8).copy(), reward=np.frombuffer(floats["reward"]).copy(),
        n_steps=np.frombuffer(steps, dtype=np.int64).copy(),
        codes={f: np.frombuffer(codes[f], dtype=np.int32).copy() for f in CATEGORICAL},
        categories={f: np.array([*index[f], None], dtype=object) for f in CATEGORICAL}, models=tuple(models),
        escalated=flag("escalated"), evidence=np.frombuffer(evidence, dtype=np.int8).copy())


def evidence_code(record: dict[str, Any]) -> int:
    """1 when a verdict line says its judge read the whole episode (``evidence.complete``), 0 when what it
    read was cut, -1 when the line does not say (an older line, another tool's: evidence unknown)."""
    found = record.get("evidence")
    return -1 if not isinstance(found, dict) else int(bool(found.get("complete")))


class LineFields(Sequence[Any]):
    """One field of chosen lines of a verdict file, read back from the file when indexed: item ``k`` is
    ``transform(record.get(key))`` of line ``lines[k]``. The file's line offsets are found on first use
    (one pass); a line whose id is not the one read before means the file changed under the report."""

    def __init__(self, path: Path, lines: np.ndarray, ids: Sequence[str], key: str,
                 transform: Callable[[Any], Any] = lambda value: value):
        self.path, self.lines, self.ids, self.key, self.transform = Path(path), lines, ids, key, transform
        self._offsets: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.lines)

    def _record(self, number: int) -> dict[str, Any]:
        if self._offsets is None:
            offsets, position = array("q", [0]), 0
            with self.path.open("rb") as handle:
                for raw in handle:
                    position += len(raw)
                    offsets.append(position)
            self._offsets = np.frombuffer(offsets, dtype=np.int64)
        with self.path.open("rb") as handle:
            handle.seek(int(self._offsets[min(number, len(self._offsets)) - 1]))
            try:
                record = json.loads(handle.readline())
            except ValueError:
                record = None
        return record if isinstance(record, dict) else {}

    @overload
    def __getitem__(self, k: int) -> Any: ...

    @overload
    def __getitem__(self, k: slice) -> list[Any]: ...

    def __getitem__(self, k: int | slice) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        record = self._record(int(self.lines[k]))
        if record.get("id") != self.ids[k]:
            raise RunError(f"{self.path}:{int(self.lines[k])}: the file changed while the report read it "
                           f"(expected id {self.ids[k]!r}); re-run the report")
        return self.transform(record.get(self.key))

    def __iter__(self) -> Iterator[Any]:
        return (self[k] for k in range(len(self)))


def collapse_whitespace(value: Any) -> str:
    """A reason as the report shows it: whitespace collapsed, "" when absent."""
    return " ".join(str(value or "").split())
