"""The JSON readers of the format loaders: whole-text iteration, the ijson streaming engine and its
guard, and the sniffing reads (a file's prefix, its first JSON lines).

One streaming engine, ijson: `stream_json_array` and `scan_json_object`/`scan_json_array` read a large
document element by element. `iter_json_array` and `iter_json_object` are not a second engine but the
standard library's `json` decoder walked element by element over a text already in memory. It is kept,
for two reasons:

* Measured: a whole document must be scanned before it is streamed (two passes), which costs CPU where
  records are cheap to convert (Inspect logs +34%, tau2 results +11% at 10k records: runs
  ``inspect_before``/``inspect_after`` and ``tau2_before``/``tau2_after`` of
  ``evals/results/ingest_documents.json``, evals/RESULTS.md), so files under `STREAM_FROM` bytes are read
  whole in one parse.
* Meaning: it defines what a document reads as. NaN, integers past 64 bits, lone surrogate escapes and
  invalid UTF-8 are read as `json` reads them and a malformed element is named by its index; wherever
  ijson refuses the bytes or could read them differently, the file is read whole by it (removing it
  would change what loads and the errors, not only the speed; docs/FORMAT.md, "Large files").
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson

from rubricforge_dspy.core.errors import InputError, RubricForgeError

_WS = re.compile(r"\s*")
_LONE_SURROGATE = re.compile("[\udc80-\udcff]")


class Malformed(InputError):
    """A JSON container whose element ``index`` cannot be parsed; later elements are unreachable."""

    def __init__(self, index: int | str | None, problem: str, key: str | None = None, start: int | None = None):
        super().__init__(problem)
        self.index = index
        self.problem = problem
        self.key = key  # for objects: the member whose value failed, and where that value starts
        self.start = start


def read_text(path: Path) -> tuple[str, bool]:
    """The file's text and whether it held invalid UTF-8 (kept as lone surrogates, see `has_bad_bytes`)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="surrogateescape"), True


def has_bad_bytes(value: Any) -> bool:
    """True when a decoded JSON value contains text that came from invalid UTF-8 bytes."""
    if isinstance(value, str):
        return bool(_LONE_SURROGATE.search(value))
    if isinstance(value, dict):
        return any(has_bad_bytes(k) or has_bad_bytes(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_bad_bytes(v) for v in value)
    return False


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    if match is None:  # ``\s*`` matches (the empty string) at any position
        raise RubricForgeError(f"no whitespace match at position {pos}")
    return match.end()


def _describe(err: json.JSONDecodeError) -> str:
    return f"malformed JSON: {err.msg} (line {err.lineno}, column {err.colno})"


def iter_json_array(text: str, pos: int = 0) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, element)`` of the JSON array at ``text[pos]``, one element at a time.

    Raises `Malformed` naming the element that cannot be parsed (the array cannot be resynchronised
    after it, so iteration stops there).
    """
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, pos)
    if text[pos : pos + 1] != "[":
        raise Malformed(None, "expected a JSON array")
    pos = _skip_ws(text, pos + 1)
    if text[pos : pos + 1] == "]":
        return
    index = 0
    while True:
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise Malformed(index, _describe(err)) from None
        yield index, value
        pos = _skip_ws(text, pos)
        sep = text[pos : pos + 1]
        if sep == "]":
            return
        if sep != ",":
            raise Malformed(index + 1, f"malformed JSON: expected ',' or ']' at offset {pos}")
        pos = _skip_ws(text, pos + 1)
        index += 1


def iter_json_object(text: str, pos: int = 0) -> Iterator[tuple[int, str, Any, int]]:
    """Yield ``(index, key, value, value_offset)`` of the JSON object at ``text[pos]``, one member at a time."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, pos)
    if text[pos : pos + 1] != "{":
        raise Malformed(None, "expected a JSON object")
    pos = _skip_ws(text, pos + 1)
    if text[pos : pos + 1] == "}":
        return
    index = 0
    while True:
        key, start = None, None
        try:
            key, pos = decoder.raw_decode(text, pos)
            if not isinstance(key, str):
                raise Malformed(index, f"malformed JSON: object key is not a string (offset {pos})")
            pos = _skip_ws(text, pos)
            if text[pos : pos + 1] != ":":
                raise Malformed(index, f"malformed JSON: expected ':' after key {key!r}")
            start = _skip_ws(text, pos + 1)
            value, pos = decoder.raw_decode(text, start)
        except json.JSONDecodeError as err:
            raise Malformed(index, _describe(err), key=key, start=start) from None
        yield index, key, value, start
        pos = _skip_ws(text, pos)
        sep = text[pos : pos + 1]
        if sep == "}":
            return
        if sep != ",":
            raise Malformed(index + 1, f"malformed JSON: expected ',' or '}}' at offset {pos}")
        pos = _skip_ws(text, pos + 1)
        index += 1


# A ``\uD8xx`` escape not followed by a low-surrogate escape, or a ``\uDCxx`` escape not preceded by a
# high one: `json` keeps such a lone surrogate as it is, while ijson's parser may join it with the next
# escape into another character. Bytes matching this are read by `json` instead (`stream_json_array`).
# (Both alternatives start with a literal backslash-u, so the search skips ahead instead of trying each byte.)
_LONE_SURROGATE_ESCAPE = re.compile(rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                                    rb"|[c-fC-F][0-9a-fA-F]{2}(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}))")
_ESCAPE_CONTEXT = 12  # bytes a match needs around it (one escape before or after)
STREAM_CHUNK = 1 << 16
STREAM_FROM = 1 << 22  # bytes: whole-document files below this are read whole (`worth_streaming`)


class _NotForIjson(RubricForgeError):
    """The bytes read hold something ijson reads differently from `json` (a lone surrogate escape), or
    nest deeper than ijson reads in bounded memory (`NestingDepth`); never leaves `stream_json_array`, which
    then reads the file as before."""


# Arrays/objects nested deeper than this are not handed to ijson (`NestingDepth`), and a document the
# package hashes (a program, a cascade, a floor: `program.store.read_json_document`) is refused (`within_depth`).
MAX_STREAM_DEPTH = 512
# Kept by the first pass: brackets, quotes, backslashes and every byte JSON allows after a backslash, so
# a backslash and the byte it escapes stay together while most text goes; the second keeps brackets and quotes.
_NOT_ESCAPE_OR_MARK = bytes(sorted(set(range(256)) - set(b'"[]{}\\/bfnrtu')))
_NOT_MARK = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_DEPTH_BLOCK = 128


class NestingDepth:
    """The nesting depth of the JSON bytes fed to it, chunk by chunk (strings, and escapes split between
    chunks, included); `feed` returns False once arrays and objects nest deeper than `MAX_STREAM_DEPTH`.

    ijson keeps the prefix of every open container, so its memory grows with the square of the depth:
    a record nested 200,000 levels deep took the process down (out of memory) before any error could be
    raised. Such a file is read whole by `json` instead, which refuses it (`RecursionError`, which the
    loaders turn into an error naming the file). Byte translations, replacements and counts do the work:
    all bytes but those of brackets, quotes and escapes are dropped, then escaped backslashes and quotes,
    then all but quotes and brackets; the brackets outside strings are walked one by one only in a block
    that could reach the limit. (Exact for valid JSON; on invalid JSON, ijson stops at the first error.)"""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.carry = b""  # backslashes that ended the last chunk: they pair with what comes next

    def feed(self, data: bytes) -> bool:
        data = self.carry + data
        cut = len(data.rstrip(b"\\"))
        data, self.carry = data[:cut], data[cut:]
        kept = data.translate(None, _NOT_ESCAPE_OR_MARK)
        if b"\\\\" in kept:  # an escaped backslash (rare): dropped first, it escapes nothing after it
            kept = kept.replace(b"\\\\", b"")
        parts = kept.replace(b'\\"', b"").translate(None, _NOT_MARK).split(b'"')
        brackets = b"".join(parts[1::2] if self.in_string else parts[0::2])
        if len(parts) % 2 == 0:  # an odd number of quotes: the chunk ends on the other side
            self.in_string = not self.in_string
        for start in range(0, len(brackets), _DEPTH_BLOCK):
            block = brackets[start:start + _DEPTH_BLOCK]
            opens = block.count(b"[") + block.count(b"{")
            if self.depth + opens <= MAX_STREAM_DEPTH:
                self.depth += 2 * opens - len(block)
                continue
            for byte in block:
                self.depth += 1 if byte in (91, 123) else -1  # "[" or "{"
                if self.depth > MAX_STREAM_DEPTH:
                    return False
        return True


def within_depth(data: bytes | str) -> bool:
    """True when arrays and objects in the JSON `data` nest at most `MAX_STREAM_DEPTH` deep (`NestingDepth`,
    exact for valid JSON). Checked on the bytes, before any parser or ``json.dumps`` recurses into them."""
    return NestingDepth().feed(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)


class _GuardedReader:
    """A binary file for ijson that stops (`_NotForIjson`) at a lone surrogate escape, or where arrays
    and objects nest deeper than `MAX_STREAM_DEPTH` (`NestingDepth`). Bytes are handed on only once checked
    with their context: the last `_ESCAPE_CONTEXT` bytes of a read wait for the next one, so an escape
    split between two reads is seen whole before ijson parses it."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._before = b""  # the last bytes handed on: context for the look-behind
        self._pending = b""  # bytes read but not handed on yet
        self._depth = NestingDepth()

    def read(self, size: int = STREAM_CHUNK) -> bytes:
        while True:
            chunk = self._handle.read(size)
            data = self._before + self._pending + chunk
            lead = len(self._before)
            safe = len(data) - _ESCAPE_CONTEXT if chunk else len(data)  # at the end of the file: all of it
            if safe > lead or not chunk:
                break
            self._pending += chunk
        found = _LONE_SURROGATE_ESCAPE.search(data, lead)
        if found is not None and found.start() < safe:
            raise _NotForIjson()
        self._pending = data[safe:]
        self._before = data[max(0, safe - _ESCAPE_CONTEXT):safe]
        if not self._depth.feed(data[lead:safe]):
            raise _NotForIjson()
        return data[lead:safe]


def _open_for_ijson(path: Path, opening: bytes, strip_bom: bool) -> BinaryIO:
    """The file opened for ijson at its first byte (after a byte order mark when `strip_bom`), or
    `_NotForIjson` when the document does not start with `opening` (the whole-text reader names what it
    is instead)."""
    handle = open(path, "rb")
    try:
        head = handle.read(4096)
        start = 3 if strip_bom and head.startswith(b"\xef\xbb\xbf") else 0
        if not head[start:].lstrip(b" \t\r\n").startswith(opening):
            raise _NotForIjson()
        handle.seek(start)
    except BaseException:
        handle.close()
        raise
    return handle


_REFUSED = (_NotForIjson, ijson.JSONError, UnicodeDecodeError)  # ijson's IncompleteJSONError is a JSONError
_SCALAR_EVENTS = frozenset(("null", "boolean", "integer", "double", "number", "string"))


def _whole_array(text: str) -> Iterator[tuple[int, Any]]:
    return iter_json_array(text)


def stream_json_array(path: Path, *, prefix: str = "item", strip_bom: bool = False,
                      whole: Callable[[str], Iterator[tuple[int, Any]]] = _whole_array,
                      ) -> Iterator[tuple[int, Any, bool]]:
    """``(index, element, has_bad_bytes)`` of a JSON array in a file, streamed: memory holds one
    element, so a results file of any size is read in bounded memory.

    The array is the file itself (``prefix="item"``) or the array member of the file's top-level object
    that the ijson `prefix` names (``"simulations.item"``: the elements of ``{"simulations": [...]}``;
    check the document's shape with `scan_json_object` first). The same elements, in the same order,
    with the same `Malformed` error as `whole` (by default `iter_json_array`) over `read_text` gives
    (``has_bad_bytes`` as `has_bad_bytes` says for that text): the file is parsed by ijson (C backend,
    ``use_float``), and wherever ijson refuses the bytes or might read them differently from `json`
    (malformed JSON, invalid UTF-8, NaN, integers past 64 bits, a lone surrogate escape, a byte order
    mark that `strip_bom` does not drop, text before or after the document), the file is read whole as
    before and the elements from that one on come from `whole`, errors included. `strip_bom` drops a
    leading byte order mark first, as the generic JSONL reader does.

    Args:
        path: The JSON file.
        prefix: The ijson prefix of the array's elements.
        strip_bom: Drop a leading byte order mark (both readers).
        whole: ``whole(text)`` yields ``(index, element)`` of the array from the whole text and raises
            `Malformed` where it cannot be parsed: the reader before streaming, and the fallback.

    Returns:
        An iterator of ``(index, element, has_bad_bytes)``.

    Raises:
        Malformed: the element that cannot be parsed (the rest of the array is unreadable), as
            `whole` raises it.
    """
    done = 0
    try:
        with _open_for_ijson(path, b"[" if prefix == "item" else b"{", strip_bom) as handle:
            for value in ijson.items(_GuardedReader(handle), prefix, use_float=True, buf_size=STREAM_CHUNK):
                yield done, value, False
                done += 1
        return
    except _REFUSED:
        pass
    text, bad_bytes = read_text(path)
    if strip_bom:
        text = text.lstrip("\ufeff")
    for index, value in whole(text):
        if index >= done:
            yield index, value, bad_bytes and has_bad_bytes(value)


def scan_json_object(path: Path, big: str, pick: tuple[str, ...] = (),
                     each: Callable[[dict[str, Any] | None], object] | None = None, *,
                     keep: tuple[str, ...] | None = None, strip_bom: bool = False) -> dict[str, Any] | None:
    """The first pass over a document ``{..., big: [...], ...}`` whose `big` list is then streamed
    (`stream_json_array` with prefix ``big + ".item"``): the top-level members `keep` (all but `big` when
    None), built, and of each element of `big` only its `pick` fields, handed to `each` in order (a dict
    per object element, None for other elements), so memory holds the small members, never the list.

    The whole file is parsed (ijson events, through the same guard as `stream_json_array`), so a document
    this accepts is well formed and the second pass reads the same elements. None when the file must be
    read whole as before, which then says what is wrong: ijson refuses or could misread the bytes
    (malformed JSON, invalid UTF-8, NaN, big integers, lone surrogate escapes, a byte order mark
    `strip_bom` does not drop, trailing text), the document is not an object, `big` is missing, repeated or
    not a list, a top-level key is empty or holds a dot (ijson prefixes could not tell it apart), or a
    picked field holds an array or object.

    Args:
        path: The JSON file.
        big: The top-level member holding the long list.
        pick: Fields of each element to collect (scalars only).
        each: Called with each element's picked fields (a dict, None for an element that is not an
            object), in order; it may be called for elements of a file this then returns None for.
        keep: The top-level members to build (others are parsed, checked and dropped: an Inspect log's
            per-sample ``reductions`` grow with the file); None for all but `big`.
        strip_bom: Drop a leading byte order mark.

    Returns:
        The top-level members kept, or None.
    """
    members: dict[str, Any] = {}
    current: dict[str, Any] | None = None
    each = each or (lambda fields: None)
    item = big + ".item"
    fields = {f"{item}.{name}": name for name in pick}
    key: str | None = None
    builder: Any = None  # ijson.ObjectBuilder (ijson ships no types)
    seen = False
    try:
        with _open_for_ijson(path, b"{", strip_bom) as handle:
            for prefix, event, value in ijson.parse(_GuardedReader(handle), use_float=True, buf_size=STREAM_CHUNK):
                if key == big and prefix != "":
                    if prefix == item:
                        if event == "start_map":
                            current = {}
                        elif event == "end_map":
                            each(current)
                            current = None
                        elif event == "start_array" or event in _SCALAR_EVENTS:
                            each(None)
                    elif prefix in fields and event != "map_key" and current is not None:
                        if event not in _SCALAR_EVENTS:
                            raise _NotForIjson()
                        current[fields[prefix]] = value
                    elif prefix == big and event not in ("start_array", "end_array"):
                        raise _NotForIjson()  # not a list: the whole-text reader names the problem
                    continue
                if prefix == "":
                    if builder is not None:
                        if key is None:  # a builder is made only for a key just read
                            raise RubricForgeError(f"{path}: a member value read without its key")
                        members[key] = builder.value
                        builder = None
                    if event == "map_key":
                        if not value or "." in value or (value == big and seen):
                            raise _NotForIjson()
                        key, seen = value, seen or value == big
                        if value != big and (keep is None or value in keep):
                            builder = ijson.ObjectBuilder()
                    continue
                if builder is not None:
                    builder.event(event, value)
    except _REFUSED:
        return None
    return members if seen else None


def worth_streaming(path: Path) -> bool:
    """True for a whole-document file of `STREAM_FROM` bytes or more: a loader that must scan a document
    before streaming it (`scan_json_object`, `scan_json_array`) reads smaller files whole, in one parse
    instead of two, with the same records."""
    return path.stat().st_size >= STREAM_FROM


def scan_json_array(path: Path, *, strip_bom: bool = False) -> bool:
    """The first pass over a file that is one JSON array, before `stream_json_array` reads its elements:
    True when ijson reads the whole file as an array (so the second pass reads it the same), False when
    it must be read whole as before (ijson refuses or could misread the bytes, see `scan_json_object`, or
    the document is not an array). Memory holds one read; nothing is built.

    Args:
        path: The JSON file.
        strip_bom: Drop a leading byte order mark.

    Returns:
        Whether the array can be streamed with the whole-text reader's results.
    """
    try:
        with _open_for_ijson(path, b"[", strip_bom) as handle:
            deque(ijson.basic_parse(_GuardedReader(handle), use_float=True, buf_size=STREAM_CHUNK), maxlen=0)
    except _REFUSED:
        return False
    return True



def read_prefix(path: Path, size: int = 1 << 20) -> str:
    """The first ``size`` bytes of a file as text (invalid bytes replaced), for format sniffing."""
    with open(path, "rb") as handle:
        return handle.read(size).decode("utf-8", errors="replace")


def first_json_lines(path: Path, limit: int = 20) -> list[dict[str, Any]]:
    """Up to ``limit`` parseable JSON objects among the first non-blank lines of a file (for sniffing)."""
    found: list[dict[str, Any]] = []
    with open(path, "rb") as handle:
        for n, line in enumerate(handle):
            if n >= 200 or len(found) >= limit:
                break
            if not line.strip():
                continue
            try:
                value = json.loads(line.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):  # not a JSON line (or nested too deeply to be one)
                continue
            if isinstance(value, dict):
                found.append(value)
    return found



def first_line_is_json(path: Path) -> bool:
    """The first non-blank line of `path` is a JSON object on its own (the file is JSON Lines, or one record)."""
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    return isinstance(json.loads(raw.decode("utf-8-sig", errors="replace")), dict)
                except ValueError:
                    return False
    return False
