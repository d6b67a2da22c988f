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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson

from rubricforge_dspy.core.files import regular_file
from rubricforge_dspy.data.labels import LabelEntry, LabelFile, LabelFileError

__all__ = ["JOURNAL_KEY", "JOURNAL_VERSION", "JournalLine", "JournalHistory", "is_journal_record",
           "iter_journal", "journal_history", "read_journal"]

JOURNAL_KEY = "rubricforge_labels"
JOURNAL_VERSION = 1


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


def iter_journal(path, *, torn_tail: bool = True) -> Iterator[JournalLine]:
    """The lines of a labels journal, each checked, in file order.

    Args:
        path: the journal.
        torn_tail: skip a final line cut without its newline (a kill mid-write; the writer fsyncs whole
            lines, so only the last can be torn) instead of refusing it.

    Raises:
        LabelFileError: a line is not JSON or not a journal line (naming the file and line).
        MissingFileError, NotARegularFileError: as `core.files.regular_file`.
    """
    path = regular_file(path, "labels file")
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if torn_tail and not raw.endswith(b"\n"):
                return
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError as error:
                raise LabelFileError(f"{where}: not JSON ({error})") from None
            yield _line_of(record, where, number)


@dataclass
class JournalHistory:
    """A journal replayed: each id's stack of states (the last is its state now) and the order of the
    actions an undo may still take back (ids, most recent last)."""

    states: dict[str, list[JournalLine]] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)

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
    """Replay the journal at `path` (see `JournalHistory`)."""
    history = JournalHistory()
    for line in iter_journal(path):
        history.apply(line)
    return history


def read_journal(path) -> LabelFile:
    """A labels journal as the package's `LabelFile`: each id's last line wins; ids whose state is a
    skip or a cleared label are listed in ``blank`` (not joined), as a generic reader lists blank rows.

    Raises:
        LabelFileError: as `iter_journal`, or when no id has a label.
    """
    last: dict[str, JournalLine] = {}
    for line in iter_journal(path):
        last[line.id] = line
    out = LabelFile(str(path), "jsonl", {})
    for ident, line in last.items():
        if line.label is None:
            out.blank.append(ident)
        else:
            out.entries[ident] = LabelEntry(line.label, None, line.line)
    if not out.entries:
        raise LabelFileError(f"{path}: no labels (every id is skipped or unlabeled)")
    return out
