"""SWE-agent trajectory files (format ``swe_agent``): one ``<instance_id>.traj`` JSON object per run.

A ``.traj`` file (SWE-agent 0.x and 1.x) holds ``trajectory`` (one entry per agent step:
``thought``, ``action``, ``observation``, ``response``, ``state``, ...), ``history`` (the chat the
model saw), ``info`` (``exit_status``, ``submission``, ``model_stats``, ...), ``environment`` and,
in 1.x, ``replay_config``.

Steps: the task is the first user message of ``history`` that is not a demonstration
(``is_demo: true`` or ``message_type: "demonstration"`` are skipped, as are system messages); then,
per trajectory entry: the ``thought`` as assistant text, the ``action`` as a ``tool_call`` (tool
name = the action's first word, i.e. the SWE-agent command such as ``edit``, ``find_file``, ``python``
or ``submit``; arguments = the whole action text) and the ``observation`` as its ``tool_result``
(``is_error`` when it reads like a failure: `looks_like_tool_error`, a Python traceback, 
``command not found`` or SWE-agent's "Your proposed edit has introduced new syntax error(s)"). The final
``submit`` is an action like any other.

Id: the instance id, from the file name ``<instance_id>.traj`` (SWE-bench runs write
``<instance_id>/<instance_id>.traj``), so a SWE-bench ``results.json`` joins by id via ``--labels``.
Hidden: ``info`` (submission, exit_status, model_stats), ``environment``, ``replay_config``, the
system prompt and the demonstrations. A ``.traj`` holds no outcome: every trajectory is unlabeled
(``label=None, reward=None``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import FULL_REWARD, Source, Step, Trajectory, TrajectoryFormatError
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats._steps import object_at, text_of
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error

NAME = "swe_agent"
LABEL_RULE = FULL_REWARD  # only applied to rewards joined with --labels (resolved = 1)
_TRAJ_LIST = re.compile(r'"trajectory"\s*:\s*\[\s*(?:\]|\{)')
# SWE-agent's own failure messages (its linter refusing an edit), besides the shared families
_SHELL_ERROR = re.compile(r"Traceback \(most recent call last\)|: command not found\b|^\s*Usage: "
                          r"|\AYour proposed edit has introduced new syntax error\(s\)", re.MULTILINE)


def instance_id(path: Path) -> str:
    """The SWE-bench instance id of a ``.traj`` file: its name without the suffix."""
    return path.name[: -len(".traj")] if path.name.endswith(".traj") else path.stem


def is_demonstration(message: dict[str, Any]) -> bool:
    return bool(message.get("is_demo")) or message.get("message_type") == "demonstration"


def task_message(history: list[Any]) -> str | None:
    """The first non-demonstration user message of ``history`` (the issue statement)."""
    for message in history:
        if isinstance(message, dict) and message.get("role") == "user" and not is_demonstration(message):
            return text_of(message.get("content"))
    return None


def observation_failed(text: str) -> bool:
    """True when an SWE-agent observation reports a failure."""
    return looks_like_tool_error(text) or bool(_SHELL_ERROR.search(text or ""))


def steps_of(record: dict[str, Any]) -> list[Step]:
    trajectory = record.get("trajectory")
    if not isinstance(trajectory, list):
        raise ValueError("no 'trajectory' list (is this an SWE-agent .traj file?)")
    history = record.get("history") or []
    if not isinstance(history, list):
        raise ValueError("'history' must be a list of messages")
    steps: list[Step] = []
    task = task_message(history)
    if task:
        steps.append(Step("user", task))
    for n, entry in enumerate(trajectory):
        if not isinstance(entry, dict):
            raise ValueError(f"trajectory[{n}] is not an object")
        thought = text_of(entry.get("thought")).strip()
        action = text_of(entry.get("action")).strip()
        if thought:
            steps.append(Step("assistant", thought))
        if action:
            call_id = f"step_{n}"
            name = action.split()[0]
            steps.append(Step("tool_call", tool_name=name, arguments=action, call_id=call_id))
            observation = text_of(entry.get("observation"))
            steps.append(Step("tool_result", observation, tool_name=name, call_id=call_id,
                              is_error=observation_failed(observation)))
    return steps


def to_trajectory(record: Any, path: Path, index: int = 0) -> Trajectory:
    if not isinstance(record, dict):
        raise ValueError("a .traj file must hold one JSON object")
    steps = steps_of(record)
    if not steps:
        raise ValueError("no observable step (empty trajectory and no task message)")
    info = object_at(record, "info")
    model = ((info.get("model_stats") or {}) if isinstance(info.get("model_stats"), dict) else {}).get("model")
    ident = instance_id(path)
    history = record.get("history") or []
    return Trajectory(
        id=ident, task_id=ident, domain=NAME, agent=str(model or "swe-agent"), steps=tuple(steps),
        reward=None, label=None, source=Source(str(path), index),
        hidden={"format": NAME, "info": redact(info),
                "environment": redact(record.get("environment")), "replay_config": record.get("replay_config"),
                "system_prompt": "\n\n".join(text_of(m.get("content")) for m in history
                                             if isinstance(m, dict) and m.get("role") == "system") or None,
                "demonstrations": [text_of(m.get("content")) for m in history
                                   if isinstance(m, dict) and is_demonstration(m)]},
    )


def read(path: Path, threshold: Any = None) -> ReadResults:
    """Yield the one trajectory of a ``.traj`` file (or the error naming it)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        yield None, TrajectoryFormatError(str(path), None, f"not UTF-8 text: {exc}")
        return
    except ValueError as exc:
        yield None, TrajectoryFormatError(str(path), None, f"malformed JSON: {exc}")
        return
    try:
        yield 0, to_trajectory(record, path)
    except ValueError as exc:
        yield 0, TrajectoryFormatError(str(path), 0, str(exc))


def sniff(head: str) -> bool:
    """True for an SWE-agent ``.traj`` object (top-level ``trajectory`` and ``history``, entries with ``action``)."""
    start = head[:200000]
    return bool(_TRAJ_LIST.search(start)) and '"history"' in start and '"action"' in start


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=110, extensions=(".traj", ".json"),
    description="an SWE-agent .traj file", sniff=lambda sample: sample.is_object and sniff(sample.head))
