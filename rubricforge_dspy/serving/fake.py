"""A zero-latency fake OpenAI-compatible server, for tests and for measuring framework overhead.

`FakeOpenAIServer` listens on 127.0.0.1 (a free port), answers `GET /v1/models` and
`POST /v1/chat/completions` at once with a fixed judge verdict, and records every request it
received (path, headers, JSON body) so tests can assert on exactly what went over the wire.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

DEFAULT_REPLY = '{"reason": "The tool results show the booking succeeded.", "passed": true, "score": 0.9}'

Reply = Callable[[dict[str, Any]], "str | tuple[int, dict[str, Any]]"]


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms Nagle/delayed-ACK stall between headers and body
    wbufsize = -1  # headers and body leave in one write, flushed after each request

    def log_message(self, format, *args):  # noqa: A002 - silence the default stderr access log
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server naming
        self.server.owner._record("GET", self.path, dict(self.headers), None)
        if self.path.rstrip("/") in ("/v1/models", "/health"):
            self._send(200, {"object": "list", "data": [{"id": self.server.owner.model_name, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        owner = self.server.owner
        owner._record("POST", self.path, dict(self.headers), body)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        answer = owner.reply(body)
        if isinstance(answer, tuple):
            self._send(*answer)
            return
        self._send(200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
            "model": body.get("model", owner.model_name),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                      "prompt_tokens_details": {"cached_tokens": 80}},
        })


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "FakeOpenAIServer"


class FakeOpenAIServer:
    """Context manager: a recording, instantly-answering OpenAI-compatible server.

    `reply(body)` returns the assistant text, or `(status, json)` for an error response.
    """

    def __init__(self, reply: Reply | None = None, model_name: str = "fake-model", record: bool = True):
        self.reply = reply or (lambda body: DEFAULT_REPLY)
        self.model_name = model_name
        self.record = record
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _record(self, method: str, path: str, headers: dict, body: dict | None) -> None:
        if self.record:
            with self._lock:
                self.requests.append({"method": method, "path": path, "headers": headers, "json": body})

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r["json"] for r in self.requests if r["method"] == "POST"]

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/v1"

    def start(self) -> "FakeOpenAIServer":
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m rubricforge_dspy.serving.fake --port N``: serve until killed (no request log kept),
    so a benchmark can measure its client's CPU time apart from the server's."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(record=False)
    server._server = _Server(("127.0.0.1", args.port), _Handler)
    server._server.owner = server
    server._server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
