"""Step builders shared by the format loaders: chat messages, tool-call arguments, call pairing and
the final answer.

Every loader yields ``(index, result)`` pairs where ``result`` is either a `Trajectory` or a
`TrajectoryFormatError` naming the file and the record (`convert_each`, `error`). The load loop
(``formats/__init__``) decides whether an error is raised or counted as skipped, so one bad record never
hides the good ones around it.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from rubricforge_dspy.core.trajectory import STEP_KINDS, Step, TrajectoryFormatError

CHAT_ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: Any, field: str) -> list[dict[str, Any]]:
    """`messages` as a list of OpenAI-style chat messages with known roles; ValueError naming the problem."""
    if not isinstance(messages, list):
        raise ValueError(f"'{field}' must be a list of messages")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i} is not an object")
        if msg.get("role") not in CHAT_ROLES:
            raise ValueError(f"message {i} has unknown role {msg.get('role')!r}; expected one of {CHAT_ROLES}")
    return messages


def object_at(record: dict[str, Any], key: str) -> dict[str, Any]:
    """``record[key]`` when it is a JSON object (a dict), else an empty dict: an optional nested object that a
    record may leave out or give as ``null`` or another type."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


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


def convert_each(path: Path, records: Iterable[tuple[Any, Any]],
                 convert_one: Callable[[Any, Any], Any]) -> Iterator[tuple[Any, Any]]:
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


