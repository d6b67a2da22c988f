"""Build the constructed OpenTelemetry fixtures of this directory (see evals/data/SOURCES.md).

The span attributes of traces A and B are copied verbatim from Arize-ai/openinference
``js/packages/openinference-genai/test/__fixtures__/*.json`` (Apache-2.0), passed as ``--fixtures DIR``;
the span envelopes (ids, times, parents, status, resource) follow the OTLP JSON encoding
(opentelemetry-proto ``trace/v1``, https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding) and
the OpenTelemetry SDK's ``ReadableSpan.to_json()``. Trace C is written from the GenAI semconv 1.30 spec
(flattened ``gen_ai.prompt.N`` / ``gen_ai.completion.N`` attributes as OpenLLMetry emits them, an
``execute_tool`` span ending in ERROR). Run: python evals/data/otel/build_constructed.py --fixtures DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = "https://opentelemetry.io/schemas/1.37.0"


def kv(attrs: dict) -> list[dict]:
    out = []
    for key, value in attrs.items():
        if isinstance(value, bool):
            v = {"boolValue": value}
        elif isinstance(value, int):
            v = {"intValue": str(value)}
        elif isinstance(value, float):
            v = {"doubleValue": value}
        elif isinstance(value, list):
            v = {"arrayValue": {"values": [{"stringValue": str(x)} for x in value]}}
        else:
            v = {"stringValue": str(value)}
        out.append({"key": key, "value": v})
    return out


def span(trace, sid, parent, name, t0, t1, attrs, error=None):
    return {"traceId": trace, "spanId": sid, "parentSpanId": parent or "", "name": name, "kind": 1,
            "startTimeUnixNano": str(t0), "endTimeUnixNano": str(t1), "attributes": kv(attrs),
            "status": {"code": 2, "message": error} if error else {"code": 1}}


def traces(fx: Path) -> dict[str, list[dict]]:
    oi = json.loads((fx / "openinference_client_span_tool_calls.json").read_text())
    genai = json.loads((fx / "otel_genai_client_span_tool_calls.json").read_text())
    tool = json.loads((fx / "otel_genai_tool_execution_span.json").read_text())
    a, b, c = "a1" * 16, "b2" * 16, "c3" * 16
    base = 1_760_000_000_000_000_000
    trace_a = [
        span(a, "a100000000000001", None, "weather_agent", base, base + 9_000_000,
             {"openinference.span.kind": "AGENT", "input.value": "Weather in Paris?",
              "output.value": "The weather in Paris is currently rainy with a temperature of 57°F."}),
        span(a, "a100000000000002", "a100000000000001", "get_weather", base + 1_000_000, base + 2_000_000,
             {"openinference.span.kind": "TOOL", "tool.name": "get_weather", "tool_call.id": "1234",
              "input.value": "{\"location\":\"Paris\"}", "output.value": "rainy, 57°F"}),
        span(a, "a100000000000003", "a100000000000001", "ChatCompletion", base + 3_000_000, base + 8_000_000, oi),
    ]
    trace_b = [
        span(b, "b200000000000001", None, "invoke_agent weather", base, base + 9_000_000,
             {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}),
        span(b, "b200000000000002", "b200000000000001", "execute_tool get_weather", base + 1_000_000,
             base + 2_000_000, tool),
        span(b, "b200000000000003", "b200000000000001", "chat gpt-4", base + 3_000_000, base + 8_000_000, genai),
    ]
    trace_c = [
        span(c, "c300000000000001", None, "chat gpt-4o-mini", base, base + 1_000_000, {
            "gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "You are a file assistant.",
            "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Show me notes.txt",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_1", "gen_ai.completion.0.tool_calls.0.name": "read_file",
            "gen_ai.completion.0.tool_calls.0.arguments": "{\"path\": \"notes.txt\"}"}),
        span(c, "c300000000000002", None, "execute_tool read_file", base + 1_100_000, base + 1_200_000, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file", "gen_ai.tool.call.id": "call_1"},
            error="FileNotFoundError: notes.txt"),
        span(c, "c300000000000003", None, "chat gpt-4o-mini", base + 2_000_000, base + 3_000_000, {
            "gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "You are a file assistant.",
            "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Show me notes.txt",
            "gen_ai.prompt.2.role": "assistant", "gen_ai.prompt.2.tool_calls.0.id": "call_1",
            "gen_ai.prompt.2.tool_calls.0.name": "read_file",
            "gen_ai.prompt.2.tool_calls.0.arguments": "{\"path\": \"notes.txt\"}",
            "gen_ai.prompt.3.role": "tool", "gen_ai.prompt.3.tool_call_id": "call_1",
            "gen_ai.prompt.3.content": "Error: FileNotFoundError: notes.txt",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "I could not find notes.txt; please check the file name."}),
    ]
    return {"a": trace_a, "b": trace_b, "c": trace_c}


def request(spans: list[dict]) -> dict:
    scope = {"scope": {"name": "constructed"}, "schemaUrl": SCHEMA, "spans": spans}
    return {"resourceSpans": [{"resource": {"attributes": kv({"service.name": "weather-demo"})}, "schemaUrl": SCHEMA,
                               "scopeSpans": [scope]}]}


def sdk_span(s: dict) -> dict:
    """The same span as the OpenTelemetry SDK's ReadableSpan.to_json() writes it."""
    attrs = {}
    for item in s["attributes"]:
        v = item["value"]
        attrs[item["key"]] = (int(v["intValue"]) if "intValue" in v else
                              [x["stringValue"] for x in v["arrayValue"]["values"]] if "arrayValue" in v else
                              next(iter(v.values())))
    return {"name": s["name"], "context": {"trace_id": "0x" + s["traceId"], "span_id": "0x" + s["spanId"],
                                           "trace_state": "[]"},
            "kind": "SpanKind.INTERNAL", "parent_id": ("0x" + s["parentSpanId"]) if s["parentSpanId"] else None,
            "start_time": "2025-10-09T08:53:20.%06dZ" % (int(s["startTimeUnixNano"]) % 10**9 // 1000),
            "end_time": "2025-10-09T08:53:20.%06dZ" % (int(s["endTimeUnixNano"]) % 10**9 // 1000),
            "status": {"status_code": "ERROR", "description": s["status"]["message"]} if s["status"]["code"] == 2
            else {"status_code": "UNSET"},
            "attributes": attrs, "events": [], "links": [],
            "resource": {"attributes": {"service.name": "weather-demo"}, "schema_url": ""}}


def mlflow_traces() -> list[dict]:
    """Two MLflow traces as ``mlflow.entities.Trace.to_dict()`` writes them: 2.x spans (``context``,
    ``status_code``) and 3.x spans (``trace_id``, ``status.code``), attributes JSON-encoded, following
    https://mlflow.org/docs/latest/genai/tracing/concepts/trace/ (Trace = info + data.spans)."""
    def enc(value):
        return json.dumps(value)

    history = [{"role": "system", "content": "You answer weather questions."},
               {"role": "user", "content": "Is it raining in Oslo?"}]
    call = {"id": "call_9", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
    first_out = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    second_in = history + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "call_9", "content": "Error: weather service timeout"}]
    sorry = "I could not reach the weather service; please try again."
    second_out = {"choices": [{"index": 0, "message": {"role": "assistant", "content": sorry}}]}

    def v2(sid, parent, name, kind, t, inputs, outputs, status="OK"):
        return {"name": name, "context": {"span_id": f"0x{sid}", "trace_id": "0x" + "9a" * 16},
                "parent_id": f"0x{parent}" if parent else None, "start_time": 1_760_000_000_000_000_000 + t,
                "end_time": 1_760_000_000_000_000_000 + t + 500, "status_code": status, "status_message": "",
                "attributes": {"mlflow.traceRequestId": enc("tr-constructed-v2"), "mlflow.spanType": enc(kind),
                               "mlflow.spanInputs": enc(inputs), "mlflow.spanOutputs": enc(outputs)}, "events": []}

    spans2 = [v2("0000000000000001", None, "agent", "AGENT", 0, {"messages": history[1:]}, second_out),
              v2("0000000000000002", "0000000000000001", "Completions", "CHAT_MODEL", 1000, {"messages": history},
                 first_out),
              v2("0000000000000003", "0000000000000001", "get_weather", "TOOL", 2000, {"city": "Oslo"},
                 "Error: weather service timeout", status="ERROR"),
              v2("0000000000000004", "0000000000000001", "Completions", "CHAT_MODEL", 3000, {"messages": second_in},
                 second_out)]
    trace2 = {"info": {"request_id": "tr-constructed-v2", "experiment_id": "0", "status": "OK",
                       "request_metadata": {}, "tags": {"mlflow.traceName": "agent"}}, "data": {"spans": spans2}}
    spans3 = []
    for s in spans2[:2]:
        spans3.append({"trace_id": "qqqqqqqqqqqqqqqqqqqqqg==", "span_id": s["context"]["span_id"][2:],
                       "parent_span_id": s["parent_id"][2:] if s["parent_id"] else None, "name": s["name"],
                       "start_time_unix_nano": s["start_time"], "end_time_unix_nano": s["end_time"], "events": [],
                       "status": {"code": "STATUS_CODE_OK", "message": ""},
                       "attributes": {**s["attributes"], "mlflow.traceRequestId": enc("tr-constructed-v3")}})
    trace3 = {"info": {"trace_id": "tr-constructed-v3", "state": "OK",
                       "trace_metadata": {"mlflow.trace_schema.version": "3"}}, "data": {"spans": spans3}}
    return [trace2, trace3]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", required=True, type=Path)
    t = traces(parser.parse_args().fixtures)
    (HERE / "constructed_otlp.json").write_text(json.dumps(request(t["a"] + t["b"] + t["c"]), indent=1) + "\n")
    lines = [request(t["a"][:2]), request(t["a"][2:] + t["b"]), request(t["c"])]  # a trace split over two lines
    (HERE / "constructed_otlp.jsonl").write_text(renumber("".join(json.dumps(x) + "\n" for x in lines), "d4e5f6"))
    console = "".join(json.dumps(sdk_span(s), indent=4) + "\n" for s in t["b"] + t["c"])  # ConsoleSpanExporter
    (HERE / "constructed_console_spans.json").write_text(renumber(console, "170817"))
    for name, trace in zip(("constructed_mlflow_v2.json", "constructed_mlflow_v3.json"), mlflow_traces(), strict=True):
        (HERE / name).write_text(json.dumps(trace, indent=1) + "\n")


def renumber(text: str, new: str) -> str:
    """Other trace ids per file, so that the directory loads without duplicate ids."""
    for old, repl in zip(("a1", "b2", "c3"), (new[:2], new[2:4], new[4:]), strict=True):
        text = text.replace(old * 16, repl * 16)
    return text


if __name__ == "__main__":
    main()
