"""What the review page reads, indexed by byte offset: verdict lines and trajectories, never held whole.

`VerdictFileIndex` scans a verdict JSONL once: each line is parsed (orjson) and checked
(`core.verdict.check_line`), and only what the queue orders and filters by is kept per item (id, task,
deciding stage, verdict, scores, the line's own label) plus the line's byte offset; the reason and the
rest are read again from disk, one line, when an item is opened. A repeated id is refused, naming both
lines.

`DataIndex` finds an item's trajectory: a generic JSON Lines file (`data.formats.jsonl`) is indexed by
the byte offset of each record, its id read from the line's start when the record begins with
``{"id": "..."`` (else the line is parsed); one record is read and converted when an item is opened
(`data.formats.jsonl.read_line`), and its id is checked against the one asked for. Any other format is
loaded whole by `data.formats.load_trajectories` (those files hold whole documents).

Look-alike ids (`lookalike_groups`): two ids of the verdict file that differ only by look-alike characters
(Cyrillic ``а`` for Latin ``a``, ``0`` for ``o``, full-width letters), invisible characters (zero-width,
bidi) or case read the same to a person; the page marks every such id and names the others. Their common
form is `evidence.render.lookalike_fold` (the render's own fold, generated from Unicode's confusables) of the
id with its control and format characters removed (`evidence.clip.sanitize`).

Cascade fields (a verdict line written by a cascade names its deciding ``stage``; an item no stage
decided has ``stage: "escalated"`` or ``escalated: true``) are read when present.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import orjson

from rubricforge_dspy.core.cascade import ESCALATED
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.core.trajectory import LabelRule, Trajectory
from rubricforge_dspy.core.verdict import VerdictLineError
from rubricforge_dspy.core.verdict import parse_line as parse_verdict_line
from rubricforge_dspy.data.formats import detect_format, load_trajectories
from rubricforge_dspy.data.formats import jsonl as jsonl_format
from rubricforge_dspy.evidence.clip import sanitize
from rubricforge_dspy.evidence.render import lookalike_fold

__all__ = ["VerdictFileIndex", "DataIndex", "ItemSummary", "ESCALATED", "lookalike_groups"]

_ID_AT_START = re.compile(rb'\s*\{\s*"id"\s*:\s*"((?:[^"\\]|\\.)*)"')  # `match` anchors it


@dataclass(frozen=True)
class ItemSummary:
    """What the queue knows of one verdict line without reading it again."""

    index: int
    id: str
    task_id: str
    stage: str
    passed: bool
    abstained: bool
    score: float
    score_calibrated: float | None
    label: int | None

    @property
    def escalated(self) -> bool:
        return self.stage == ESCALATED


class VerdictFileIndex:
    """The items of one verdict file: per-item columns and byte offsets (module docstring).

    Args:
        path: the verdict JSONL (`rubricforge judge --out`, a run's ``predictions/*.jsonl``).

    Raises:
        VerdictLineError: a line is not a verdict line, or repeats an id (file and line named).
        InputError: the file holds no verdict.
    """

    def __init__(self, path: PathArg):
        self.path = regular_file(path, "verdict file")
        self.ids: list[str] = []
        self.tasks: list[str] = []
        self.stages: list[str] = []
        self.offsets = array("q")
        self.scores = array("d")
        self.calibrated = array("d")  # NaN: none
        self.flags = array("b")  # bit 0 passed, bit 1 abstained, bit 2 contradiction
        self.labels = array("b")  # -1: none
        self.position: dict[str, int] = {}
        self._scan()
        if not self.ids:
            raise InputError(f"{self.path}: no verdict lines; give the --verdicts a judge wrote "
                             "(`rubricforge judge --out`)")

    def _scan(self) -> None:
        offset, path, position = 0, self.path, self.position
        ids, tasks, stages = self.ids.append, self.tasks.append, self.stages.append
        offsets, scores, calibrated, flags, labels = (self.offsets.append, self.scores.append,
                                                      self.calibrated.append, self.flags.append, self.labels.append)
        nan = float("nan")
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                start, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                record = parse_verdict_line(raw, path, number)
                get = record.get
                ident = record["id"]
                if ident in position:
                    first = self._line_number(position[ident])
                    raise VerdictLineError(f"{path}:{number}: duplicate id {ident!r} (first on line {first})")
                position[ident] = len(position)
                ids(ident)
                tasks(str(get("task_id") or ""))
                stage = get("stage")
                stages(ESCALATED if get("escalated") is True else stage if type(stage) is str else "")
                offsets(start)
                scores(float(record["score"]))
                value = get("score_calibrated")
                calibrated(nan if value is None else float(value))
                flags(int(bool(record["passed"])) | (int(bool(record["abstained"])) << 1)
                      | (int(bool(get("contradiction"))) << 2))
                label = get("label")
                labels(-1 if label is None else int(label))

    def _line_number(self, index: int) -> int:
        with self.path.open("rb") as handle:
            return handle.read(self.offsets[index]).count(b"\n") + 1

    def __len__(self) -> int:
        return len(self.ids)

    def summary(self, index: int) -> ItemSummary:
        calibrated = self.calibrated[index]
        flags = self.flags[index]
        return ItemSummary(index, self.ids[index], self.tasks[index], self.stages[index], bool(flags & 1),
                           bool(flags & 2), self.scores[index], None if calibrated != calibrated else calibrated,
                           None if self.labels[index] < 0 else self.labels[index])

    def record(self, index: int) -> dict[str, Any]:
        """The whole verdict line of item `index`, read from disk (one seek, one line)."""
        with self.path.open("rb") as handle:
            handle.seek(self.offsets[index])
            raw = handle.readline()
        record: dict[str, Any] = orjson.loads(raw)
        return record

    def iter_records(self) -> Iterable[tuple[int, dict[str, Any]]]:
        """``(index, verdict line)`` for every item, read again in file order (for background work)."""
        with self.path.open("rb") as handle:
            for index, offset in enumerate(self.offsets):
                handle.seek(offset)
                yield index, orjson.loads(handle.readline())


class DataIndex:
    """Trajectories by id, from data files (module docstring).

    Args:
        paths: the data files or directories (as ``--data``).
        format: a format name or ``"auto"``.
    """

    def __init__(self, paths: str | Path | Iterable[PathArg], format: str = "auto"):
        self.paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
        self.format = format
        self._lines: dict[str, tuple[int, int, int]] = {}  # id -> (file number, line index, offset)
        self._files: list[Path] = []
        self._whole: dict[str, Trajectory] = {}
        jsonl_files = [p for p in self.paths if self._is_jsonl(p)]
        others = [p for p in self.paths if p not in jsonl_files]
        for path in jsonl_files:
            self._index_jsonl(path)
        if others:
            for trajectory in load_trajectories(others, format=format):
                self._add_whole(trajectory)

    def _is_jsonl(self, path: Path) -> bool:
        if not path.is_file() or self.format not in ("auto", "jsonl"):
            return False
        regular_file(path, "data file")
        fmt = detect_format(path) if self.format == "auto" else "jsonl"
        return fmt == "jsonl" and not jsonl_format.is_array(path)

    def _add_whole(self, trajectory: Trajectory) -> None:
        if trajectory.id in self._whole or trajectory.id in self._lines:
            raise InputError(f"trajectory id {trajectory.id!r} appears twice in --data; ids must be unique")
        self._whole[trajectory.id] = trajectory

    def _index_jsonl(self, path: Path) -> None:
        number = len(self._files)
        self._files.append(path)
        offset = 0
        with path.open("rb") as handle:
            for line_index, raw in enumerate(handle):
                start, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                match = _ID_AT_START.match(raw, 0, 512)
                if match:
                    found = match[1]
                    ident = found.decode() if b"\\" not in found else orjson.loads(b'"' + found + b'"')
                else:
                    try:
                        record = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue  # not JSON: no id to index it by (its verdict's item says the id is not in --data)
                    ident = record.get("id") if isinstance(record, dict) else None
                    if not isinstance(ident, str):
                        continue
                if ident in self._lines:
                    raise InputError(f"{path}:{line_index + 1}: trajectory id {ident!r} appears twice in --data; "
                                     "ids must be unique")
                self._lines[ident] = (number, line_index, start)

    def __len__(self) -> int:
        return len(self._lines) + len(self._whole)

    def __contains__(self, ident: str) -> bool:
        return ident in self._lines or ident in self._whole

    def get(self, ident: str, label_rule: LabelRule | None = None) -> Trajectory | None:
        """The `Trajectory` of `ident`, or None when the data has no such id.

        Raises:
            TrajectoryFormatError: the record cannot be read (its file and line named).
        """
        if ident in self._whole:
            return self._whole[ident]
        where = self._lines.get(ident)
        if where is None:
            return None
        number, line_index, offset = where
        path = self._files[number]
        rule = label_rule if label_rule is not None else _default_rule()
        _, result = jsonl_format.read_line(path, line_index, offset, rule)
        if isinstance(result, Exception):
            raise result
        if result.id != ident:
            raise InputError(f"{path}:{line_index + 1}: the record read as {result.id!r}, not {ident!r}")
        return result

    def ids(self) -> Iterable[str]:
        yield from self._lines
        yield from self._whole


def _default_rule() -> LabelRule:
    from rubricforge_dspy.data.formats import default_label_rule

    return default_label_rule("jsonl")


def lookalike_groups(ids: Sequence[str]) -> dict[int, tuple[int, ...]]:
    """Items whose ids read like another id of the same file (module docstring).

    Args:
        ids: the ids, by item.

    Returns:
        item -> the other items whose id has the same look-alike form; items with no look-alike are absent.
    """
    forms: dict[str, list[int]] = {}
    for index, ident in enumerate(ids):
        clean = ident if ident.isprintable() else sanitize(ident)[0].strip()  # sanitize changes no printable id
        forms.setdefault(lookalike_fold(clean), []).append(index)
    return {index: tuple(other for other in group if other != index)
            for group in forms.values() if len(group) > 1 for index in group}
