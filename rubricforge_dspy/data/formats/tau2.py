"""tau2-bench simulation results: ``{timestamp, info, tasks, simulations: [...]}``.

Each simulation ``{id, task_id, trial, messages, reward_info, termination_reason, ...}`` becomes one
trajectory. Messages have role ``assistant`` | ``user`` | ``tool``; tool calls are
``{id, name, arguments, requestor}`` and tool messages carry the call ``id`` and, in most
submissions, an ``error`` flag (when it is absent the ``Error: ...`` content shape is used).

Hidden only: the agent policy (``info.environment_info.policy`` -> ``system_prompt``), the task
definition (user scenario, evaluation criteria), ``reward_info``, ``termination_reason``, run info
(agent/user LLMs, with credentials redacted), timings and costs.

Agent name: the leaderboard submission directory without its date and the run's agent model
(``toolorchestra_nvidia_2025-12-02`` + ``info.agent_info.llm`` -> ``toolorchestra_nvidia/gpt-4.1-mini-...``,
so runs of different models under one submission stay apart), else ``<llm>/<implementation>`` from
``info.agent_info``. Domain: ``info.environment_info.domain_name``.
"""

from __future__ import annotations

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
from rubricforge_dspy.data.formats._json_stream import (
    Malformed,
    has_bad_bytes,
    iter_json_array,
    iter_json_object,
    read_text,
    scan_json_object,
    stream_json_array,
    worth_streaming,
)
from rubricforge_dspy.data.formats._records import IdSet, redact
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

NAME = "tau2"
# tau2's own success check (pass^k): reward 1 (within 1e-6).
LABEL_RULE = FULL_REWARD
_SUBMISSION_DIR = re.compile(r"^(?P<name>.+?)_\d{4}-\d{2}-\d{2}$")


def sniff(prefix: str) -> bool:
    """True when a file prefix looks like a tau2-bench results object."""
    head = prefix.lstrip()
    if not head.startswith("{"):
        return False
    return '"simulations"' in head or ('"environment_info"' in head and '"agent_info"' in head)


def agent_name(path: Path, info: dict[str, Any]) -> str:
    """``<submission>/<llm>`` (runs by different models under one submission stay apart), else
    ``<llm>/<implementation>`` from ``info.agent_info``, else the file stem."""
    agent_info = object_at(info, "agent_info")
    llm, impl = agent_info.get("llm"), agent_info.get("implementation")
    match = _SUBMISSION_DIR.match(path.parent.name)
    if match:
        return f"{match['name']}/{llm}" if llm else match["name"]
    return "/".join(str(x) for x in (llm, impl) if x) or path.stem


def _call_parts(call: dict[str, Any]) -> tuple[str, Any, str | None]:
    """``(name, arguments, id)`` of a tau2 tool call (flat) or an OpenAI-style one (``function``)."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = call
    return str(function.get("name")), parse_arguments(function.get("arguments")), call.get("id")


def steps_of(messages: list[dict[str, Any]]) -> list[Step]:
    """Observable steps of a tau2 message list (roles already validated)."""
    steps: list[Step] = []
    calls = CallTracker()
    for msg in messages:
        role, content = msg["role"], text_of(msg.get("content"))
        if role == "system":
            continue
        if role == "tool":
            call_id, name = calls.result(msg.get("id") or msg.get("tool_call_id"))
            flag = msg.get("error")
            is_error = bool(flag) if isinstance(flag, bool) else looks_like_tool_error(content)
            steps.append(
                Step(kind="tool_result", content=content, tool_name=name or msg.get("name"), call_id=call_id,
                     is_error=is_error)
            )
            continue
        if content.strip():
            steps.append(Step(kind="user" if role == "user" else "assistant", content=content))
        for call in msg.get("tool_calls") or []:
            name, arguments, raw_id = _call_parts(call)
            # tau2 lets the user simulator call tools too (telecom); keep who called it visible.
            tool_name = name if role == "assistant" else f"user:{name}"
            call_id = calls.call(raw_id, tool_name)
            steps.append(Step(kind="tool_call", tool_name=tool_name, arguments=arguments, call_id=call_id))
    return finalize_answer(steps)


def convert(
    sim: Any, *, path: Path, index: int, doc: dict[str, Any], tasks: dict[str, Any], threshold: LabelRule | float,
    suffix: str
) -> Trajectory:
    """One simulation as a `Trajectory`; ValueError with the problem when it cannot be."""
    if not isinstance(sim, dict):
        raise ValueError(f"simulation must be a JSON object, got {type(sim).__name__}")
    reward_info = sim.get("reward_info")
    if not isinstance(reward_info, dict) or "reward" not in reward_info:
        raise ValueError("missing 'reward_info.reward'")
    reward = as_reward(reward_info["reward"], "reward_info.reward")
    if "task_id" not in sim:
        raise ValueError("missing 'task_id'")
    messages = check_messages(sim.get("messages"), "messages")
    steps = steps_of(messages)
    if not steps:
        raise ValueError("empty trajectory: no observable messages")
    info = object_at(doc, "info")
    env = object_at(info, "environment_info")
    task_id = str(sim["task_id"])
    task = tasks.get(task_id)
    scenario = task.get("user_scenario") if isinstance(task, dict) else None
    trial = sim.get("trial") if isinstance(sim.get("trial"), int) else None
    system = [text_of(m.get("content")) for m in messages if m["role"] == "system"]
    hidden = {
        "format": NAME,
        "system_prompt": "\n\n".join(system) or env.get("policy"),
        "task": task,
        "instruction": scenario.get("instructions") if isinstance(scenario, dict) else None,
        "evaluation_criteria": task.get("evaluation_criteria") if isinstance(task, dict) else None,
        "reward_info": reward_info,
        "termination_reason": sim.get("termination_reason"),
        "simulation_id": sim.get("id"),
        "agent_info": redact(info.get("agent_info")),
        "user_info": redact(info.get("user_info")),
        "run": redact({k: v for k, v in info.items() if k not in ("agent_info", "user_info", "environment_info")}),
        "timing": {k: sim.get(k) for k in ("timestamp", "start_time", "end_time", "duration") if k in sim},
        "costs": {k: sim.get(k) for k in ("agent_cost", "user_cost") if k in sim},
        "submission": path.parent.name,
    }
    return Trajectory(
        id=f"{path.parent.name}/{path.stem}:{task_id}:{suffix}",
        task_id=task_id,
        domain=str(env.get("domain_name") or "unknown"),
        agent=agent_name(path, info),
        steps=tuple(steps),
        reward=reward,
        label=label_from_reward(reward, threshold),
        source=Source(str(path), index),
        trial=trial,
        hidden=hidden,
    )


def _load(text: str) -> tuple[dict[str, Any], list[Any], Malformed | None]:
    """The document's members, its simulations, and the parse failure that stopped reading, if any."""
    doc: dict[str, Any] = {}
    sims: list[Any] = []
    try:
        for _, key, value, _ in iter_json_object(text):
            doc[key] = value
    except Malformed as exc:
        if exc.key != "simulations" or exc.start is None:
            return doc, sims, Malformed(None, exc.problem)
        try:
            for _, sim in iter_json_array(text, exc.start):
                sims.append(sim)
        except Malformed as inner:
            return doc, sims, inner
        return doc, sims, None
    raw = doc.get("simulations")
    if not isinstance(raw, list):
        return doc, sims, Malformed(None, "missing 'simulations' list")
    return doc, raw, None


def _key_text(sim: Any) -> str:
    """The ``(task_id, trial)`` pair an id is built from, as one string (elements that are not objects
    never become trajectories)."""
    return f"{sim.get('task_id')}\x00{sim.get('trial')}" if isinstance(sim, dict) else "\x00"


def _whole_simulations(text: str) -> Iterator[tuple[int, Any]]:
    """The simulations the whole-text reader finds (`_load`), then its failure: `stream_json_array`'s
    fallback, should the file change between the two passes."""
    _, sims, failure = _load(text)
    yield from enumerate(sims)
    if failure is not None:
        raise failure


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(simulation_index, Trajectory | TrajectoryFormatError)`` for every simulation of the file.

    Streamed in two passes (`scan_json_object`, then `stream_json_array`: memory holds the small members
    such as ``tasks`` and ``info`` and one simulation): the first also notes which ``(task_id, trial)``
    keys repeat (64-bit hashes, `IdSet`; two different keys colliding, about 3e-8 for a million, only adds
    a ``#index`` suffix). A file that ijson could read differently from `json` (malformed, invalid UTF-8,
    NaN, ...) is read whole, as before, with the same trajectories and errors.
    """
    seen, repeated = IdSet(), IdSet()

    def note(fields: dict[str, Any] | None) -> None:
        if fields is not None and not seen.add(key := _key_text(fields)):
            repeated.add(key)

    doc = None
    if worth_streaming(path):
        doc = scan_json_object(path, "simulations", ("task_id", "trial"), note, keep=("info", "tasks"))
    if doc is None:  # small, or ijson could read it differently from `json`
        yield from _read_whole(path, threshold)
        return
    sims = stream_json_array(path, prefix="simulations.item", whole=_whole_simulations)
    yield from _convert_all(path, doc, sims, repeated, threshold)


def _read_whole(path: Path, threshold: LabelRule | float) -> ReadResults:
    """The reader before streaming: the whole text parsed member by member (`_load`)."""
    text, had_bad_bytes = read_text(path)
    doc, sims, failure = _load(text)
    del text
    if failure is not None and failure.index is None:
        yield None, error(path, None, failure.problem)
        return
    seen, repeated = IdSet(), IdSet()
    for sim in sims:
        if isinstance(sim, dict) and not seen.add(key := _key_text(sim)):
            repeated.add(key)

    def records() -> Iterator[tuple[int, Any, bool]]:
        for index, sim in enumerate(sims):
            yield index, sim, had_bad_bytes and has_bad_bytes(sim)
        if failure is not None:
            raise failure

    yield from _convert_all(path, doc, records(), repeated, threshold)


def _convert_all(path: Path, doc: dict[str, Any], sims: Iterable[tuple[int, Any, bool]], repeated: IdSet,
                 threshold: LabelRule | float) -> ReadResults:
    """Each ``(index, simulation, has_bad_bytes)`` of `sims` converted, then the parse failure that ended
    them, if any (`Malformed`, named with its index)."""
    task_list = doc.get("tasks")
    if not isinstance(task_list, list):
        task_list = []
    tasks = {str(t.get("id")): t for t in task_list if isinstance(t, dict)}
    try:
        for index, sim, bad_bytes in sims:
            if bad_bytes:
                yield index, error(path, index, "invalid UTF-8 bytes in record")
                continue
            trial = str(sim.get("trial")) if isinstance(sim, dict) else ""
            suffix = trial if _key_text(sim) not in repeated else f"{trial}#{index}"
            try:
                yield index, convert(
                    sim, path=path, index=index, doc=doc, tasks=tasks, threshold=threshold, suffix=suffix
                )
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                yield index, error(path, index, str(exc))
    except Malformed as failure:
        if failure.index is None:
            yield None, error(path, None, failure.problem)
        else:
            yield failure.index, error(path, failure.index,
                                       f"{failure.problem}; the rest of the file is unreadable")


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=130, description="tau2-bench simulation results",
    sniff=lambda sample: sample.is_object and sniff(sample.head))
