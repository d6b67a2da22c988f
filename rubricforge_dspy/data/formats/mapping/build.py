"""One mapped record -> one `Trajectory`, counting every field that resolved to nothing.

The steps are built with the same step builders as the shipped readers (`new_step`, `finalize_answer`,
`CallTracker`, `parse_arguments`, `looks_like_tool_error`), so a mapped trajectory renders exactly as a
built-in one would: the task, thoughts, actions, observations and final answer are steps; the reward,
the label and every ``hidden`` field are not.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import jmespath

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule, Source, Step, Trajectory
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats._steps import (
    CallTracker,
    as_reward,
    finalize_answer,
    new_step,
    parse_arguments,
    text_of,
)
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error
from rubricforge_dspy.data.formats.mapping.functions import set_record
from rubricforge_dspy.data.formats.mapping.native import jmespath_false
from rubricforge_dspy.data.formats.mapping.spec import Expr, LabelSpec, Mapping, ValueSetRule

TEXT_ACTION = "action"  # the tool name of a plain-text action (as the generic JSONL names it)
ROLE_TARGETS = ("user", "assistant", "system", "tool", "observation", "skip")
DEFAULT_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool", "function": "tool",
                 "observation": "observation"}
_CALL_DEFAULTS = {"tool_calls": "tool_calls || (function_call && [function_call])",
                  "tool": "function.name || name || function", "arguments": "function.arguments || arguments || args",
                  "call_id": "id", "tool_call_id": "tool_call_id", "error": "error"}


def is_empty(value: Any) -> bool:
    """True for what a field must not silently be: null, an empty (or blank) string, list or object."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, (list, dict)) and not value


def _text(value: Any) -> str:
    """A value as the judge reads it: strings as they are, content-part lists joined, others as JSON."""
    if isinstance(value, (dict, list)) and not (isinstance(value, list) and all(isinstance(v, dict) and "text" in v
                                                                               for v in value)):
        return json.dumps(value, ensure_ascii=False)
    return text_of(value)


class Converter:
    """Turns the records of one mapping into trajectories and counts, per field, the records in which
    it resolved to nothing (`empty`; `records` counts the records seen).

    With `audit` (``map check``), it also counts what the error flag said against what the tool output's
    text says (`flags`: ``results``, ``flag_true``, ``flag_false``, ``flag_null``, ``text_error``,
    ``flag_true_text_error``) and keeps the label field's raw value in ``hidden["label_value"]``."""

    def __init__(self, mapping: Mapping, rule: LabelSpec | None = None, audit: bool = False):
        self.mapping = mapping
        self.rule = _effective_rule(mapping, rule)
        self.records = 0
        self.empty: Counter[str] = Counter()
        self.audit = audit
        self.flags: Counter[str] = Counter()
        self._label_value: Any = None
        self._defaults: dict[str, Callable[[Any], Any]] = {
            key: Expr(text, jmespath.compile(text), f"messages.{key}") for key, text in _CALL_DEFAULTS.items()}
        self._defaults["tool_calls"] = _default_tool_calls  # the one default that builds a list: written out
        self._index: Any = None

    def _field(self, name: str, record: Any, key: Any, file: str) -> Any:
        expr = self.mapping.fields.get(name)
        if expr is None:
            return None
        value = expr(record, key, file, 0, self._index)
        if is_empty(value):
            self.empty[name] += 1
            return None
        return value

    def convert(self, record: Any, key: Any, path: Path, index: int, default_id: str, name: str | None = None,
                keys: tuple[Any, ...] = ()) -> Trajectory:
        """The `Trajectory` of one record; ValueError (naming the field) for a record that cannot be one.
        `name` is the data file's name as ``$file`` / ``file()`` give it (its path under the data folder
        without the suffix; default the file's stem); `keys` the member names of the records path, outermost
        first (``key(n)``)."""
        self.records += 1
        file = name if name is not None else path.stem
        self._index = index
        set_record(file, index, key, keys)
        ident = self._field("id", record, key, file)
        if ident is None:
            if "id" in self.mapping.fields and not self.mapping.fields["id"].optional:
                raise ValueError(f"id: {self.mapping.fields['id'].text!r} resolved to nothing")
            ident = default_id
        ident = _scalar_text(ident, "id")
        task_id = self._field("task_id", record, key, file)
        system = self._field("system", record, key, file)
        steps, system_from_messages = self._steps(record, key, file)
        task = self._field("task", record, key, file)
        if task is not None and not (steps and steps[0].kind == "user" and _text(task).strip() in steps[0].content):
            steps.insert(0, new_step("user", _text(task)))  # unless the first user turn already states it
        final = self._field("final_answer", record, key, file)
        if final is not None:
            steps.append(new_step("final_answer", _text(final)))
        elif self.mapping.mode == "messages":
            finalize_answer(steps)
        if not steps:
            raise ValueError("no observable step: the task, steps and final answer all resolved to nothing")
        reward, label = self._label(record, key, file)
        trial = self._field("trial", record, key, file)
        hidden = {"format": self.mapping.name, "mapping": self.mapping.file,
                  "label_source": "mapping" if label is not None else None,
                  "system_prompt": "\n\n".join(filter(None, [_text(system) if system else None,
                                                            system_from_messages])) or None}
        for name, expr in self.mapping.hidden.items():
            hidden[name] = redact(expr(record, key, file))
        session = self._field("session_id", record, key, file)
        if session is not None:  # where session grouping (--session-key) finds it
            hidden["session_id"] = _scalar_text(session, "session_id")
        if self.audit:
            hidden["label_value"] = self._label_value
        return Trajectory(
            id=ident, task_id=_scalar_text(task_id, "task_id") if task_id is not None else ident,
            domain=_scalar_text(self._field("domain", record, key, file) or self.mapping.name, "domain"),
            agent=_scalar_text(self._field("agent", record, key, file) or self.mapping.name, "agent"),
            steps=tuple(steps), reward=reward, label=label, source=Source(str(path), index),
            trial=int(trial) if isinstance(trial, (int, float)) and not isinstance(trial, bool) else None,
            hidden=hidden)

    def _label(self, record: Any, key: Any, file: str) -> tuple[float | None, int | None]:
        self._label_value = None
        reward_value = self._field("reward", record, key, file)
        reward = as_reward(reward_value) if reward_value is not None else None
        rule = self.rule
        if isinstance(rule, ValueSetRule):
            label_field = self.mapping.label_field
            if label_field is None:  # a value-set rule comes with the field it reads (spec._label_spec)
                raise InputError(f"{file}: the label rule {rule} reads a field the mapping does not give")
            value = self._label_value = label_field(record, key, file)
            if is_empty(value):
                self.empty["label"] += 1
                return reward, None
            return reward, rule.label(value)
        if isinstance(rule, LabelRule) and reward is not None:
            return reward, rule.label(reward)
        return reward, None

    def _error(self, flag: Any, content: str) -> bool:
        return _audit_error(self.flags, flag, content) if self.audit else _is_error(flag, content)

    def _count_empty(self, name: str, values: list[Any]) -> None:
        if all(is_empty(v) for v in values):
            self.empty[name] += 1

    def _steps(self, record: Any, key: Any, file: str) -> tuple[list[Step], str | None]:
        mode = self.mapping.mode
        if mode == "none":
            return [], None
        if mode == "parallel":
            return self._parallel(record, key, file), None
        spec = self.mapping.step_fields
        items = spec["path"](record, key, file)
        prefix = f"{mode}."
        if is_empty(items):
            self.empty[prefix + "path"] += 1
            for name in spec:
                if name != "path":
                    self.empty[prefix + name] += 1
            return [], None
        if not isinstance(items, list):
            raise ValueError(f"{prefix}path: {spec['path'].text!r} is a {type(items).__name__}, not a list")
        if mode == "steps":
            return self._from_steps(items), None
        return self._from_messages(items)

    def _from_steps(self, items: list[Any]) -> list[Step]:
        spec = self.mapping.step_fields
        names = [name for name in spec if name != "path"]
        seen: dict[str, list[Any]] = {name: [] for name in names}
        steps: list[Step] = []
        calls = CallTracker()
        for item in items:
            values = {name: spec[name](item) for name in names}
            for name in names:
                seen[name].append(values[name])
            self._one_step(steps, calls, values)
        for name in names:
            self._count_empty("steps." + name, seen[name])
        return steps

    def _one_step(self, steps: list[Step], calls: CallTracker, values: dict[str, Any]) -> None:
        """The steps of one action: its thought, the call, and the observation answering it."""
        thought, tool, action = values.get("thought"), values.get("tool"), values.get("action")
        if not is_empty(thought):
            steps.append(new_step("assistant", _text(thought)))
        call = None
        if not is_empty(tool):
            arguments = values.get("arguments")
            arguments = parse_arguments(arguments) if arguments is not None else (action if action is not None else {})
            call = (calls.call(None, str(tool)), str(tool))
            steps.append(new_step("tool_call", "", call[1], arguments, call[0]))
        elif not is_empty(action):
            call = (calls.call(None, TEXT_ACTION), TEXT_ACTION)
            steps.append(new_step("tool_call", "", TEXT_ACTION, action, call[0]))
        observation = values.get("observation")
        if observation is None or (call is None and is_empty(observation)):
            return
        content = _text(observation)
        call_id, name = calls.result(None) if call is not None else (None, None)
        steps.append(new_step("tool_result", content, name, None, call_id, self._error(values.get("error"), content)))

    def _parallel(self, record: Any, key: Any, file: str) -> list[Step]:
        lists = {}
        for name, expr in self.mapping.step_fields.items():
            value = expr(record, key, file)
            if is_empty(value):
                self.empty[name] += 1
                value = []
            if not isinstance(value, list):
                raise ValueError(f"{name}: {expr.text!r} is a {type(value).__name__}, not a list")
            lists[name] = value
        actions = lists["actions"]
        n = len(actions)
        for name, allowed in (("observations", (n, n - 1)), ("errors", None), ("thoughts", (n,))):
            if name not in lists or not lists[name]:
                continue
            allowed = allowed or (len(lists.get("observations", [])),)
            if len(lists[name]) not in allowed:
                raise ValueError(f"{name} has {len(lists[name])} items but actions has {n} (parallel lists must "
                                 "line up: observations[i] answers actions[i])")
        steps: list[Step] = []
        calls = CallTracker()
        for i, action in enumerate(actions):
            values = {"action": action}
            for name, target in (("observations", "observation"), ("errors", "error"), ("thoughts", "thought")):
                items = lists.get(name) or []
                values[target] = items[i] if i < len(items) else None
            self._one_step(steps, calls, values)
        return steps

    def _from_messages(self, items: list[Any]) -> tuple[list[Step], str | None]:
        spec = {**self._defaults, **self.mapping.step_fields}
        roles = {**DEFAULT_ROLES, **self.mapping.roles}
        steps: list[Step] = []
        system: list[str] = []
        calls = CallTracker()
        contents = []
        for i, msg in enumerate(items):
            raw_role = spec["role"](msg)
            role = roles.get(raw_role) if isinstance(raw_role, str) else None
            if role is None:
                raise ValueError(f"message {i}: role {raw_role!r} is not mapped; add it to 'messages.roles' "
                                 f"(as one of {ROLE_TARGETS})")
            content = spec["content"](msg)
            contents.append(content)
            text = _text(content) if content is not None else ""
            if role == "skip":
                continue
            if role == "system":
                system.append(text)
            elif role == "user":
                steps.append(new_step("user", text))
            elif role == "assistant":
                if text.strip():
                    steps.append(new_step("assistant", text))
                self._calls(spec, msg, steps, calls, i)
            else:
                raw_id = spec["tool_call_id"](msg) if role == "tool" else None
                call_id, name = calls.result(raw_id if isinstance(raw_id, str) and raw_id else None)
                steps.append(new_step("tool_result", text, name, None, call_id, self._error(spec["error"](msg), text)))
        self._count_empty("messages.content", contents)
        return steps, "\n\n".join(system) or None

    def _calls(self, spec: dict[str, Any], msg: Any, steps: list[Step], calls: CallTracker, i: int) -> None:
        found = spec["tool_calls"](msg)
        if is_empty(found):
            return
        if not isinstance(found, list):
            raise ValueError(f"message {i}: tool calls are a {type(found).__name__}, not a list")
        for call in found:
            name = spec["tool"](call)
            if is_empty(name):
                raise ValueError(f"message {i}: a tool call without a tool name ({spec['tool'].text!r} is empty)")
            raw_id = spec["call_id"](call)
            call_id = calls.call(raw_id if isinstance(raw_id, str) and raw_id else None, str(name))
            steps.append(new_step("tool_call", "", str(name), parse_arguments(spec["arguments"](call)), call_id))


def _default_tool_calls(message: Any) -> Any:
    """``tool_calls || (function_call && [function_call])`` (`_CALL_DEFAULTS`), as the interpreter gives it,
    without the evaluation budget a built list asks of a user's expression (this one builds one element)."""
    if not isinstance(message, dict):
        return None
    calls = message.get("tool_calls")
    if not jmespath_false(calls):
        return calls
    call = message.get("function_call")
    return call if jmespath_false(call) else [call]


def _audit_error(flags: Counter[str], flag: Any, content: str) -> bool:
    """`_is_error`, counting in `flags` what the flag said and what the text says."""
    text_error = looks_like_tool_error(content)
    flagged = _is_error(flag, content)
    flags["results"] += 1
    flags["text_error"] += text_error
    if flag is None or (not isinstance(flag, bool) and is_empty(flag)):
        flags["flag_null"] += 1
    elif flagged:
        flags["flag_true"] += 1
        flags["flag_true_text_error"] += text_error
    else:
        flags["flag_false"] += 1
    return flagged


def _is_error(flag: Any, content: str) -> bool:
    """A step's error flag: the mapped value when it says (a boolean, or a non-empty error message), else
    the tool-output shapes every loader reads (`looks_like_tool_error`)."""
    if isinstance(flag, bool):
        return flag
    if flag is not None and not is_empty(flag):
        return True
    return looks_like_tool_error(content)


def _scalar_text(value: Any, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{name} must be a string or a number, got {type(value).__name__} {str(value)[:80]!r}")
    return str(value)


def _effective_rule(mapping: Mapping, rule: LabelSpec | None) -> LabelSpec | None:
    """The label rule to apply: the mapping's own, or a `LabelRule` given by the caller (``--label-threshold``),
    which applies wherever the mapping gives a reward (over a value-set label too: the caller asked for it), and
    is refused, naming the mapping, where it gives none."""
    if rule is None or rule == mapping.label_rule:
        return mapping.label_rule
    if "reward" not in mapping.fields:
        given = (f"labels come from '{mapping.label_rule.field}' (a value set)"
                 if isinstance(mapping.label_rule, ValueSetRule) else "it gives no label")
        raise InputError(f"{mapping.file}: the mapping gives no 'reward' ({given}), so the reward rule {rule} does "
                         "not apply; drop the threshold, or join rewards with --labels FILE")
    return rule
