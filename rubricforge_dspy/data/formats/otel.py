"""OpenTelemetry traces of LLM agents (format ``otel``): GenAI semantic conventions or OpenInference.

Containers read (sniffed from the content):

* OTLP JSON: one export request ``{"resourceSpans": [{"resource", "scopeSpans": [{"spans": [...]}]}]}``
  (attributes as ``[{"key", "value": {"stringValue" | "intValue" | ...}}]``), or OTLP JSON Lines (one
  export request per line, as the collector's file exporter writes them);
* span lists as the OpenTelemetry SDK writes them (``ReadableSpan.to_json()``: ``{"name", "context":
  {"trace_id", "span_id"}, "parent_id", "attributes": {...}, "events", "status": {"status_code"},
  "resource"}``): a JSON array, one span per line, the ConsoleSpanExporter's concatenated indented
  objects, or ``{"spans": [...]}`` (any-agent's saved ``AgentTrace``);
* MLflow trace JSON ``{"info", "data": {"spans": [...]}}`` (2.x and 3.x span fields, ``mlflow.*`` attributes;
  the trajectory id is ``mlflow.traceRequestId``).

One trajectory per trace id (all root spans of a trace together), id = the trace id in hex. The
span -> step mapping is in ``spans.py``; the attribute dialects and the pinned semconv versions in
``otel_attrs.py``. Spans are grouped by trace in memory as compact records, so a JSON Lines file is
read line by line but its traces are emitted at the end (a trace may span several export requests).
Resource attributes (API keys redacted), evaluator attributes (``eval.*``, ``gen_ai.evaluation.*``)
and EVALUATOR/GUARDRAIL spans go to ``hidden``; no reward is read from a trace (unlabeled,
``label=None``; labels come from ``--labels``), except an evaluator attribute named exactly ``eval.reward`` /
``gen_ai.evaluation.score.value`` on the trace's root span.

Sessions (`data.sessions`, ``--session-key``): a span attribute in `SESSION_ATTRIBUTES` (``session.id`` of
OpenInference and the OpenTelemetry semantic conventions, ``gen_ai.conversation.id`` of the GenAI
conventions, ``langfuse.session.id``), or an MLflow trace's metadata ``mlflow.trace.session``, becomes the
trajectory's ``hidden["session_id"]``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import LabelRule, TrajectoryFormatError
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._json_stream import first_json_lines, first_line_is_json
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats.jsonl import iter_json_lines
from rubricforge_dspy.data.formats.otel_attrs import (
    check_schema_url,
    hidden_attributes,
    io_values,
    llm_messages,
    maybe_json,
    span_kind,
    tool_info,
)
from rubricforge_dspy.data.formats.spans import Span, build_trajectory

NAME = "otel"
_VALUE_KEYS = ("stringValue", "boolValue", "intValue", "doubleValue", "bytesValue")
REWARD_ATTRIBUTES = ("eval.reward", "gen_ai.evaluation.score.value")
SESSION_ATTRIBUTES = ("session.id", "gen_ai.conversation.id", "langfuse.session.id", "mlflow.trace.session")
MLFLOW_SESSION = "mlflow.trace.session"  # MLflow: the trace metadata key of the session id


def any_value(value: Any) -> Any:
    """An OTLP JSON ``AnyValue`` as a plain Python value."""
    if not isinstance(value, dict):
        return value
    for key in _VALUE_KEYS:
        if key in value:
            raw = value[key]
            return int(raw) if key == "intValue" else float(raw) if key == "doubleValue" else raw
    if "arrayValue" in value:
        return [any_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return kv_list((value["kvlistValue"] or {}).get("values") or [])
    return None


def kv_list(items: Any) -> dict[str, Any]:
    """OTLP ``[{"key", "value"}]`` attributes as a flat dict (a plain dict is returned as is)."""
    if isinstance(items, dict):
        return items
    if not isinstance(items, list):
        raise ValueError(f"attributes must be a list of {{key, value}}, got {type(items).__name__}")
    return {item["key"]: any_value(item.get("value")) for item in items if isinstance(item, dict) and "key" in item}


def hex_id(raw: Any, width: int) -> str | None:
    """A trace/span id as lowercase hex: hex strings, ``0x`` hex, integers, or base64 (protobuf JSON)."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, int):
        return format(raw, f"0{width}x")
    text = str(raw)
    if text.startswith("0x"):
        return text[2:].lower().zfill(width)
    if len(text) == width and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    try:
        decoded = base64.b64decode(text, validate=True)
        if len(decoded) * 2 == width:
            return decoded.hex()
    except (binascii.Error, ValueError):
        pass
    return text


def _seconds(raw: Any) -> float:
    if raw is None or raw == "":
        return 0.0
    if isinstance(raw, (int, float)) or (isinstance(raw, str) and raw.isdigit()):
        return int(raw) / 1e9
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()


def _is_error(status: Any) -> tuple[bool, str | None]:
    if not isinstance(status, dict):
        return False, None
    code = status.get("code", status.get("status_code"))
    error = code in (2, "2") or str(code).upper() in ("ERROR", "STATUS_CODE_ERROR")
    return error, status.get("message") or status.get("description")


def _at(where: str, text: str) -> str:
    """`text` prefixed with `where` (a path inside the record), or as is at the record's top: the loader's
    `TrajectoryFormatError` names the file and record already."""
    return f"{where}: {text}" if where else text


def _inside(where: str, part: str) -> str:
    return f"{where}, {part}" if where else part


def to_span(raw: dict[str, Any], where: str = "") -> tuple[str, Span, dict[str, Any]]:
    """``(trace id, Span, resource attributes)`` of one OTLP-JSON or SDK-JSON span; `where` names the span's
    place in its record for an error (empty: the record itself)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name", ""), str):
        raise ValueError(_at(where, "a span must be an object with a name"))
    if "traceId" in raw:  # OTLP JSON
        trace_id, span_id, parent = raw.get("traceId"), raw.get("spanId"), raw.get("parentSpanId")
        start, end = raw.get("startTimeUnixNano"), raw.get("endTimeUnixNano")
        events = [(e.get("name", ""), kv_list(e.get("attributes") or [])) for e in raw.get("events") or []]
        resource: dict[str, Any] = {}
    elif isinstance(raw.get("context"), dict):  # SDK ReadableSpan.to_json()
        ctx = raw["context"]
        trace_id, span_id = ctx.get("trace_id"), ctx.get("span_id")
        parent = raw.get("parent_id") or (raw.get("parent") or {}).get("span_id")
        start, end = raw.get("start_time"), raw.get("end_time")
        events = [(e.get("name", ""), e.get("attributes") or {}) for e in raw.get("events") or []]
        resource = (raw.get("resource") or {}).get("attributes") or {}
        check_schema_url((raw.get("resource") or {}).get("schema_url"))
    elif "trace_id" in raw and "span_id" in raw:  # MLflow 3 trace JSON (OTLP field names in snake case)
        trace_id, span_id, parent = raw.get("trace_id"), raw.get("span_id"), raw.get("parent_span_id")
        start, end = raw.get("start_time_unix_nano"), raw.get("end_time_unix_nano")
        events = [(e.get("name", ""), e.get("attributes") or {}) for e in raw.get("events") or []]
        resource = {}
    else:
        raise ValueError(_at(where, "not a span (no traceId, context.trace_id or trace_id)"))
    trace = hex_id(trace_id, 32)
    if not trace:
        raise ValueError(_at(where, f"span {raw.get('name')!r} has no trace id"))
    attrs = kv_list(raw.get("attributes") or {})
    if attrs.get("mlflow.traceRequestId"):  # MLflow: the trace's request id is the id users know
        trace = str(maybe_json(attrs["mlflow.traceRequestId"]))
    name = raw.get("name", "")
    where = _inside(where, f"span {name!r}")
    kind = span_kind(attrs, name, where)
    error, message = _is_error(raw.get("status") or {"status_code": raw.get("status_code"),
                                                      "description": raw.get("status_message")})
    model = attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model") or attrs.get("llm.model_name")
    span = Span(span_id=hex_id(span_id, 16) or f"{trace}:{name}", parent_id=hex_id(parent, 16), name=name,
                start=_seconds(start), end=_seconds(end), kind=kind, error=error, model=model,
                agent_name=attrs.get("gen_ai.agent.name"), hidden=hidden_attributes(attrs),
                session=session_attribute(attrs))
    if kind == "evaluator":
        span.hidden = {k: v for k, v in attrs.items() if not k.startswith("gen_ai.usage")}
    elif kind == "llm":
        found = llm_messages(attrs, events, where)
        if found:
            span.inputs, span.outputs = found
    elif kind == "tool":
        name_, cid, args, result = tool_info(attrs, name)
        if result is None and error:
            result = f"Error: {message or 'the tool span ended with status ERROR'}"
        span.tool = (name_, cid, args, result)
    else:
        span.value_in, span.value_out = io_values(attrs)
    return trace, span, resource


def session_attribute(attrs: dict[str, Any]) -> str | None:
    """The session id a span's attributes carry (`SESSION_ATTRIBUTES`, first found), or None."""
    for key in SESSION_ATTRIBUTES:
        value = maybe_json(attrs.get(key))
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def mlflow_session(info: Any) -> str | None:
    """An MLflow trace info's session (metadata ``mlflow.trace.session``; JSON or an entity), or None."""
    metadata = info.get("trace_metadata") or info.get("request_metadata") if isinstance(info, dict) else (
        getattr(info, "trace_metadata", None) or getattr(info, "request_metadata", None))
    value = metadata.get(MLFLOW_SESSION) if isinstance(metadata, dict) else None
    return str(value) if value not in (None, "") else None


def _with_session(found: Iterator[tuple[str, Span, dict[str, Any]]],
                  session: str | None) -> Iterator[tuple[str, Span, dict[str, Any]]]:
    for trace, span, resource in found:
        if session is not None and span.session is None:
            span.session = session
        yield trace, span, resource


def _otlp_spans(request: Any, where: str) -> Iterator[tuple[str, Span, dict[str, Any]]]:
    if not isinstance(request, dict) or not isinstance(request.get("resourceSpans"), list):
        raise ValueError(_at(where, "not an OTLP export request (no resourceSpans list)"))
    for r, rs in enumerate(request["resourceSpans"]):
        check_schema_url(rs.get("schemaUrl"))
        resource = kv_list((rs.get("resource") or {}).get("attributes") or [])
        for s, ss in enumerate(rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []):
            check_schema_url(ss.get("schemaUrl"))
            for k, raw in enumerate(ss.get("spans") or []):
                trace, span, _ = to_span(raw, _inside(where, f"resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"))
                yield trace, span, resource


def _spans_of(value: Any, where: str) -> Iterator[tuple[str, Span, dict[str, Any]]]:
    """The spans of one record: an OTLP export request, an MLflow trace, ``{"spans": [...]}``, a list, a span."""
    if isinstance(value, dict) and "resourceSpans" in value:
        yield from _otlp_spans(value, where)
    elif isinstance(value, dict) and isinstance(value.get("data"), dict) and "info" in value:
        yield from _with_session(_spans_of(value["data"].get("spans") or [], where), mlflow_session(value["info"]))
    elif isinstance(value, dict) and isinstance(value.get("spans"), list):
        yield from _spans_of(value["spans"], where)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from _spans_of(item, f"{where}[{k}]" if where else f"span {k}")
    else:
        yield to_span(value, where)


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """``(record index, value | TrajectoryFormatError)``: one JSON value per line (streamed), else the
    whole-file JSON (spans or export requests one record each), else concatenated indented objects."""
    if first_line_is_json(path):  # JSON Lines (a one-line JSON file is one record)
        yield from iter_json_lines(path)
        return
    text = path.read_text(encoding="utf-8-sig")
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    else:
        if isinstance(value, dict) and isinstance(value.get("data"), dict) and "info" in value:
            session = mlflow_session(value["info"])  # MLflow: {"info", "data": {"spans"}}; of info only the session
            value = value["data"]
            for span in value.get("spans") or [] if session is not None else []:
                if isinstance(span, dict) and isinstance(span.get("attributes"), dict):
                    span["attributes"].setdefault(MLFLOW_SESSION, session)
        if isinstance(value, dict) and isinstance(value.get("spans"), list):
            value = value["spans"]
        yield from enumerate(value if isinstance(value, list) else [value])  # spans or export requests
        return
    decoder, pos, index = json.JSONDecoder(), 0, 0  # ConsoleSpanExporter: indented objects one after another
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError as exc:
            yield index, TrajectoryFormatError(str(path), index, f"malformed JSON at offset {pos}: {exc}")
            return
        yield index, value
        index += 1


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(trace index, Trajectory | TrajectoryFormatError)``; bad lines/records are reported by index."""
    traces: dict[str, list[Span]] = {}
    resources: dict[str, dict[str, Any]] = {}
    for index, value in _records(path):
        if isinstance(value, TrajectoryFormatError):
            yield index, value
            continue
        try:
            found = list(_spans_of(value, ""))  # the error names the file and record
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            yield index, TrajectoryFormatError(str(path), index, str(exc))
            continue
        for trace, span, resource in found:
            traces.setdefault(trace, []).append(span)
            resources.setdefault(trace, {}).update(resource)
    for index, (trace, spans) in enumerate(traces.items()):
        try:
            yield index, build_trajectory(spans, trace_id=trace, path=path, index=index, fmt=NAME,
                                          threshold=threshold, reward=_reward(spans),
                                          hidden={"resource": redact(resources.get(trace) or {})})
        except (ValueError, TypeError) as exc:
            yield index, TrajectoryFormatError(str(path), f"trace {trace}", str(exc))


def _reward(spans: list[Span]) -> float | None:
    roots = [s for s in spans if not s.parent_id or s.parent_id not in {x.span_id for x in spans}]
    for span in roots:
        for key in REWARD_ATTRIBUTES:
            value = span.hidden.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
    return None


def sniff(head: str, path: Path) -> bool:
    """True for OTLP JSON (lines) or SDK span JSON."""
    start = head[:4000]
    if '"resourceSpans"' in start:
        return True
    if '"trace_id"' in start and '"span_id"' in start and ('"context"' in start or '"mlflow.' in start):
        return True
    return any("resourceSpans" in obj or isinstance(obj.get("context"), dict) and "trace_id" in obj["context"]
               for obj in first_json_lines(path, limit=3))


FORMAT = Format(
    name=NAME, read=read, priority=60, extensions=(".json", ".jsonl"), description="OpenTelemetry spans (OTLP JSON)",
    sniff=lambda sample: sample.is_json and sniff(sample.head, sample.path))
