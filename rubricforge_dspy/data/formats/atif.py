"""Harbor's Agent Trajectory Interchange Format (format ``atif``): one ``trajectory.json`` per run.

Read (ATIF v1.x, ``{"schema_version": "ATIF-v1.N", "session_id", "agent": {"name", "version",
"model_name"}, "steps": [...], "final_metrics", "notes"}``): per step, ``source`` ``user`` -> user turn,
``agent`` -> its ``message`` as assistant text, then each of its ``tool_calls`` (``tool_call_id``,
``function_name``, ``arguments``) as a tool call, then each ``observation.results`` entry as the tool
result of the call its ``source_call_id`` names (an entry without one answers the step's first open
call). ``system`` steps are the hidden system prompt. The agent's last text with nothing after it is the
final answer. A result is ``is_error`` when the producer says so (``is_error``, ``result.success: false``,
``extra.tool_result_is_error``), else when its text reads as a failure (`looks_like_tool_error`).

Variants real producers write (surveyed in evals/data/SOURCES.md) are accepted: ``schema_version`` without
the ``ATIF-v`` prefix (``"1.4"``); no ``session_id``, ``agent`` or ``step_id``; ``agent.model`` for
``model_name``; tool calls as ``{"id", "name", "arguments"|"input"}`` or OpenAI's ``{"id", "function":
{"name", "arguments"}}``; a message as a list of content parts; tool results written as their own
``system`` (or ``tool``) steps, ``{"message": "Tool result for <call id>", "observation": {"content",
"result": {"success", "output"|"error"}}}``, even before the step holding the call (such a result is shown
right after its call); ``assistant``/``model`` for ``agent``, ``human`` for ``user``; extra fields anywhere.
Refused, naming the file and the step: a file whose ``steps`` is not a list, a step that is not an
object, a ``source`` none of the above.

Id: ``session_id``, else the file's parent directory name when the file is ``trajectory.json`` (Harbor
writes ``<trial>/agent/trajectory.json``), else the file stem. Hidden: ``agent.extra``, ``final_metrics``,
``notes``, step ``metrics`` and ``reasoning_content`` are not shown (reasoning is the model's private
scratchpad in ATIF). An ATIF file holds no outcome (Harbor's verifier writes its reward elsewhere): every
trajectory is unlabeled (``label=None``); join rewards with ``--labels``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import ANY_POSITIVE_REWARD, Source, Step, Trajectory, TrajectoryFormatError
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats._steps import CallTracker, finalize_answer, object_at, parse_arguments, text_of
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error

NAME = "atif"
LABEL_RULE = ANY_POSITIVE_REWARD  # only applied to rewards joined with --labels


_SOURCES = {"user": "user", "human": "user", "agent": "agent", "assistant": "agent", "model": "agent",
            "system": "system", "tool": "tool"}
_RESULT_FOR = re.compile(r"\A\s*Tool result for (\S+)\s*\Z")
_VERSION = re.compile(r"\A(?:ATIF-?)?v?1(?:\.\d+)*\Z", re.IGNORECASE)


def _call_of(call: Any, where: str) -> tuple[str | None, str, Any]:
    """``(raw id, tool name, arguments)`` of a tool call in any of the shapes producers write."""
    if not isinstance(call, dict):
        raise ValueError(f"{where}: a tool call is not an object")
    function = object_at(call, "function")
    raw_id = call.get("tool_call_id") or call.get("id") or call.get("call_id")
    name = call.get("function_name") or call.get("name") or function.get("name") or "tool"
    for key in ("arguments", "input", "args"):
        if key in call:
            return (str(raw_id) if raw_id is not None else None), str(name), call[key]
    return (str(raw_id) if raw_id is not None else None), str(name), function.get("arguments")


def _flag(*values: Any) -> bool | None:
    for value in values:
        if isinstance(value, bool):
            return value
    return None


def _results_of(step: dict[str, Any], message: str, where: str) -> list[tuple[str | None, str, bool | None]]:
    """``(call id, content, explicit error flag or None)`` of a step's observation, in any producer's shape."""
    observation = step.get("observation")
    if observation is None:
        return []
    if isinstance(observation, list):
        entries = observation
    elif isinstance(observation, dict):
        entries = observation["results"] if isinstance(observation.get("results"), list) else \
            [observation] if any(k in observation for k in ("content", "result", "output")) else []
    else:
        raise ValueError(f"{where}: 'observation' must be an object")
    extra = object_at(step, "extra")
    named = _RESULT_FOR.match(message)
    out: list[tuple[str | None, str, bool | None]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            out.append((None, text_of(entry), None))
            continue
        result = object_at(entry, "result")
        raw_id = entry.get("source_call_id") or entry.get("tool_call_id") or entry.get("call_id") or \
            (named.group(1) if named and len(entries) == 1 else None)
        content = text_of(entry.get("content")) if entry.get("content") is not None else \
            text_of(entry.get("output") if entry.get("output") is not None else
                    result.get("output") if result.get("output") is not None else result.get("error"))
        success = _flag(result.get("success"), entry.get("success"))
        flag = _flag(entry.get("is_error"), result.get("is_error"), extra.get("tool_result_is_error"),
                     None if success is None else not success)
        out.append((str(raw_id) if raw_id is not None else None, content, flag))
    return out


def steps_of(raw_steps: Any) -> tuple[list[Step], list[str]]:
    if not isinstance(raw_steps, list):
        raise ValueError("'steps' must be a list")
    parsed = []
    for n, step in enumerate(raw_steps):
        where = f"steps[{n}]"
        if not isinstance(step, dict):
            raise ValueError(f"{where} is not an object")
        source = _SOURCES.get(str(step.get("source")).lower()) if isinstance(step.get("source"), str) else None
        if source is None:
            raise ValueError(f"{where}: unknown source {step.get('source')!r} (expected user, agent or system)")
        text = text_of(step.get("message")).strip()
        calls = [_call_of(c, where) for c in (step.get("tool_calls") or [])] if source == "agent" else []
        parsed.append((source, text, calls, _results_of(step, text, where)))
    later_calls: dict[str, int] = {}  # call id -> index of the step that makes the call
    for n, (_, _, calls, _) in enumerate(parsed):
        for raw_id, _, _ in calls:
            if raw_id:
                later_calls.setdefault(raw_id, n)
    steps: list[Step] = []
    system: list[str] = []
    tracker = CallTracker()
    deferred: dict[str, list[tuple[str, bool | None]]] = {}  # results written before their call

    def add_result(raw_id: str | None, content: str, flag: bool | None) -> None:
        call_id, name = tracker.result(raw_id)
        steps.append(Step("tool_result", content, tool_name=name, call_id=call_id,
                          is_error=flag if flag is not None else looks_like_tool_error(content)))

    for n, (source, text, calls, results) in enumerate(parsed):
        if source in ("system", "tool") and results:  # tool results written as their own step
            for raw_id, content, flag in results:
                if raw_id and later_calls.get(raw_id, -1) > n and not tracker.knows(raw_id):
                    deferred.setdefault(raw_id, []).append((content, flag))
                else:
                    add_result(raw_id, content, flag)
            continue
        if source == "system":
            if text:
                system.append(text)
            continue
        if source == "user" or source == "tool":
            if text:
                steps.append(Step("user", text))
            continue
        if text:
            steps.append(Step("assistant", text))
        for raw_id, name, arguments in calls:
            steps.append(Step("tool_call", tool_name=name, arguments=parse_arguments(arguments),
                              call_id=tracker.call(raw_id, name)))
        for raw_id, _, _ in calls:
            for content, flag in deferred.pop(raw_id, []) if raw_id else []:
                add_result(raw_id, content, flag)
        for raw_id, content, flag in results:
            add_result(raw_id, content, flag)
    return finalize_answer(steps), system


def default_id(path: Path) -> str:
    return path.parent.name if path.name == "trajectory.json" and path.parent.name != "agent" else \
        path.parent.parent.name if path.name == "trajectory.json" else path.stem


def to_trajectory(record: Any, path: Path) -> Trajectory:
    if not isinstance(record, dict):
        raise ValueError("not an ATIF trajectory (expected a JSON object)")
    version = record.get("schema_version")
    if not (isinstance(version, str) and _VERSION.match(version.strip())) and not isinstance(version, (int, float)):
        raise ValueError(f"not an ATIF trajectory (schema_version {version!r}; expected 'ATIF-v1.x' or '1.x')")
    steps, system = steps_of(record.get("steps"))
    if not steps:
        raise ValueError("no observable step")
    agent = object_at(record, "agent")
    ident = str(record.get("session_id") or default_id(path))
    name = "/".join(str(x) for x in (agent.get("name"), agent.get("model_name") or agent.get("model")) if x) \
        or "unknown"
    return Trajectory(
        id=ident, task_id=ident, domain=NAME, agent=name, steps=tuple(steps), reward=None, label=None,
        source=Source(str(path), 0),
        hidden={"format": NAME, "schema_version": record.get("schema_version"),
                "system_prompt": "\n\n".join(system) or None, "agent": redact(agent),
                "final_metrics": record.get("final_metrics"), "notes": record.get("notes"),
                "extra": redact(record.get("extra")),
                "step_metrics": [s.get("metrics") for s in record["steps"] if isinstance(s, dict) and s.get("metrics")],
                "reasoning": [s.get("reasoning_content") for s in record["steps"]
                              if isinstance(s, dict) and s.get("reasoning_content")]},
    )


def read(path: Path, threshold: Any = None) -> ReadResults:
    try:
        record = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        yield None, TrajectoryFormatError(str(path), None, f"malformed JSON: {exc}")
        return
    try:
        yield 0, to_trajectory(record, path)
    except (ValueError, TypeError, AttributeError) as exc:
        yield 0, TrajectoryFormatError(str(path), 0, str(exc))


_SNIFF_VERSION = re.compile(r'"schema_version"\s*:\s*"(?:ATIF-v?1\.|v?1\.\d+")', re.IGNORECASE)
_SNIFF_STEP = re.compile(r'"source"\s*:\s*"(?:user|agent|system)"')


def sniff(head: str) -> bool:
    """True for an ATIF object: ``"schema_version": "ATIF-v1...`` near the start and ``steps``; a bare
    ``"1.x"`` version also needs an ATIF step (``"source": "user"|"agent"|"system"``)."""
    start = head[:4000]
    if '"steps"' not in head[:200000] or not _SNIFF_VERSION.search(start):
        return False
    return '"ATIF-' in start.upper() or bool(_SNIFF_STEP.search(head[:200000]))


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=120, description="an ATIF trajectory",
    sniff=lambda sample: sample.is_object and sniff(sample.head))
