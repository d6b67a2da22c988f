"""``python -m evals.simulator``: run the SIMULATED judge server until SIGINT/SIGTERM.

Prints the endpoint on stdout (``SIMULATED judge server ... api_base=http://host:port/v1``) and, with
``--stats-out``, writes the scheduler's counters as JSON when it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from evals.simulator.model import GpuModel
from evals.simulator.server import DEFAULT_MODEL_NAME, FaultPlan, SimServer


def build_parser() -> argparse.ArgumentParser:
    defaults = GpuModel()
    p = argparse.ArgumentParser(prog="python -m evals.simulator", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port")
    p.add_argument("--speedup", type=float, default=10.0,
                   help="real time = modelled GPU time / speedup (default 10)")
    p.add_argument("--workers", type=int, default=1, help="simulated GPU workers behind one router")
    p.add_argument("--policy", choices=("round_robin", "cache_aware"), default="round_robin")
    p.add_argument("--max-running", type=int, default=defaults.max_running)
    p.add_argument("--step-fixed-ms", type=float, default=defaults.step_fixed_s * 1000)
    p.add_argument("--per-running-ms", type=float, default=defaults.per_running_s * 1000)
    p.add_argument("--prefill-tokens-per-s", type=float, default=1 / defaults.prefill_per_token_s)
    p.add_argument("--prefill-chunk", type=int, default=defaults.prefill_chunk)
    p.add_argument("--kv-tokens", type=int, default=defaults.kv_capacity_tokens)
    p.add_argument("--model-name", default=DEFAULT_MODEL_NAME)
    p.add_argument("--faults", default="", help="e.g. garbage=0.05,truncated=0.02,http_500=0.05,stall=0.01")
    p.add_argument("--die-after", type=int, default=None, help="drop every request after the first N and stop")
    p.add_argument("--stall-seconds", type=float, default=30.0, help="how long a stalled request hangs (0: forever)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    p.add_argument("--stats-out", default=None, help="write the counters here (JSON) when stopping")
    return p


def model_from_args(args) -> GpuModel:
    return GpuModel(max_running=args.max_running, step_fixed_s=args.step_fixed_ms / 1000,
                    per_running_s=args.per_running_ms / 1000, prefill_per_token_s=1 / args.prefill_tokens_per_s,
                    prefill_chunk=args.prefill_chunk, kv_capacity_tokens=args.kv_tokens)


async def _main(args) -> int:
    server = SimServer(model_from_args(args), speedup=args.speedup, workers=args.workers, policy=args.policy,
                       faults=FaultPlan.parse(args.faults, die_after=args.die_after, stall_s=args.stall_seconds,
                                              seed=args.seed),
                       host=args.host, port=args.port, model_name=args.model_name)
    await server.serve()
    print(f"SIMULATED judge server (evals/simulator, not a real model): api_base={server.api_base} "
          f"model={server.model_name} workers={args.workers} policy={args.policy} speedup={args.speedup}",
          flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    died = False
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
        except asyncio.TimeoutError:
            pass
        if server._dead and not died:
            died = True
            print("simulated server: died after", args.die_after, "requests (fault injection)", flush=True)
    if args.stats_out:
        Path(args.stats_out).write_text(json.dumps(server.stats(), indent=2) + "\n")
    await server.shutdown()
    return 0


def main(argv=None) -> int:
    return asyncio.run(_main(build_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
