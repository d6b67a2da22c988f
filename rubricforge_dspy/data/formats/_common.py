"""Helpers shared by the format loaders: reading, record-level JSON parsing, step building.

Every loader yields ``(index, result)`` pairs where ``result`` is either a `Trajectory` or a
`TrajectoryFormatError` naming the file and the record. The public API (``loaders/__init__``)
decides whether an error is raised or counted as skipped, so one bad record never hides the
good ones around it.
"""

from __future__ import annotations

import ast
import json
import math
import re
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path
from typing import Any

import ijson
import orjson

from rubricforge_dspy.core.errors import InputError, RubricForgeError
from rubricforge_dspy.core.trajectory import STEP_KINDS, Source, Step, Trajectory, TrajectoryFormatError

_WS = re.compile(r"\s*")
_LONE_SURROGATE = re.compile("[\udc80-\udcff]")
_SECRET_KEY = re.compile(r"api[_-]?key|secret|password|token$|authorization", re.IGNORECASE)

# Tool outputs that report a failure, by family. Precision matters more than recall: a successful output
# that merely mentions an error ("0 errors", "No errors found", "error_rate: 0.1", grep hits in error.py,
# "test_error_handling PASSED", "exit code 0", "HTTP/1.1 200 OK", '{"error": null}') must never match,
# so every pattern is anchored at the start of the output (\A) or of a line (^, MULTILINE) and names a
# failure form that tools print, not a word. Examples of each family are in tests/data/test_tool_errors.py and
# counts on the shipped data in evals/results/tool_error_marks.json (`python -m evals.tool_error_marks`).
_ERRNO_NAMES = ("ENOENT|EACCES|EPERM|EEXIST|ENOTDIR|EISDIR|ENOTEMPTY|ECONNREFUSED|ECONNRESET|ETIMEDOUT|"
                "EADDRINUSE|ENOSPC|EROFS|EMFILE|ENOTFOUND|EAI_AGAIN|EPIPE")
_HTTP_REASONS = ("Bad Request|Unauthorized|Payment Required|Forbidden|Not Found|Method Not Allowed|Not Acceptable|"
                 "Request Timeout|Conflict|Gone|Payload Too Large|Unprocessable (?:Entity|Content)|Too Many Requests|"
                 "Internal Server Error|Not Implemented|Bad Gateway|Service Unavailable|Gateway Timeout")
TOOL_ERROR_FAMILIES: dict[str, tuple[str, re.Pattern]] = {
    # The rule before issue 19 (kept as is): tau-bench tools return "Error: ..." strings, unknown tool names
    # give "Unknown action <name>", the AgentVerify "assertions" agent wraps outputs as '# var_3 = "Error: ..."'.
    "error_prefix": ("output starts with 'Error', 'Unknown action'",
                     re.compile(r"""\A\s*(?:\#\s*var_\d+\s*=\s*["']?)?(?:Error\b|Unknown action\b)""")),
    # MySQL "ERROR 1064 (42000): ...", PostgreSQL "ERROR:  relation ... does not exist" (psql prefixes the
    # script name), SQLite shell "Parse error: ..." / "Runtime error: ...", "no such table: x".
    "sql": ("SQL engine errors: MySQL 'ERROR 1064 (42000):', PostgreSQL 'ERROR:  ...', SQLite 'Parse error:', "
            "'no such table:'",
            re.compile(r"^(?:psql:[^\n]{0,200}?: )?ERROR:  \S|^ERROR \d{3,5} \([0-9A-Z]{5}\)(?: at line \d+)?:"
                       r"|^(?:Parse|Runtime) error(?: near line \d+)?:"
                       r"|^no such (?:table|column|function): \S", re.MULTILINE)),
    # git ("error: pathspec ...", "fatal: not a git repository"), pip ("ERROR: Could not find ..."),
    # compilers and CLIs that lead with a lower- or upper-case error label and a colon.
    "error_label": ("output starts with 'error:', 'ERROR:', 'fatal:', 'Fatal error:', 'Exception:'",
                    re.compile(r"\A\s*(?:error|ERROR|fatal|FATAL|Fatal error|Exception|EXCEPTION|Execution error)"
                               r"(?:\s*\[[^\]\n]{0,40}\])?\s*:")),
    # bash/sh/zsh diagnostics and coreutils-style "prog: [object: ]reason" lines (the whole line is the
    # diagnostic: a grep hit "src/a.py:12: # No such file" has no space after the first colon and text
    # after the reason), dash's "sh: 1: foo: not found", make's "*** ... Error 2", errno names (Node's
    # "EACCES: permission denied, mkdir '/app'") and Python's "[Errno 2] ...".
    "shell": ("shell and OS diagnostics: 'bash: x: command not found', 'cat: x: No such file or directory', "
              "'Permission denied', 'sh: 1: x: not found', make '*** Error 2', 'ENOENT:', '[Errno 2]'",
              re.compile(r"^[\w.+/~-]{1,80}(?:: line \d+)?: (?:[^\n]{0,300}?: )?(?:\[Errno \d+\] )?(?:command not found|No such file or "
                         r"directory|Permission denied|Is a directory|Not a directory|Operation not permitted|"
                         r"Directory not empty|File exists|Read-only file system|No space left on device)\s*$"
                         r"|^(?:/bin/)?(?:ba|da|z|k)?sh: \d+: [^\n]{1,200}: not found\s*$"
                         r"|^(?:/bin/)?(?:ba|z)?sh: (?:line \d+: )?syntax error\b"
                         r"|^(?:g?make|ninja)(?:\[\d+\])?: \*\*\* [^\n]*\bError \d+"
                         rf"|^\s*(?:Error: )?(?:{_ERRNO_NAMES})[:,] "
                         r"|^\s*(?:[\w.]+: )?\[Errno \d+\] ", re.MULTILINE)),
    # A Python traceback header followed by its exception line, or an output that is an exception line
    # ("KeyError: 'x'", "sqlite3.OperationalError: ...", "Uncaught TypeError: ..."), or a Java crash.
    "traceback": ("Python traceback (header and exception line), an output that starts with 'XError:' / "
                  "'XException:', Java 'Exception in thread'",
                  re.compile(r"^Traceback \(most recent call last\):\s*\n(?:.*\n)*?[A-Za-z_][\w.]*"
                             r"(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b[^\n]*$"
                             r"|\A\s*(?:Uncaught )?(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::\s|\s*\Z)"
                             r"|^Exception in thread \S", re.MULTILINE)),
    # A non-zero exit status reported on its own line: "Exit code 1", "exit status 127", "returncode: 2",
    # "[Command finished with exit code 1]" (OpenHands), "Process exited with code 2", mini-SWE's
    # "<returncode>1</returncode>". "exit code 0" and sentences that mention codes mid-line do not match.
    "exit_code": ("non-zero exit status on its own line: 'Exit code 1', 'returncode: 2', 'Exit status 127', "
                  "'[Command finished with exit code 1]', '<returncode>1</returncode>'",
                  re.compile(r"(?im)^[ \t]*[\[(*]?[ \t]*(?:(?:the )?(?:command|process|program|script|subprocess|"
                             r"task|job|container)\b[^\n]{0,60}?\b(?:exited|failed|finished|completed|terminated|"
                             r"returned) with (?:a )?(?:non-zero )?(?:exit )?(?:code|status)|exit[ _-]?(?:code|status)|"
                             r"return[ _-]?code|returncode)[ \t]*[:=]?[ \t]*(?:-[1-9]\d*|[1-9]\d*)\b"
                             r"|<returncode>\s*(?:-\d+|[1-9]\d*)\s*</returncode>")),
    # HTTP error statuses: a status line, a status field with a 4xx/5xx value, or an output that starts
    # with the code and its reason phrase ("404 Not Found", "HTTP Error 503: ...", "500 Server Error: ...").
    "http": ("HTTP 4xx/5xx: 'HTTP/1.1 500', 'status_code: 503', '404 Not Found', 'HTTP Error 404:'",
             re.compile(r"^\s*HTTP/\d(?:\.\d)?\s+[45]\d\d\b"
                        r"|^\s*[{,]?\s*[\"']?(?:status|status_?code|statusCode|http_?status|http_?code)[\"']?\s*[:=]"
                        r"\s*[\"']?[45]\d\d\b"
                        rf"|\A\s*(?:HTTP Error )?[45]\d\d:?\s+(?:{_HTTP_REASONS})\b"
                        r"|^\s*[45]\d\d (?:Client|Server) Error:", re.MULTILINE)),
}
_JSON_ERROR_KEYS = ("error", "errors")
_JSON_CAP = 200_000  # longer outputs are not parsed as JSON (cost), only matched by the line patterns


def _json_error(content: str) -> bool:
    """A JSON object whose top-level ``error``/``errors`` is set (not null, false, empty) or ``status: error``."""
    text = content.strip()
    if not (text.startswith("{") and text.endswith("}")) or len(text) > _JSON_CAP:
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    if any(value.get(key) not in (None, False, "", [], {}, 0) for key in _JSON_ERROR_KEYS if key in value):
        return True
    return isinstance(value.get("status"), str) and value["status"].strip().lower() in ("error", "failed", "failure")


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
    return _WS.match(text, pos).end()


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
    nest deeper than ijson reads in bounded memory (`_Depth`); never leaves `stream_json_array`, which
    then reads the file as before."""


MAX_STREAM_DEPTH = 512  # arrays/objects nested deeper than this are not handed to ijson (`_Depth`)
# Kept by the first pass: brackets, quotes, backslashes and every byte JSON allows after a backslash, so
# a backslash and the byte it escapes stay together while most text goes; the second keeps brackets and quotes.
_NOT_ESCAPE_OR_MARK = bytes(sorted(set(range(256)) - set(b'"[]{}\\/bfnrtu')))
_NOT_MARK = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_DEPTH_BLOCK = 128


class _Depth:
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


class _GuardedReader:
    """A binary file for ijson that stops (`_NotForIjson`) at a lone surrogate escape, or where arrays
    and objects nest deeper than `MAX_STREAM_DEPTH` (`_Depth`). Bytes are handed on only once checked
    with their context: the last `_ESCAPE_CONTEXT` bytes of a read wait for the next one, so an escape
    split between two reads is seen whole before ijson parses it."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self._before = b""  # the last bytes handed on: context for the look-behind
        self._pending = b""  # bytes read but not handed on yet
        self._depth = _Depth()

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


def _open_for_ijson(path: Path, opening: bytes, strip_bom: bool):
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
                      whole=_whole_array) -> Iterator[tuple[int, Any, bool]]:
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


def scan_json_object(path: Path, big: str, pick: tuple[str, ...] = (), each=None, *,
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
    current: dict | None = None
    each = each or (lambda fields: None)
    item = big + ".item"
    fields = {f"{item}.{name}": name for name in pick}
    key, builder, seen = None, None, False
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


CHAT_ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: Any, field: str) -> list[dict]:
    """`messages` as a list of OpenAI-style chat messages with known roles; ValueError naming the problem."""
    if not isinstance(messages, list):
        raise ValueError(f"'{field}' must be a list of messages")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i} is not an object")
        if msg.get("role") not in CHAT_ROLES:
            raise ValueError(f"message {i} has unknown role {msg.get('role')!r}; expected one of {CHAT_ROLES}")
    return messages


def error(path: Path, record: int | str | None, problem: str) -> TrajectoryFormatError:
    return TrajectoryFormatError(str(path), record, problem)


def as_reward(value: Any, what: str = "reward") -> float:
    """A finite float reward, or ValueError with a readable problem."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    reward = float(value)
    if not math.isfinite(reward):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return reward


def text_of(content: Any) -> str:
    """Message content as text: strings as is, OpenAI content-part lists joined, None as ''."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text", "")))
            else:
                parts.append(str(part))
        return "".join(parts)
    return json.dumps(content, ensure_ascii=False) if isinstance(content, dict) else str(content)


def parse_arguments(raw: Any) -> Any:
    """Tool-call arguments as a JSON value when possible.

    JSON strings are decoded; Python-literal dict strings (``"{'a': 1}"``, written by some tau-bench
    forks) are read with `ast.literal_eval`; anything else is kept as given.
    """
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    if not text:
        return {}
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)  # what only the standard library reads (NaN, integers past 64 bits)
    except ValueError:
        pass
    if text[:1] in "{[":
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return raw


def convert_each(path: Path, records, convert_one) -> Iterator[tuple[Any, Any]]:
    """``(index, Trajectory | TrajectoryFormatError)`` for ``(index, value)`` records: a record that is
    already an error passes through; ``convert_one(value, index)`` failing with a ValueError, TypeError,
    KeyError or AttributeError becomes an error naming the file and the record."""
    for index, value in records:
        if isinstance(value, TrajectoryFormatError):
            yield index, value
            continue
        try:
            yield index, convert_one(value, index)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            yield index, TrajectoryFormatError(str(path), index, str(exc))


def tool_error_family(content: str | None) -> str | None:
    """The family of failure a tool output reports, or None when it reads as a success.

    Families (see `TOOL_ERROR_FAMILIES`): ``error_prefix`` (``Error: ...``, ``Unknown action``),
    ``error_label`` (``error:``, ``fatal:``, ``ERROR:``), ``shell`` (``command not found``, ``No such file
    or directory``, ``Permission denied``, errno names), ``traceback`` (Python tracebacks, exception lines),
    ``sql``, ``exit_code`` (a non-zero exit status on its own line), ``http`` (4xx/5xx statuses) and
    ``json_error`` (a JSON object with a set ``error``). The first family that matches is returned.

    Args:
        content: The tool output as text (None or empty reads as a success).

    Returns:
        The family name, or None.
    """
    if not content:
        return None
    for name, (_, pattern) in TOOL_ERROR_FAMILIES.items():
        if pattern.search(content):
            return name
    return "json_error" if _json_error(content) else None


def looks_like_tool_error(content: str | None) -> bool:
    """True for tool outputs that report a failure (any family of `tool_error_family`).

    Args:
        content: The tool output as text.

    Returns:
        Whether the text reads as a failed tool call.
    """
    return tool_error_family(content) is not None


_STEP_KINDS = frozenset(STEP_KINDS)
_new = object.__new__


def new_step(kind: str, content: str = "", tool_name: str | None = None, arguments: Any = None,
             call_id: str | None = None, is_error: bool = False) -> Step:
    """``Step(kind, content, ...)`` built in a third of the time, for loaders' per-message hot loop.

    A frozen dataclass sets each field through ``object.__setattr__``; this fills the instance's
    ``__dict__`` at once instead. The result is the same `Step` (equal, same hash and repr) and the
    same check is made: an unknown `kind` raises the ValueError ``Step.__post_init__`` raises.

    Raises:
        ValueError: `kind` is not one of `STEP_KINDS`.
    """
    if kind not in _STEP_KINDS:
        raise ValueError(f"unknown step kind {kind!r}; expected one of {STEP_KINDS}")
    step = _new(Step)
    step.__dict__.update(kind=kind, content=content, tool_name=tool_name, arguments=arguments, call_id=call_id,
                         is_error=is_error)
    return step


def finalize_answer(steps: list[Step]) -> list[Step]:
    """Turn the agent's last text into a ``final_answer``: the last ``assistant`` step, provided no
    tool call, text action or observation (``tool_result``) follows it. User turns may follow (a
    closing "thanks" does not make the answer less final); an episode that ends on an action or an
    observation has no final answer."""
    for i in range(len(steps) - 1, -1, -1):
        kind = steps[i].kind
        if kind == "assistant":
            steps[i] = new_step("final_answer", steps[i].content)
            break
        if kind in ("tool_call", "tool_result"):
            break
    return steps


def redact(value: Any) -> Any:
    """A copy of ``value`` with credentials (``api_key`` and the like) replaced by ``"<redacted>"``."""
    if isinstance(value, dict):
        return {
            k: ("<redacted>" if isinstance(k, str) and _SECRET_KEY.search(k) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def read_prefix(path: Path, size: int = 1 << 20) -> str:
    """The first ``size`` bytes of a file as text (invalid bytes replaced), for format sniffing."""
    with open(path, "rb") as handle:
        return handle.read(size).decode("utf-8", errors="replace")


def first_json_lines(path: Path, limit: int = 20) -> list[dict]:
    """Up to ``limit`` parseable JSON objects among the first non-blank lines of a file (for sniffing)."""
    found = []
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


class CallTracker:
    """Pairs tool results with tool calls and keeps call ids unique within one trajectory.

    Some runs reuse a provider call id inside one episode (tau-bench's official gpt-4o airline file
    does, 73 times); a reused id gets a ``#2``, ``#3``... suffix. A result answers the oldest still
    open call with its id, or, when it carries no id (AgentVerify forks), the oldest open call.
    """

    def __init__(self) -> None:
        self._open: list[tuple[str | None, str, str]] = []  # (raw id, unique id, tool name)
        self._uses: dict[str, int] = {}
        self._last: dict[str, tuple[str, str]] = {}
        self._n = 0

    def call(self, raw_id: str | None, name: str) -> str:
        """Register a call; returns its unique id."""
        base = raw_id or f"call_{self._n}"
        self._n += 1
        self._uses[base] = self._uses.get(base, 0) + 1
        unique = base if self._uses[base] == 1 else f"{base}#{self._uses[base]}"
        self._open.append((raw_id, unique, name))
        if raw_id:
            self._last[raw_id] = (unique, name)
        return unique

    def has_open(self) -> bool:
        """True while some registered call has had no result yet."""
        return bool(self._open)

    def knows(self, raw_id: str | None) -> bool:
        return bool(raw_id) and raw_id in self._last

    def result(self, raw_id: str | None) -> tuple[str | None, str | None]:
        """``(unique call id, tool name)`` answered by a result carrying ``raw_id`` (None if unknown)."""
        for i, (rid, unique, name) in enumerate(self._open):
            if not raw_id or rid == raw_id:
                del self._open[i]
                return unique, name
        if raw_id and raw_id in self._last:
            return self._last[raw_id]
        return raw_id, None


@dataclass
class TrajectoryCounts:
    """What counting a trajectory needs of it, without its steps: ``rubricforge stats`` reads these
    (`iter_trajectory_counts`), so a generic JSONL record is checked exactly as for a `Trajectory` but no
    `Step` is built. The fields mean what the `Trajectory` fields of the same name mean; ``hidden`` holds
    only ``format`` and the label's provenance (``label_source``, ``label_rule``), never text. A plain
    dataclass, so a labels file is joined to it as to a trajectory (`dataclasses.replace`)."""

    id: str
    task_id: str
    domain: str
    agent: str
    reward: float | None
    label: int | None
    source: Source
    trial: int | None = None
    n_steps: int = 0
    n_tool_errors: int = 0
    hidden: dict | None = None

    @classmethod
    def of(cls, trajectory: Trajectory) -> "TrajectoryCounts":
        """The counts of a loaded trajectory (how the formats other than the generic JSONL are counted)."""
        return cls(id=trajectory.id, task_id=trajectory.task_id, domain=trajectory.domain, agent=trajectory.agent,
                   reward=trajectory.reward, label=trajectory.label, source=trajectory.source, trial=trajectory.trial,
                   n_steps=len(trajectory.steps), n_tool_errors=trajectory.n_tool_errors,
                   hidden={key: trajectory.hidden[key] for key in ("format", "label_source", "label_rule",
                                                                   "label_from_reward") if key in trajectory.hidden})


class IdSet:
    """The ids a load has seen, in 8 bytes per slot: a linear-probing table of 64-bit blake2b hashes
    (`array`), so checking a million ids for repeats takes about 16 MB instead of ~100 MB of strings.

    Ids are compared by hash: two different ids collide with probability about n^2 / 2^65 (3e-8 for a
    million ids), and a collision is reported as a repeated id (loud, never a silent drop)."""

    def __init__(self) -> None:
        self._table = array("Q", bytes(8 * 1024))
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @staticmethod
    def _hash(ident: str) -> int:
        digest = blake2b(ident.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return int.from_bytes(digest, "little") or 1  # 0 marks an empty slot

    def add(self, ident: str) -> bool:
        """Add `ident`; True when it is new, False when it was seen before."""
        key = self._hash(ident)
        table = self._table
        mask = len(table) - 1
        slot = key & mask
        while True:
            held = table[slot]
            if held == key:
                return False
            if not held:
                break
            slot = (slot + 1) & mask
        table[slot] = key
        self._n += 1
        if 2 * self._n > mask:
            self._grow()
        return True

    def __contains__(self, ident: str) -> bool:
        key = self._hash(ident)
        table = self._table
        mask = len(table) - 1
        slot = key & mask
        while table[slot]:
            if table[slot] == key:
                return True
            slot = (slot + 1) & mask
        return False

    def _grow(self) -> None:
        old = self._table
        table = array("Q", bytes(16 * len(old)))
        mask = len(table) - 1
        for key in old:
            if key:
                slot = key & mask
                while table[slot]:
                    slot = (slot + 1) & mask
                table[slot] = key
        self._table = table
