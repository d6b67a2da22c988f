"""The project's one fake OpenAI-compatible chat-completions server, for tests and benchmarks.

    with FakeOpenAI(responder=lambda body, n: {"reason": "ok", "passed": True, "score": 0.9}) as fake:
        lm = make_lm(LMConfig(model=fake.model, api_base=fake.api_base))

It listens on 127.0.0.1 (a free port unless one is given). Endpoints: ``POST /v1/chat/completions``
and ``GET /v1/models`` (``/chat/completions``, ``/models`` and ``/health`` work too). Every chat request
is recorded (`fake.requests`: ``n``, ``path``, ``headers``, the parsed ``body``, the reply's status),
so tests can assert on exactly what went over the wire; `record=False` keeps no log (benchmarks).
Usage tokens served are summed in `fake.usage`.

A responder ``(body: dict, n: int) -> reply`` scripts each request (`n` counts chat requests from 0).
A reply is one of:
  - a dict: a verdict, sent as the JSON message content (e.g. ``{"reason": .., "passed": .., "score": ..}``);
  - a str that is not a fault name: sent verbatim as the message content;
  - a `Reply`: full control (content, HTTP status, delay, dropped connection, finish reason);
  - a fault name (`FAULTS`): ``"timeout"`` (hang `hang_seconds` before answering), ``"http_500"``,
    ``"http_503"``, ``"http_400"``, ``"http_429"``, ``"garbage"`` (200 with non-JSON content),
    ``"truncated"`` (200 with a verdict cut mid-JSON and finish reason ``length``, as a server does
    at ``max_tokens``), ``"drop"`` (close the connection without a response),
    ``"http_429_retry_after"`` / ``"http_503_retry_after"`` (the status with a ``Retry-After`` header:
    `retry_after`, delay-seconds or an HTTP-date; default ``"2"``), ``"html_200"`` (HTTP 200 with an HTML
    page, ``Content-Type: text/html``, instead of a JSON completion: a proxy's login or error page).
``delay`` adds a fixed sleep before every reply; ``die_after=N`` shuts the server down after N chat
requests (later requests are refused: a server dying mid-batch).

The OpenAI Batch API (``/v1/files``, ``/v1/batches``) is served by `fake_batches.FakeBatches`
(`fake.batch_api`; options and faults via ``batch_options``), its lines answered by `reply_for`.

Everything is bounded in time: hangs wake up when the server stops, handler threads are daemons,
and `stop()` joins with a timeout. ``keep_alive=False`` (default) answers one request per connection,
so a stopped server refuses new ones at once; benchmarks use ``keep_alive=True`` (HTTP/1.1).
Standalone: ``python -m evals.fake_server --port 8000``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

FAULTS = ("timeout", "http_500", "http_503", "http_400", "http_429", "garbage", "truncated", "drop",
          "http_429_retry_after", "http_503_retry_after", "html_200")
DEFAULT_VERDICT = {"reason": "The tool results show the task was completed.", "passed": True, "score": 0.9}
TRUNCATED_CONTENT = '{"reason": "The agent called book_reservation and the tool returned an err'
HTML_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body><h1>Sign in to continue</h1>"
             b"<form method=\"post\"><input name=\"user\"></form></body></html>\n")


class _Server(ThreadingHTTPServer):
    """A listen backlog for hundreds of clients connecting at once. The standard library's is 5: with 32
    simultaneous connects, some were reset (httpx ReadError), a transport error a real server does not give."""

    request_queue_size = 1024


@dataclass
class Reply:
    """One scripted response. `content` is a str (sent verbatim) or a dict (sent as JSON)."""

    content: Any = None
    status: int = 200
    delay: float = 0.0
    drop: bool = False
    finish_reason: str = "stop"
    retry_after: str | None = None  # sent as the Retry-After header of an error status
    page: bytes | None = None  # sent as the whole response body (text/html) instead of a completion


def fault_reply(name: str, hang_seconds: float, retry_after: str = "2") -> Reply:
    if name.endswith("_retry_after"):
        return Reply(status=int(name[5:8]), retry_after=retry_after)
    if name == "timeout":
        return Reply(content=DEFAULT_VERDICT, delay=hang_seconds)
    if name == "garbage":
        return Reply(content="I think it went fine, probably. <no json here>")
    if name == "truncated":
        return Reply(content=TRUNCATED_CONTENT, finish_reason="length")
    if name == "drop":
        return Reply(drop=True)
    if name == "html_200":
        return Reply(page=HTML_PAGE)
    if name.startswith("http_"):
        return Reply(status=int(name[5:]))
    raise ValueError(f"unknown fault {name!r}; expected a verdict dict, a Reply, or one of {FAULTS}")


def user_text(body: dict[str, Any]) -> str:
    """The content of the last user message of a chat request (where DSPy puts the trajectory)."""
    users = [m.get("content") for m in body.get("messages", []) if m.get("role") == "user"]
    last = users[-1] if users else ""
    return last if isinstance(last, str) else json.dumps(last)


def system_text(body: dict[str, Any]) -> str:
    """The system message of a chat request (where DSPy puts the rubric)."""
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "system")


def estimate_tokens(text: str) -> int:
    """A rough token count of `text` (4 characters per token, at least 1), reported as usage."""
    return max(1, len(text) // 4)


class FakeOpenAI:
    def __init__(self, responder: Callable[[dict[str, Any], int], Any] | None = None, *, model: str = "fake-judge",
                 delay: float = 0.0, die_after: int | None = None, hang_seconds: float = 5.0,
                 host: str = "127.0.0.1", port: int = 0, record: bool = True, keep_alive: bool = False,
                 batch_options: dict[str, Any] | None = None, retry_after: str = "2"):
        from rubricforge_dspy.testing.fake_batches import FakeBatches

        self.responder = responder or (lambda body, n: DEFAULT_VERDICT)
        self.model = model
        self.delay = delay
        self.die_after = die_after
        self.hang_seconds = hang_seconds
        self.retry_after = retry_after
        self.record = record
        self.requests: list[dict[str, Any]] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self.faults: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._count = 0
        self._server = _Server((host, port), _handler_for(self, keep_alive))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.batch_api = FakeBatches(self, **(batch_options or {}))

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/v1"

    @property
    def n_requests(self) -> int:
        with self._lock:
            return self._count

    @property
    def chat_bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests received, in arrival order."""
        with self._lock:
            return [r["body"] for r in self.requests]

    def start(self) -> "FakeOpenAI":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving and close the listening socket (new connections are refused)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout)
        self._server.server_close()

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling -----------------------------------------------------------------
    def _next(self, path: str, headers: dict[str, Any], body: dict[str, Any],
              raw: bytes | None = None) -> tuple[int, Reply]:
        with self._lock:
            n = self._count
            self._count += 1
        scripted: Any  # what the responder returned: a Reply, a fault name, or content
        if self.die_after is not None and n >= self.die_after:
            scripted = Reply(drop=True)  # dead: racing requests get no answer either
        else:
            scripted = self.responder(body, n)
        if isinstance(scripted, str) and scripted in FAULTS:
            with self._lock:
                self.faults[scripted] = self.faults.get(scripted, 0) + 1
            reply = fault_reply(scripted, self.hang_seconds, self.retry_after)
        elif isinstance(scripted, Reply):
            reply = scripted
        else:
            reply = Reply(content=scripted)
        if self.record:
            with self._lock:
                self.requests.append({"n": n, "path": path, "headers": headers, "body": body, "raw": raw,
                                      "status": reply.status, "drop": reply.drop})
        return n, reply

    def reply_for(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) the chat endpoint answers for `body`, with no delay (a Batch API line);
        a dropped or hung reply becomes HTTP 500."""
        n, reply = self._next(path, {}, body)
        try:
            if reply.drop:
                return 500, {"error": {"message": "fake fault: dropped", "type": "fake_fault", "code": 500}}
            if reply.status != 200 or reply.page is not None:  # (a batch line is JSON: a page becomes its error)
                status = 500 if reply.page is not None else reply.status
                return status, {"error": {"message": f"fake fault: HTTP {status}", "type": "fake_fault",
                                          "code": status}}
            content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
            return 200, self._completion(body, content, reply.finish_reason)
        finally:
            self._after(n)

    def _after(self, n: int) -> None:
        if self.die_after is not None and n + 1 >= self.die_after and not self._stopping.is_set():
            threading.Thread(target=self.stop, daemon=True).start()

    def _completion(self, body: dict[str, Any], content: str, finish_reason: str) -> dict[str, Any]:
        prompt = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        usage = {"prompt_tokens": estimate_tokens(prompt), "completion_tokens": estimate_tokens(content)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        with self._lock:
            self.usage["prompt_tokens"] += usage["prompt_tokens"]
            self.usage["completion_tokens"] += usage["completion_tokens"]
        return {
            "id": f"chatcmpl-fake-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason}],
            "usage": usage,
        }


def _handler_for(fake: FakeOpenAI, keep_alive: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so a stopped server refuses new ones at once.
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
        disable_nagle_algorithm = True
        wbufsize = -1  # headers and body leave in one write

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, payload: Any, headers: dict[str, Any] | None = None,
                  content_type: str | None = None) -> None:
            binary = isinstance(payload, bytes)
            data = payload if binary else json.dumps(payload).encode("utf-8")
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type or ("application/octet-stream" if binary
                                                              else "application/json"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _batch_route(self, method: str, raw: bytes = b"") -> bool:
            path = self.path.split("?")[0].rstrip("/")
            if not any(path.startswith(p) for p in ("/v1/files", "/v1/batches", "/files", "/batches")):
                return False
            self._send(*fake.batch_api.handle(method, path, self.headers, raw))
            return True

        def do_GET(self) -> None:  # noqa: N802
            if self._batch_route("GET"):
                return
            if self.path.rstrip("/") in ("/v1/models", "/models", "/health"):
                self._send(200, {"object": "list", "data": [{"id": fake.model, "object": "model",
                                                             "owned_by": "fake"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) or b"{}"
            if self._batch_route("POST", raw):
                return
            if self.path.split("?")[0].rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                self._send(400, {"error": {"message": "request body is not JSON"}})
                return
            n, reply = fake._next(self.path, dict(self.headers), body, raw)
            try:
                wait = fake.delay + reply.delay
                if wait and fake._stopping.wait(wait):
                    self.close_connection = True  # stopped while hanging: drop the request
                    return
                if reply.drop:
                    self.close_connection = True
                    return
                if reply.status != 200:
                    self._send(reply.status, {"error": {"message": f"fake fault: HTTP {reply.status}",
                                                        "type": "fake_fault", "code": reply.status}},
                               {"Retry-After": reply.retry_after} if reply.retry_after is not None else None)
                    return
                if reply.page is not None:
                    self._send(200, reply.page, content_type="text/html; charset=utf-8")
                    return
                content = reply.content
                if not isinstance(content, str):
                    content = json.dumps(content)
                self._send(200, fake._completion(body, content, reply.finish_reason))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout): nothing to do
            finally:
                fake._after(n)

    return Handler
