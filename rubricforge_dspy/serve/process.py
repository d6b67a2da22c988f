"""Start an OpenAI-compatible server as a child process, wait until it is healthy, stop it for sure.

Generic over servers: SGLang, the router, llama.cpp all answer ``GET /v1/models`` (or ``/health``)
once they are ready. The child's stdout and stderr go to a log file (never a pipe that could fill
up and stall the server), whose tail is quoted when the server fails to come up.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping, Sequence

from rubricforge_dspy.core.errors import ServerError

STOP_GRACE_SECONDS = 10.0


class ServerStartError(ServerError):
    """The server process exited or did not become healthy in time; the message quotes its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _log_tail(path: Path | None, lines: int = 25) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def probe(url: str, timeout: float = 2.0) -> bool:
    """True when GET `url` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 - local health URL
            return bool(reply.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def wait_for_health(url: str, timeout: float = 120.0, process: subprocess.Popen[bytes] | None = None,
                    interval: float = 0.25, log_path: Path | None = None) -> float:
    """Poll GET `url` until it answers 200; return the seconds waited.

    Raises `ServerStartError` when `process` exits first, or `TimeoutError` after `timeout` seconds.
    """
    start = time.monotonic()
    while True:
        if probe(url, timeout=min(2.0, max(interval, 0.5))):
            return time.monotonic() - start
        if process is not None and process.poll() is not None:
            raise ServerStartError(
                f"server exited with code {process.returncode} before {url} was healthy; log tail:\n"
                f"{_log_tail(log_path)}")
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{url} not healthy after {timeout:.0f}s; log tail:\n{_log_tail(log_path)}")
        time.sleep(interval)


class ServerProcess:
    """A running server: `.process`, `.health_url`, `.log_path`; `stop()` terminates, then kills.

    Usable as a context manager. A server still running when the interpreter exits is stopped too.
    """

    def __init__(self, process: subprocess.Popen[bytes], health_url: str, log_path: Path, owns_log: bool):
        self.process = process
        self.health_url = health_url
        self.log_path = log_path
        self._owns_log = owns_log
        self.startup_seconds: float | None = None
        atexit.register(self.stop)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """Terminate (SIGTERM), wait up to `grace` seconds, then kill. Returns the exit code."""
        atexit.unregister(self.stop)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=grace)
        return self.process.returncode

    def cleanup_log(self) -> None:
        if self._owns_log:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch_server(cmd: Sequence[str], health_url: str, timeout: float = 120.0,
                  env: Mapping[str, str] | None = None, log_path: str | Path | None = None,
                  cwd: str | Path | None = None) -> ServerProcess:
    """Start `cmd`, wait until GET `health_url` answers 200, and return the running `ServerProcess`.

    On any failure while waiting (exit, timeout, KeyboardInterrupt) the process is stopped before
    the error propagates.
    """
    owns_log = log_path is None
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix="rubricforge-server-", suffix=".log")
        os.close(handle)
        log_path = name
    log_path = Path(log_path)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=None if env is None else dict(env), cwd=cwd)
    server = ServerProcess(process, health_url, log_path, owns_log)
    try:
        server.startup_seconds = wait_for_health(health_url, timeout, process=process, log_path=log_path)
    except BaseException:
        server.stop()
        raise
    return server
