"""Plant leak-test canaries in every non-observable field of OpenTelemetry and Langfuse trace files.

Observable in a trace: the LLM calls' messages (minus system messages), the tool spans' names,
arguments and results, span status, and an agent span's input/output when no LLM span has messages.
Poisoned: resource attributes (an API key among them), evaluator attributes (``eval.*``,
``gen_ai.evaluation.*``) on every span, an EVALUATOR span with an LLM call under it, system messages,
and for Langfuse the scores, corrections, trace metadata/tags/user/session, costs and usage, observation
metadata, and an EVALUATOR observation with a generation under it. The reward is planted as an
``eval.reward`` attribute on the root spans / a Langfuse score named ``reward``, so a test can check the
canary value was really read.
"""

from __future__ import annotations

import json
from pathlib import Path

CANARY = "CANARY7f3a"
CANARY_REWARD = 0.7315926
TRACE_FORMATS = ("otel", "langfuse")


def poison_langfuse(data: dict) -> dict:
    trace = data["trace"]
    for key in ("metadata", "tags", "userId", "sessionId", "release", "version"):
        trace[key] = f"{CANARY}.{key}"
    trace["scores"] = [{"name": "reward", "value": CANARY_REWARD, "comment": f"{CANARY}.score", "dataType": "NUMERIC"}]
    trace["corrections"] = [{"name": "output", "longStringValue": f"{CANARY}.correction"}]
    for obs in data["observations"]:
        obs["costDetails"] = {"total": f"{CANARY}.cost"}
        obs["usageDetails"] = {"input": f"{CANARY}.usage"}
        if obs["type"] != "TOOL":  # a TOOL observation's attributes name the tool and the call: observable
            obs["metadata"] = json.dumps({"resourceAttributes": {"api_key": f"{CANARY}.key"}})
    data["observations"].append({"id": "evaluator1", "type": "EVALUATOR", "name": "judge",
                                 "parentObservationId": None, "startTime": "2030-01-01T00:00:00Z",
                                 "input": f"{CANARY}.eval_in", "output": f"{CANARY}.eval_out"})
    data["observations"].append({"id": "evaluator2", "type": "GENERATION", "name": "judge llm",
                                 "parentObservationId": "evaluator1", "startTime": "2030-01-01T00:00:01Z",
                                 "input": [{"role": "user", "content": f"{CANARY}.eval_prompt"}],
                                 "output": {"role": "assistant", "content": f"{CANARY}.eval_verdict"}})
    return data


def _otlp_attr(key, value):
    return {"key": key, "value": {"doubleValue": value} if isinstance(value, float) else {"stringValue": value}}


def _poison_otlp(request: dict) -> dict:
    for rs in request["resourceSpans"]:
        rs.setdefault("resource", {}).setdefault("attributes", [])
        rs["resource"]["attributes"] += [_otlp_attr("openai.api_key", f"{CANARY}.api_key"),
                                         _otlp_attr("deployment", f"{CANARY}.resource")]
        for ss in rs["scopeSpans"]:
            spans = ss["spans"]
            for s in spans:
                s["attributes"] += [_otlp_attr("eval.comment", f"{CANARY}.eval"),
                                    _otlp_attr("gen_ai.evaluation.explanation", f"{CANARY}.x")]
                if not s.get("parentSpanId"):
                    s["attributes"].append(_otlp_attr("eval.reward", CANARY_REWARD))
            for trace in sorted({s["traceId"] for s in spans}):
                spans.append({"traceId": trace, "spanId": "ee" * 8, "name": "judge", "startTimeUnixNano": "9",
                              "endTimeUnixNano": "9", "attributes": [
                                  _otlp_attr("openinference.span.kind", "EVALUATOR"),
                                  _otlp_attr("input.value", f"{CANARY}.judge_in")]})
                spans.append({"traceId": trace, "spanId": "ef" * 8, "parentSpanId": "ee" * 8, "name": "judge llm",
                              "startTimeUnixNano": "9", "endTimeUnixNano": "9", "attributes": [
                                  _otlp_attr("gen_ai.operation.name", "chat"),
                                  _otlp_attr("gen_ai.input.messages", json.dumps(
                                      [{"role": "user", "parts": [{"type": "text", "content": f"{CANARY}.judge"}]}]))]})
    return request


def _poison_sdk_spans(spans: list[dict]) -> list[dict]:
    ids = {s["context"]["span_id"] for s in spans}
    out = []
    for s in spans:
        attrs = {**s["attributes"], "eval.comment": f"{CANARY}.eval", "gen_ai.evaluation.explanation": f"{CANARY}.x"}
        if s.get("parent_id") not in ids and (s.get("parent") or {}).get("span_id") not in ids:
            attrs["eval.reward"] = CANARY_REWARD
        if "gen_ai.input.messages" in attrs:  # system messages are hidden
            msgs = json.loads(attrs["gen_ai.input.messages"])
            attrs["gen_ai.input.messages"] = json.dumps([{**m, "content": f"{CANARY}.system"}
                                                         if m.get("role") == "system" else m for m in msgs])
        resource = {"attributes": {"openai.api_key": f"{CANARY}.key", "service.name": f"{CANARY}.svc"},
                    "schema_url": ""}
        out.append({**s, "attributes": attrs, "resource": resource})
    for trace in sorted({s["context"]["trace_id"] for s in spans}, key=str):
        out.append({"name": "judge", "context": {"trace_id": trace, "span_id": "0xeeeeeeeeeeeeeeee"},
                    "attributes": {"openinference.span.kind": "EVALUATOR", "input.value": f"{CANARY}.judge"}})
    return out


def _poison_mlflow(trace: dict) -> dict:
    info = {**trace["info"], "assessments": [{"name": "correctness", "feedback": {"value": f"{CANARY}.assessment"}}],
            "tags": {"note": f"{CANARY}.tag"}, "request_metadata": {"api_key": f"{CANARY}.key"}}
    spans = trace["data"]["spans"]
    parents = {s.get("parent_id") or s.get("parent_span_id") for s in spans}
    out = []
    for s in spans:
        attrs = {**s["attributes"], "eval.comment": f"{CANARY}.eval", "mlflow.chat.tokenUsage": f"{CANARY}.usage"}
        if not (s.get("parent_id") or s.get("parent_span_id")):
            attrs["eval.reward"] = CANARY_REWARD
        inputs = json.loads(attrs.get("mlflow.spanInputs") or "null")
        if isinstance(inputs, dict) and isinstance(inputs.get("messages"), list):
            inputs["messages"] = [{**m, "content": f"{CANARY}.system"} if m.get("role") == "system" else m
                                  for m in inputs["messages"]]
            attrs["mlflow.spanInputs"] = json.dumps(inputs)
        out.append({**s, "attributes": attrs})
    judge = dict(out[0])
    judge.update({"name": "judge", "attributes": {**out[0]["attributes"], "mlflow.spanType": json.dumps("EVALUATOR"),
                                                  "mlflow.spanInputs": json.dumps(f"{CANARY}.judge")}})
    judge.pop("eval.reward", None)
    for key in ("span_id",):
        judge[key] = "ee" * 8
    if "context" in judge:
        judge["context"] = {**judge["context"], "span_id": "0x" + "ee" * 8}
    assert parents  # every trace has a root
    return {"info": info, "data": {"spans": out + [judge]}}


def poison_trace_file(path: Path, fmt: str, target: Path) -> Path:
    """A poisoned copy of a trace file at ``target``, in the same container."""
    text = path.read_text()
    if fmt == "langfuse":
        target.write_text(json.dumps(poison_langfuse(json.loads(text))))
        return target
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "info" in data and "data" in data:  # MLflow
        target.write_text(json.dumps(_poison_mlflow(data)))
    elif isinstance(data, dict) and "resourceSpans" in data:
        target.write_text(json.dumps(_poison_otlp(data)))
    elif isinstance(data, dict) and "spans" in data:  # any-agent's AgentTrace
        target.write_text(json.dumps({**data, "spans": _poison_sdk_spans(data["spans"])}))
    elif data is None and text.lstrip().startswith('{"resourceSpans"'):  # OTLP JSON Lines
        target.write_text("".join(json.dumps(_poison_otlp(json.loads(line))) + "\n" for line in text.splitlines()
                                  if line.strip()))
    else:  # SDK spans: a JSON array or the ConsoleSpanExporter's concatenated objects
        decoder, pos, spans = json.JSONDecoder(), 0, []
        while pos < len(text.rstrip()):
            value, pos = decoder.raw_decode(text, pos)
            spans.extend(value if isinstance(value, list) else [value])
            while pos < len(text) and text[pos].isspace():
                pos += 1
        target.write_text(json.dumps(_poison_sdk_spans(spans)))
    return target
