"""Serve the review page with uvicorn: 127.0.0.1 by default, a random free port unless one is given.

The socket is bound here (port 0 asks the kernel for a free one, with no race between choosing and
binding) and handed to uvicorn. Another address than the loopback is refused unless ``allow_remote`` is
given, and then served with a `ReviewExposedWarning`: the token is the only thing between the network
and the page, and the page is plain HTTP.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
import warnings
from typing import Callable

import uvicorn

from rubricforge_dspy.core.errors import InputError, RubricForgeWarning
from rubricforge_dspy.review.app import create_app
from rubricforge_dspy.review.security import COOKIE, new_token
from rubricforge_dspy.review.state import ReviewInputs, ReviewState

logger = logging.getLogger(__name__)

__all__ = ["ReviewServer", "ReviewExposedWarning", "serve", "DEFAULT_HOST"]

DEFAULT_HOST = "127.0.0.1"


class ReviewExposedWarning(RubricForgeWarning):
    """The review page listens on an address other machines may reach."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(uvicorn.Server):
    """uvicorn's server, which says when it accepts connections and then starts the review's background pass."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event, started: Callable[[], object]):
        super().__init__(config)
        self._ready, self._started = ready, started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self._started()
        self._ready.set()


class ReviewServer:
    """The review page on a socket of its own.

    Args:
        state: the open review (`ReviewState`); closed with the server.
        host: the address to listen on (default 127.0.0.1).
        port: the port; None or 0 for a free one.
        allow_remote: required to listen on anything but a loopback address.
        token: the run token (default: a fresh random one).

    Raises:
        InputError: a non-loopback `host` without `allow_remote`, or the address cannot be bound.
    """

    def __init__(self, state: ReviewState, host: str = DEFAULT_HOST, port: int | None = None, *,
                 allow_remote: bool = False, token: str | None = None):
        if not _loopback(host):
            if not allow_remote:
                raise InputError(f"refusing to serve the review page on {host}: only a loopback address "
                                 "(127.0.0.1) is served unless remote access is allowed explicitly "
                                 "(--allow-remote); the page holds your trajectories and writes your labels")
            warnings.warn(f"the review page listens on {host}: anyone who can reach it and learns the token can read "
                          "the trajectories and write labels; the connection is not encrypted",
                          ReviewExposedWarning, stacklevel=2)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port or 0))
        except OSError as error:
            self.sock.close()
            raise InputError(f"cannot listen on {host}:{port or 0}: {error.strerror}") from None
        self.host, self.port = host, self.sock.getsockname()[1]
        self.token = token or new_token()
        self.state = state
        shown = f"[{host}]" if ":" in host else host
        hosts = {f"{shown}:{self.port}"} | ({f"localhost:{self.port}"} if _loopback(host) else set())
        self.app = create_app(state, self.token, hosts, cookie=f"{COOKIE}_{self.port}")
        self.url = f"http://{shown}:{self.port}/?token={self.token}"
        self.ready = threading.Event()
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False)
        self.server = _Server(config, self.ready, state.start)
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C), then release the labels file."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.state.close()
            self.sock.close()

    def start(self, timeout: float = 30.0) -> str:
        """Serve in a background thread; returns the URL once uvicorn accepts connections."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])),
                                        name="review-server", daemon=True)
        self._thread.start()
        if not self.ready.wait(timeout):
            raise RuntimeError(f"the review server did not start within {timeout} s")
        return self.url

    def stop(self) -> None:
        """Stop a server started with `start` and release the labels file."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self.state.close()
        self.sock.close()


def serve(inputs: ReviewInputs, *, host: str = DEFAULT_HOST, port: int | None = None, allow_remote: bool = False,
          on_ready: Callable[[str], object] | None = None, on_label: Callable[..., object] | None = None,
          sink_name: str = "the label sink") -> ReviewState:
    """Open the review of `inputs` and serve it until interrupted (Ctrl-C).

    Args:
        inputs: what to review (`ReviewInputs`).
        host, port, allow_remote: where to listen (`ReviewServer`).
        on_ready: called with the URL to open (it holds the token) once the server accepts connections; the
            command line prints it. Without it, the URL is logged at INFO.
        on_label, sink_name: a callback given each line the page appends to the labels file, and what it sends
            to (`ReviewState`): ``rubricforge review --to-mlflow`` logs each label to MLflow with it.

    Returns:
        The closed `ReviewState` (its ``sink`` holds the callback's counts: sent, failed).
    """
    state = ReviewState(inputs, on_label=on_label, sink_name=sink_name)
    try:
        server = ReviewServer(state, host, port, allow_remote=allow_remote)
    except BaseException:
        state.close()
        raise

    def announce() -> None:
        if server.ready.wait():
            (on_ready or (lambda url: logger.info("review page: %s", url)))(server.url)

    threading.Thread(target=announce, name="review-announce", daemon=True).start()
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C is how the page is stopped (uvicorn re-raises the signal it caught)
        pass
    return state
