"""The OpenAI Batch API of `FakeOpenAI` (``/v1/files`` and ``/v1/batches``), for tests.

Each batch is processed in a background thread, line by line, through the fake server's own chat
reply logic (its responder and faults, `FakeOpenAI.reply_for`), so a poll sees ``validating``, then
``in_progress``, then ``completed`` (``line_delay`` seconds per line). Faults:
  - ``line_errors``: custom ids answered in the error file instead of the output file;
  - a responder reply with an HTTP status (e.g. ``"http_500"``): an output line with that status_code;
  - ``batch_fault="failed"``: the batch fails validation as a whole (status ``failed``);
  - ``batch_fault="expired"``: it expires after ``expire_after`` lines (the rest go to the error file
    with code ``batch_expired``), status ``expired``.
``batches_created`` counts creations (a resumed client must not create a second batch).
"""

from __future__ import annotations

import json
import threading
import time
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, Iterable, Protocol

# A route's answer: the HTTP status and its payload (JSON as a dict, or raw bytes).
Reply = tuple[int, dict[str, Any] | bytes]


class ChatReplier(Protocol):
    """The server whose chat replies a batch replays (`testing.fake_server.FakeOpenAI`): its reply logic and
    the event set when it stops (a structural type: the server imports this module, not the other way)."""

    _stopping: threading.Event

    def reply_for(self, url: str, body: dict[str, Any]) -> Reply: ...


class FakeBatches:
    def __init__(self, fake: ChatReplier, line_delay: float = 0.02, line_errors: Iterable[str] = (),
                 batch_fault: str | None = None,
                 expire_after: int = 1):
        self.fake = fake
        self.line_delay = line_delay
        self.line_errors = set(line_errors)
        self.batch_fault = batch_fault
        self.expire_after = expire_after
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.batches_created = 0
        self.lock = threading.RLock()

    # -- routes: (method, path, headers, raw body) -> (status, payload: dict | bytes) --------------
    def handle(self, method: str, path: str, headers: Message, raw: bytes) -> Reply:
        parts = [p for p in path.split("?")[0].strip("/").split("/") if p]
        if parts and parts[0] == "v1":
            parts = parts[1:]
        if parts[:1] == ["files"]:
            if method == "POST" and len(parts) == 1:
                return self.upload(headers, raw)
            if method == "GET" and len(parts) == 3 and parts[2] == "content" and parts[1] in self.files:
                return 200, self.files[parts[1]]
            if method == "GET" and len(parts) == 2 and parts[1] in self.files:
                return 200, self.file_object(parts[1])
        if parts[:1] == ["batches"]:
            if method == "POST" and len(parts) == 1:
                return self.create(json.loads(raw or b"{}"))
            batch = self.batches.get(parts[1]) if len(parts) > 1 else None
            if batch is not None and method == "GET" and len(parts) == 2:
                with self.lock:
                    return 200, dict(batch)
            if batch is not None and method == "POST" and parts[2:] == ["cancel"]:
                with self.lock:
                    if batch["status"] in ("validating", "in_progress"):
                        batch["status"] = "cancelling"
                    return 200, dict(batch)
        return 404, {"error": {"message": f"no route {method} {path}"}}

    def file_object(self, file_id: str) -> dict[str, Any]:
        return {"id": file_id, "object": "file", "bytes": len(self.files[file_id]), "purpose": "batch",
                "created_at": int(time.time()), "filename": file_id}

    def upload(self, headers: Message, raw: bytes) -> Reply:
        content_type = headers.get("Content-Type", "")
        if not content_type.startswith("multipart/form-data"):
            return 400, {"error": {"message": "expected multipart/form-data"}}
        message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
        fields = {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
                  for part in message.iter_parts()}
        file = fields.get("file")
        if fields.get("purpose") != b"batch" or not isinstance(file, bytes):  # a leaf part decodes to bytes
            return 400, {"error": {"message": "need purpose=batch and a file"}}
        return 200, self.store(file)

    def store(self, data: bytes) -> dict[str, Any]:
        with self.lock:
            file_id = f"file-fake-{len(self.files)}"
            self.files[file_id] = data
        return self.file_object(file_id)

    def create(self, body: dict[str, Any]) -> Reply:
        if body.get("input_file_id") not in self.files or body.get("endpoint") != "/v1/chat/completions":
            return 400, {"error": {"message": "unknown input_file_id or unsupported endpoint"}}
        with self.lock:
            self.batches_created += 1
            batch_id = f"batch_fake_{self.batches_created}"
            lines = [json.loads(x) for x in self.files[body["input_file_id"]].splitlines() if x.strip()]
            self.batches[batch_id] = batch = {
                "id": batch_id, "object": "batch", "endpoint": body["endpoint"], "status": "validating",
                "input_file_id": body["input_file_id"], "completion_window": body.get("completion_window"),
                "created_at": int(time.time()), "output_file_id": None, "error_file_id": None, "errors": None,
                "metadata": body.get("metadata") or {},
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
        threading.Thread(target=self.process, args=(batch_id, lines), daemon=True).start()
        return 200, dict(batch)

    # -- processing -----------------------------------------------------------------------------
    def process(self, batch_id: str, lines: list[dict[str, Any]]) -> None:
        batch = self.batches[batch_id]
        time.sleep(self.line_delay)
        if self.batch_fault == "failed":
            with self.lock:
                batch["status"] = "failed"
                batch["errors"] = {"data": [{"code": "invalid_request", "message": "fake whole-batch failure"}]}
            return
        with self.lock:
            batch["status"] = "in_progress"
        output, errors = [], []
        for i, line in enumerate(lines):
            if self.fake._stopping.wait(self.line_delay):
                return
            with self.lock:
                cancelled = batch["status"] == "cancelling"
            custom_id = line["custom_id"]
            if cancelled or (self.batch_fault == "expired" and i >= self.expire_after):
                code = "batch_cancelled" if cancelled else "batch_expired"
                errors.append({"id": f"req_{i}", "custom_id": custom_id, "response": None,
                               "error": {"code": code, "message": f"fake: {code}"}})
                continue
            if custom_id in self.line_errors:
                errors.append({"id": f"req_{i}", "custom_id": custom_id, "response": None,
                               "error": {"code": "server_error", "message": "fake per-line error"}})
                with self.lock:
                    batch["request_counts"]["failed"] += 1
                continue
            status, body = self.fake.reply_for(line["url"], line["body"])
            output.append({"id": f"req_{i}", "custom_id": custom_id, "error": None,
                           "response": {"status_code": status, "request_id": f"req_{i}", "body": body}})
            with self.lock:
                batch["request_counts"]["completed" if status == 200 else "failed"] += 1
        with self.lock:
            if output:
                batch["output_file_id"] = self.store("\n".join(map(json.dumps, output)).encode() + b"\n")["id"]
            if errors:
                batch["error_file_id"] = self.store("\n".join(map(json.dumps, errors)).encode() + b"\n")["id"]
            batch["status"] = ("cancelled" if batch["status"] == "cancelling" else
                               "expired" if self.batch_fault == "expired" else "finalizing")
        if batch["status"] == "finalizing":
            time.sleep(self.line_delay)
            with self.lock:
                batch["status"] = "completed"
