"""The review page's labels file: the journal of `rubricforge_dspy.data.label_journal`, written by one process.

One writer per file: `LabelsFile.open` takes the package's output lock (`apply.job.output_lock`: an
exclusive ``flock`` on ``LABELS.lock`` beside the real path, a symlink refused) and holds it until
`close`; a second review (or any other writer) on the same file is refused at once with the holder's pid.

Only a journal is written to: an existing non-empty file whose first line is not a journal line (a CSV,
a JSON array, a generic labels file: a mistaken ``--labels-out``) is refused before any byte is written.

No label is lost:

- every line is written whole on an ``O_APPEND`` descriptor and ``fsync``-ed before the call returns:
  a label the page confirmed is on disk;
- a write or fsync that fails (a full disk: ENOSPC, a failing disk: EIO, ...) or falls short cuts the
  file back to its length before the line (``ftruncate``) and raises `LabelNotSavedError` ("not saved:
  <reason>"), so no half line stays for the next label to be glued to; if even the cut fails, the file
  takes no more lines until the page is started again (which repairs it, as below);
- at open, a last line without its newline is kept (newline added) when it is a whole journal line;
  else it is torn (a kill mid-write): its text is kept beside the journal in ``LABELS.torn-<UTC time>``,
  it is cut off, and the repair is logged as a warning and listed in `LabelsFile.notices` (the page shows
  them). Torn lines inside the file (left by an older writer) are counted and reported the same way;
  the whole lines after them are read (`data.label_journal`).
"""

from __future__ import annotations

import errno
import logging
import os
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import orjson

from rubricforge_dspy.apply.job import check_owned, output_lock
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.data.label_journal import (
    SAMPLES,
    JournalHistory,
    JournalLine,
    is_journal_record,
    iter_journal,
    read_journal,
    starts_a_journal,
)
from rubricforge_dspy.data.labels import LabelFile, LabelFileError
from rubricforge_dspy.review.agreement import ADJUDICATION_KEY, AdjudicationLine

logger = logging.getLogger(__name__)

__all__ = ["LabelsFile", "LabelNotSavedError", "append_label", "read_labels", "check_labeler", "LABELS"]

LABELS = {"pass": 1, "fail": 0, "skip": None}
MAX_NOTE_CHARS = 2000


FIRST_LINE_BYTES = 1 << 16  # enough of a file's first line to tell a journal line from anything else
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class LabelNotSavedError(InputError):
    """A label the labels file did not take (a full or failing disk): the file is as it was before it.

    Attributes:
        errno: the OS's error number (``errno.ENOSPC``...), or None.
    """

    def __init__(self, message: str, errno_: int | None = None):
        super().__init__(message)
        self.errno = errno_


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _reason(error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0)
    return f"{error.strerror or error}" + (f" ({name})" if name else "")


class LabelsFile:
    """An open labels journal: its replayed history and the one descriptor that appends to it.

    Use as a context manager (or `open` / `close`); `label` and `undo` append one line each.

    Args:
        path: the journal (created when missing; its directory too).
        labeler: who labels (kept on every line).
    """

    def __init__(self, path: PathArg, labeler: str):
        self.path = Path(path)
        self.labeler = check_labeler(labeler)
        self.history = JournalHistory()
        self.notices: list[str] = []  # repairs found at open (a torn line): logged, and shown on the page
        self._stack: ExitStack | None = None
        self._fd: int | None = None
        self._broken: str | None = None  # why no more line may be written (a failed write not undone)

    def open(self) -> "LabelsFile":
        """Take the lock, refuse a file that is not a journal, repair its tail, replay it, open it to append.

        Raises:
            OutputLockedError: another process writes the file.
            LabelFileError: the file exists, is not empty and is not a labels journal (nothing written).
        """
        stack = ExitStack()
        try:
            stack.enter_context(output_lock(self.path))
            self._refuse_other_files()
            self._repair_tail()
            self.history = _replay(self.path) if self.path.exists() else JournalHistory()
            if self.history.torn:
                self._notice(f"{self.path}: {len(self.history.torn)} torn line(s) inside (line "
                             f"{', '.join(str(t.line) for t in self.history.torn[:10])}): text of earlier writes cut "
                             "short, not read; every whole label line after them is read")
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            check_owned(self.path, self._fd)  # the file the lock holds, with one name (apply.job)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def _notice(self, text: str) -> None:
        logger.warning("%s", text)
        self.notices.append(text)

    def _refuse_other_files(self) -> None:
        """A non-empty file whose first line is not a journal line is not written to (module docstring)."""
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            first = handle.readline(FIRST_LINE_BYTES)
        if first and not starts_a_journal(first.rstrip(b"\r\n")):
            raise LabelFileError(f"{self.path}: not a labels journal (its first line is not a line `rubricforge "
                                 "review` writes: a CSV, JSON or other labels file?); the labels file "
                                 "(--labels-out) is a new file or a journal the page wrote: give another path "
                                 "(and read this one with --labels). Nothing was written to it")

    def _repair_tail(self) -> None:
        """A final line without its newline: kept (newline added) when it is a whole journal line; else torn
        (a kill mid-write, never confirmed to anyone): its text kept in a side file, then cut off."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            keep, block = size, 1 << 16
            while keep > 0:  # the start of the last line: after the last newline
                start = max(0, keep - block)
                handle.seek(start)
                chunk = handle.read(keep - start)
                if keep == size and chunk.endswith(b"\n"):
                    return
                found = chunk.rfind(b"\n")
                if found >= 0:
                    keep = start + found + 1
                    break
                keep = start
            handle.seek(keep)
            tail = handle.read()
            if _whole_journal_line(tail):
                handle.seek(0, os.SEEK_END)
                handle.write(b"\n")
                handle.flush()
                os.fsync(handle.fileno())
                logger.info("%s: its last line lacked its newline: kept, newline added", self.path)
                return
            side = self._keep_aside(tail)
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        self._notice(f"{self.path}: its last line was torn ({len(tail)} bytes without a newline: a write cut short, "
                     f"never confirmed); cut off, its text kept in {side}. If an item's label is missing, label it "
                     "again")

    def _keep_aside(self, text: bytes) -> Path:
        """Write `text` to a new ``LABELS.torn-<UTC time>`` beside the journal (fsync-ed); its path."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        side = self.path.with_name(f"{self.path.name}.torn-{stamp}")
        fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(os.dup(fd), "wb") as handle:  # a buffered file writes it all, or raises
                handle.write(text)
            os.fsync(fd)
        finally:
            os.close(fd)
        return side

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def __enter__(self) -> "LabelsFile":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, line: JournalLine) -> JournalLine:
        """Append `line` whole and fsync it; on any failure cut the file back and raise `LabelNotSavedError`."""
        fd = self._fd
        if fd is None:
            raise InputError(f"{self.path}: the labels file is not open for writing")
        what = f"not saved: the {'undo' if line.undo else line.state + ' label'} of {line.id}"
        if self._broken is not None:
            raise LabelNotSavedError(f"{what}: {self._broken}")
        data = memoryview(orjson.dumps(line.to_record()) + b"\n")
        before = os.fstat(fd).st_size  # one writer (the lock): nobody else moves the end
        try:
            while data:
                written = os.write(fd, data)
                if written <= 0:
                    raise OSError(errno.EIO, "the file system took no byte of the line")
                data = data[written:]
            os.fsync(fd)
        except OSError as error:
            self._cut_back(fd, before, error, what)
        self.history.apply(line)
        return line

    def _cut_back(self, fd: int, size: int, error: OSError, what: str) -> None:
        """Truncate the file open as `fd` to `size` (its length before a failed line) and raise
        `LabelNotSavedError`."""
        reason = _reason(error)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as again:
            self._broken = (f"{self.path}: a line could not be written ({reason}) nor cut back ({_reason(again)}): "
                            "the file takes no more labels; stop the page and start it again (it cuts the torn "
                            "line, keeping its text beside the file)")
            logger.error("%s", self._broken)
            raise LabelNotSavedError(f"{what}: {self._broken}", error.errno) from error
        message = (f"{what}: {self.path}: {reason}; the labels file is as it was before it (every earlier label "
                   "kept): " + ("free disk space, then label the item again" if error.errno in SPACE_ERRNOS
                                else "label the item again"))
        logger.error("%s", message)
        raise LabelNotSavedError(message, error.errno) from error

    def state(self, ident: str) -> JournalLine | None:
        """The id's current label line, or None when it was never labeled (or every label was undone)."""
        return self.history.current(ident)

    def label(self, ident: str, choice: str, note: str = "", *, sample: str | None = None,
              audit: str | None = None, labeler: str | None = None, adjudication: bool = False) -> JournalLine:
        """Append `choice` (``"pass"``, ``"fail"`` or ``"skip"``) with `note` for `ident`; `sample` says which
        sample the item came from (``"audit"``, ``"escalated"``, ``"other"``: `data.label_journal.SAMPLES`) and
        `audit` the digest of the audit draw an audit item belongs to; `labeler` who labels (default: the file's
        `labeler`, `check_labeler`); `adjudication` marks a label that resolves a disagreement between labelers
        (`review.agreement`)."""
        if choice not in LABELS:
            raise InputError(f"a label is pass, fail or skip; got {choice!r}")
        if sample is not None and sample not in SAMPLES:
            raise InputError(f"a label's sample is one of {', '.join(SAMPLES)}; got {sample!r}")
        note = " ".join(str(note or "").split())[:MAX_NOTE_CHARS]
        name = self.labeler if labeler is None else check_labeler(labeler)
        line = JournalLine(str(ident), LABELS[choice], choice == "skip", note, name, _now(), False, 0, sample,
                           audit if sample == "audit" else None)
        return self._write(AdjudicationLine.of(line) if adjudication else line)

    def undo(self, labeler: str | None = None) -> JournalLine | None:
        """Take back the most recent action still standing (whoever wrote it): append a line, signed by `labeler`
        (default: the file's), restoring the state its id had before it (unlabeled when it had none). Returns that
        line, or None when there is nothing to undo."""
        if not self.history.actions:
            return None
        ident = self.history.actions[-1]
        stack = self.history.states.get(ident, [])
        before = stack[-2] if len(stack) >= 2 else None
        restored = JournalLine(ident, before.label if before else None, before.skip if before else False,
                               before.note if before else "", self.labeler if labeler is None
                               else check_labeler(labeler), _now(), True, 0,
                               before.sample if before else None, before.audit if before else None)
        return self._write(restored)

    def counts(self) -> dict[str, int]:
        """How many ids are passed, failed, skipped now."""
        out = {"pass": 0, "fail": 0, "skip": 0}
        for stack in self.history.states.values():
            state = stack[-1].state
            if state in out:
                out[state] += 1
        return out


MAX_LABELER_CHARS = 100


def check_labeler(name: object) -> str:
    """A labeler's name as kept on a label line: stripped, not empty, at most 100 characters (untrusted text like
    any other: every page shows it escaped).

    Raises:
        InputError: an empty or too long name (naming what to do).
    """
    text = str(name or "").strip()
    if not text:
        raise InputError("a labeler name is needed (kept on every label line): give --labeler NAME or type one "
                         "on the page")
    if len(text) > MAX_LABELER_CHARS:
        raise InputError(f"a labeler name is at most {MAX_LABELER_CHARS} characters; got {len(text)}")
    return text


def _replay(path: Path) -> JournalHistory:
    """`data.label_journal.journal_history`, with each adjudication line (``"adjudication": true``) read as an
    `AdjudicationLine` (the journal reader reads the line, not that key)."""
    marked = set()
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if ADJUDICATION_KEY.encode() in raw:
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a torn line: counted by the reader
                if isinstance(record, dict) and record.get(ADJUDICATION_KEY) is True:
                    marked.add(number)
    history = JournalHistory()
    for line in iter_journal(path, history.torn):
        history.apply(AdjudicationLine.of(line) if line.line in marked else line)
    if history.torn:
        logger.warning("%s: %d torn line(s) (line %s): text a write cut short, not read; every whole label line "
                       "is read", path, len(history.torn), ", ".join(str(t.line) for t in history.torn[:10]))
    return history


def _whole_journal_line(raw: bytes) -> bool:
    try:
        return is_journal_record(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return False


def append_label(path: PathArg, ident: str, choice: str, *, labeler: str, note: str = "") -> JournalLine:
    """Open the journal at `path` (taking its lock), append one label, close it."""
    with LabelsFile(path, labeler) as labels:
        return labels.label(ident, choice, note)


def read_labels(path: PathArg) -> LabelFile:
    """The journal at `path` as the package's `LabelFile` (last line per id wins; `data.label_journal`)."""
    return read_journal(path)


def iter_lines(path: PathArg) -> Iterator[JournalLine]:
    """Every line of the journal, in order (`data.label_journal.iter_journal`)."""
    return iter_journal(path)
