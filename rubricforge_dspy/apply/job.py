"""The job a verdict file belongs to, and resuming it.

An output file ``OUT`` of `rubricforge judge` (online or through the Batch API) belongs to one job:
beside it, ``OUT.job.json`` records the judge's fingerprint (with its parts) and the input's
fingerprint (`input_fingerprint`: the input files' bytes and load settings). `claim_output` refuses
a run whose judge or input differ, saying what changed; `read_done` reads which ids are already
judged, repairing a line cut by a kill and dropping abstentions for LM errors so they are asked again.

One writer per output file, keyed on the file (its device and inode), not on its name. `output_lock`
holds two exclusive ``flock`` locks for the whole run, and a second writer meeting either is refused at
once (`OutputLockedError`, exit 2) with the holder's pid:

- the lock of the NAME, ``OUT.lock`` beside the real path of ``OUT`` (its directory resolved), which holds
  the holder's pid and serializes runs on one name before the file exists;
- the lock of the FILE: ``OUT`` itself is opened (created when missing, so the file exists from the
  moment it is owned; removed again if the run fails before writing a byte) and flocked on that
  descriptor. The kernel keys a flock on the inode, so a run reaching the file by ANY name (a hard link
  made at any time, a rename while it is written) meets it; its message finds the holder's pid in
  ``/proc/locks``.

Before locking, `checked_output` refuses an ``OUT`` that is a symlink, anything but a regular file, or a
regular file with more than one name (``st_nlink > 1``: a hard link), each with one line (`InputError`,
exit 2). After locking, the file's identity is checked again on the descriptor (still one name, still
the file at ``OUT``), and the verdict writer checks that the descriptor it appends to is the file the lock
holds (`check_owned`); the one rewrite of ``OUT`` under the lock (`read_done` dropping lines to ask again,
by rename) moves the file lock to the new file before the rename. The files written beside ``OUT`` are never
written through another name: the job file (``OUT.job.json``) and the done index (``OUT.ids``) are written
whole to a new file renamed into place, and the index is then appended through that new file's descriptor.
The kernel releases both locks when their process dies, so a killed run never blocks a re-run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable

import orjson

from rubricforge_dspy.apply.locking import (  # noqa: F401 - re-exported: callers import these from here
    LOCK_SUFFIX,
    OutputLockedError,
    check_owned,
    checked_output,
    lock_path,
    new_file,
    output_lock,
    relock,
    replace_file,
    write_all,
)
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.verdict import VerdictLineError, check_line, load_line, parse_line
from rubricforge_dspy.data.scan import InputScan, scan_input
from rubricforge_dspy.judge.fingerprint import Fingerprint
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS

if TYPE_CHECKING:
    from rubricforge_dspy.core.trajectory import LabelRule, Trajectory
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.labels import LabelJoin

__all__ = ["JOB_SUFFIX", "LOCK_SUFFIX", "IDS_SUFFIX", "ids_path", "DoneIndex",
           "BatchOutputError", "OutputLockedError", "ResumeState", "read_done",
           "job_path", "lock_path", "output_lock", "checked_output", "check_owned", "input_fingerprint",
           "files_fingerprint", "replace_file",
           "checked_input",
           "claim_output", "claim_job"]

JOB_SUFFIX = ".job.json"


class BatchOutputError(InputError):
    """The output file cannot be resumed (not ours, corrupted, or written by another program/model).
    The command line exits 2."""


# -- resume ----------------------------------------------------------------------------------------

@dataclass
class ResumeState:
    """What a resumed job found in its output: the ids already judged, bytes of a torn tail repaired, the
    judge fingerprints seen, abstentions for LM errors to ask again, and how many ids the done index gave."""

    ids: set[str]
    repaired_bytes: int = 0
    fingerprints: set[str | None] = field(default_factory=set)  # None: a line without a fingerprint
    retried: int = 0  # abstentions for LM errors found in the file, asked again
    from_index: int = 0  # ids taken from the done index (``OUT.ids``) instead of re-reading their lines
    lines_read: int = 0  # verdict lines of the output read to decide (0: the index said everything)


IDS_SUFFIX = ".ids"
_INDEX_VERSION = 2  # 2: entries appended by the writer after the snapshot (`DoneIndex`)
_PROBE = 4096  # bytes before the covered end whose hash tells the same file from a rewritten one


def ids_path(out_path: PathArg) -> Path:
    """``OUT.ids``: the done index `read_done` keeps beside the output ``OUT``."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + IDS_SUFFIX)


def _probe(handle: BinaryIO, end: int) -> str:
    start = max(0, end - _PROBE)
    handle.seek(start)
    return hashlib.sha256(handle.read(end - start)).hexdigest()


def _load_index(path: Path) -> tuple[dict[str, Any], list[str]] | None:
    """The done index of `path` when it still describes the file's first ``covered`` bytes, else None
    (missing, unreadable, another version, or stale: the file was rewritten or cut since).

    The index is a header line, the snapshot's ids (a JSON array line), then what `DoneIndex` appended:
    a ``{"fingerprint": ...}`` line before its first id, and one ``[id, start, end]`` line per verdict
    line written at bytes ``[start, end)`` of `path` (a final line cut by a kill is ignored). The
    header's ``covered`` then becomes the last entry's ``end``, once that line of `path` is read back and
    holds that id."""
    try:
        with ids_path(path).open("rb") as handle:
            header = orjson.loads(handle.readline())
            ids = orjson.loads(handle.readline())
            appended = handle.read().split(b"\n")[:-1]  # the last piece: empty, or an entry cut by a kill
        stat = path.stat()
        if header.get("version") != _INDEX_VERSION or not isinstance(ids, list) or len(ids) != header["count"]:
            return None
        covered = header["covered"]
        if stat.st_ino != header["inode"] or stat.st_size < covered:
            return None
        if not (stat.st_size == covered and stat.st_mtime_ns == header["mtime_ns"]):
            with path.open("rb") as handle:  # appended to (or touched) since: is the covered part the same?
                if _probe(handle, covered) != header["probe"]:
                    return None
        last = None
        for raw in appended:
            entry = orjson.loads(raw)
            if isinstance(entry, dict):
                header["fingerprints"] = [*header["fingerprints"], entry["fingerprint"]]
                continue
            ident, start, end = entry
            if not isinstance(ident, str) or start != covered or end <= start:
                return None  # entries chain from the covered end, one line each
            ids.append(ident)
            covered, last = end, entry
        if last is not None:
            ident, start, end = last
            if stat.st_size < end:
                return None
            with path.open("rb") as handle:  # the last entry's line must be where the index says
                handle.seek(start)
                line = handle.read(end - start)
            if not line.endswith(b"\n") or orjson.loads(line).get("id") != ident:
                return None
        header["covered"] = covered
        return header, ids
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_index(path: Path, ids: Iterable[str], fingerprints: set[str | None], keep: bool = False) -> int | None:
    """Record the ids of every line of `path` (all done: no retried abstention left in it) in ``OUT.ids``,
    atomically, with what identifies the file: inode, size, mtime and a hash of its last bytes. With `keep`,
    the new index's descriptor is returned, open for appending (`DoneIndex`)."""
    listed = list(ids)
    stat = path.stat()
    with path.open("rb") as handle:
        probe = _probe(handle, stat.st_size)
    header = {"version": _INDEX_VERSION, "covered": stat.st_size, "size": stat.st_size,
              "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino, "probe": probe, "count": len(listed),
              "fingerprints": sorted(fingerprints, key=str)}
    return replace_file(ids_path(path), orjson.dumps(header) + b"\n" + orjson.dumps(listed) + b"\n", keep)


class DoneIndex:
    """The done index (``OUT.ids``) kept current by the verdict writer, so the next `read_done` reads
    the index only: opened after `read_done` (with the output's lock held), it rewrites the snapshot
    of the ids done so far, then `add` appends one ``[id, start, end]`` entry per verdict line written.

    An abstention for an LM error is not done (the next resume asks again, rewriting the file through
    the full pass): `add` with ``done=False`` stops the appends, so that line and every later one are
    read back from the output (`_tail`) by the next resume. A kill between a verdict line and its entry
    leaves the line to that tail read too; a kill mid-entry leaves a cut last line the reader ignores.

    Args:
        out_path: the verdict file ``OUT`` (it must exist: the writer creates it before).
        done: what `read_done` returned for it.
        fingerprint: the judge fingerprint of the verdicts this run writes.
    """

    def __init__(self, out_path: PathArg, done: ResumeState, fingerprint: str | None):
        self._path = Path(out_path)
        self._fd: int | None = _write_index(self._path, done.ids, done.fingerprints, keep=True)
        self._end = self._path.stat().st_size
        self._fingerprint = fingerprint
        self._started = False

    def add(self, ident: str, size: int, done: bool = True) -> None:
        """Record that a verdict line of `size` bytes for `ident` was appended to the output."""
        start, self._end = self._end, self._end + size
        if self._fd is None:
            return
        if not done:
            self.close()
            return
        data = orjson.dumps([ident, start, self._end]) + b"\n"
        if not self._started:
            data = orjson.dumps({"fingerprint": self._fingerprint}) + b"\n" + data
            self._started = True
        write_all(self._fd, data)

    def close(self) -> None:
        """Stop appending (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _tail(path: Path, start: int, known: set[str], retry_kinds: frozenset[str]
          ) -> tuple[list[dict[str, Any]], int, int] | None:
    """The verdict lines after byte `start` (each checked by `check_line`), the bytes of a final line
    cut without its newline, and the line number it starts at; None when a line there must be asked
    again (a retried abstention: the full pass rewrites the file)."""
    records: list[dict[str, Any]] = []
    torn = 0
    with path.open("rb") as handle:
        handle.seek(start)
        for raw in handle:
            if not raw.endswith(b"\n"):
                torn = len(raw)
                break
            if not raw.strip():
                continue
            where = f"{path} (after byte {start})"
            record = check_line(load_line(raw, where), where)
            if record["id"] in known:
                raise VerdictLineError(f"{path}: duplicate id {record['id']!r}")
            if record["abstained"] and record.get("error_kind") in retry_kinds:
                return None
            known.add(record["id"])
            records.append(record)
    return records, torn, start


def read_done(out_path: PathArg, repair: bool = True, retry_kinds: frozenset[str] = LM_ERROR_KINDS) -> ResumeState:
    """Ids already judged in `out_path` (each line checked as `rubricforge_dspy.core.verdict.read_verdicts`
    checks it, in one streaming pass that keeps the ids only, never the lines). A final
    line without its newline (a kill mid-write) is truncated away when `repair` is true; any other line
    that is not a verdict, or a repeated id, raises `BatchOutputError` naming the line.

    Abstentions whose error kind is in `retry_kinds` (the server failed to answer: timeouts,
    connection errors, HTTP errors) are not done: when `repair` is true they are removed from the file
    (rewritten atomically) so the resumed run asks again, as the cache would. Format failures (parse,
    truncated, invalid) are answers and stay.

    O(1) resume: with `repair`, the ids are also written to ``OUT.ids`` (`ids_path`), whose header
    records the file's inode, size, mtime and a hash of its last bytes. The next call takes the ids of
    the part of the file the index covers from it and reads only the lines appended since; a missing,
    unreadable or stale index (the file was rewritten or cut) falls back to one full pass. The verdict
    writer of `apply.stream` keeps the index current as it writes (`DoneIndex`), so after a run this
    reads the index (and the last indexed line, to check it) only."""
    path = Path(out_path)
    state = ResumeState(ids=set())
    if not path.exists():
        return state
    if repair and retry_kinds == LM_ERROR_KINDS:
        quick = _resume_from_index(path, state, retry_kinds)
        if quick is not None:
            return quick
    try:
        ids, retried, complete = _full_pass(path, state, retry_kinds)
    except VerdictLineError as error:
        raise BatchOutputError(f"cannot resume {path}, line {error.line}: {error}; refusing to append to it") from error
    state.ids = set(ids)
    if repair and retried:
        _drop_lines(path, retried, complete)
    elif state.repaired_bytes and repair:
        os.truncate(path, complete)
    if repair and retry_kinds == LM_ERROR_KINDS:
        _write_index(path, ids, state.fingerprints)
    return state


def _full_pass(path: Path, state: ResumeState, retry_kinds: frozenset[str]) -> tuple[dict[str, None], set[str], int]:
    """One streaming pass over the verdict file `path`, keeping ids only (never the lines): the done ids
    in file order (a dict used as an ordered set), the ids of abstentions to ask again, and the bytes
    before a final line cut without its newline; fills `state`'s counts and fingerprints. Each line is
    checked as `core.verdict.read_verdicts` checks it; a repeated id names both lines."""
    done: dict[str, None] = {}
    retried: set[str] = set()
    complete = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.endswith(b"\n"):
                state.repaired_bytes = len(raw)
                break
            complete += len(raw)
            if not raw.strip():
                continue
            record = parse_line(raw, path, number)
            ident = record["id"]
            if ident in done or ident in retried:
                error = VerdictLineError(f"{path}:{number}: duplicate id {ident!r} "
                                         f"(first on line {_first_line(path, ident)})")
                error.line = number
                raise error
            state.lines_read += 1
            if record["abstained"] and record.get("error_kind") in retry_kinds:
                retried.add(ident)
                continue
            done[ident] = None
            state.fingerprints.add(record.get("judge_fingerprint"))
    state.retried = len(retried)
    return done, retried, complete


def _first_line(path: Path, ident: str) -> int | None:
    """The number of the first line of `path` holding `ident` (for a duplicate's message)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                if orjson.loads(raw).get("id") == ident:
                    return number
            except (orjson.JSONDecodeError, AttributeError):
                continue
    return None


def _drop_lines(path: Path, retried: set[str], complete: int) -> None:
    """Rewrite `path` (atomically, streaming) without the lines of the `retried` ids, blank lines and
    anything after its first `complete` bytes (a torn final line). The new file is flocked before it is
    renamed into place and becomes the file lock this process holds for `path` (`relock`)."""
    temporary = path.with_name(path.name + ".tmp")
    fd = new_file(temporary)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file created now: nobody else holds it
        with path.open("rb") as source, open(os.dup(fd), "wb") as target:
            read = 0
            for raw in source:
                read += len(raw)
                if read > complete:
                    break
                if raw.strip() and orjson.loads(raw)["id"] not in retried:
                    target.write(raw)
        os.replace(temporary, path)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    relock(path, fd)


def _resume_from_index(path: Path, state: ResumeState, retry_kinds: frozenset[str]) -> ResumeState | None:
    """`read_done` through the done index: the indexed ids, plus the lines appended after them (checked
    one by one); None when there is no usable index or the tail needs the full pass."""
    found = _load_index(path)
    if found is None:
        return None
    header, ids = found
    known = set(ids)
    if len(known) != len(ids):
        return None  # an index listing an id twice is not ours: read the file
    try:
        tail = _tail(path, header["covered"], known, retry_kinds)
    except (VerdictLineError, orjson.JSONDecodeError):
        return None  # a bad line after the covered part: the full pass names it (file and line)
    if tail is None:
        return None
    records, torn, _ = tail
    state.lines_read = len(records)
    state.ids = known
    state.from_index = len(ids)
    state.fingerprints = set(header["fingerprints"]) | {r.get("judge_fingerprint") for r in records}
    if torn:
        state.repaired_bytes = torn
        os.truncate(path, path.stat().st_size - torn)
    if records or torn:
        _write_index(path, known, state.fingerprints)
    return state


# -- the job an output file belongs to ---------------------------------------------------------

def job_path(out_path: PathArg) -> Path:
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + JOB_SUFFIX)


def input_fingerprint(paths: Iterable[PathArg], **settings: Any) -> str:
    """sha256 over the input files' bytes (directories: every file under them, sorted) and the load
    `settings` (format, label threshold, ...): which data a verdict file was judged on."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for root in sorted(Path(p) for p in paths):
        files = sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else [root]
        for file in files:
            digest.update(str(file.name).encode() + b"\0")
            with file.open("rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def _mapping_files(format: str) -> list[Path]:
    """The mapping file of a mapped format (``--map``): part of what the data are, so of their fingerprint."""
    from rubricforge_dspy.data.formats import format_named

    fmt = format_named(format) if format not in (None, "auto") else None
    mapping = None if fmt is None else fmt.mapping
    return [Path(mapping.file)] if mapping is not None and Path(mapping.file).is_file() else []


def checked_input(paths: list[PathArg], *, format: str, label_threshold: float | str | LabelRule | None,
                  on_error: str, limit: int | None, labels: LabelJoin | None = None,
                  report: LoadReport | None = None, each: Callable[[Trajectory], None] | None = None
                  ) -> tuple[InputScan, str]:
    """Check the whole input before anything is paid, and fingerprint it for the job file.

    Args:
        paths: the input files or directories.
        format, label_threshold, on_error, limit: as for `data.formats.iter_trajectories`.
        labels: a `data.labels.LabelJoin` (its labels past `limit` are left out of its report), or None.
        report: the `LoadReport` the pass fills (default: the scan's own).
        each: called with each trajectory within `limit` during the same pass (`data.scan.scan_input`).

    Returns:
        The scan (ids, counts; `data.scan.scan_input`) and `input_fingerprint` of the files (with the mapping
        file of a mapped format: a changed mapping is changed data) and settings.

    Raises:
        InputError: a `limit` below 1, a malformed record (unless ``on_error="skip"``), a repeated id, or an
            empty input.
    """
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1, got {limit}: nothing would be judged")
    scan = scan_input(paths, format=format, label_threshold=label_threshold, on_error=on_error, limit=limit,
                      label_ids=labels.file.entries if labels is not None else None, report=report, each=each)
    if labels is not None:
        labels.leave_out(scan.beyond_limit_labeled)
    return scan, files_fingerprint(paths, format=format, label_threshold=label_threshold,
                                   label_file=labels.file.path if labels is not None else None)


def files_fingerprint(paths: list[PathArg], *, format: str, label_threshold: float | str | LabelRule | None,
                      label_file: PathArg | None = None) -> str:
    """The data fingerprint of a judging job (``data_fingerprint`` in ``OUT.job.json``): `input_fingerprint`
    of the input files, the label file, the mapping file of a mapped format (a changed mapping is changed
    data), the format and the label threshold."""
    files: list[PathArg] = [*paths, *([label_file] if label_file is not None else []), *_mapping_files(format)]
    return input_fingerprint(files,
                             format=format, label_threshold=None if label_threshold is None else str(label_threshold))


def claim_output(out_path: PathArg, fingerprint: Fingerprint, data: str | None, has_lines: bool) -> None:
    """Record (or check) which job `out_path` belongs to; raises `BatchOutputError` on a mismatch. The job file
    is written whole to a new file renamed into place: a link to it is replaced, never written through."""
    path = job_path(out_path)
    if path.exists():
        job = json.loads(path.read_text())
        problems = []
        if job.get("judge_fingerprint") != fingerprint.sha256:
            changed = Fingerprint(job.get("judge_fingerprint", ""), job.get("judge_parts") or {}).diff(fingerprint)
            problems.append(f"another judge configuration (changed: {', '.join(changed[:6]) or 'unknown'})")
        if data is not None and job.get("data_fingerprint") not in (None, data):
            problems.append("other input data")
        if problems and has_lines:
            raise BatchOutputError(
                f"{out_path}: belongs to another job ({'; '.join(problems)}). Appending would mix verdicts of "
                f"two jobs in one file. Use a new --out, or delete {out_path} and {path} to start over.")
        if not problems:
            return
    elif has_lines:
        return  # a file from an older version: its lines are checked one by one (read_done)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps({"judge_fingerprint": fingerprint.sha256, "data_fingerprint": data,
                                    "judge_parts": fingerprint.parts}, indent=1, sort_keys=True, default=str).encode())


def claim_job(out_path: PathArg, fingerprint: Fingerprint, data: str | None, done: ResumeState) -> None:
    """`claim_output`, then refuse an output whose lines (the `done` of `read_done`) carry the fingerprint of
    another judge configuration: every back end claims its output this way before its first call.

    Raises:
        BatchOutputError: `out_path` belongs to another job, or holds another judge's verdicts.
    """
    claim_output(out_path, fingerprint, data, bool(done.ids))
    foreign = {f for f in done.fingerprints if f not in (None, fingerprint.sha256)}
    if done.ids and foreign:
        raise BatchOutputError(
            f"{out_path}: holds verdicts of another judge configuration (fingerprints {sorted(foreign)[:3]}); "
            f"this run is {fingerprint.sha256}. Use a new output path.")
