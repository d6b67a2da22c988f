"""The labels journal: an append-only JSONL of a person's labels, where a changed mind is a new line that wins.

`rubricforge review` writes it (one writer per file, one fsync per line: `rubricforge_dspy.review.labels`);
every command that reads ``--labels`` can read it. One line per action::

    {"rubricforge_labels": 1, "id": "t1", "label": 1, "skip": false, "note": "", "labeler": "ana",
     "time": "2026-11-27T20:31:04.123456+00:00", "undo": false}

- ``label``: 1 (pass), 0 (fail) or null (no label: skipped when ``skip`` is true, cleared otherwise);
- ``undo``: true on a line that restores the state the id had before its previous action (undo is a
  new line too: nothing is ever rewritten);
- ``rubricforge_labels``: the format marker (version 1); any other key is kept but not read.

The state of an id is its last line's (last wins). A line without a label (a skip, a cleared label)
joins nothing: as a generic label reader counts a blank row. `read_journal` resolves the file into the
package's `LabelFile` (the same record every ``--labels`` reader returns), and `journal_history`
replays it (the per-id states and the action order an undo pops).

Torn lines. The writer cuts a line it could not write whole back off the file, but a journal may still
hold one (a kill mid-write, or a full disk under an older writer, which then appended the next labels
right after the half line). Readers lose nothing silently: a line that is not whole JSON is a torn
line, counted (`LabelFile.torn`, `JournalHistory.torn`, the join summary) and logged as a warning;
when a whole journal line follows the torn text on the same line (the marker
``{"rubricforge_labels":`` cannot occur inside a JSON string, so it starts a line), that line is read.
A last line that is whole JSON but lacks its newline is read like any other.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson

from rubricforge_dspy.core.files import regular_file
from rubricforge_dspy.data.label_records import LabelEntry, LabelFile, LabelFileError

__all__ = ["JOURNAL_KEY", "JOURNAL_VERSION", "JournalLine", "JournalHistory", "TornLine", "is_journal_record",
           "starts_a_journal", "iter_journal", "journal_history", "read_journal"]

logger = logging.getLogger(__name__)

JOURNAL_KEY = "rubricforge_labels"
JOURNAL_VERSION = 1
_MARKER = re.compile(rb'\{\s*"' + JOURNAL_KEY.encode() + rb'"\s*:')  # how every journal line begins


@dataclass(frozen=True)
class JournalLine:
    """One action: the id's new state (label 1/0/None, skip, note), who and when, and whether it undid one."""

    id: str
    label: int | None
    skip: bool
    note: str
    labeler: str
    time: str
    undo: bool
    line: int

    @property
    def state(self) -> str:
        """``"pass"``, ``"fail"``, ``"skip"`` or ``"unlabeled"``."""
        if self.label is not None:
            return "pass" if self.label == 1 else "fail"
        return "skip" if self.skip else "unlabeled"

    def to_record(self) -> dict[str, Any]:
        """The line as written (`line` is where it was read, not part of it)."""
        return {JOURNAL_KEY: JOURNAL_VERSION, "id": self.id, "label": self.label, "skip": self.skip,
                "note": self.note, "labeler": self.labeler, "time": self.time, "undo": self.undo}


def is_journal_record(record: Any) -> bool:
    """True for a line of a labels journal (it carries the format marker)."""
    return isinstance(record, dict) and record.get(JOURNAL_KEY) == JOURNAL_VERSION


def starts_a_journal(first_line: bytes) -> bool:
    """True when `first_line` (a file's first line) is a labels-journal line, whole or torn (it begins as one).

    A CSV, a JSON array, a generic JSONL labels file or a SWE-bench report is not: ``--labels-out`` never
    writes into those (`review.labels.LabelsFile.open`)."""
    try:
        return is_journal_record(orjson.loads(first_line))
    except orjson.JSONDecodeError:
        return _MARKER.match(first_line.lstrip()) is not None


@dataclass(frozen=True)
class TornLine:
    """A line of the journal that is not whole JSON (a write cut short): where, and its text."""

    line: int
    text: bytes


def _line_of(record: Any, where: str, number: int) -> JournalLine:
    if not is_journal_record(record):
        raise LabelFileError(f"{where}: not a labels journal line (no \"{JOURNAL_KEY}\": {JOURNAL_VERSION}); a "
                             "journal holds only lines written by `rubricforge review`")
    ident, label = record.get("id"), record.get("label")
    if not isinstance(ident, str) or not ident:
        raise LabelFileError(f"{where}: missing id")
    if label is not None and (isinstance(label, bool) or label not in (0, 1)):
        raise LabelFileError(f"{where}: label must be 0, 1 or null, got {label!r} (id {ident})")
    texts = {key: record.get(key, "") for key in ("note", "labeler", "time")}
    for key, value in texts.items():
        if not isinstance(value, str):
            raise LabelFileError(f"{where}: {key} must be a string (id {ident})")
    skip, undo = record.get("skip", False), record.get("undo", False)
    if not isinstance(skip, bool) or not isinstance(undo, bool):
        raise LabelFileError(f"{where}: skip and undo must be true or false (id {ident})")
    if skip and label is not None:
        raise LabelFileError(f"{where}: a skipped item has no label (id {ident})")
    return JournalLine(ident, label, skip, texts["note"], texts["labeler"], texts["time"], undo, number)


def _parse(raw: bytes) -> tuple[Any, bytes] | None:
    """``(record, torn text before it)`` for a line that is JSON whole, or whose tail after torn text is a
    journal line; None when no part of it is."""
    try:
        return orjson.loads(raw), b""
    except orjson.JSONDecodeError:
        pass
    for match in _MARKER.finditer(raw, 1):
        try:
            record = orjson.loads(raw[match.start():])
        except orjson.JSONDecodeError:
            continue
        if is_journal_record(record):
            return record, raw[:match.start()]
    return None


def iter_journal(path, torn: list[TornLine] | None = None) -> Iterator[JournalLine]:
    """The lines of a labels journal, each checked, in file order.

    Args:
        path: the journal.
        torn: a list that receives each torn line (`TornLine`: not whole JSON, a write cut short; module
            docstring), which is then skipped; None refuses the file at the first torn line.

    Raises:
        LabelFileError: a line is not a journal line (naming the file and line), or torn when `torn` is None.
        MissingFileError, NotARegularFileError: as `core.files.regular_file`.
    """
    path = regular_file(path, "labels file")
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            parsed = _parse(raw.rstrip(b"\r\n"))
            if parsed is None or parsed[1]:
                if torn is None:
                    raise LabelFileError(f"{where}: a torn line (not whole JSON: a write was cut short there); "
                                         "`rubricforge review` on this file keeps its whole lines and reports it")
                torn.append(TornLine(number, raw if parsed is None else parsed[1]))
                if parsed is None:
                    continue
            yield _line_of(parsed[0], where, number)


def _say_torn(path, torn: list[TornLine]) -> None:
    if torn:
        logger.warning("%s: %d torn line(s) (line %s): text a write cut short, not read; every whole label line "
                       "is read", path, len(torn), ", ".join(str(t.line) for t in torn[:10]))


@dataclass
class JournalHistory:
    """A journal replayed: each id's stack of states (the last is its state now) and the order of the
    actions an undo may still take back (ids, most recent last)."""

    states: dict[str, list[JournalLine]] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    torn: list[TornLine] = field(default_factory=list)

    def current(self, ident: str) -> JournalLine | None:
        stack = self.states.get(ident)
        return stack[-1] if stack else None

    def apply(self, line: JournalLine) -> None:
        """Replay one line: an action pushes the id's new state; an undo pops its last one."""
        if line.undo:
            stack = self.states.get(line.id) or []
            if stack:
                stack.pop()
            for position in range(len(self.actions) - 1, -1, -1):
                if self.actions[position] == line.id:
                    del self.actions[position]
                    break
            if not stack:
                self.states.pop(line.id, None)
            return
        self.states.setdefault(line.id, []).append(line)
        self.actions.append(line.id)


def journal_history(path) -> JournalHistory:
    """Replay the journal at `path` (see `JournalHistory`); torn lines are skipped and listed in ``torn``."""
    history = JournalHistory()
    for line in iter_journal(path, history.torn):
        history.apply(line)
    _say_torn(path, history.torn)
    return history


def read_journal(path) -> LabelFile:
    """A labels journal as the package's `LabelFile`: each id's last line wins; ids whose state is a
    skip or a cleared label are listed in ``blank`` (not joined), as a generic reader lists blank rows;
    the numbers of torn lines (module docstring) are in ``torn`` (and logged as a warning).

    Raises:
        LabelFileError: as `iter_journal`, or when no id has a label.
    """
    last: dict[str, JournalLine] = {}
    torn: list[TornLine] = []
    for line in iter_journal(path, torn):
        last[line.id] = line
    _say_torn(path, torn)
    out = LabelFile(str(path), "jsonl", {}, torn=[t.line for t in torn])
    for ident, line in last.items():
        if line.label is None:
            out.blank.append(ident)
        else:
            out.entries[ident] = LabelEntry(line.label, None, line.line)
    if not out.entries:
        raise LabelFileError(f"{path}: no labels (every id is skipped or unlabeled"
                             + (f"; {len(torn)} torn line(s) not read" if torn else "") + ")")
    return out
