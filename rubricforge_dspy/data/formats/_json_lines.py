"""The JSON Lines reader every line-based format shares: one value (or a `TrajectoryFormatError` naming the
line) per non-blank line, streamed, each line bounded by the record cap and the nesting limit.

Re-exported by `rubricforge_dspy.data.formats.jsonl` (``jsonl.iter_json_lines``, ``jsonl.line_value``), where
the generic record shape lives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from rubricforge_dspy.core.trajectory import TrajectoryFormatError


def iter_json_lines(path: Path, cap: int | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_index, value | TrajectoryFormatError)`` per non-blank line, reading one line at a time,
    each in at most `cap` bytes (default: the record cap, `mapping.limits.max_record_bytes`, the one cap of
    every reader): a longer line is skipped in 1 MiB reads and is a bad record naming its size and the cap.

    Lines are parsed by orjson; a line orjson refuses (malformed, or JSON that only the standard
    library reads: NaN, integers past 64 bits, a byte-order mark) is read again by `json` for the
    same value or the same error message as before. A line nested deeper than `MAX_STREAM_DEPTH` is a bad
    record too."""
    from rubricforge_dspy.data.formats._json_stream import MAX_STREAM_DEPTH, NestingDepth
    from rubricforge_dspy.data.formats.mapping.limits import RECORD_CAP_ENV, max_record_bytes

    cap = max_record_bytes() if cap is None else cap
    with open(path, "rb") as handle:
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
                yield index, TrajectoryFormatError(
                    str(path), index, f"line {index + 1} is {size:,} bytes, over the record cap of {cap:,} bytes "
                                      f"(set {RECORD_CAP_ENV} to a larger number of MiB to read it)")
            elif raw.count(b"[") + raw.count(b"{") > MAX_STREAM_DEPTH and not NestingDepth().feed(raw):
                yield index, TrajectoryFormatError(
                    str(path), index, f"JSON nested too deeply (more than {MAX_STREAM_DEPTH} levels, deeper than any "
                                      "trajectory): not read")
            elif raw.strip():
                yield index, line_value(path, index, raw)


def line_value(path: Path, index: int, raw: bytes) -> Any:
    """One line's value (orjson, else `json` for the same value or error as before)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _slow_line(path, index, raw)


def _slow_line(path: Path, index: int, raw: bytes) -> Any:
    """A line orjson refused, read by `json`: its value, or the error naming the line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return TrajectoryFormatError(str(path), index, f"invalid UTF-8 bytes (line {index + 1}, byte {exc.start})")
    if index == 0:
        line = line.lstrip("\ufeff")
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        return TrajectoryFormatError(str(path), index,
                                     f"malformed JSON (line {index + 1}, column {exc.colno}): {exc.msg}")
    except RecursionError:
        return TrajectoryFormatError(str(path), index, f"JSON nested too deeply (line {index + 1}): not a "
                                                       "trajectory record")
