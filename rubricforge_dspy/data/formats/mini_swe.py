"""mini-SWE-agent trajectory files (format ``mini_swe``): ``*.traj.json``.

Layouts: ``{"info": {"exit_status", "submission", "model_stats", ...}, "messages": [...],
"trajectory_format": "mini-swe-agent-1[.x]"}`` as ``DefaultAgent.save`` writes it, or (older files)
a bare list of ``{"role", "content"}`` messages.

One trajectory per file. Steps: system messages are hidden; the user messages before the first
command are the task (``user``); an assistant message's text before its fenced command (```bash or
```mswea_bash_command) is ``assistant`` and the command a ``tool_call`` of tool ``bash``
(``arguments`` = the command); the user message that follows a command is its output
(``tool_result``, ``is_error`` when ``<returncode>`` is not 0); ``exit`` messages (the submission) are
hidden. Id: ``info["instance_id"]`` when present, else the file stem without ``.traj``. No outcome is
in the file: every trajectory is unlabeled (``label=None, reward=None``); labels come from
``--labels`` (e.g. a SWE-bench results file, keyed by instance id). Hidden: info (submission,
exit_status, model_stats, config), the system prompt, exit messages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import FULL_REWARD, LabelRule, Source, Step, Trajectory
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats._steps import CallTracker, error, finalize_answer, object_at, text_of

NAME = "mini_swe"
LABEL_RULE = FULL_REWARD  # only used with --labels (resolved = 1)
_COMMAND = re.compile(r"```(?:bash|mswea_bash_command)[ \t]*\n(.*?)\n?```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")


def _commands(msg: dict[str, Any], text: str) -> tuple[str, list[str]]:
    """The thought (text before the first command block) and the commands of an assistant message."""
    actions = object_at(msg, "extra").get("actions")
    if isinstance(actions, list) and actions:
        commands = [str(a.get("command", "")) if isinstance(a, dict) else str(a) for a in actions]
        match = _COMMAND.search(text)
        return (text[: match.start()] if match else text).strip(), commands
    found = list(_COMMAND.finditer(text))
    if not found:
        return text.strip(), []
    return text[: found[0].start()].strip(), [m.group(1) for m in found]


def _steps(messages: Any) -> tuple[list[Step], dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    steps: list[Step] = []
    hidden: dict[str, list[str]] = {"system": [], "exit": []}
    calls = CallTracker()
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i} is not an object")
        role, text = msg.get("role"), text_of(msg.get("content"))
        if role == "system":
            hidden["system"].append(text)
        elif role == "exit":
            hidden["exit"].append(text)
        elif role == "assistant":
            thought, commands = _commands(msg, text)
            if thought:
                steps.append(Step(kind="assistant", content=thought))
            for command in commands:
                steps.append(Step(kind="tool_call", tool_name="bash", arguments=command,
                                  call_id=calls.call(None, "bash")))
        elif role in ("user", "tool"):
            if calls.has_open():  # the output of the pending command(s)
                call_id, _ = calls.result(None)
                code = _RETURNCODE.search(text)
                steps.append(Step(kind="tool_result", tool_name="bash", content=text, call_id=call_id,
                                  is_error=bool(code and int(code.group(1)) != 0)))
            else:  # the task, or a format-error reminder after a message without a command
                steps.append(Step(kind="user", content=text))
        else:
            raise ValueError(f"message {i} has unknown role {role!r}")
    return finalize_answer(steps), hidden


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield the one ``(0, Trajectory | TrajectoryFormatError)`` of a trajectory file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError as exc:
        yield 0, error(path, None, f"malformed JSON: {exc}")
        return
    info = object_at(data, "info") if isinstance(data, dict) else {}
    messages = data.get("messages") if isinstance(data, dict) else data
    try:
        steps, extra = _steps(messages)
        if not steps:
            raise ValueError("no observable messages (only system/exit messages)")
    except ValueError as exc:
        yield 0, error(path, 0, f"{exc} (expected a mini-swe-agent .traj.json: docs/FORMAT.md)")
        return
    stem = path.name[: -len(".traj.json")] if path.name.endswith(".traj.json") else path.stem
    instance = str(info.get("instance_id") or (data.get("instance_id") if isinstance(data, dict) else None) or stem)
    config = object_at(info, "config")
    model = object_at(config, "model").get("model_name")
    yield 0, Trajectory(
        id=instance, task_id=instance, domain="swe", agent=f"mini-swe-agent/{model}" if model else "mini-swe-agent",
        steps=tuple(steps), reward=None, label=None, source=Source(str(path), 0),
        hidden={"format": NAME, "info": redact(info),
                "submission": info.get("submission"), "exit_status": info.get("exit_status"),
                "model_stats": info.get("model_stats"), "system_prompt": "\n\n".join(extra["system"]) or None,
                "exit_messages": extra["exit"],
                "trajectory_format": data.get("trajectory_format") if isinstance(data, dict) else None},
    )


def sniff(head: str, path: Path) -> bool:
    """True for ``"trajectory_format": "mini-swe-agent..."`` or a ``.traj.json`` message list."""
    if re.search(r'"trajectory_format"\s*:\s*"mini-swe-agent', head) or '"mini_version"' in head[:100_000]:
        return True  # the format tag is written last; info.mini_version comes first
    return path.name.endswith(".traj.json") and head.startswith("[") and '"role"' in head[:2000]


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=15, description="a mini-SWE-agent trajectory",
    sniff=lambda sample: sniff(sample.head, sample.path))
