"""OpenAI Agents SDK trace exports (format ``openai_agents``): the SDK's own trace and span records.

The SDK (``openai-agents``) records each run as a trace of spans and hands them to its trace processors;
``Trace.export()`` is ``{"object": "trace", "id", "workflow_name", "group_id", "metadata"}`` and
``Span.export()`` is ``{"object": "trace.span", "id", "trace_id", "parent_id", "started_at", "ended_at",
"span_data": {"type": ...}, "error"}``. Containers read (sniffed from the content): JSON Lines with one
exported record per line (what a file-writing trace processor writes), a JSON array of records, or the
body the SDK's ``BackendSpanExporter`` posts, ``{"data": [records]}`` (whole, or one per line).
``tests/fixtures/openai_agents/traces.jsonl`` is a sample written by the SDK itself.

Mapping (then ``spans.py``, shared with ``otel`` and ``langfuse``), by ``span_data.type``:

* ``generation`` (the Chat Completions model): an LLM call, ``input`` / ``output`` chat messages;
* ``response`` (the Responses model): an LLM call when the record carries ``input`` / ``response``
  (a processor of one's own); the SDK's export keeps only ``response_id``, so the conversation of a
  Responses-model run is then not in the file (its tool calls are, from the function spans);
* ``function``: a tool execution (``name``, ``input`` = the arguments, ``output`` = the result); a span with
  an ``error`` is a failed call (``is_error``), its message the result when the output is empty;
* ``agent``: the agent's name (the trajectory's ``agent``); ``handoff``: nothing of its own (the transfer is
  the ``transfer_to_...`` tool call and its result in the messages);
* ``guardrail``: hidden (``hidden["evaluations"]``), like EVALUATOR/GUARDRAIL spans elsewhere;
* ``custom`` (task/turn), ``mcp_tools``, speech and any type the SDK adds later: no step.

One trajectory per trace, id = the trace id (``trace_...``). Spans are grouped by trace in memory, so the
traces are emitted when the file has been read. Hidden: the trace's ``workflow_name``, ``group_id`` and
``metadata`` (secrets redacted). No reward is read (unlabeled, ``label=None``; labels come from
``--labels``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import LabelRule, TrajectoryFormatError
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._json_stream import first_json_lines, first_line_is_json
from rubricforge_dspy.data.formats._records import redact
from rubricforge_dspy.data.formats._steps import parse_arguments
from rubricforge_dspy.data.formats.jsonl import iter_json_lines
from rubricforge_dspy.data.formats.otel_attrs import Msg, normalize_messages
from rubricforge_dspy.data.formats.spans import Span, build_trajectory

NAME = "openai_agents"
TRACE, SPAN = "trace", "trace.span"
_TRACE_KEYS = ("workflow_name", "group_id", "metadata")


def _seconds(raw: Any) -> float:
    if not raw:
        return 0.0
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _assistant(messages: list[Msg]) -> list[Msg]:
    """An LLM call's output: what the model said, whatever role a message without one was given."""
    return [m if m.role != "user" else type(m)("assistant", m.content, m.tool_calls) for m in messages]


def to_span(raw: dict[str, Any], where: str = "") -> tuple[str, Span]:
    """``(trace id, Span)`` of one exported span; ValueError naming the span (and `where`, its place inside
    the record, when it is nested) when it cannot be read."""
    where = f"{where + ', ' if where else ''}span {raw.get('id')!r}"
    data = raw.get("span_data")
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a span needs a span_data object")
    if not raw.get("trace_id") or not raw.get("id"):
        raise ValueError(f"{where}: a span needs an id and a trace_id")
    kind_name = str(data.get("type") or "")
    where = f"{where} ({kind_name or 'untyped'})"
    error = raw.get("error")
    span = Span(span_id=str(raw["id"]), parent_id=raw.get("parent_id"), name=str(data.get("name") or kind_name),
                start=_seconds(raw.get("started_at")), end=_seconds(raw.get("ended_at") or raw.get("started_at")),
                kind="other", error=error is not None, model=data.get("model"))
    if kind_name == "generation":
        span.kind = "llm"
        span.inputs = normalize_messages(data.get("input"), f"{where}, input")
        span.outputs = _assistant(normalize_messages(data.get("output"), f"{where}, output"))
    elif kind_name == "response" and (data.get("input") is not None or data.get("response") is not None):
        span.kind = "llm"
        span.inputs = normalize_messages(data.get("input"), f"{where}, input")
        span.outputs = _assistant(normalize_messages(data.get("response"), f"{where}, response"))
    elif kind_name == "function":
        span.kind = "tool"
        result = _text(data.get("output"))
        if result is None and error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            result = f"Error: {message or 'the function span ended with an error'}"
        span.tool = (str(data.get("name") or "unknown"), None, parse_arguments(data.get("input")), result)
    elif kind_name == "agent":
        span.kind, span.agent_name = "agent", data.get("name")
    elif kind_name == "guardrail":
        span.kind, span.hidden = "evaluator", {"name": data.get("name"), "triggered": data.get("triggered")}
    return str(raw["trace_id"]), span


def _items(value: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` of one JSON value: a trace or span record, a ``{"data": [...]}`` body, or a list."""
    if isinstance(value, dict) and value.get("object") in (TRACE, SPAN):
        yield where, value
    elif isinstance(value, dict) and isinstance(value.get("data"), list):
        for k, item in enumerate(value["data"]):
            yield from _items(item, f"{where}data[{k}]")
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from _items(item, f"{where}[{k}]")
    else:
        raise ValueError(f"{where + ': ' if where else ''}not an OpenAI Agents SDK trace record (expected "
                         "\"object\": \"trace\" or \"trace.span\", or {\"data\": [...]})")


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """``(record index, value | TrajectoryFormatError)``: one JSON value per line, else the whole file."""
    if first_line_is_json(path):  # JSON Lines (a one-line file is one record)
        yield from iter_json_lines(path)
        return
    try:
        value = json.loads(path.read_text(encoding="utf-8-sig"))
    except (ValueError, UnicodeDecodeError) as exc:
        yield 0, TrajectoryFormatError(str(path), None, f"malformed JSON: {exc}")
        return
    if isinstance(value, dict) and isinstance(value.get("data"), list):
        value = value["data"]
    yield from enumerate(value if isinstance(value, list) else [value])


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(trace index, Trajectory | TrajectoryFormatError)``; bad records are reported by index."""
    spans: dict[str, list[Span]] = {}
    traces: dict[str, dict[str, Any]] = {}
    for index, value in _records(path):
        if isinstance(value, TrajectoryFormatError):
            yield index, value
            continue
        try:
            found: list[tuple[str, Span | None, dict[str, Any] | None]] = []
            for where, item in _items(value, ""):
                if item["object"] == TRACE:
                    if not item.get("id"):
                        raise ValueError(f"{where + ': ' if where else ''}a trace record needs an id")
                    found.append((str(item["id"]), None, item))
                else:
                    trace_id, span = to_span(item, where)
                    found.append((trace_id, span, None))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            yield index, TrajectoryFormatError(str(path), index, str(exc))
            continue
        for trace_id, member, trace in found:
            spans.setdefault(trace_id, [])
            if member is not None:
                spans[trace_id].append(member)
            elif trace is not None:  # always, for a trace record
                traces[trace_id] = trace
    for index, (trace_id, trace_spans) in enumerate(spans.items()):
        trace = traces.get(trace_id) or {}
        hidden = {key: redact(trace[key]) for key in _TRACE_KEYS if trace.get(key) not in (None, {}, [])}
        try:
            yield index, build_trajectory(trace_spans, trace_id=trace_id, path=path, index=index, fmt=NAME,
                                          threshold=threshold, hidden=hidden)
        except (ValueError, TypeError) as exc:
            yield index, TrajectoryFormatError(str(path), f"trace {trace_id}", str(exc))


def _is_record(obj: Any) -> bool:
    if isinstance(obj, dict) and isinstance(obj.get("data"), list) and obj["data"]:
        obj = obj["data"][0]
    return isinstance(obj, dict) and (obj.get("object") == SPAN and isinstance(obj.get("span_data"), dict)
                                      or obj.get("object") == TRACE and "workflow_name" in obj)


def sniff(head: str, path: Path) -> bool:
    """True for the SDK's exported trace/span records (JSON Lines, an array, or a ``{"data": [...]}`` body)."""
    start = head[:20000]
    if head.startswith("["):
        return '"object"' in start and ('"trace.span"' in start and '"span_data"' in start
                                        or '"workflow_name"' in start)
    if '"span_data"' in start or '"workflow_name"' in start:
        if any(_is_record(obj) for obj in first_json_lines(path, limit=3)):
            return True
        try:
            return _is_record(json.loads(path.read_text(encoding="utf-8-sig")))
        except (ValueError, UnicodeDecodeError):
            return False
    return False


FORMAT = Format(
    name=NAME, read=read, priority=50, extensions=(".json", ".jsonl"), description="OpenAI Agents SDK trace records",
    sniff=lambda sample: sample.is_json and sniff(sample.head, sample.path))
