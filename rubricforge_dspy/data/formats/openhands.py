"""OpenHands saved trajectories (format ``openhands``).

Containers read (sniffed from the content):

* a saved event list (a JSON array of events, as ``save_trajectory_path`` / the GUI export write it);
* an evaluation ``output.jsonl`` (one instance per line: ``{"instance_id", "instruction", "history":
  [events], "test_result", "metadata", "metrics", "instance", "error"}``).

Events carry ``id``, ``source`` (``user``/``agent``/``environment``) and either ``action`` + ``args``
or ``observation`` + ``content`` + ``extras`` + ``cause`` (the id of the action it answers).
Mapping: a user ``message`` -> user turn; an agent ``message`` or ``think`` -> assistant text; the
``thought`` of any other agent action -> assistant text, then the action itself (``run``, ``read``,
``edit``, ``browse``, ``run_ipython``, ...) -> ``tool_call`` (tool name = the action, arguments = its
``args`` minus bookkeeping such as ``thought``, ``impl_source``, ``confirmation_state``); an
observation whose ``cause`` is such an action -> its ``tool_result`` (``is_error`` for observation
``error``, a ``run`` with ``extras.metadata.exit_code`` != 0, or text that reads like an error);
``finish`` -> the final answer (``final_thought``, else ``thought``, else ``outputs``). System
prompts, ``recall``, state changes and other bookkeeping events are not steps.

Id: ``instance_id`` when the record has one, else the file stem (``#n`` per line for a JSON Lines
file without instance ids). Hidden: ``test_result``, ``metadata`` (API keys redacted), ``metrics``,
``instance`` (the benchmark row, which may hold the gold patch), ``error``, ``instruction`` and the
system prompt. A resolved flag in ``test_result``/``report`` is evaluator output: it stays hidden and
is NOT used as a label; every trajectory is unlabeled (``label=None``). To label, join a
SWE-bench ``results.json`` (or report) with ``--labels``: the id is the instance id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import FULL_REWARD, Source, Step, Trajectory, TrajectoryFormatError
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._json_stream import first_json_lines
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats._steps import object_at, text_of
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error
from rubricforge_dspy.data.formats.jsonl import iter_json_lines

NAME = "openhands"
LABEL_RULE = FULL_REWARD  # only applied to rewards joined with --labels (resolved = 1)
SKIPPED_ACTIONS = frozenset({"system", "recall", "change_agent_state", "null", "condensation", "delegate"})
SKIPPED_OBSERVATIONS = frozenset({"agent_state_changed", "recall", "null", "think", "user_rejected", "condensation"})
_NOISE_ARGS = frozenset({"thought", "impl_source", "confirmation_state", "security_risk", "blocking", "is_static",
                         "hidden", "translated_ipython_code", "kernel_init_code", "is_input", "cwd",
                         "include_extra", "wait_for_response", "image_urls"})
_HIDDEN_KEYS = ("test_result", "metadata", "metrics", "instance", "error", "instruction", "report")


def _exit_failed(event: dict[str, Any]) -> bool:
    meta = object_at(event, "extras").get("metadata")
    code = meta.get("exit_code") if isinstance(meta, dict) else (event.get("extras") or {}).get("exit_code")
    return isinstance(code, int) and not isinstance(code, bool) and code != 0


def _final_answer(args: dict[str, Any], event: dict[str, Any]) -> str:
    for key in ("final_thought", "thought"):
        if text_of(args.get(key)).strip():
            return text_of(args[key]).strip()
    outputs = args.get("outputs")
    if outputs:
        return outputs if isinstance(outputs, str) else json.dumps(outputs, ensure_ascii=False)
    return text_of(event.get("message")).strip()


def steps_of(events: list[Any]) -> tuple[list[Step], list[str]]:
    """The observable steps of an event list, and the system prompts it held (hidden)."""
    steps: list[Step] = []
    system: list[str] = []
    calls: dict[Any, tuple[str, str]] = {}  # action event id -> (call id, tool name)
    for n, event in enumerate(events):
        if not isinstance(event, dict):
            raise ValueError(f"event {n} is not an object")
        source = event.get("source")
        if "action" in event:
            action = event.get("action")
            args = object_at(event, "args")
            if action == "system":
                system.append(text_of(args.get("content")))
                continue
            if action in SKIPPED_ACTIONS:
                continue
            if action == "message":
                text = text_of(args.get("content") or event.get("message")).strip()
                if text:
                    steps.append(Step("user" if source == "user" else "assistant", text))
                continue
            if source != "agent":
                continue
            thought = text_of(args.get("thought")).strip()
            if action == "finish":
                steps.append(Step("final_answer", _final_answer(args, event)))
                continue
            if thought:
                steps.append(Step("assistant", thought))
            if action == "think":
                continue
            call_id = f"call_{event.get('id', n)}"
            arguments = {k: v for k, v in args.items() if k not in _NOISE_ARGS}
            steps.append(Step("tool_call", tool_name=str(action), arguments=arguments, call_id=call_id))
            calls[event.get("id", n)] = (call_id, str(action))
        elif "observation" in event:
            kind = event.get("observation")
            cause = event.get("cause")
            if kind in SKIPPED_OBSERVATIONS or cause not in calls:
                if kind == "error" and cause is None:  # an error not tied to a call: shown as a failed step
                    steps.append(Step("tool_result", text_of(event.get("content")), tool_name="error", is_error=True))
                continue
            call_id, name = calls.pop(cause)
            content = text_of(event.get("content"))
            failed = kind == "error" or (kind == "run" and _exit_failed(event)) or looks_like_tool_error(content)
            steps.append(Step("tool_result", content, tool_name=name, call_id=call_id, is_error=failed))
    return steps, system


def to_trajectory(record: Any, path: Path, index: int, default_id: str) -> Trajectory:
    if isinstance(record, list):
        events, extra = record, {}
    elif isinstance(record, dict) and isinstance(record.get("history"), list):
        events, extra = record["history"], record
    else:
        raise ValueError("expected an OpenHands event list or a record with a 'history' list of events")
    steps, system = steps_of(events)
    if not steps:
        raise ValueError("no observable step (no messages, actions or observations)")
    ident = str(extra.get("instance_id") or default_id)
    metadata = object_at(extra, "metadata")
    llm = object_at(metadata, "llm_config")
    agent = "/".join(str(x) for x in (metadata.get("agent_class"), llm.get("model")) if x) or "openhands"
    hidden = {key: redact(extra[key]) for key in _HIDDEN_KEYS if key in extra}
    return Trajectory(
        id=ident, task_id=ident, domain=NAME, agent=agent, steps=tuple(steps), reward=None, label=None,
        source=Source(str(path), index),
        hidden={"format": NAME, "system_prompt": "\n\n".join(system) or None, **hidden},
    )


def read(path: Path, threshold: Any = None) -> ReadResults:
    """Yield ``(record index, Trajectory | TrajectoryFormatError)``: one per event-list file or per JSONL line."""
    head = path.read_bytes()[:64].decode("utf-8-sig", errors="replace").lstrip()
    records: Iterable[tuple[int, Any]]
    if head.startswith("["):
        try:
            records = [(0, json.loads(path.read_text(encoding="utf-8-sig")))]
        except ValueError as exc:
            yield None, TrajectoryFormatError(str(path), None, f"malformed JSON: {exc}")
            return
        many = False
    else:
        records, many = iter_json_lines(path), True
    for index, record in records:
        if isinstance(record, TrajectoryFormatError):
            yield index, record
            continue
        try:
            yield index, to_trajectory(record, path, index, f"{path.stem}#{index}" if many else path.stem)
        except ValueError as exc:
            yield index, TrajectoryFormatError(str(path), index, str(exc))


def _is_event(obj: Any) -> bool:
    return isinstance(obj, dict) and "source" in obj and ("action" in obj or "observation" in obj)


def sniff_array(head: str) -> bool:
    """True for a JSON array whose first element is an OpenHands event."""
    start = head[:4000]
    return '"source"' in start and ('"action"' in start or '"observation"' in start) and '"id"' in start \
        and ('"args"' in start or '"extras"' in start)


def sniff_line(obj: dict[str, Any]) -> bool:
    """True for an OpenHands evaluation output line (a ``history`` of events)."""
    history = obj.get("history")
    return isinstance(history, list) and bool(history) and _is_event(history[0])


def sniff(head: str, path: Path) -> bool:
    if head.startswith("["):
        return sniff_array(head)
    return any(sniff_line(obj) for obj in first_json_lines(path, limit=3))


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=80, extensions=(".json", ".jsonl"),
    description="OpenHands events or evaluation output", sniff_record=sniff_line,
    sniff=lambda sample: sample.is_array and sniff_array(sample.head))
