"""One trace's spans -> one `Trajectory`: the mapping shared by the OpenTelemetry and Langfuse loaders.

The episode is rebuilt from the LLM calls' message histories, without duplicating turns: LLM spans
repeat the whole conversation in their input, so the calls are read in start order and each call
contributes only the messages (counted as a multiset by `Msg.key`) that the history does not hold yet,
then its output. Tool-execution spans (``execute_tool`` / TOOL) are joined to the tool calls by call
id (else by tool name, oldest unmatched call first): a span in error marks the result ``is_error``, and
supplies the result when no tool message carries it. A tool span matching no call becomes a call and a
result of its own, at its start time. System messages go to ``hidden["system_prompt"]``; evaluator
spans (and everything under them) go to ``hidden["evaluations"]`` and are never steps.

When no LLM span carries messages, the root agent/chain span's input and output become the user turn
and the final answer.

The trace's session (a span's `Span.session`: the platform's session attribute) goes to
``hidden["session_id"]`` and its first span's start to ``hidden["started_at"]``, for `data.sessions`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.trajectory import LabelRule, Source, Step, Trajectory, label_from_reward
from rubricforge_dspy.data.formats._steps import CallTracker, finalize_answer, new_step
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error
from rubricforge_dspy.data.formats.otel_attrs import Msg, normalize_messages
from rubricforge_dspy.data.sessions import SESSION_ID, STARTED_AT


@dataclass
class Span:
    """A span (or Langfuse observation) reduced to what the episode needs."""

    span_id: str
    parent_id: str | None
    name: str
    start: float
    end: float
    kind: str  # llm | tool | agent | evaluator | other
    inputs: list[Msg] = field(default_factory=list)
    outputs: list[Msg] = field(default_factory=list)
    tool: tuple[str, str | None, Any, str | None] | None = None  # (name, call id, arguments, result)
    error: bool = False
    value_in: str | None = None
    value_out: str | None = None
    model: str | None = None
    agent_name: str | None = None
    hidden: dict[str, Any] = field(default_factory=dict)
    session: str | None = None  # the platform's session attribute (`data.sessions`), when the span carries one


def _under_evaluator(spans: list[Span]) -> set[str]:
    by_id = {s.span_id: s for s in spans}
    out = set()
    for s in spans:
        seen: set[str] = set()
        cur: Span | None = s
        while cur is not None and cur.span_id not in seen:
            if cur.kind == "evaluator":
                out.add(s.span_id)
                break
            seen.add(cur.span_id)
            cur = by_id.get(cur.parent_id) if cur.parent_id else None
    return out


def _history(llm_spans: list[Span]) -> tuple[list[tuple[float, float, Msg]], list[str]]:
    """``(time, order, message)`` of each message the LLM spans add to the conversation, and the system prompts.
    The order is a sort key: a tool result `_join_tools` places right after its call gets the call's plus 0.5."""
    history: list[tuple[float, float, Msg]] = []
    held: Counter[tuple[Any, ...]] = Counter()
    system: list[str] = []
    seq = 0
    for span in llm_spans:
        for msgs, when in ((span.inputs, span.start), (span.outputs, span.end)):
            local: Counter[tuple[Any, ...]] = Counter()
            for msg in msgs:
                if msg.role == "system":
                    if msg.content and msg.content not in system:
                        system.append(msg.content)
                    continue
                key = msg.key()
                local[key] += 1
                if local[key] > held[key]:
                    held[key] += 1
                    history.append((when, seq, msg))
                    seq += 1
    return history, system


@dataclass
class _Call:
    """Tool call `index` of message `msg`, and whether a tool span was matched to it."""

    msg: Msg
    index: int
    matched: bool = False

    @property
    def call(self) -> tuple[str | None, str, Any]:
        return self.msg.tool_calls[self.index]


def _join_tools(history: list[tuple[float, float, Msg]],
                tool_spans: list[Span]) -> list[tuple[float, float, Msg]]:
    calls = [_Call(msg, i) for _, _, msg in history for i in range(len(msg.tool_calls))]
    ids = {c.call[0] for c in calls}
    for _, _, msg in history:  # a result whose id no call carries answers the oldest call that has no id (Gemini/ADK)
        if msg.role == "tool" and (msg.tool_call_id is None or msg.tool_call_id not in ids):
            bare = next(((c.msg, c.index) for c in calls if c.call[0] is None), None)
            if bare is not None:
                m, i = bare
                msg.tool_call_id = msg.tool_call_id or f"call_{len(ids)}"
                m.tool_calls[i] = (msg.tool_call_id, *m.tool_calls[i][1:])
                ids.add(msg.tool_call_id)
    results = {msg.tool_call_id: msg for _, _, msg in reversed(history) if msg.role == "tool" and msg.tool_call_id}
    seq = len(history)
    for span in tool_spans:
        if span.tool is None:  # the caller passes tool spans that carry a tool
            raise RubricForgeError(f"span {span.name!r} is passed as a tool span but carries no tool")
        name, cid, args, result = span.tool
        failed = span.error or (result is not None and looks_like_tool_error(result))
        open_calls = [c for c in calls if not c.matched]
        match = next((c for c in open_calls if cid and c.call[0] == cid), None) or next(
            (c for c in open_calls if c.call[1] == name and not (cid and c.call[0])), None) \
            or next((c for c in open_calls if c.call[1] == name), None)  # ids disagree: by name
        if match is None:  # a tool run no LLM message mentions: its own call and result
            cid = cid or span.span_id
            history.append((span.start, seq, Msg("assistant", tool_calls=[(cid, name, args)])))
            history.append((span.end, seq + 1, Msg("tool", result or "", tool_call_id=cid, is_error=failed)))
            seq += 2
            continue
        match.matched = True
        msg, i = match.msg, match.index
        call_id = msg.tool_calls[i][0]
        known = results.get(call_id) if call_id else None
        if known is not None:
            known.is_error = known.is_error or failed
            if not known.content and result:
                known.content = result
            continue
        if not call_id:  # the call carried no id: give it the span's, so the result pairs with it
            call_id = cid or span.span_id
            msg.tool_calls[i] = (call_id, msg.tool_calls[i][1], msg.tool_calls[i][2])
        when = next((t, q) for t, q, m in history if m is msg)  # right after its call, whatever the clocks say
        history.append((when[0], when[1] + 0.5, Msg("tool", result or "", tool_call_id=call_id, is_error=failed)))
    return history


def steps_and_system(spans: list[Span]) -> tuple[list[Step], list[str], str | None]:
    """Observable steps, system prompts, and the model name of one trace's spans."""
    hidden_ids = _under_evaluator(spans)
    live = [s for s in spans if s.span_id not in hidden_ids]
    order = sorted(range(len(live)), key=lambda i: (live[i].start, i))
    live = [live[i] for i in order]
    llm = [s for s in live if s.kind == "llm" and (s.inputs or s.outputs)]
    history, system = _history(llm)
    history = _join_tools(history, [s for s in live if s.kind == "tool" and s.tool is not None])
    history.sort(key=lambda t: (t[0], t[1]))
    messages = [m for _, _, m in history]
    roots = [s for s in live if s.kind in ("agent", "other") and (s.value_in or s.value_out)]
    if not any(m.role == "user" for m in messages) and roots and _last_text(roots[0].value_in, "user"):
        messages.insert(0, Msg("user", _last_text(roots[0].value_in, "user")))
    if not any(m.role == "assistant" and m.content.strip() for m in messages) and roots \
            and _last_text(roots[0].value_out, "assistant"):
        messages.append(Msg("assistant", _last_text(roots[0].value_out, "assistant")))
    model = next((s.model for s in live if s.model), None)
    return _to_steps(messages), system, model


def _last_text(value: str | None, role: str) -> str:
    """An agent span's input/output: the last ``role`` message's text when it holds chat messages (``""``
    when those carry no text, e.g. only tool calls), else the value as is."""
    if not value:
        return ""
    try:
        msgs = normalize_messages(value, "agent span")
    except ValueError:
        return value
    texts = [m.content for m in msgs if m.role in (role, "user") and m.content.strip()]
    return texts[-1] if texts else ""


def _to_steps(messages: list[Msg]) -> list[Step]:
    steps: list[Step] = []
    calls = CallTracker()
    for msg in messages:
        if msg.role == "tool":
            call_id, name = calls.result(msg.tool_call_id) if calls.knows(msg.tool_call_id) or not msg.tool_call_id \
                else (msg.tool_call_id, None)
            steps.append(Step("tool_result", msg.content, tool_name=name, call_id=call_id,
                              is_error=msg.is_error or looks_like_tool_error(msg.content)))
            continue
        if msg.content.strip():
            steps.append(new_step(msg.role, msg.content))
        for cid, name, args in msg.tool_calls:
            steps.append(Step("tool_call", tool_name=name, arguments=args, call_id=calls.call(cid, name)))
    return finalize_answer(steps)


def build_trajectory(spans: list[Span], *, trace_id: str, path: Path | str, index: int, fmt: str,
                     threshold: LabelRule | float, reward: float | None = None, agent: str | None = None,
                     hidden: dict[str, Any] | None = None) -> Trajectory:
    """The trajectory of one trace; ValueError when it has no observable step."""
    steps, system, model = steps_and_system(spans)
    if not steps:
        raise ValueError(f"trace {trace_id}: no observable step (no LLM messages, tool spans, or agent input/output)")
    evaluations = [{"span": s.name, **s.hidden} for s in spans if s.hidden]
    names = [s.agent_name for s in spans if s.agent_name]
    sessions = list(dict.fromkeys(s.session for s in spans if s.session))
    if len(sessions) > 1:
        raise ValueError(f"trace {trace_id}: its spans name different sessions ({', '.join(map(repr, sessions))})")
    starts = [s.start for s in spans if math.isfinite(s.start) and s.start > 0]
    labeled = reward if reward is not None and math.isfinite(reward) else None
    return Trajectory(
        id=trace_id, task_id=trace_id, domain=fmt,
        agent=agent or "/".join(x for x in (names[0] if names else None, model) if x) or "unknown",
        steps=tuple(steps), reward=None if labeled is None else float(labeled),
        label=None if labeled is None else label_from_reward(labeled, threshold),
        source=Source(str(path), index),
        hidden={"format": fmt, "system_prompt": "\n\n".join(system) or None,
                "evaluations": evaluations, **({SESSION_ID: sessions[0]} if sessions else {}),
                **({STARTED_AT: min(starts)} if starts else {}), **(hidden or {})},
    )
