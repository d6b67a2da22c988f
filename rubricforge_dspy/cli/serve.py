"""``rubricforge serve``: launch an SGLang (GPU) server or router, or the embedded llama.cpp judge
server, and print its endpoint until Ctrl-C or SIGTERM.

`rubricforge_dspy.cli.main` registers it in `build_parser`.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import threading
from typing import TYPE_CHECKING

from rubricforge_dspy.core.errors import InputError

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["cmd_serve"]


def cmd_serve(args: argparse.Namespace) -> int:
    """Launch a judge server and print its endpoint; Ctrl-C (or SIGTERM) stops it."""
    import time

    from rubricforge_dspy.serve import launch_server, sglang_launch_command, sglang_router_command

    if args.engine == "embedded":
        return _serve_embedded(args)
    port = args.port or 30000
    if args.router_workers:
        cmd = sglang_router_command(args.router_workers, host=args.host, port=port)
    else:
        if not args.model:
            raise InputError("--model (HF id or path) is required with --engine sglang")
        cmd = sglang_launch_command(args.model, host=args.host, port=port, tp=args.tp, dp=args.dp,
                                    revision=args.revision, served_model_name=args.served_model_name)
    print(shlex.join(cmd))
    if args.dry_run:  # print the launch command only: nothing is started
        return 0
    with launch_server(cmd, f"http://{args.host}:{port}/health", timeout=args.health_timeout) as server:
        print(f"endpoint: http://{args.host}:{port}/v1  (export RUBRICFORGE_API_BASE=http://{args.host}:{port}/v1)",
              flush=True)
        while server.running:
            time.sleep(1.0)
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _serve_embedded(args: argparse.Namespace) -> int:
    """`rubricforge serve` (embedded): run the embedded judge server until Ctrl-C or SIGTERM, printing its endpoint."""
    import time

    from rubricforge_dspy.serve import EmbeddedServer

    server = EmbeddedServer(**({"n_ctx": args.n_ctx} if args.n_ctx else {}), n_threads=args.threads, port=args.port)
    if args.dry_run:  # print the launch command only: nothing is started
        print(shlex.join(server.launch_command()))
        return 0
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the server like Ctrl-C
    with server as config:
        print(f"embedded judge LM: {config.describe()}")
        print(f"export RUBRICFORGE_API_BASE={config.api_base}")
        print(f"export RUBRICFORGE_MODEL={config.model}")
        print(f"export RUBRICFORGE_STRUCTURED_OUTPUT={config.structured_output}")
        print("Ctrl-C stops the server.", flush=True)
        try:
            while server.server is not None and server.server.running:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return 0
