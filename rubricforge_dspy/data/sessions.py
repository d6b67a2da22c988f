"""Sessions: the traces of one multi-turn session grouped into one trajectory (``--session-key``).

A platform logs each turn of a conversation as a trace of its own; a session's outcome is judged on the
whole conversation. The readers expose the platform's own session attribute as ``hidden["session_id"]``
(`SESSION_ID`), and the trace's start time (seconds since the epoch) as ``hidden["started_at"]``
(`STARTED_AT`):

- MLflow (``load_mlflow_traces``, MLflow trace JSON read by ``otel``): the trace metadata
  ``mlflow.trace.session`` (what ``mlflow.update_current_trace(metadata={"mlflow.trace.session": ...})`` sets);
- OpenTelemetry (``otel``): a span attribute ``session.id`` (OpenInference and the OpenTelemetry semantic
  conventions), ``gen_ai.conversation.id`` (GenAI semantic conventions) or ``langfuse.session.id``;
- Langfuse (``langfuse``): the trace's ``sessionId``;
- a declarative mapping: whatever its ``hidden: {session_id: <expression>}`` (and ``started_at``) gives;
- a generic JSONL file written by ``rubricforge convert`` (or the ``--from-mlflow`` spool): the loader's
  hidden fields it carries under ``metadata.hidden``.

`group_sessions` then makes one trajectory per session: its id is the session id (so ``--labels`` join
per session and the verdict is per session), its steps are the traces' steps in start order (a trace
without a start time keeps its reading order), each trace's closing answer but the last read as an
``assistant`` turn. The traces of one session must agree on the task (a task id other than the trace's
own id) and on the label; otherwise `SessionError` names the session and the traces that differ. A trace
without a session id stays a trajectory of its own and is counted (`SessionReport.alone`).

``--session-key EXPR`` groups by another value: EXPR is a JMESPath expression on each trajectory's hidden
fields (e.g. ``sessionId`` or ``userId`` of a Langfuse trace, ``metadata.conversation`` of a generic JSONL
record, ``resource."service.instance.id"`` of an OpenTelemetry trace); ``--session-key`` alone means
``session_id``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Step, Trajectory

__all__ = ["SESSION_ID", "STARTED_AT", "SessionError", "SessionReport", "group_sessions", "session_of"]

SESSION_ID = "session_id"  # hidden field a reader (or a mapping's ``hidden``) fills with the session id
STARTED_AT = "started_at"  # hidden field: the trace's start, seconds since the epoch (orders a session's traces)


class SessionError(InputError):
    """The traces of one session disagree on the task or the label, or a session key is not an expression."""


@dataclass
class SessionReport:
    """What `group_sessions` did: sessions made, traces grouped into them, traces without a session id."""

    key: str = SESSION_ID
    sessions: int = 0
    traces: int = 0
    alone: list[str] = field(default_factory=list)  # ids of traces without a session id (judged alone)

    def summary(self) -> str:
        text = (f"sessions ({self.key}): {self.traces} trace(s) grouped into {self.sessions} session "
                f"trajectory(ies); the trajectory id is the session id")
        if self.alone:
            text += (f"; {len(self.alone)} trace(s) carry no session id and are judged alone "
                     f"(e.g. {self.alone[0]})")
        return text


def _compile(key: str) -> Any:
    import jmespath
    from jmespath.exceptions import JMESPathError

    try:
        return jmespath.compile(key)
    except JMESPathError as exc:
        raise SessionError(f"--session-key {key!r} is not a JMESPath expression on the trajectory's hidden "
                           f"fields: {exc}") from None


def _carried(trajectory: Trajectory, name: str) -> Any:
    """Hidden field `name`, or the one a converted generic JSONL record carries (``metadata.hidden``)."""
    if name in trajectory.hidden:
        return trajectory.hidden[name]
    metadata = trajectory.hidden.get("metadata")
    carried = metadata.get("hidden") if isinstance(metadata, dict) else None
    return carried.get(name) if isinstance(carried, dict) else None


def session_of(trajectory: Trajectory, key: str = SESSION_ID, *, _compiled: Any = None) -> str | None:
    """The session id of `trajectory` under `key` (a JMESPath expression on its hidden fields), or None.

    Args:
        trajectory: a loaded trajectory.
        key: the expression; ``session_id`` (the default) is the platform's own session attribute.

    Raises:
        SessionError: `key` is not an expression, or its value is a list or an object (not an id).
    """
    if key == SESSION_ID:
        value = _carried(trajectory, SESSION_ID)
    else:
        value = (_compiled or _compile(key)).search(trajectory.hidden)
    if value is None or value == "":
        return None
    if isinstance(value, (dict, list)):
        raise SessionError(f"{trajectory.source.file}, record {trajectory.source.index} (trajectory "
                           f"{trajectory.id!r}): --session-key {key!r} gives a {type(value).__name__}, not a "
                           "session id; point it at a string or a number")
    return str(value)


def _started(trajectory: Trajectory) -> float:
    value = _carried(trajectory, STARTED_AT)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return math.inf  # no start time: after the timed traces, in reading order


def _task(trajectory: Trajectory) -> str | None:
    """The task a trace names, or None when its task id is only its own id (traces have no task of their own)."""
    return None if trajectory.task_id == trajectory.id else trajectory.task_id


def _merged_steps(traces: list[Trajectory]) -> tuple[Step, ...]:
    steps: list[Step] = []
    used: set[str] = set()
    for k, trace in enumerate(traces):
        last = k == len(traces) - 1
        renamed: dict[str, str] = {}
        for step in trace.steps:
            if step.kind == "final_answer" and not last:
                step = replace(step, kind="assistant")  # a turn's answer; the session's answer is its last
            if step.call_id is not None:
                if step.call_id not in renamed:  # a call id an earlier trace used: kept apart
                    renamed[step.call_id] = step.call_id if step.call_id not in used else f"{step.call_id}@{k + 1}"
                step = replace(step, call_id=renamed[step.call_id])
            steps.append(step)
        used.update(renamed.values())
    return tuple(steps)


def _one(values: set[Any], what: str, session: str, traces: list[Trajectory],
         of: Callable[[Trajectory], Any]) -> Any:
    if len(values) > 1:
        detail = ", ".join(f"{t.id} ({t.source.file}, record {t.source.index}): {of(t)!r}" for t in traces)
        raise SessionError(f"session {session!r}: its traces disagree on the {what} ({detail}); a session is "
                           f"judged as one trajectory with one {what}: fix the {what} of these traces, or group "
                           "by another --session-key")
    return next(iter(values)) if values else None


def _merge(session: str, traces: list[Trajectory]) -> Trajectory:
    traces = sorted(traces, key=_started)  # stable: equal or missing start times keep the reading order
    first = traces[0]
    task = _one({_task(t) for t in traces} - {None}, "task", session, traces, _task)
    label = _one({t.label for t in traces} - {None}, "label", session, traces, lambda t: t.label)
    rewards = {t.reward for t in traces if t.reward is not None and t.label is not None}
    reward = next(iter(rewards)) if len(rewards) == 1 else None  # several per-turn rewards: the label stands
    system = next((t.hidden.get("system_prompt") for t in traces if t.hidden.get("system_prompt")), None)
    agents = list(dict.fromkeys(t.agent for t in traces))
    hidden = {"format": first.hidden.get("format"), SESSION_ID: session, "system_prompt": system,
              "session": {"trace_ids": [t.id for t in traces], "n_traces": len(traces)},
              "traces": [{"id": t.id, **t.hidden} for t in traces]}
    started = [_started(t) for t in traces if _started(t) != math.inf]
    if started:
        hidden[STARTED_AT] = min(started)
    return Trajectory(id=session, task_id=task or session, domain=first.domain, agent="+".join(agents),
                      steps=_merged_steps(traces), reward=reward, label=label, source=first.source, trial=None,
                      hidden=hidden)


def group_sessions(trajectories: Iterable[Trajectory], key: str = SESSION_ID,
                   report: SessionReport | None = None) -> list[Trajectory]:
    """One trajectory per session, in the order each session is first read; traces without one as they are.

    Args:
        trajectories: loaded trajectories (one per trace), with their session id in their hidden fields.
        key: a JMESPath expression on each trajectory's hidden fields giving its session id (default
            ``session_id``, the platform's own session attribute: see the module's docstring).
        report: a `SessionReport` to fill in.

    Returns:
        The session trajectories (id = the session id), with the traces that carry no session id
        interleaved where they were read.

    Raises:
        SessionError: traces of one session that disagree on the task or the label, a session id equal to
            another trajectory's id, or a key that is not an expression or gives no id.
    """
    report = report if report is not None else SessionReport(key=key)
    report.key = key
    compiled = _compile(key)
    order: list[tuple[str, Any]] = []  # ("session", id) or ("alone", trajectory)
    sessions: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        session = session_of(trajectory, key, _compiled=compiled)
        if session is None:
            order.append(("alone", trajectory))
            report.alone.append(trajectory.id)
            continue
        if session not in sessions:
            sessions[session] = []
            order.append(("session", session))
        sessions[session].append(trajectory)
        report.traces += 1
    out: list[Trajectory] = []
    for kind, item in order:
        out.append(item if kind == "alone" else _merge(item, sessions[item]))
    report.sessions = len(sessions)
    alone = {t.id for kind, t in order if kind == "alone"}
    clash = sorted(alone & set(sessions))
    if clash:
        raise SessionError(f"session id {clash[0]!r} is also the id of a trace without a session; the ids of "
                           "a session and of a trajectory judged alone must differ")
    return out
