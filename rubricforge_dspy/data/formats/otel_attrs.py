"""Read LLM messages and tool executions out of span attributes, in the dialects the loaders support.

Dialects (pinned; see docs/FORMAT.md "OpenTelemetry"):

* **OpenTelemetry GenAI semantic conventions**, semconv 1.26 - 1.38 (``SEMCONV_MAX``):
  - 1.36+ JSON attributes ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (messages with
    ``parts``: ``text``, ``tool_call``, ``tool_call_response``) and ``gen_ai.system_instructions``;
  - the earlier flattened attributes ``gen_ai.prompt.N.role|content|tool_call_id|tool_calls.M.id|name|arguments``
    and ``gen_ai.completion.N...`` (OpenLLMetry), and a whole-list ``gen_ai.prompt`` / ``gen_ai.completion``;
  - the 1.27 - 1.35 span events ``gen_ai.system|user|assistant|tool.message`` and ``gen_ai.choice``;
  - ``execute_tool`` spans: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``,
    ``gen_ai.tool.call.result`` (any-agent's ``gen_ai.tool.args`` / ``gen_ai.output`` are read as aliases).
* **OpenInference** (Arize) semantic conventions as of openinference-semantic-conventions 0.1.x:
  ``openinference.span.kind`` (``OPENINFERENCE_KINDS``), ``llm.input_messages.N.message.role|content|
  contents.M.message_content.text|tool_call_id|tool_calls.M.tool_call.id|function.name|function.arguments``,
  ``llm.output_messages...``, ``tool.name``, ``tool_call.id``, ``input.value`` / ``output.value``.

Message bodies may be OpenAI chat messages, GenAI ``parts`` messages, or OpenAI Responses API items;
`normalize_messages` turns all of them into `Msg` records. A value that cannot be mapped raises
ValueError naming the attribute, which the loaders turn into a `TrajectoryFormatError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rubricforge_dspy.data.formats._steps import parse_arguments, text_of

SEMCONV_MIN = (1, 26)
SEMCONV_MAX = (1, 38)
OPENINFERENCE_KINDS = ("LLM", "TOOL", "AGENT", "CHAIN", "RETRIEVER", "EMBEDDING", "RERANKER", "GUARDRAIL",
                       "EVALUATOR", "PROMPT", "UNKNOWN")
_SCHEMA_URL = re.compile(r"opentelemetry\.io/schemas/(\d+)\.(\d+)")
_ROLES = {"system": "system", "developer": "system", "user": "user", "human": "user", "assistant": "assistant",
          "ai": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "ipython": "tool"}
# attribute prefixes that are evaluator output: never observable, kept in hidden
EVAL_PREFIXES = ("eval.", "evaluation.", "gen_ai.evaluation.", "langfuse.score", "score.")


@dataclass
class Msg:
    """One chat message, whatever the dialect: role user|assistant|tool|system."""

    role: str
    content: str = ""
    tool_calls: list[tuple[str | None, str, Any]] = field(default_factory=list)  # (id, name, arguments)
    tool_call_id: str | None = None
    is_error: bool = False

    def key(self) -> tuple[str, str, tuple[tuple[str | None, ...], ...], str | None]:
        """Identity used to drop the history an LLM call repeats (arguments by call id when there is one)."""
        calls = tuple((cid, name) if cid else (None, name, json.dumps(args, sort_keys=True, default=str))
                      for cid, name, args in self.tool_calls)
        return (self.role, self.content.strip(), calls, self.tool_call_id)


def check_schema_url(url: Any) -> None:
    """ValueError when ``url`` declares an OpenTelemetry semconv version this module does not read."""
    match = _SCHEMA_URL.search(url) if isinstance(url, str) else None
    if match and (int(match.group(1)), int(match.group(2))) > SEMCONV_MAX:
        version = f"{match.group(1)}.{match.group(2)}"
        raise ValueError(
            f"schemaUrl {url!r} declares semantic conventions {version}, newer than the GenAI conventions this "
            f"loader reads (1.{SEMCONV_MIN[1]} - 1.{SEMCONV_MAX[1]}); check docs/FORMAT.md for the attribute names "
            f"read, and re-export with an instrumentation pinned to semconv <= 1.{SEMCONV_MAX[1]} (or convert to the "
            f"generic JSONL)")


def maybe_json(value: Any) -> Any:
    """A JSON string decoded (when it is JSON), anything else as given."""
    if isinstance(value, str) and value[:1] in "[{\"":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _role(raw: Any, where: str) -> str:
    role = _ROLES.get(str(raw).lower()) if raw is not None else None
    if role is None:
        raise ValueError(f"{where}: message role {raw!r} is not one of {sorted(set(_ROLES))}")
    return role


def _call(part: dict[str, Any]) -> tuple[str | None, str, Any]:
    fn = part.get("function")
    if not isinstance(fn, dict):
        fn = part
    name = fn.get("name") or part.get("name") or "unknown"
    args = fn.get("arguments", fn.get("args", fn.get("input")))
    return (part.get("id") or part.get("call_id") or part.get("tool_call_id"), str(name), parse_arguments(args))


def _from_parts(role: str, parts: list[Any], out: list[Msg]) -> None:
    """GenAI 1.36+ ``parts`` (text / tool_call / tool_call_response; reasoning, blob and uri parts skipped)."""
    msg, responses, texts = Msg(role=role), [], []
    for part in parts:
        if not isinstance(part, dict):
            texts.append(str(part))
            continue
        kind = part.get("type")
        if kind == "tool_call":
            msg.tool_calls.append(_call(part))
        elif kind == "tool_call_response":
            responses.append(Msg(role="tool", content=_text(part.get("response", part.get("result", ""))),
                                 tool_call_id=part.get("id")))
        elif kind in ("text", None):
            texts.append(_text(part.get("content", part.get("text", ""))))
    msg.content = "".join(texts)
    if msg.content or msg.tool_calls or not responses:
        out.append(msg)
    out.extend(responses)


def _text(value: Any) -> str:
    """A message body as text: JSON strings decoded and objects re-encoded compactly."""
    value = maybe_json(value)
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else text_of(value)


def _gemini(contents: list[Any], where: str) -> list[Msg]:
    """Gemini ``contents``: ``{role: user|model, parts: [{text} | {function_call} | {function_response}]}``."""
    out: list[Msg] = []
    for i, content in enumerate(contents):
        if isinstance(content, str):
            out.append(Msg("user", content))
            continue
        if not isinstance(content, dict):
            raise ValueError(f"{where}: contents {i} is not an object")
        msg = Msg(_role(content.get("role") or "user", f"{where}, contents {i}"))
        responses = []
        for part in content.get("parts") or []:
            call = part.get("function_call") or part.get("functionCall") if isinstance(part, dict) else None
            answer = part.get("function_response") or part.get("functionResponse") if isinstance(part, dict) else None
            if call:
                msg.tool_calls.append((call.get("id"), str(call.get("name") or "unknown"), call.get("args")))
            elif answer:
                responses.append(Msg("tool", _text(answer.get("response")), tool_call_id=answer.get("id")))
            elif isinstance(part, dict) and part.get("text") and not part.get("thought"):
                msg.content += str(part["text"])
        if msg.content or msg.tool_calls or not responses:
            out.append(Msg("assistant", msg.content, msg.tool_calls) if msg.role == "user" and msg.tool_calls else msg)
        out.extend(responses)
    return out


def _responses_item(item: dict[str, Any], out: list[Msg]) -> bool:
    """OpenAI Responses API items (function_call, function_call_output, output_text messages)."""
    kind = item.get("type")
    if kind == "function_call":
        call = (item.get("call_id") or item.get("id"), str(item.get("name") or "unknown"),
                parse_arguments(item.get("arguments")))
        if out and out[-1].role == "assistant" and (out[-1].tool_calls or not out[-1].content.strip()):
            out[-1].tool_calls.append(call)
        else:
            out.append(Msg(role="assistant", tool_calls=[call]))
        return True
    if kind == "function_call_output":
        out.append(Msg(role="tool", content=_text(item.get("output")), tool_call_id=item.get("call_id")))
        return True
    if kind == "reasoning":
        return True
    return False


def normalize_messages(value: Any, where: str, roleless: str | None = None) -> list[Msg]:
    """Messages of any supported dialect (list, single message, choice, Responses object, JSON string).

    roleless: the role of a message that states none (``{"content": ...}``), for a caller that knows which
    side of the call the messages are on; None keeps the default: a lone such object is the assistant's (a
    completion), one in a list is an error."""
    value = maybe_json(value)
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        return [Msg(role="user", content=value)]
    if isinstance(value, dict):
        return _object_messages(value, where, roleless)
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of messages, got {type(value).__name__}")
    out: list[Msg] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"{where}: message {i} is not an object")
        _add_message(item, f"{where}, message {i}", roleless, out)
    return out


def _object_messages(value: dict[str, Any], where: str, roleless: str | None) -> list[Msg]:
    """`normalize_messages` of one object: a request body, a response, a choice or a single message."""
    if isinstance(value.get("messages"), list):  # a request body
        return normalize_messages(value["messages"], where, roleless)
    if isinstance(value.get("contents"), (list, str)):  # a Gemini request body
        return _gemini(value["contents"] if isinstance(value["contents"], list) else [value["contents"]], where)
    if isinstance(value.get("args"), list) and set(value) <= {"args", "kwargs"} \
            and all(isinstance(a, str) for a in value["args"]):  # LlamaIndex complete(prompt)
        return [Msg(role="user", content=a) for a in value["args"]]
    if isinstance(value.get("content"), dict) and isinstance(value["content"].get("parts"), list):
        return _gemini([value["content"]], where)  # a Gemini / ADK response
    if isinstance(value.get("candidates"), list):
        return _gemini([c["content"] for c in value["candidates"] if isinstance(c, dict) and c.get("content")], where)
    if isinstance(value.get("prompt"), str) and len(value) == 1:  # Vercel AI SDK
        return [Msg(role="user", content=value["prompt"])]
    if isinstance(value.get("output"), list) and value.get("object") == "response":
        return normalize_messages(value["output"], where, roleless)
    if isinstance(value.get("message"), dict):  # a gen_ai.choice / chat completion choice
        return normalize_messages([value["message"]], where, roleless)
    if isinstance(value.get("choices"), list):
        return normalize_messages([c.get("message") for c in value["choices"] if isinstance(c, dict)], where, roleless)
    if "role" in value or "type" in value:
        return normalize_messages([value], where, roleless)
    if "text" in value or "content" in value:
        return [Msg(role=roleless or "assistant", content=text_of(value.get("text", value.get("content"))))]
    raise ValueError(f"{where}: cannot read messages from an object with keys {sorted(value)[:8]}")


def _add_message(item: dict[str, Any], where: str, roleless: str | None, out: list[Msg]) -> None:
    """Append the messages of one item of a message list (`where` names it) to `out`."""
    if _responses_item(item, out):
        return
    if "toolCallId" in item:  # Vercel AI SDK tool calls / results
        if "toolName" in item and not any(k in item for k in ("output", "result")):
            _responses_item({"type": "function_call", "call_id": item["toolCallId"], "name": item["toolName"],
                             "arguments": item.get("input", item.get("args"))}, out)
        else:
            out.append(Msg("tool", _text(item.get("output", item.get("result"))), tool_call_id=item["toolCallId"]))
        return
    named = next((cid for m in out[::-1] if m.role == "assistant" for cid, n, _ in m.tool_calls
                  if n == item.get("role")), None) if item.get("role") not in _ROLES else None
    if named is not None:  # LangChain.js: a tool message whose role is the tool's name
        out.append(Msg("tool", _text(item.get("content")), tool_call_id=item.get("tool_call_id") or named))
        return
    if item.get("type") == "message" and "role" not in item:
        item = {**item, "role": roleless or "assistant"}
    role = roleless if roleless is not None and item.get("role") is None else _role(item.get("role"), where)
    if isinstance(item.get("parts"), list):
        _from_parts(role, item["parts"], out)
        return
    content = item.get("content")
    if isinstance(content, list):  # content blocks; Anthropic tool_use / tool_result blocks become calls / results
        blocks = [p for p in content if isinstance(p, dict) and p.get("type") in ("tool_use", "tool_result")]
        content = [p for p in content if not (isinstance(p, dict) and p.get("type") in ("tool_use", "tool_result"))]
        results = [Msg("tool", _text(b.get("content")), tool_call_id=b.get("tool_use_id"),
                       is_error=bool(b.get("is_error"))) for b in blocks if b["type"] == "tool_result"]
        item = {**item, "tool_calls": [*(item.get("tool_calls") or []),
                                       *({"id": b.get("id"), "name": b.get("name"), "arguments": b.get("input")}
                                         for b in blocks if b["type"] == "tool_use")]}
        if results and not content and not item["tool_calls"]:
            out.extend(results)
            return
        content = "".join(str(p.get("text", p.get("content", ""))) if isinstance(p, dict) else str(p)
                          for p in content if not (isinstance(p, dict) and p.get("type") in ("reasoning", "image")))
    msg = Msg(role=role, content=_text(content),
              tool_call_id=(item.get("tool_call_id") or item.get("id")) if role == "tool" else None)
    calls = maybe_json(item.get("tool_calls"))
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            msg.tool_calls.append(_call(call))
    out.append(msg)


def _indexed(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``prefix.N.rest`` attributes grouped by N: ``{N: {rest: value}}``."""
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix + "."):
            head, _, rest = key[len(prefix) + 1:].partition(".")
            if head.isdigit() and rest:
                groups.setdefault(int(head), {})[rest] = value
    return dict(sorted(groups.items()))


def _flat_messages(attrs: dict[str, Any], prefix: str, style: str, where: str) -> list[Msg]:
    """Flattened messages: OpenInference (``message.role``) or GenAI/OpenLLMetry (``role``) style."""
    out = []
    for n, fields in _indexed(attrs, prefix).items():
        if style == "oi":
            fields = {k[len("message."):]: v for k, v in fields.items() if k.startswith("message.")}
        texts = [fields.get("content")] if fields.get("content") is not None else \
            [v for _, v in sorted((int(k.split(".")[1]), v) for k, v in fields.items()
                                  if re.fullmatch(r"contents\.\d+\.message_content\.text", k))]
        calls = []
        for _, call in _indexed(fields, "tool_calls").items():
            call = {k.removeprefix("tool_call."): v for k, v in call.items()}
            calls.append((call.get("id"), str(call.get("function.name") or call.get("name") or "unknown"),
                          parse_arguments(call.get("function.arguments", call.get("arguments")))))
        role = _role(fields.get("role"), f"{where}, {prefix}.{n}")
        out.append(Msg(role=role, content="".join(_text(t) for t in texts),
                       tool_calls=calls, tool_call_id=fields.get("tool_call_id") if role == "tool" else None))
    return out


_EVENT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def _event_messages(events: list[tuple[str, dict[str, Any]]], where: str) -> tuple[list[Msg], list[Msg]]:
    inputs, outputs = [], []
    for name, ev in events:
        if name == "gen_ai.content.prompt" and "gen_ai.prompt" in ev:  # semconv 1.26
            inputs.extend(normalize_messages(ev["gen_ai.prompt"], f"{where}, event {name}"))
        elif name == "gen_ai.content.completion" and "gen_ai.completion" in ev:
            outputs.extend(_as_output(normalize_messages(ev["gen_ai.completion"], f"{where}, event {name}")))
        elif name in _EVENT_ROLES or name == "gen_ai.choice":
            body = maybe_json(ev.get("message")) if name == "gen_ai.choice" and "message" in ev else ev
            body = dict(body) if isinstance(body, dict) else {"content": body}
            body["role"] = body.get("role") or _EVENT_ROLES.get(name, "assistant")
            target = outputs if name == "gen_ai.choice" else inputs
            target.extend(normalize_messages([body], f"{where}, event {name}"))
    return inputs, outputs


def _as_output(msgs: list[Msg]) -> list[Msg]:
    return [Msg("assistant", m.content, m.tool_calls) if m.role == "user" else m for m in msgs]


def llm_messages(attrs: dict[str, Any], events: list[tuple[str, dict[str, Any]]],
                 where: str) -> tuple[list[Msg], list[Msg]] | None:
    """``(input messages, output messages)`` of an LLM-call span, or None when it carries none."""
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        inputs = normalize_messages(attrs.get("gen_ai.input.messages"), f"{where}, gen_ai.input.messages")
        outputs = normalize_messages(attrs.get("gen_ai.output.messages"), f"{where}, gen_ai.output.messages")
        if attrs.get("gen_ai.system_instructions"):
            inputs.insert(0, Msg("system", _text(attrs["gen_ai.system_instructions"])))
        return inputs, _as_output(outputs)
    if "mlflow.spanInputs" in attrs or "mlflow.spanOutputs" in attrs:
        return (normalize_messages(maybe_json(attrs.get("mlflow.spanInputs")), f"{where}, mlflow.spanInputs"),
                _as_output(normalize_messages(maybe_json(attrs.get("mlflow.spanOutputs")),
                                              f"{where}, mlflow.spanOutputs")))
    if any(k.startswith("llm.input_messages.") or k.startswith("llm.output_messages.") for k in attrs):
        return (_flat_messages(attrs, "llm.input_messages", "oi", where),
                _as_output(_flat_messages(attrs, "llm.output_messages", "oi", where)))
    if any(k.startswith("gen_ai.prompt.") or k.startswith("gen_ai.completion.") for k in attrs):
        return (_flat_messages(attrs, "gen_ai.prompt", "genai", where),
                _as_output(_flat_messages(attrs, "gen_ai.completion", "genai", where)))
    if "gen_ai.prompt" in attrs or "gen_ai.completion" in attrs:
        return (normalize_messages(attrs.get("gen_ai.prompt"), f"{where}, gen_ai.prompt"),
                _as_output(normalize_messages(attrs.get("gen_ai.completion"), f"{where}, gen_ai.completion")))
    inputs, outputs = _event_messages(events, where)
    if inputs or outputs:
        return inputs, outputs
    if attrs.get("gen_ai.operation.name") in ("call_llm", "chat", "text_completion", "generate_content") \
            and "gen_ai.output" in attrs:  # any-agent: tool calls / text in gen_ai.output
        out = maybe_json(attrs["gen_ai.output"])
        if isinstance(out, list) and all(isinstance(c, dict) and "tool.name" in c for c in out):
            calls: list[tuple[str | None, str, Any]] = [
                (None, str(c["tool.name"]), parse_arguments(c.get("tool.args"))) for c in out]
            return [], [Msg("assistant", tool_calls=calls)]
        return [], [Msg("assistant", _text(out))]
    return None


def span_kind(attrs: dict[str, Any], name: str, where: str) -> str:
    """``llm`` | ``tool`` | ``agent`` | ``evaluator`` | ``other`` for a span's attributes."""
    oi = attrs.get("openinference.span.kind")
    if oi is not None:
        if str(oi).upper() not in OPENINFERENCE_KINDS:
            raise ValueError(f"{where}: unknown openinference.span.kind {oi!r} "
                             f"(this loader reads {OPENINFERENCE_KINDS})")
        oi = str(oi).upper()
        return {"LLM": "llm", "TOOL": "tool", "AGENT": "agent", "CHAIN": "agent", "EVALUATOR": "evaluator",
                "GUARDRAIL": "evaluator"}.get(oi, "other")
    if "mlflow.spanType" in attrs:  # MLflow (values JSON-encoded)
        kind = str(maybe_json(attrs["mlflow.spanType"])).upper()
        return {"LLM": "llm", "CHAT_MODEL": "llm", "TOOL": "tool", "AGENT": "agent", "CHAIN": "agent",
                "EVALUATOR": "evaluator", "GUARDRAIL": "evaluator"}.get(kind, "other")
    op = attrs.get("gen_ai.operation.name")
    if op == "execute_tool" or "gen_ai.tool.call.id" in attrs and op is None:
        return "tool"
    if op in ("invoke_agent", "create_agent"):
        return "agent"
    if any(k.startswith(EVAL_PREFIXES) for k in attrs) and not any(k.startswith("gen_ai.input") for k in attrs):
        return "evaluator"
    prompted = any(k.startswith(("gen_ai.prompt", "llm.input_messages")) for k in attrs)
    return "llm" if op is not None or prompted else "other"


def tool_info(attrs: dict[str, Any], span_name: str = "unknown") -> tuple[str, str | None, Any, str | None]:
    """``(tool name, call id, arguments, result text)`` of a tool-execution span."""
    name = attrs.get("gen_ai.tool.name") or attrs.get("tool.name") or span_name
    call_id = attrs.get("gen_ai.tool.call.id") or attrs.get("tool_call.id")
    args = next((attrs[k] for k in ("gen_ai.tool.call.arguments", "gen_ai.tool.args", "input.value", "input",
                                          "mlflow.spanInputs")
                 if k in attrs), None)
    result = next((attrs[k] for k in ("gen_ai.tool.call.result", "gen_ai.output", "output.value", "output",
                                            "mlflow.spanOutputs")
                   if k in attrs), None)
    if result is not None and not isinstance(result, str):
        result = json.dumps(result, ensure_ascii=False)
    return str(name), call_id, parse_arguments(args), result


def io_values(attrs: dict[str, Any]) -> tuple[str | None, str | None]:
    """An agent/chain span's ``input.value`` / ``output.value`` (text), for traces without LLM messages."""
    if "mlflow.spanInputs" in attrs or "mlflow.spanOutputs" in attrs:
        inputs, outputs = (None if attrs.get(k) is None else _text(attrs[k])
                           for k in ("mlflow.spanInputs", "mlflow.spanOutputs"))
        return inputs, outputs
    return attrs.get("input.value"), attrs.get("output.value")


def hidden_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """Evaluator attributes of a span (never observable)."""
    return {k: v for k, v in attrs.items() if k.startswith(EVAL_PREFIXES)}
