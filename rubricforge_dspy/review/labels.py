"""The review page's labels file: the journal of `rubricforge_dspy.data.label_journal`, written by one process.

One writer per file: `LabelsFile.open` takes the package's output lock (`apply.job.output_lock`: an
exclusive ``flock`` on ``LABELS.lock`` beside the real path, a symlink refused) and holds it until
`close`; a second review (or any other writer) on the same file is refused at once with the holder's pid.
Every line is written whole with one ``write`` on an ``O_APPEND`` descriptor and ``fsync``-ed before the
call returns: a label the page confirmed is on disk. A torn last line (a kill mid-write) is cut off
before the first append, so the file stays a valid journal.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

import orjson

from rubricforge_dspy.apply.job import output_lock
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.data.label_journal import JournalHistory, JournalLine, iter_journal, journal_history, read_journal
from rubricforge_dspy.data.labels import LabelFile

__all__ = ["LabelsFile", "append_label", "read_labels", "LABELS"]

LABELS = {"pass": 1, "fail": 0, "skip": None}
MAX_NOTE_CHARS = 2000


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


class LabelsFile:
    """An open labels journal: its replayed history and the one descriptor that appends to it.

    Use as a context manager (or `open` / `close`); `label` and `undo` append one line each.

    Args:
        path: the journal (created when missing; its directory too).
        labeler: who labels (kept on every line).
    """

    def __init__(self, path: PathArg, labeler: str):
        if not labeler or not str(labeler).strip():
            raise InputError("a labeler name is needed (kept on every label line)")
        self.path = Path(path)
        self.labeler = str(labeler).strip()
        self.history = JournalHistory()
        self._stack: ExitStack | None = None
        self._fd: int | None = None

    def open(self) -> "LabelsFile":
        stack = ExitStack()
        try:
            stack.enter_context(output_lock(self.path))
            self._repair_tail()
            self.history = journal_history(self.path) if self.path.exists() else JournalHistory()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def _repair_tail(self) -> None:
        """Cut a final line without its newline (a kill mid-write): it was never confirmed to anyone."""
        if not self.path.exists():
            return
        size = self.path.stat().st_size
        if size == 0:
            return
        with self.path.open("rb+") as handle:
            handle.seek(max(0, size - 1))
            if handle.read(1) == b"\n":
                return
            handle.seek(0)
            keep = handle.read().rfind(b"\n") + 1
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def __enter__(self) -> "LabelsFile":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _write(self, line: JournalLine) -> JournalLine:
        if self._fd is None:
            raise InputError(f"{self.path}: the labels file is not open for writing")
        data = orjson.dumps(line.to_record()) + b"\n"
        written = os.write(self._fd, data)
        if written != len(data):  # a full disk: say so rather than leave half a line unnoticed
            raise OSError(f"{self.path}: wrote {written} of {len(data)} bytes of a label line")
        os.fsync(self._fd)
        self.history.apply(line)
        return line

    def state(self, ident: str) -> JournalLine | None:
        """The id's current label line, or None when it was never labeled (or every label was undone)."""
        return self.history.current(ident)

    def label(self, ident: str, choice: str, note: str = "") -> JournalLine:
        """Append `choice` (``"pass"``, ``"fail"`` or ``"skip"``) with `note` for `ident`."""
        if choice not in LABELS:
            raise InputError(f"a label is pass, fail or skip; got {choice!r}")
        note = " ".join(str(note or "").split())[:MAX_NOTE_CHARS]
        return self._write(JournalLine(str(ident), LABELS[choice], choice == "skip", note, self.labeler, _now(),
                                       False, 0))

    def undo(self) -> JournalLine | None:
        """Take back the most recent action still standing: append a line restoring the state its id had
        before it (unlabeled when it had none). Returns that line, or None when there is nothing to undo."""
        if not self.history.actions:
            return None
        ident = self.history.actions[-1]
        stack = self.history.states.get(ident, [])
        before = stack[-2] if len(stack) >= 2 else None
        restored = JournalLine(ident, before.label if before else None, before.skip if before else False,
                               before.note if before else "", self.labeler, _now(), True, 0)
        return self._write(restored)

    def counts(self) -> dict[str, int]:
        """How many ids are passed, failed, skipped now."""
        out = {"pass": 0, "fail": 0, "skip": 0}
        for stack in self.history.states.values():
            state = stack[-1].state
            if state in out:
                out[state] += 1
        return out


def append_label(path: PathArg, ident: str, choice: str, *, labeler: str, note: str = "") -> JournalLine:
    """Open the journal at `path` (taking its lock), append one label, close it."""
    with LabelsFile(path, labeler) as labels:
        return labels.label(ident, choice, note)


def read_labels(path: PathArg) -> LabelFile:
    """The journal at `path` as the package's `LabelFile` (last line per id wins; `data.label_journal`)."""
    return read_journal(path)


def iter_lines(path):
    """Every line of the journal, in order (`data.label_journal.iter_journal`)."""
    return iter_journal(path)
