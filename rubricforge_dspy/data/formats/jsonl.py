"""The generic JSONL interchange format: one trajectory per line, OpenAI chat messages (streamed).

Each line is validated against ``rubricforge_dspy/core/schemas/trajectory.schema.json`` (JSON Schema
draft 2020-12); see ``docs/FORMAT.md``. Mapping: ``user`` -> ``user`` step; ``assistant`` text ->
``assistant`` step, its ``tool_calls`` (or legacy ``function_call``, or text ``action``) -> ``tool_call``
steps; ``tool`` (or legacy ``function``, or a ``user`` message marked ``"observation": true``) ->
``tool_result`` (error flag from ``is_error`` / ``error``, else the ``Error: ...`` content shape); the
closing assistant text -> ``final_answer`` (see `finalize_answer`). ``system`` messages go to
``hidden["system_prompt"]`` and ``metadata`` to ``hidden["metadata"]``; neither is ever a step.

``"reward": null`` (and no ``label``) marks an unlabeled episode (``label=None, reward=None``): judge it,
or join labels with ``--labels``. A file holding one JSON array of such records (``[{...}, {...}]``) is read
as well (streamed, one record at a time).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from rubricforge_dspy.core.errors import OutputExistsError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import (
    ANY_POSITIVE_REWARD,
    LabelRule,
    Source,
    Step,
    Trajectory,
    TrajectoryFormatError,
    label_from_reward,
)
from rubricforge_dspy.data.formats._format import FileSample, Format, ReadResults
from rubricforge_dspy.data.formats._json_lines import iter_json_lines as iter_json_lines  # re-exported: its home
from rubricforge_dspy.data.formats._json_lines import line_value as line_value
from rubricforge_dspy.data.formats._json_stream import Malformed, iter_json_array, stream_json_array
from rubricforge_dspy.data.formats._records import TrajectoryCounts
from rubricforge_dspy.data.formats._steps import (
    CallTracker,
    as_reward,
    convert_each,
    finalize_answer,
    new_step,
    parse_arguments,
    text_of,
)
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

NAME = "jsonl"
# The generic format: an explicit ``label`` wins; else any positive reward (warned about when graded).
LABEL_RULE = ANY_POSITIVE_REWARD
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "core" / "schemas" / "trajectory.schema.json"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The interchange JSON Schema (draft 2020-12)."""
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return loaded


def inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every ``{"$ref": "#/$defs/NAME"}`` replaced by that definition (the interchange schema's
    definitions are not recursive), and ``$defs`` dropped: jsonschema then validates without resolving
    references, about twice as fast (every line of a file is validated)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if len(node) == 1 and isinstance(ref, str) and ref.startswith("#/$defs/"):
            return inline_refs(defs[ref[len("#/$defs/"):]], defs)
        return {key: inline_refs(value, defs) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [inline_refs(item, defs) for item in node]
    return node


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema())
    return Draft202012Validator(inline_refs(schema(), schema().get("$defs", {})))


_TOP_KEYS = frozenset(("id", "task_id", "trial", "domain", "agent", "messages", "reward", "label",
                       "metadata"))
_ROLES = frozenset(("system", "user", "assistant", "tool", "function"))


def _text(value: Any) -> bool:
    return type(value) is str and value != ""


def _number(value: Any) -> bool:
    return type(value) is float or type(value) is int


def _call_ok(call: Any) -> bool:
    """A ``function``/``function_call`` object: a non-empty name, arguments a string or an object."""
    if type(call) is not dict or not _text(call.get("name")):
        return False
    arguments = call.get("arguments", "")
    return type(arguments) is str or type(arguments) is dict


def _message_ok(msg: Any) -> bool:
    """True only when `msg` certainly satisfies ``$defs/message`` (False: let jsonschema decide)."""
    if type(msg) is not dict:
        return False
    role = msg.get("role")
    if type(role) is not str or role not in _ROLES:
        return False
    if "content" in msg:
        content = msg["content"]
        if content is not None and type(content) is not str:
            if type(content) is not list:
                return False
            for part in content:
                if type(part) is not dict or type(part.get("type")) is not str or (
                        "text" in part and type(part["text"]) is not str):
                    return False
    elif role != "assistant":  # tool, function, system and user messages require content
        return False
    if len(msg) == 2 and "content" in msg and role in ("user", "assistant", "system"):
        return True  # the common plain turn: nothing else to check
    name = msg.get("name")
    if name is not None and type(name) is not str:
        return False
    tool_calls = msg.get("tool_calls")
    if tool_calls is not None:
        if type(tool_calls) is not list or role in ("system", "user"):
            return False
        for call in tool_calls:
            if type(call) is not dict:
                return False
            ident, kind = call.get("id"), call.get("type", "function")
            if type(ident) is not str or not ident or type(kind) is not str or kind != "function" \
                    or not _call_ok(call.get("function")):
                return False
    if "tool_call_id" in msg and not _text(msg["tool_call_id"]):
        return False
    if "is_error" in msg and type(msg["is_error"]) is not bool:
        return False
    # Every key checked so far (a message of only these keys, the common action and result, is decided here):
    if len(msg) == 1 + ("content" in msg) + ("name" in msg) + ("tool_calls" in msg) + ("tool_call_id" in msg) \
            + ("is_error" in msg):
        return _text(name) if role == "function" else role != "tool" or "tool_call_id" in msg
    if "function_call" in msg and (role != "assistant" or (msg["function_call"] is not None
                                                          and not _call_ok(msg["function_call"]))):
        return False
    if "action" in msg and (role != "assistant" or type(msg["action"]) is not str):
        return False
    if "observation" in msg and (role != "user" or type(msg["observation"]) is not bool):
        return False
    if "tool_call_id" in msg and not _text(msg["tool_call_id"]):
        return False
    for key in ("is_error", "final_answer"):
        if key in msg and type(msg[key]) is not bool:
            return False
    if "error" in msg and msg["error"] is not None and type(msg["error"]) is not bool:
        return False
    if role == "tool":
        return "tool_call_id" in msg
    if role == "function":
        return _text(name)
    return True


def _surely_valid(obj: Any) -> bool:
    """A structural check of the interchange schema for the common record, in microseconds: True only
    when `obj` certainly satisfies the schema; False sends it to jsonschema, which decides (so the two
    can differ only in speed). Conservative on purpose: e.g. a float ``task_id`` of 3.0 is valid JSON
    Schema but is left to jsonschema."""
    if type(obj) is not dict or not _TOP_KEYS.issuperset(obj) or not _text(obj.get("id")):
        return False
    task_id, messages = obj.get("task_id"), obj.get("messages")
    if type(task_id) is not str and type(task_id) is not int:
        return False
    if "reward" not in obj or (obj["reward"] is not None and not _number(obj["reward"])):
        return False
    if obj.get("trial") is not None and type(obj["trial"]) is not int:
        return False
    if obj.get("label") is not None and (type(obj["label"]) is not int or obj["label"] not in (0, 1)):
        return False
    for key in ("domain", "agent"):
        if key in obj and type(obj[key]) is not str:
            return False
    if "metadata" in obj and type(obj["metadata"]) is not dict:
        return False
    if type(messages) is not list or not messages:
        return False
    for msg in messages:
        if not _message_ok(msg):
            return False
    return True


def validation_problem(obj: Any) -> str | None:
    """A one-line description of why ``obj`` violates the schema, or None when it is valid.

    A record the structural check (`_surely_valid`) accepts costs microseconds; any other record is
    checked by jsonschema, which gives the best-match message (or finds it valid after all)."""
    if _surely_valid(obj):
        return None
    from jsonschema.exceptions import best_match

    err = best_match(_validator().iter_errors(obj))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
    return f"schema violation at {where}: {err.message[:300]}"


def sniff_line(obj: dict[str, Any]) -> bool:
    """True when a JSON line looks like an interchange record."""
    return isinstance(obj.get("messages"), list) and ("reward" in obj or "id" in obj)


def sniff_array(head: str) -> bool:
    """True when a file prefix is a JSON array whose first element looks like an interchange record."""
    try:
        first = next(iter_json_array(head), None)
    except Malformed:
        return False
    return first is not None and isinstance(first[1], dict) and sniff_line(first[1])


def _is_error(msg: dict[str, Any], content: str) -> bool:
    for key in ("is_error", "error"):
        flag = msg.get(key)
        if isinstance(flag, bool):
            return flag
    return looks_like_tool_error(content)


TEXT_ACTION = "action"  # tool name of a text action (``{"role": "assistant", "action": "..."}``)


def steps_of(messages: list[dict[str, Any]]) -> list[Step]:
    """Observable steps of a schema-valid message list; ValueError for a result answering no call.

    Besides OpenAI ``tool_calls``/``tool`` messages, two more ways to write actions and results:
    text-only ReAct agents mark an action with ``"action": "<text>"`` on an assistant message and the
    environment's answer with ``"observation": true`` on a user message; legacy OpenAI function calling
    (``function_call: {name, arguments}`` on an assistant message, answered by a ``function`` message)
    is read as tool calls and results. See docs/FORMAT.md.

    The closing assistant text becomes the ``final_answer``, unless some assistant message carries
    ``"final_answer": true|false``: then exactly the messages marked true are final answers."""
    return _walk(messages, True)


def count_steps(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """``(steps, tool errors)`` of a schema-valid message list, the counts of `steps_of` (the same walk,
    so the same ValueError for a result answering no call) without building any `Step` or parsing any
    tool-call arguments: what ``rubricforge stats`` needs of a record."""
    return _walk(messages, False)


@overload
def _walk(messages: list[dict[str, Any]], build: Literal[True]) -> list[Step]: ...
@overload
def _walk(messages: list[dict[str, Any]], build: Literal[False]) -> tuple[int, int]: ...
def _walk(messages: list[dict[str, Any]], build: bool) -> list[Step] | tuple[int, int]:
    """The one walk over the messages: the steps (`steps_of`) when `build`, else ``(steps, tool errors)``."""
    steps: list[Step] = []
    append = steps.append
    n_steps = n_errors = 0
    calls = CallTracker()
    explicit = False  # an assistant message says whether it is the final answer: no inference then
    last_call: tuple[str, str] | None = None  # (call id, tool name) of the latest action

    def answer(i: int, raw_id: str | None, role: str) -> tuple[str | None, str | None]:
        if raw_id is not None:
            if not calls.knows(raw_id):
                raise ValueError(f"message {i}: tool_call_id {raw_id!r} answers no earlier tool call")
            return calls.result(raw_id)
        if calls.has_open():
            return calls.result(None)
        if last_call is None:
            what = {"tool": "tool message", "function": "function message"}.get(role, "observation")
            raise ValueError(f"message {i}: {what} answers no earlier action; an observation must follow an "
                             "assistant message with 'action', 'tool_calls' or 'function_call' (write the task "
                             "or the environment's opening text as a plain user message)")
        return last_call  # a further observation of the latest action

    def call(raw_id: str | None, name: str, arguments: Any) -> None:
        nonlocal last_call, n_steps
        call_id = calls.call(raw_id, name)
        last_call = (call_id, name)
        if build:
            append(new_step("tool_call", "", name, arguments, call_id))
        else:
            n_steps += 1

    for i, msg in enumerate(messages):
        role, content = msg["role"], msg.get("content")
        if role == "system":
            continue
        if type(content) is not str:
            content = text_of(content)
        if role == "tool" or role == "function" or (role == "user" and msg.get("observation") is True):
            call_id, name = answer(i, msg.get("tool_call_id") if role == "tool" else None, role)
            is_error = _is_error(msg, content)
            if build:
                append(new_step("tool_result", content, (msg.get("name") if role != "user" else None) or name,
                                None, call_id, is_error))
            else:
                n_steps += 1
                n_errors += is_error
            continue
        if content and not content.isspace():
            if build:
                final = msg.get("final_answer") if role == "assistant" else None
                if final is True or final is False:
                    explicit = True
                append(new_step("final_answer" if final is True else role, content))
            else:
                n_steps += 1
        if len(msg) == 2 and "content" in msg:
            continue  # role and content only: no action
        for tool_call in msg.get("tool_calls") or ():
            function = tool_call["function"]
            call(tool_call["id"], function["name"], parse_arguments(function.get("arguments")) if build else None)
        if msg.get("function_call"):
            function = msg["function_call"]
            call(None, function["name"], parse_arguments(function.get("arguments")) if build else None)
        if isinstance(msg.get("action"), str):
            call(None, TEXT_ACTION, msg["action"])
    if not build:
        return n_steps, n_errors
    return steps if explicit else finalize_answer(steps)


EMPTY = "empty trajectory: no user/assistant/tool messages"


def _checked(obj: Any) -> tuple[float | None, Any]:
    """``(reward, given label)`` of a record that satisfies the schema; ValueError naming the problem
    otherwise (the checks `convert` and `count` share, in the same order)."""
    if not isinstance(obj, dict):
        raise ValueError(f"record must be a JSON object, got {type(obj).__name__}")
    if "reward" not in obj:
        raise ValueError("missing 'reward' (a number; null for an unlabeled episode)")
    problem = validation_problem(obj)
    if problem:
        raise ValueError(problem)
    given = obj.get("label")
    if obj["reward"] is not None:
        return as_reward(obj["reward"]), given
    if given is None:
        return None, None  # unlabeled
    return as_reward(float(given)), given


def _label(reward: float | None, given: Any, threshold: LabelRule | float) -> int | None:
    if reward is None:
        return None
    return int(given) if given is not None else label_from_reward(reward, threshold)


def convert(obj: Any, *, path: Path, index: int, threshold: LabelRule | float) -> Trajectory:
    """One interchange record as a `Trajectory`; ValueError with the problem when it cannot be."""
    reward, given = _checked(obj)
    steps = steps_of(obj["messages"])
    if not steps:
        raise ValueError(EMPTY)
    system = [text_of(m.get("content")) for m in obj["messages"] if m["role"] == "system"]
    return Trajectory(
        id=obj["id"],
        task_id=str(obj["task_id"]),
        domain=obj.get("domain") or "unknown",
        agent=obj.get("agent") or "unknown",
        steps=tuple(steps),
        reward=reward,
        label=_label(reward, given, threshold),
        source=Source(str(path), index),
        trial=obj.get("trial"),
        hidden={
            "format": NAME,
            "system_prompt": "\n\n".join(system) or None,
            "metadata": obj.get("metadata") or {},
            "label_source": "record" if given is not None else None,
        },
    )


def count(obj: Any, *, path: Path, index: int, threshold: LabelRule | float) -> TrajectoryCounts:
    """One interchange record as `TrajectoryCounts`: checked exactly as `convert` checks it (the same
    errors), with the same id, task, label and reward, but no steps built."""
    reward, given = _checked(obj)
    n_steps, n_errors = count_steps(obj["messages"])
    if not n_steps:
        raise ValueError(EMPTY)
    return TrajectoryCounts(
        id=obj["id"], task_id=str(obj["task_id"]), domain=obj.get("domain") or "unknown",
        agent=obj.get("agent") or "unknown", reward=reward, label=_label(reward, given, threshold),
        source=Source(str(path), index), trial=obj.get("trial"), n_steps=n_steps, n_tool_errors=n_errors,
        hidden={"format": NAME, "label_source": "record" if given is not None else None})


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(line_index, Trajectory | TrajectoryFormatError)`` line by line (constant memory); a
    file that is one JSON array of records yields ``(element_index, ...)``."""
    yield from convert_each(path, _records(path),
                            lambda value, index: convert(value, path=path, index=index, threshold=threshold))


def read_counts(
    path: Path, threshold: LabelRule | float
) -> Iterator[tuple[int | str | None, TrajectoryCounts | TrajectoryFormatError]]:
    """`read`, yielding `TrajectoryCounts` (every record checked as `read` checks it; no steps built)."""
    yield from convert_each(path, _records(path),
                            lambda value, index: count(value, path=path, index=index, threshold=threshold))


def is_array(path: Path) -> bool:
    """True when the file is one JSON array of records rather than JSON Lines."""
    with open(path, "rb") as handle:
        head = handle.read(4096).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    return head.startswith("[")


def read_line(
    path: Path, line_index: int, offset: int, threshold: LabelRule | float
) -> tuple[int, Trajectory | TrajectoryFormatError]:
    """The record on line `line_index` (starting at byte `offset`) of a JSON Lines file, read alone."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        raw = handle.readline()
    return next(convert_each(path, [(line_index, line_value(path, line_index, raw))],
                             lambda value, index: convert(value, path=path, index=index, threshold=threshold)))


def _records(path: Path) -> Iterator[tuple[int | str, Any]]:
    """``(index, record)`` of a JSON Lines file or a JSON array (an unreadable record: its index and the error;
    a malformed array ends with the index `Malformed` names)."""
    if not is_array(path):
        yield from iter_json_lines(path)
        return
    index = -1
    try:
        for index, value, bad_bytes in stream_json_array(path, strip_bom=True):  # bounded memory
            if bad_bytes:
                yield index, TrajectoryFormatError(str(path), index, "invalid UTF-8 bytes in record")
            else:
                yield index, value
    except Malformed as exc:
        yield exc.index if exc.index is not None else index + 1, TrajectoryFormatError(
            str(path), exc.index, f"{exc.problem}; the rest of the JSON array is unreadable")


def to_record(trajectory: Trajectory, *, reward: Any = None, label: Any = None,
              metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """A trajectory as one line of this format (what `read` reads back to the same steps).

    Only the observable steps are written, plus the agent's system prompt when the loader kept one;
    `reward` and `label` are the caller's (None writes ``null``: a record to be labeled, which the
    loader refuses until a number is filled in). Nothing of ``hidden`` besides the system prompt is
    written: evaluator output must not travel with a file meant for labeling or judging."""
    messages: list[dict[str, Any]] = []
    system = trajectory.hidden.get("system_prompt")
    if system:
        messages.append({"role": "system", "content": system})
    last_call: str | None = None
    # Mark final answers only when reading the messages back would infer them differently.
    mark = finalize_answer([Step(kind="assistant" if s.kind == "final_answer" else s.kind) for s in trajectory.steps]) \
        != [Step(kind=s.kind) for s in trajectory.steps]
    text_calls: set[str | None] = set()
    for i, step in enumerate(trajectory.steps):
        if step.kind == "user":
            messages.append({"role": "user", "content": step.content})
        elif step.kind in ("assistant", "final_answer"):
            messages.append({"role": "assistant", "content": step.content})
            if mark:
                messages[-1]["final_answer"] = step.kind == "final_answer"
        elif step.kind == "tool_call" and step.tool_name == TEXT_ACTION and isinstance(step.arguments, str):
            last_call = step.call_id or f"call_{i}"
            text_calls.add(last_call)
            messages.append({"role": "assistant", "content": None, "action": step.arguments})
        elif step.kind == "tool_result" and (step.call_id or last_call) in text_calls:
            messages.append({"role": "user", "content": step.content, "observation": True,
                             "is_error": step.is_error})
        elif step.kind == "tool_call":
            last_call = step.call_id or f"call_{i}"
            arguments = json.dumps(step.arguments, ensure_ascii=False)  # a string argument stays a string
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": last_call, "type": "function", "function": {"name": step.tool_name or "unknown",
                                                                   "arguments": arguments}}]})
        else:
            call_id = step.call_id or last_call
            if call_id is None:
                raise ValueError(f"{trajectory.source}: step {i} is a tool result answering no tool call")
            message = {"role": "tool", "tool_call_id": call_id, "content": step.content, "is_error": step.is_error}
            if step.tool_name:
                message["name"] = step.tool_name
            messages.append(message)
    record = {"id": trajectory.id, "task_id": trajectory.task_id, "trial": trajectory.trial,
              "domain": trajectory.domain, "agent": trajectory.agent, "messages": messages,
              "reward": reward, "label": label}
    if metadata:
        record["metadata"] = metadata
    return record


def write_records(records: Iterable[dict[str, Any]], out_path: PathArg) -> int:
    """Write interchange records, one per line, to a NEW file; returns how many were written.

    The one writer of this format (``rubricforge convert`` and ``label-next`` use it). Refuses to
    overwrite; writes to ``OUT.partial`` and renames it at the end, so an interrupted run leaves no
    half file under the real name."""
    out_path = Path(out_path)
    if out_path.exists():
        raise OutputExistsError(f"{out_path} exists; nothing is overwritten (choose another --out)")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    n = 0
    try:
        with partial.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
                n += 1
        partial.replace(out_path)
    finally:
        partial.unlink(missing_ok=True)
    return n


def _sniff_document(sample: FileSample) -> bool:
    """A JSON array of interchange records, or an empty ``.jsonl`` file (a `FileSample`)."""
    if sample.is_array:
        return sniff_array(sample.head)
    return sample.path.suffix == ".jsonl" and not sample.head


FORMAT = Format(
    name=NAME, read=read, count=read_counts, label_rule=LABEL_RULE, priority=10, extensions=(".jsonl", ".json"),
    description="generic trajectory records (docs/FORMAT.md)", sniff_record=sniff_line, sniff=_sniff_document)
