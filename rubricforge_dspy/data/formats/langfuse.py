"""Langfuse trace exports (format ``langfuse``): traces with their observations.

Shapes read: ``{"trace": {...}, "observations": [...]}`` (the UI's / ``download_traces`` export), a
trace with its ``observations`` inline (the public API's ``TraceWithFullDetails``), ``{"data": [...]}``
(a page of the traces API), a JSON array of any of these, or JSON Lines with one per line. JSON Lines, an
array and a ``data`` page are streamed (one trace in memory; a file ijson could read differently from
`json` is read whole, as before).

Mapping (then ``spans.py``): ``GENERATION`` -> an LLM call whose ``input`` / ``output`` are chat
messages in any dialect ``otel_attrs.normalize_messages`` reads (OpenAI chat, GenAI ``parts``,
OpenAI Responses items); a message of the output that names no role is the model's; one of the input
that names none cannot be told the user's from the agent's, so it is no step: it is kept, with its
observation, in ``hidden["unattributed_messages"]`` (Claude Agent SDK traces record ``{"content": "role"}``
as the input of later turns); ``TOOL`` -> a tool execution (name, call id and arguments from the
observation's OpenTelemetry attributes in ``metadata.attributes`` when present, else its name and
``input``), ``level: ERROR`` -> ``is_error``; ``AGENT`` / ``CHAIN`` / ``SPAN`` -> input/output used only
when no generation carries messages (then the trace's own ``input`` / ``output`` too); ``EVALUATOR`` /
``GUARDRAIL`` observations and everything under them are hidden. One trajectory per trace, id = the
trace id. Hidden: ``scores``, ``corrections``, trace ``metadata``, tags, user/session ids, costs; the trace's
``sessionId`` is also ``hidden["session_id"]``, which ``--session-key`` groups by (`data.sessions`).
Reward: a numeric or boolean score named ``reward`` (case-insensitive), else none
(unlabeled, ``label=None``; labels come from ``--labels``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import LabelRule, Trajectory, TrajectoryFormatError
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._json_stream import (
    Malformed,
    first_json_lines,
    read_prefix,
    scan_json_array,
    scan_json_object,
    stream_json_array,
    worth_streaming,
)
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats._steps import convert_each
from rubricforge_dspy.data.formats.jsonl import iter_json_lines
from rubricforge_dspy.data.formats.otel_attrs import maybe_json, normalize_messages, tool_info
from rubricforge_dspy.data.formats.spans import Span, build_trajectory
from rubricforge_dspy.data.sessions import SESSION_ID

NAME = "langfuse"
_KINDS = {"GENERATION": "llm", "TOOL": "tool", "AGENT": "agent", "CHAIN": "agent", "SPAN": "other", "EVENT": "other",
          "EVALUATOR": "evaluator", "GUARDRAIL": "evaluator", "RETRIEVER": "other", "EMBEDDING": "other"}
UNATTRIBUTED = "unattributed"  # the role given to an input message that names none (never a step)
_HIDDEN_TRACE_KEYS = ("scores", "corrections", "metadata", "tags", "userId", "sessionId", "release", "version",
                      "environment", "projectId", "totalCost", "latency", "bookmarked", "public")


def _seconds(raw: Any) -> float:
    if not raw:
        return 0.0
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()


def _text(value: Any) -> str | None:
    value = maybe_json(value)
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _attributes(obs: dict[str, Any]) -> dict[str, Any]:
    meta = maybe_json(obs.get("metadata"))
    attrs = meta.get("attributes") if isinstance(meta, dict) else None
    return attrs if isinstance(attrs, dict) else {}


def to_span(obs: dict[str, Any], where: str, unattributed: list[dict[str, str]] | None = None) -> Span:
    """One observation as a `Span`; ValueError naming the observation when its messages cannot be read.
    Input messages that name no role are left out of the span and added to `unattributed` (with the
    observation's id and name)."""
    if not isinstance(obs, dict) or "id" not in obs:
        raise ValueError(f"{where}: an observation must be an object with an id")
    kind_name = str(obs.get("type") or "SPAN").upper()
    if kind_name not in _KINDS:
        raise ValueError(f"{where}: unknown observation type {obs.get('type')!r} (expected one of {sorted(_KINDS)})")
    where = f"{where} ({kind_name} {obs.get('name')!r})"
    span = Span(span_id=str(obs["id"]), parent_id=obs.get("parentObservationId"), name=str(obs.get("name") or ""),
                start=_seconds(obs.get("startTime")), end=_seconds(obs.get("endTime") or obs.get("startTime")),
                kind=_KINDS[kind_name], error=str(obs.get("level") or "").upper() == "ERROR", model=obs.get("model"))
    if span.kind == "llm":
        inputs = normalize_messages(obs.get("input"), f"{where}, input", roleless=UNATTRIBUTED)
        span.inputs = [m for m in inputs if m.role != UNATTRIBUTED]
        if unattributed is not None:
            unattributed.extend({"observation": str(obs["id"]), "name": span.name, "content": m.content}
                                for m in inputs if m.role == UNATTRIBUTED)
        span.outputs = [m if m.role != "user" else type(m)("assistant", m.content, m.tool_calls)
                        for m in normalize_messages(obs.get("output"), f"{where}, output", roleless="assistant")]
    elif span.kind == "tool":
        attrs = _attributes(obs)
        name, cid, args, _ = tool_info(attrs) if attrs.get("gen_ai.tool.name") else (span.name, None, None, None)
        result = _text(obs.get("output"))
        if result is None and span.error:
            result = f"Error: {obs.get('statusMessage') or 'the tool observation has level ERROR'}"
        span.tool = (name, cid, maybe_json(obs.get("input")) if args is None else args, result)
    elif span.kind == "evaluator":
        span.hidden = {"input": obs.get("input"), "output": obs.get("output")}
    else:
        span.value_in, span.value_out = _text(obs.get("input")), _text(obs.get("output"))
    return span


def _reward(scores: Any) -> float | None:
    for score in scores if isinstance(scores, list) else []:
        if isinstance(score, dict) and str(score.get("name", "")).lower() == "reward":
            value = score.get("value")
            if isinstance(value, (int, float)):
                return float(value)
    return None


def convert(record: Any, *, path: Path, index: int, threshold: LabelRule | float) -> Trajectory:
    """One exported trace as a `Trajectory`; ValueError with the problem when it cannot be."""
    if not isinstance(record, dict):
        raise ValueError(f"a trace export must be a JSON object, got {type(record).__name__}")
    trace = record["trace"] if isinstance(record.get("trace"), dict) else record
    observations = record.get("observations")
    if not isinstance(observations, list):
        observations = trace.get("observations")
    if not isinstance(observations, list) or "id" not in trace:
        raise ValueError("not a Langfuse trace export: expected {trace: {id, ...}, observations: [...]} "
                         "or a trace with an observations list")
    trace_id = str(trace["id"])
    unattributed: list[dict[str, Any]] = []
    spans = [to_span(obs, f"observation {i}", unattributed) for i, obs in enumerate(observations)]
    root = Span(span_id=f"trace:{trace_id}", parent_id=None, name=str(trace.get("name") or ""), start=float("-inf"),
                end=float("-inf"), kind="other", value_in=_text(trace.get("input")),
                value_out=_text(trace.get("output")))
    hidden = {k: redact(trace.get(k)) for k in _HIDDEN_TRACE_KEYS if trace.get(k) not in (None, [], {})}
    if unattributed:
        hidden["unattributed_messages"] = unattributed
    if trace.get("sessionId") not in (None, ""):
        hidden[SESSION_ID] = str(trace["sessionId"])
    return build_trajectory([root, *spans], trace_id=trace_id, path=path, index=index, fmt=NAME,
                            threshold=threshold, reward=_reward(trace.get("scores")), hidden=hidden)


def _records(path: Path) -> Iterator[tuple[int | str, Any]]:
    head = read_prefix(path, 1 << 16).lstrip("\ufeff \t\r\n")
    lines = first_json_lines(path, limit=2)
    if head[:1] == "{" and lines and ("trace" in lines[0] or "observations" in lines[0]):
        yield from iter_json_lines(path)  # JSON Lines, one trace per line
        return
    # A list of traces (an array, or an API page {"data": [...], "meta": ...}) is streamed, one trace in
    # memory, once a first pass found it well formed; anything else, and small files (most exports are one
    # trace), is read whole, as before.
    if not worth_streaming(path):
        streamed = None
    elif scan_json_object(path, "data", keep=(), strip_bom=True) is not None:
        streamed = stream_json_array(path, prefix="data.item", strip_bom=True, whole=_whole_records)
    elif scan_json_array(path, strip_bom=True):
        streamed = stream_json_array(path, strip_bom=True, whole=_whole_records)
    else:
        streamed = None
    if streamed is None:
        try:
            yield from _whole_records(path.read_text(encoding="utf-8-sig"))
        except UnicodeDecodeError as exc:
            yield 0, TrajectoryFormatError(str(path), None, f"malformed JSON: {exc}")
        except Malformed as exc:
            yield 0, TrajectoryFormatError(str(path), None, exc.problem)
        return
    try:
        for index, value, bad_bytes in streamed:
            if bad_bytes:
                value = TrajectoryFormatError(str(path), index, "invalid UTF-8 bytes in record")
            yield index, value
    except Malformed as exc:  # only when the file changed between the two passes
        yield exc.index or 0, TrajectoryFormatError(str(path), exc.index, exc.problem)


def _whole_records(text: str) -> Iterator[tuple[int, Any]]:
    """``(index, trace)`` of a whole JSON text: a list, a ``{"data": [...]}`` page, or one trace;
    `Malformed` when the text is not JSON."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Malformed(None, f"malformed JSON: {exc}") from None
    if isinstance(value, dict) and isinstance(value.get("data"), list):
        value = value["data"]
    return enumerate(value if isinstance(value, list) else [value])


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(trace index, Trajectory | TrajectoryFormatError)``, one per exported trace."""
    yield from convert_each(path, _records(path),
                            lambda value, index: convert(value, path=path, index=index, threshold=threshold))


def sniff(head: str) -> bool:
    """True for a Langfuse trace export (observations with Langfuse's field names)."""
    start = head[:20000]
    return '"observations"' in start and ('"parentObservationId"' in start or '"projectId"' in start)


FORMAT = Format(
    name=NAME, read=read, priority=40, extensions=(".json", ".jsonl"), description="a Langfuse trace export",
    sniff=lambda sample: sample.is_json and sniff(sample.head))
