"""Where a mapping's records are: JSON documents (streamed for simple paths), JSON Lines, one file per record.

A JSON document whose records path is simple (``@`` or ``[*]`` for a top-level array, ``*`` for the
values of a top-level object, ``a.b[*]`` / ``a.b.*`` for an array / object member) is streamed with
ijson, one record at a time, so memory holds one record; any other JMESPath reads the document whole
(the path is evaluated by `jmespath`). JSON Lines are read one line at a time.

Every record comes as ``(file, key, default_id, value | TrajectoryFormatError)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ijson
import orjson

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats._json_stream import Malformed, stream_json_array
from rubricforge_dspy.data.formats.jsonl import iter_json_lines
from rubricforge_dspy.data.formats.mapping.spec import Mapping, compile_field

_ARRAY_ROOT = ("@", "[*]", "[]", "@[*]", "@[]")
_SIMPLE = re.compile(r"^(?P<prefix>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?P<tail>\[\*\]|\[\]|\.\*)$")


def data_files(path: Path, mapping: Mapping) -> list[Path]:
    """The data files of `path`: the file itself, or a folder's files matching the mapping's glob (sorted;
    hidden files and folders left out)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TrajectoryFormatError(str(path), None, "no such file or directory")
    found = sorted(p for p in path.glob(mapping.glob) if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not found and "**" not in mapping.glob:
        found = sorted(p for p in path.rglob(mapping.glob) if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
    return found


def iter_records(path: Path, mapping: Mapping) -> Iterator[tuple[Path, int, Any, str, Any]]:
    """``(file, index, key, default id, value | TrajectoryFormatError)`` of every record under `path`."""
    root = path if path.is_dir() else path.parent
    files = data_files(path, mapping)
    if not files:
        yield path, 0, None, "", TrajectoryFormatError(str(path), None, f"no file in this folder matches the mapping's "
                                                                         f"glob {mapping.glob!r} (records.glob)")
    inner = compile_field(mapping.records_path, mapping.file, "records.path") if mapping.source == "files" else None
    for file in files:
        if mapping.source == "files":
            key = file.relative_to(root).with_suffix("").as_posix() if path.is_dir() else file.stem
            value = _whole(file)
            if not isinstance(value, TrajectoryFormatError) and mapping.records_path not in _ARRAY_ROOT:
                value = inner(value)
                if value is None:
                    value = TrajectoryFormatError(str(file), None, f"records.path {mapping.records_path!r} "
                                                                   "resolved to nothing")
            yield file, 0, key, key, value
        elif mapping.source == "jsonl":
            for index, value in iter_json_lines(file):
                yield file, index, index, f"{file.stem}:{index}", value
        else:
            for index, key, value in _json_records(file, mapping.records_path):
                yield file, index, key, f"{file.stem}:{key}", value


def _whole(file: Path) -> Any:
    try:
        return orjson.loads(file.read_bytes())
    except orjson.JSONDecodeError as exc:
        return TrajectoryFormatError(str(file), None, f"malformed JSON: {exc}")


def _json_records(file: Path, records_path: str) -> Iterator[tuple[int, Any, Any]]:
    """``(index, key, value)`` of the records of one JSON document; a document in which the path matches
    no record gives one error naming the file (never an empty load that looks like success)."""
    n = 0
    for item in _json_records_of(file, records_path):
        n += 1
        yield item
    if n == 0:
        yield 0, 0, TrajectoryFormatError(str(file), None, f"records.path {records_path!r} matched no records")


def _json_records_of(file: Path, records_path: str) -> Iterator[tuple[int, Any, Any]]:
    head = _head(file)
    if records_path in _ARRAY_ROOT and head == b"[":
        yield from _stream_array(file)
        return
    simple = _SIMPLE.match(records_path) if head == b"{" else None
    if records_path == "*" and head == b"{":
        yield from _stream_members(file, "")
        return
    if simple:
        prefix = simple["prefix"]
        yield from (_stream_members(file, prefix) if simple["tail"] == ".*" else _stream_items(file, prefix))
        return
    document = _whole(file)
    if isinstance(document, TrajectoryFormatError):
        yield 0, 0, document
        return
    found = compile_field(records_path, "", "records.path")(document)
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
        at = exc.index if exc.index is not None else index + 1
        yield at, at, TrajectoryFormatError(str(file), at, f"{exc.problem}; the rest of the JSON array is unreadable")


def _unreadable(file: Path, index: int, exc: Exception) -> TrajectoryFormatError:
    return TrajectoryFormatError(str(file), index, f"malformed JSON after record {index - 1}: {exc}; the rest of "
                                                   "the file is unreadable")


def _stream_members(file: Path, prefix: str) -> Iterator[tuple[int, Any, Any]]:
    """The members of the object at `prefix` (``""``: the document), one at a time, with their keys."""
    index = 0
    try:
        with open(file, "rb") as handle:
            for index, (key, value) in enumerate(ijson.kvitems(handle, prefix, use_float=True)):
                yield index, key, value
    except (ijson.JSONError, UnicodeDecodeError) as exc:
        yield index + 1, index + 1, _unreadable(file, index + 1, exc)


def _stream_items(file: Path, prefix: str) -> Iterator[tuple[int, Any, Any]]:
    """The elements of the array at `prefix`, one at a time."""
    index = -1
    try:
        with open(file, "rb") as handle:
            for index, value in enumerate(ijson.items(handle, prefix + ".item", use_float=True)):
                yield index, index, value
    except (ijson.JSONError, UnicodeDecodeError) as exc:
        yield index + 1, index + 1, _unreadable(file, index + 1, exc)
