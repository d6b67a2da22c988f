"""Where a mapping's records are: JSON documents (streamed for simple paths), JSON Lines, one file per record.

A JSON document whose records path is simple (``@`` or ``[*]`` for a top-level array, ``*`` for the
values of a top-level object, ``a.b[*]`` / ``a.b.*`` for an array / object member) is streamed with
ijson, one record at a time, so memory holds one record; any other JMESPath reads the document whole
(the path is evaluated by `jmespath`). JSON Lines are read one line at a time.

Every read is bounded (`limits`): a JSON line, a per-record file or a streamed record larger than
`max_record_bytes` is a bad record naming the file, the record and the cap, read in memory bounded by the
cap (a long line is skipped in 1 MiB reads; a streamed record stops the file's stream, the rest of the
file being named unreadable); a document read whole that is larger than the cap has each record's size
checked. Data nest at most `MAX_STREAM_DEPTH` levels (`NestingDepth`, the streaming guard of the shipped
readers): a deeper record or document is a bad record, never handed to a recursive parser.

A records path through nested objects (``*.*``, ``a.*.*``: ``{category: {trial: record}}``) is streamed too,
from ijson's events, one record at a time; its record's key is the tuple of member names on the way,
outermost first (``key(n)``), and ``$key`` / ``key()`` the innermost.

Every record comes as ``(file, index, key, default_id, value | TrajectoryFormatError, keys)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson
import orjson
from ijson.common import ObjectBuilder

from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.files import regular_file
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats._json_stream import (
    MAX_STREAM_DEPTH,
    STREAM_CHUNK,
    Malformed,
    NestingDepth,
    stream_json_array,
)
from rubricforge_dspy.data.formats.jsonl import line_value
from rubricforge_dspy.data.formats.mapping.limits import RECORD_CAP_ENV, EvaluationLimitError, max_record_bytes
from rubricforge_dspy.data.formats.mapping.spec import Expr, Mapping, compile_field

_ARRAY_ROOT = ("@", "[*]", "[]", "@[*]", "@[]")
_SIMPLE = re.compile(r"^(?P<prefix>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?P<tail>\[\*\]|\[\]|\.\*)$")
_NESTED = re.compile(r"^(?:(?P<prefix>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\.)?"
                     r"(?P<levels>\*(?:\.\*)+)$")  # two or more object levels: *.*, a.b.*.*


def data_files(path: Path, mapping: Mapping) -> list[Path]:
    """The data files of `path`: the file itself, or a folder's files matching the mapping's glob (sorted;
    hidden files and folders left out)."""
    if not path.exists():
        raise TrajectoryFormatError(str(path), None, "no such file or directory")
    if regular_file(path, "data file", directory=True).is_file():
        return [path]
    found = sorted(p for p in path.glob(mapping.glob) if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not found and "**" not in mapping.glob:
        found = sorted(p for p in path.rglob(mapping.glob) if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
    return found


def file_name(file: Path, root: Path, folder: bool) -> str:
    """A data file as ``$file`` / ``file()`` name it: its path under the data folder without the suffix
    (``gpt-4/overall``), or its stem when a file was given."""
    return file.relative_to(root).with_suffix("").as_posix() if folder else file.stem


def iter_records(path: Path, mapping: Mapping) -> Iterator[tuple[Path, int, Any, str, Any, tuple[Any, ...]]]:
    """``(file, index, key, default id, value | TrajectoryFormatError, keys)`` of every record under `path`;
    `keys` are the member names of the objects the records path went through, outermost first (``key(n)``;
    empty for a line, an array element or a file), and `key` the innermost of them when there are some."""
    root = path if path.is_dir() else path.parent
    files = data_files(path, mapping)
    if not files:
        yield path, 0, None, "", TrajectoryFormatError(str(path), None, f"no file in this folder matches the mapping's "
                                                                         f"glob {mapping.glob!r} (records.glob)"), ()
    records_path = mapping.records_path or ""  # None only for "jsonl", which reads no path
    inner = compile_field(records_path, mapping.file, "records.path") if mapping.source == "files" else None
    cap = max_record_bytes()
    for file in files:
        if inner is not None:  # mapping.source == "files"
            key = file_name(file, root, path.is_dir())
            size = file.stat().st_size
            value = _over_cap(file, None, f"the file is {size:,} bytes", cap) if size > cap else _whole(file)
            if not isinstance(value, TrajectoryFormatError) and records_path not in _ARRAY_ROOT:
                value = _select(inner, value, file, size)
                if value is None:
                    value = TrajectoryFormatError(str(file), None, f"records.path {mapping.records_path!r} "
                                                                   "resolved to nothing")
            yield file, 0, key, key, value, ()
        elif mapping.source == "jsonl":
            for index, value in _json_lines(file, cap):
                yield file, index, index, f"{file.stem}:{index}", value, ()
        else:
            member = records_path == "*" or records_path.endswith(".*")  # keys are member names
            for index, key, value in _json_records(file, records_path, cap):
                if isinstance(key, tuple):  # a nested records path: the member names on the way
                    yield file, index, key[-1], f"{file.stem}:{'/'.join(map(str, key))}", value, key
                else:
                    keys = (key,) if member and isinstance(key, str) else ()
                    yield file, index, key, f"{file.stem}:{key}", value, keys


def _select(path: Expr, document: Any, file: Path, size: int) -> Any:
    """The records path's value on a document of `size` bytes (its budget grows with them), or the error
    naming the file when it goes past it."""
    try:
        return path(document, size=size)
    except EvaluationLimitError as exc:
        return TrajectoryFormatError(str(file), None, str(exc))


def _over_cap(file: Path, record: int | None, what: str, cap: int) -> TrajectoryFormatError:
    """The bad record of a record larger than the record cap (named by `what`)."""
    return TrajectoryFormatError(str(file), record, f"{what}, over the record cap of {cap:,} bytes (set "
                                                    f"{RECORD_CAP_ENV} to a larger number of MiB to read it)")


def _too_deep(file: Path, record: int | None) -> TrajectoryFormatError:
    return TrajectoryFormatError(str(file), record, f"JSON nested more than {MAX_STREAM_DEPTH} levels deep (deeper "
                                                    "than any trajectory): not read")


def _json_lines(file: Path, cap: int) -> Iterator[tuple[int, Any]]:
    """``(line index, value | TrajectoryFormatError)`` of every non-blank line, as `iter_json_lines` reads
    them, each line read in at most `cap` bytes: a longer one is skipped (in 1 MiB reads) and named."""
    with open(file, "rb") as handle:
        index = -1
        while True:
            raw = handle.readline(cap + 1)
            if not raw:
                return
            index += 1
            if len(raw) > cap and not raw.endswith(b"\n"):
                size = len(raw)
                while (rest := handle.readline(1 << 20)):
                    size += len(rest)
                    if rest.endswith(b"\n"):
                        break
                yield index, _over_cap(file, index, f"line {index + 1} is {size:,} bytes", cap)
            elif raw.count(b"[") + raw.count(b"{") > MAX_STREAM_DEPTH and not NestingDepth().feed(raw):
                yield index, _too_deep(file, index)  # (never deeper than its opening brackets: counted first)
            elif raw.strip():
                yield index, line_value(file, index, raw)


def _whole(file: Path) -> Any:
    data = file.read_bytes()
    if not NestingDepth().feed(data):
        return _too_deep(file, None)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return TrajectoryFormatError(str(file), None, f"malformed JSON: {exc}")


def _json_records(file: Path, records_path: str, cap: int) -> Iterator[tuple[int, Any, Any]]:
    """``(index, key, value)`` of the records of one JSON document; a document in which the path matches
    no record gives one error naming the file (never an empty load that looks like success). In a document
    larger than `cap`, a record may be too: each is checked (`_record_size`)."""
    n = 0
    big = file.stat().st_size > cap
    for index, key, value in _json_records_of(file, records_path, cap if big else None):
        n += 1
        if big and not isinstance(value, TrajectoryFormatError) and _record_size(value, cap) > cap:
            value = _over_cap(file, index, f"record {index} is more than {cap:,} bytes of JSON", cap)
        yield index, key, value
    if n == 0:
        yield 0, 0, TrajectoryFormatError(str(file), None, f"records.path {records_path!r} matched no records")


def _record_size(value: Any, cap: int) -> int:
    """About the bytes `value` takes as JSON (strings and keys by length, 8 per other value), counted up to
    a little past `cap` and no further, without recursion."""
    size, stack = 0, [value]
    while stack and size <= cap:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2 + sum(len(key) + 4 for key in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            size += 2 + len(item)
            stack.extend(item)
        else:
            size += 8
    return size


def _json_records_of(file: Path, records_path: str, cap: int | None) -> Iterator[tuple[int, Any, Any]]:
    """The records of one document; `cap` (for a document larger than the record cap) streams with a
    guard that stops at a record larger than it."""
    head = _head(file)
    if records_path in _ARRAY_ROOT and head == b"[":
        yield from (_stream_array(file) if cap is None else _stream_items(file, "", cap))
        return
    simple = _SIMPLE.match(records_path) if head == b"{" else None
    if records_path == "*" and head == b"{":
        yield from _stream_members(file, "", cap)
        return
    nested = _NESTED.match(records_path) if head == b"{" else None
    if nested:
        yield from _stream_nested(file, nested["prefix"] or "", nested["levels"].count("*"), cap)
        return
    if simple:
        prefix = simple["prefix"]
        yield from (_stream_members(file, prefix, cap) if simple["tail"] == ".*"
                    else _stream_items(file, prefix, cap))
        return
    document = _whole(file)
    if isinstance(document, TrajectoryFormatError):
        yield 0, 0, document
        return
    found = _select(compile_field(records_path, "", "records.path"), document, file, file.stat().st_size)
    if isinstance(found, TrajectoryFormatError):
        yield 0, 0, found
        return
    if records_path == "*" and isinstance(document, dict):
        found = document
    if isinstance(found, dict) and records_path == "*":  # a dict of records: its values, keys kept
        yield from ((i, key, value) for i, (key, value) in enumerate(found.items()))
    elif isinstance(found, dict):  # the path names one object: that is the record
        yield 0, 0, found
    elif isinstance(found, list):
        yield from ((i, i, value) for i, value in enumerate(found))
    else:
        problem = "resolved to nothing" if found is None else f"is a {type(found).__name__}, not a list or object"
        yield 0, 0, TrajectoryFormatError(str(file), None, f"records.path {records_path!r} {problem}")


def _head(file: Path) -> bytes:
    with open(file, "rb") as handle:
        return handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]


def _stream_array(file: Path) -> Iterator[tuple[int, Any, Any]]:
    index = -1
    try:
        for index, value, bad_bytes in stream_json_array(file, strip_bom=True):
            yield index, index, (TrajectoryFormatError(str(file), index, "invalid UTF-8 bytes in record")
                                 if bad_bytes else value)
    except Malformed as exc:
        at = exc.index if isinstance(exc.index, int) else index + 1  # an array's elements: int or None
        yield at, at, TrajectoryFormatError(str(file), at, f"{exc.problem}; the rest of the JSON array is unreadable")
    except RecursionError:  # deeper than the streaming guard lets ijson read, and than `json` follows
        yield index + 1, index + 1, _too_deep(file, index + 1)


def _unreadable(file: Path, index: int, exc: Exception) -> TrajectoryFormatError:
    return TrajectoryFormatError(str(file), index, f"malformed JSON after record {index - 1}: {exc}; the rest of "
                                                   "the file is unreadable")


class _Stop(RubricForgeError):
    """Raised through ijson by `_CappedReader`: the rest of the file is not read (``too_big``: a record past
    the cap; else nested too deeply)."""

    def __init__(self, too_big: bool):
        super().__init__("record past the cap" if too_big else "nested too deeply")
        self.too_big = too_big


class _CappedReader:
    """A binary file for ijson that stops (`_Stop`) where arrays and objects nest deeper than
    `MAX_STREAM_DEPTH` (`NestingDepth`) or, with a `cap`, where more than `cap` bytes (and two reads of
    slack: ijson reads ahead) are read between two records (`mark`), so a record past the cap is never
    built whole."""

    def __init__(self, handle: BinaryIO, cap: int | None):
        self._handle = handle
        self._cap = cap
        self._depth = NestingDepth()
        self.since = 0  # bytes read since the last record

    def mark(self) -> None:
        self.since = 0

    def read(self, size: int = STREAM_CHUNK) -> bytes:
        data = self._handle.read(size)
        self.since += len(data)
        if self._cap is not None and self.since > self._cap + 2 * STREAM_CHUNK:
            raise _Stop(too_big=True)
        if not self._depth.feed(data):
            raise _Stop(too_big=False)
        return data


def _stream(file: Path, cap: int | None,
            records: Callable[[_CappedReader], Iterator[tuple[Any, Any]]]) -> Iterator[tuple[int, Any, Any]]:
    """``(index, key, value)`` of `records(reader)` (ijson ``(key, value)`` pairs read through a
    `_CappedReader`); a malformed tail, a record past the cap or nested too deeply ends the file with one
    error naming the record."""
    index = -1
    try:
        with open(file, "rb") as handle:
            reader = _CappedReader(handle, cap)
            for index, (key, value) in enumerate(records(reader)):
                reader.mark()
                yield index, index if key is None else key, value
    except (ijson.JSONError, UnicodeDecodeError) as exc:
        yield index + 1, index + 1, _unreadable(file, index + 1, exc)
    except _Stop as stop:
        at = index + 1
        if stop.too_big and cap is not None:  # (only a cap stops a record as too big)
            error = _over_cap(file, at, f"record {at} is more than {cap:,} bytes", cap)
        else:
            error = _too_deep(file, at)
        yield at, at, TrajectoryFormatError(str(file), at, f"{error.problem}; the rest of the file is not read")


def _stream_members(file: Path, prefix: str, cap: int | None = None) -> Iterator[tuple[int, Any, Any]]:
    """The members of the object at `prefix` (``""``: the document), one at a time, with their keys."""
    return _stream(file, cap, lambda reader: ijson.kvitems(reader, prefix, use_float=True, buf_size=STREAM_CHUNK))


def _stream_items(file: Path, prefix: str, cap: int | None = None) -> Iterator[tuple[int, Any, Any]]:
    """The elements of the array at `prefix` (``""``: the document), one at a time."""
    item = f"{prefix}.item" if prefix else "item"
    return _stream(file, cap, lambda reader: ((None, value) for value in
                                              ijson.items(reader, item, use_float=True, buf_size=STREAM_CHUNK)))


def _stream_nested(file: Path, prefix: str, levels: int, cap: int | None = None) -> Iterator[tuple[int, Any, Any]]:
    """The records `levels` objects deep under the object at `prefix` (``""``: the document), one at a time,
    keyed by the tuple of member names on the way (``*.*`` on ``{category: {trial: record}}``:
    ``(category, trial)``). As JMESPath's ``*.*`` does, a member that is not an object at a level above the
    records is passed over (its values are no records); at the last level every value is a record (a
    ``records.filter`` leaves out what is not one, counted)."""
    return _stream(file, cap, lambda reader: _nested_pairs(reader, prefix, levels))


def _nested_pairs(reader: Any, prefix: str, levels: int) -> Iterator[tuple[tuple[Any, ...], Any]]:
    events = ijson.parse(reader, use_float=True, buf_size=STREAM_CHUNK)
    for where, event, _ in events:  # to the object at `prefix`
        if where == prefix and event == "start_map":
            break
    else:
        return
    keys: list[str] = []  # the member names of the levels entered so far
    for _, event, value in events:
        if event == "end_map":
            if not keys:
                return  # the object at `prefix` is closed
            keys.pop()
            continue
        if event != "map_key":
            continue  # (never reached: inside a map, a member starts with its key)
        if len(keys) == levels - 1:  # the member's value is a record
            yield (*keys, value), _build(events)
            continue
        _, event, _ = next(events)
        if event == "start_map":
            keys.append(value)
        else:
            _skip(events, event)  # not an object above the records' level: no records in it


def _build(events: Iterator[tuple[str, str, Any]]) -> Any:
    """The value whose events come next in `events`, built whole (one record)."""
    builder = ObjectBuilder()
    depth = 0
    for _, event, value in events:
        builder.event(event, value)
        depth += event in ("start_map", "start_array")
        depth -= event in ("end_map", "end_array")
        if depth == 0:
            return builder.value
    raise ijson.IncompleteJSONError("the document ends inside a record")


def _skip(events: Iterator[tuple[str, str, Any]], first: str) -> None:
    """Pass over a value whose first event was `first`."""
    depth = int(first in ("start_map", "start_array"))
    while depth:
        _, event, _ = next(events)
        depth += event in ("start_map", "start_array")
        depth -= event in ("end_map", "end_array")
