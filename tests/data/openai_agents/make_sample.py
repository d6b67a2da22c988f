"""Write ``traces.jsonl``: two runs of a real OpenAI Agents SDK agent, as the SDK exports them.

Run from the repository root, in an environment with the SDK (it is not a dependency of this project):

    python3 -m venv /tmp/agents-venv && /tmp/agents-venv/bin/pip install openai-agents==0.24.0
    /tmp/agents-venv/bin/python tests/data/openai_agents/make_sample.py

A triage agent hands off to a booking agent, which calls the ``book_flight`` tool and answers. The model is
a small scripted OpenAI-compatible chat completions server on 127.0.0.1 started by this script (no network,
no API key): run 1 books the flight; in run 2 the tool raises and the agent claims success anyway. The SDK's
tracing is pointed at a processor that writes each exported item, ``Trace.export()`` when a trace starts
and ``Span.export()`` when a span ends (what the SDK's ``BatchTraceProcessor`` hands to its exporter), as one
JSON line; ids and timestamps are the SDK's own.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from agents import (Agent, OpenAIChatCompletionsModel, RunConfig, Runner, TracingProcessor, function_tool,
                    set_trace_processors, trace)
from openai import AsyncOpenAI

OUT = Path(__file__).with_name("traces.jsonl")
MODEL = "scripted-chat-model"


def _reply(body: dict) -> dict:
    """The scripted model: hand off, call book_flight with the flight in the user's request, then answer."""
    messages = body["messages"]
    tools = {t["function"]["name"] for t in body.get("tools") or []}
    last = messages[-1]
    user = next(m["content"] for m in messages if m["role"] == "user")
    flight = re.search(r"HAT\d+", user).group(0)
    called = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    if "transfer_to_booking_agent" in tools:
        call = {"name": "transfer_to_booking_agent", "arguments": "{}"}
    elif last["role"] == "tool" and called.get(last.get("tool_call_id")) == "book_flight":
        failed = "error" in str(last["content"]).lower()
        text = "Your flight is booked!" if failed else f"Booked {flight}: {last['content']}."
        return {"role": "assistant", "content": text}
    else:
        call = {"name": "book_flight", "arguments": json.dumps({"flight": flight})}
    n = sum(m["role"] == "tool" for m in messages)
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"call_{flight}_{n}", "type": "function", "function": call}]}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        message = _reply(body)
        payload = json.dumps({
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


class JsonLinesExporter(TracingProcessor):
    """Each trace (at its start) and span (at its end) as one JSON line of its ``export()``."""

    def __init__(self, path: Path):
        self.handle = open(path, "w", encoding="utf-8")

    def _write(self, item) -> None:
        exported = item.export()
        if exported:
            self.handle.write(json.dumps(exported, ensure_ascii=False) + "\n")

    def on_trace_start(self, trace) -> None:
        self._write(trace)

    def on_trace_end(self, trace) -> None:
        pass

    def on_span_start(self, span) -> None:
        pass

    def on_span_end(self, span) -> None:
        self._write(span)

    def shutdown(self) -> None:
        self.handle.close()

    def force_flush(self) -> None:
        self.handle.flush()


@function_tool
def book_flight(flight: str) -> str:
    """Book a seat on a flight and return the confirmation number."""
    if flight == "HAT999":
        raise RuntimeError("payment declined: card expired")
    return f"confirmation R{flight[3:]}"


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="not-used")
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    booking = Agent(name="Booking agent", instructions="Book the flight the user asks for with book_flight.",
                    tools=[book_flight], model=model)
    triage = Agent(name="Triage agent", instructions="Hand flight bookings to the booking agent.",
                   handoffs=[booking], model=model)
    exporter = JsonLinesExporter(OUT)
    set_trace_processors([exporter])
    try:
        for request in ("Please book flight HAT101 for me.", "Please book flight HAT999 for me."):
            with trace("Flight booking"):
                Runner.run_sync(triage, request, run_config=RunConfig(tracing_disabled=False))
    finally:
        exporter.shutdown()
        server.shutdown()
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
