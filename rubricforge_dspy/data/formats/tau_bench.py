"""tau-bench (v1) result files: a JSON list of ``{task_id, reward, trial, info, traj}``.

Two kinds of runs share the schema:

* tool-calling runs: ``traj`` holds OpenAI-style messages; the assistant emits ``tool_calls`` and the
  environment answers with ``role: "tool"`` messages;
* ``act`` / ``react`` runs: there are no tool messages. The assistant writes ``Action: {json}``
  (after an optional ``Thought: ...``) and the observation comes back as a user turn starting with
  ``API output:``. The action is parsed exactly like tau-bench's ``ChatReActAgent``: the text after
  the last ``Action:`` is JSON-decoded; a ``respond`` action or undecodable text is a message to the
  user, anything else a tool call whose observation is the next user turn.

Observable steps: user turns, assistant text, tool calls and results (``is_error`` for ``Error: ...``,
``Unknown action ...`` and the AgentVerify ``# var_N = "Error: ..."`` shape), and the closing assistant
message as ``final_answer``. The system prompt (agent policy) and the whole ``info`` dict (the user
simulator's instruction, gold actions and outputs, reward info, gt data hash, user cost, crash
errors) go to ``hidden`` only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import (
    FULL_REWARD,
    LabelRule,
    Source,
    Step,
    Trajectory,
    label_from_reward,
)
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._json_stream import Malformed, stream_json_array
from rubricforge_dspy.data.formats._records import IdSet
from rubricforge_dspy.data.formats._steps import (
    CallTracker,
    as_reward,
    check_messages,
    error,
    finalize_answer,
    object_at,
    parse_arguments,
    text_of,
)
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error

NAME = "tau_bench"
# tau-bench's own success check (pass^k): reward 1 (within 1e-6); its rewards are 0 or 1.
LABEL_RULE = FULL_REWARD
RESPOND = "respond"
API_OUTPUT = "API output:"
STRATEGIES = ("tool-calling", "few-shot", "assertions-agent", "react", "act")
_RUN_NAME = re.compile(
    r"^(?P<prefix>.+?)-(?P<temperature>\d+(?:\.\d+)?)_range_(?P<range>-?\d+--?\d+)(?P<rest>.*)$"
)

AIRLINE_TOOLS = {
    "book_reservation", "cancel_reservation", "get_reservation_details", "search_direct_flight",
    "search_onestop_flight", "send_certificate", "update_reservation_baggages",
    "update_reservation_flights", "update_reservation_passengers", "list_all_airports",
}
RETAIL_TOOLS = {
    "find_user_id_by_email", "find_user_id_by_name_zip", "get_order_details", "get_product_details",
    "list_all_product_types", "cancel_pending_order", "exchange_delivered_order_items",
    "modify_pending_order_address", "modify_pending_order_items", "modify_pending_order_payment",
    "modify_user_address", "return_delivered_order_items",
}


def sniff(prefix: str) -> bool:
    """True when a file prefix looks like a tau-bench results list."""
    head = prefix.lstrip()
    return head.startswith("[") and '"traj"' in head and '"task_id"' in head


def run_from_name(stem: str) -> dict[str, Any]:
    """Strategy / model / temperature parsed from a tau-bench results file name.

    ``tool-calling-grok-4-fast-reasoning-0.0_range_0--1_user-...`` -> strategy ``tool-calling``,
    model ``grok-4-fast-reasoning``; ``gpt-4o-airline`` -> model ``gpt-4o`` (strategy unknown).
    """
    run: dict[str, Any] = {"strategy": None, "model": stem, "temperature": None}
    match = _RUN_NAME.match(stem)
    prefix = stem
    if match:
        prefix = match["prefix"]
        run["temperature"] = float(match["temperature"])
        user = re.match(r"_user-(.+?)-(llm|react|verify|reflection|human)\b", match["rest"])
        if user:
            run["user_model"], run["user_strategy"] = user.group(1), user.group(2)
    for strategy in STRATEGIES:
        if prefix.startswith(strategy + "-"):
            run["strategy"], prefix = strategy, prefix[len(strategy) + 1 :]
            break
    prefix = re.sub(r"-(airline|retail)$", "", prefix)
    run["model"] = "unknown-model" if prefix in ("none", "") else prefix
    return run


def agent_name(run: dict[str, Any]) -> str:
    return f"{run['model']}/{run['strategy']}" if run["strategy"] else run["model"]


def infer_domain(path: Path, records: Iterable[Any]) -> str:
    """``airline`` / ``retail`` from the file name, the system prompt, else the tool names used."""
    name = path.name.lower()
    for domain in ("airline", "retail"):
        if domain in name:
            return domain
    tools: set[str] = set()
    for record in records:
        traj = record.get("traj") if isinstance(record, dict) else None
        for msg in traj if isinstance(traj, list) else []:
            if not isinstance(msg, dict):
                continue
            content = msg.get("content")
            if not isinstance(content, str):
                content = ""
            if msg.get("role") == "system":
                head = content[:200].lower()
                if "airline" in head:
                    return "airline"
                if "retail" in head:
                    return "retail"
            for call in msg.get("tool_calls") or []:
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    tools.add(str(call["function"].get("name")))
            if msg.get("role") == "tool" and msg.get("name"):
                tools.add(str(msg["name"]))
    if tools & AIRLINE_TOOLS and not tools & RETAIL_TOOLS:
        return "airline"
    if tools & RETAIL_TOOLS and not tools & AIRLINE_TOOLS:
        return "retail"
    return "unknown"


def _is_text_mode(traj: list[dict[str, Any]], strategy: str | None) -> bool:
    """act/react runs: no tool messages or tool_calls, actions written as ``Action: {...}`` in text.

    The strategy in the file name decides when known; otherwise the messages do.
    """
    if strategy in ("act", "react"):
        return True
    if strategy is not None or any(m.get("role") == "tool" or m.get("tool_calls") for m in traj):
        return False
    return any(
        m.get("role") == "user" and text_of(m.get("content")).startswith(API_OUTPUT) for m in traj
    ) or any(m.get("role") == "assistant" and "Action:" in text_of(m.get("content")) for m in traj)


def parse_text_action(content: str) -> tuple[str, str, Any]:
    """``(thought, name, arguments)`` of an act/react assistant message, as tau-bench parses it."""
    thought, sep, action_text = content.rpartition("Action:")
    if not sep:
        thought, action_text = "", content
    action_text = action_text.strip()
    try:
        action = json.loads(action_text)
    except ValueError:
        action = None
    if not isinstance(action, dict) or not isinstance(action.get("name"), str):
        return thought.strip(), RESPOND, {"content": action_text}
    arguments = action.get("arguments", {})
    return thought.strip(), action["name"], arguments


def _text_mode_steps(traj: list[dict[str, Any]]) -> list[Step]:
    steps: list[Step] = []
    pending: tuple[str, str] | None = None  # (call_id, tool name) awaiting its observation
    n_calls = 0
    for msg in traj:
        role, content = msg["role"], text_of(msg.get("content"))
        if role == "assistant":
            thought, name, arguments = parse_text_action(content)
            if thought:
                steps.append(Step(kind="assistant", content=thought))
            if name == RESPOND:
                said = arguments.get("content") if isinstance(arguments, dict) else None
                said = said if isinstance(said, str) else json.dumps(arguments, ensure_ascii=False)
                if said.strip():
                    steps.append(Step(kind="assistant", content=said))
                pending = None
            else:
                call_id = f"call_{n_calls}"
                n_calls += 1
                steps.append(Step(kind="tool_call", tool_name=name, arguments=arguments, call_id=call_id))
                pending = (call_id, name)
        elif role == "user" and pending is not None:
            observation = content[len(API_OUTPUT) :].lstrip() if content.startswith(API_OUTPUT) else content
            steps.append(
                Step(
                    kind="tool_result",
                    content=observation,
                    tool_name=pending[1],
                    call_id=pending[0],
                    is_error=looks_like_tool_error(observation),
                )
            )
            pending = None
        elif role == "user":
            steps.append(Step(kind="user", content=content))
    return steps


def _tool_calling_steps(traj: list[dict[str, Any]]) -> list[Step]:
    steps: list[Step] = []
    calls = CallTracker()
    for msg in traj:
        role, content = msg["role"], text_of(msg.get("content"))
        if role == "user":
            steps.append(Step(kind="user", content=content))
        elif role == "assistant":
            if content.strip():
                steps.append(Step(kind="assistant", content=content))
            for call in msg.get("tool_calls") or []:
                function = call.get("function") or {}
                name = str(function.get("name"))
                steps.append(
                    Step(
                        kind="tool_call",
                        tool_name=name,
                        arguments=parse_arguments(function.get("arguments")),
                        call_id=calls.call(call.get("id"), name),
                    )
                )
        elif role == "tool":
            call_id, called = calls.result(msg.get("tool_call_id"))
            steps.append(
                Step(
                    kind="tool_result",
                    content=content,
                    tool_name=msg.get("name") or called,
                    call_id=call_id,
                    is_error=looks_like_tool_error(content),
                )
            )
    return steps


def _gt_data_hash(reward_info: dict[str, Any]) -> Any:
    inner = reward_info.get("info")
    return inner.get("gt_data_hash") if isinstance(inner, dict) else None


def _hidden(record: dict[str, Any], system_prompt: str | None, run: dict[str, Any], mode: str) -> dict[str, Any]:
    info = object_at(record, "info")
    task = object_at(info, "task")
    reward_info = object_at(info, "reward_info")
    hidden: dict[str, Any] = {
        "format": NAME,
        "system_prompt": system_prompt,
        "info": info,
        "instruction": task.get("instruction"),
        "user_id": task.get("user_id"),
        "gold_actions": task.get("actions"),
        "gold_outputs": task.get("outputs"),
        "reward_info": reward_info or None,
        "gt_data_hash": _gt_data_hash(reward_info),
        "user_cost": info.get("user_cost"),
        "run": dict(run, mode=mode),
    }
    if "error" in info:
        hidden["run_error"] = info.get("error")
    extra = {k: v for k, v in record.items() if k not in ("task_id", "reward", "trial", "info", "traj")}
    if extra:
        hidden["record_extra"] = extra
    return hidden


def convert(
    record: Any, *, path: Path, index: int, domain: str, run: dict[str, Any], threshold: LabelRule | float,
    unique: bool = True,
) -> Trajectory:
    """One tau-bench record as a `Trajectory`; ValueError with the problem when it cannot be."""
    if not isinstance(record, dict):
        raise ValueError(f"record must be a JSON object, got {type(record).__name__}")
    if "reward" not in record:
        raise ValueError("missing 'reward'")
    reward = as_reward(record["reward"])
    if "task_id" not in record:
        raise ValueError("missing 'task_id'")
    traj = check_messages(record.get("traj"), "traj")
    system = [text_of(m.get("content")) for m in traj if m["role"] == "system"]
    body = [m for m in traj if m["role"] != "system"]
    text_mode = _is_text_mode(body, run.get("strategy"))
    steps = _text_mode_steps(body) if text_mode else _tool_calling_steps(body)
    if not steps:
        info = object_at(record, "info")
        crash = f" (the run crashed: {str(info['error'])[:160]!r})" if info.get("error") else ""
        raise ValueError(f"empty trajectory: no observable messages{crash}; a crashed run has nothing to judge: "
                         "skip and count such records with --skip-bad (on_error='skip')")
    steps = finalize_answer(steps)
    trial = record.get("trial")
    trial = trial if isinstance(trial, int) and not isinstance(trial, bool) else None
    task_id = str(record["task_id"])
    if trial is None:
        suffix = f"#{index}"
    else:
        suffix = str(trial) if unique else f"{trial}#{index}"
    return Trajectory(
        id=f"{path.stem}:{task_id}:{suffix}",
        task_id=task_id,
        domain=domain,
        agent=agent_name(run),
        steps=tuple(steps),
        reward=reward,
        label=label_from_reward(reward, threshold),
        source=Source(str(path), index),
        trial=trial,
        hidden=_hidden(record, "\n\n".join(system) or None, run, "text-actions" if text_mode else "tool-calling"),
    )


def _key(record: Any) -> tuple[str, str]:
    """The (task_id, trial) pair an id is built from."""
    if not isinstance(record, dict):
        return ("", "")
    return (str(record.get("task_id")), str(record.get("trial")))


def _key_text(record: Any) -> str:
    return "\x00".join(_key(record))


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(record_index, Trajectory | TrajectoryFormatError)`` for every record of the file.

    The file is streamed twice (`stream_json_array`: memory holds one record): once for what ids and the
    domain depend on (which ``(task_id, trial)`` keys repeat, the domain's evidence), once to convert.
    Keys are held as 64-bit hashes (`IdSet`, 16 bytes a key), so memory stays flat for any number of
    records; two different keys colliding (about 3e-8 for a million) only adds a ``#index`` suffix."""
    seen, repeated = IdSet(), IdSet()

    def keyed() -> Iterator[Any]:  # the records before a parse failure, which the second pass reports
        try:
            for _, record, _ in stream_json_array(path):
                key = _key_text(record)
                if not seen.add(key):
                    repeated.add(key)
                yield record
        except Malformed:
            return

    records = keyed()
    domain = infer_domain(path, records)
    for _ in records:  # infer_domain may stop early: count the rest
        pass
    run = run_from_name(path.stem)
    failure: Malformed | None = None
    try:
        for index, record, bad_bytes in stream_json_array(path):
            if bad_bytes:
                yield index, error(path, index, "invalid UTF-8 bytes in record")
                continue
            try:
                unique = _key_text(record) not in repeated
                yield index, convert(
                    record, path=path, index=index, domain=domain, run=run, threshold=threshold, unique=unique
                )
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                yield index, error(path, index, str(exc))
    except Malformed as exc:
        failure = exc
    if failure is not None:
        yield failure.index, error(path, failure.index, f"{failure.problem}; the rest of the file is unreadable")


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=30, description="tau-bench results (a JSON array of runs)",
    sniff=lambda sample: sample.is_array and sniff(sample.head))
