"""A real `mlflow server` (SQLite backend) on 127.0.0.1 for tests that need MLflow over HTTP, and that can be
killed or paused while a test runs (import it after `pytest.importorskip("mlflow")`).

``mlflow server`` starts its web server as a child process, so the server runs in a process group of its
own: `MlflowServer.kill` ends the group (the port then refuses connections), `MlflowServer.pause` stops it
(SIGSTOP: the kernel still accepts connections, nothing answers them, as a hung server would).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    """A port nothing listens on now (the kernel picks it; closed again before it is returned)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """A running `mlflow server`: its `uri`, and its process group to kill or pause."""

    def __init__(self, process: subprocess.Popen, uri: str, log: Path):
        self.process, self.uri, self.log = process, uri, log

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def pause(self) -> None:
        """SIGSTOP the server: connections are still accepted by the kernel, and never answered."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """End the server and its workers; returns once the port refuses connections."""
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
        self.process.wait(timeout=60)
        port = int(self.uri.rsplit(":", 1)[1])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the workers die with the group; wait until none listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.uri} still accepts connections after the server was killed")


@contextmanager
def mlflow_server(root: Path, *, start_timeout: float = 180) -> Iterator[MlflowServer]:
    """Start `mlflow server` on a free 127.0.0.1 port with its store in `root`; kill it on exit."""
    port = free_port()
    log_path = root / "mlflow-server.log"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
    server = MlflowServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{server.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: {log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield server
    finally:
        server._signal(signal.SIGCONT)
        server._signal(signal.SIGKILL)
        process.wait(timeout=60)
