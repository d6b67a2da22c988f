"""Throughput of the judge against a bare HTTP client, and the framework's per-call CPU overhead.

    PYTHONPATH=. python evals/bench_throughput.py                  # the embedded llama.cpp server
    PYTHONPATH=. python evals/bench_throughput.py --api-base http://host:30000/v1 --model qwen2.5-7b@rev

1. Real server: the same trajectories through `TrajectoryJudge` (DSPy + JSONAdapter + our engine,
   threads, bounded concurrency) and through a bare httpx client posting the *identical* request
   bodies (captured from the judge by a recording fake server) at the same concurrency. Passes
   alternate (bare, judge, bare, judge, ...) so machine load drifts hit both; the ratio is
   judge trajectories/s over bare trajectories/s (goal >= 0.95).
2. Zero-latency fake server (a separate process, so only the client's CPU is counted): CPU seconds
   per call of the judge vs the bare client; the difference is the framework's overhead per call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import dspy
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parse_rate import machine, sample_trajectories  # noqa: E402

from rubricforge_dspy.cli.lm_options import add_lm_arguments, lm_config  # noqa: E402
from rubricforge_dspy.evidence.render import RenderConfig  # noqa: E402
from rubricforge_dspy.judge.module import TrajectoryJudge  # noqa: E402
from rubricforge_dspy.lm.config import LMConfig  # noqa: E402
from rubricforge_dspy.lm.engine import make_lm  # noqa: E402
from rubricforge_dspy.serve import EmbeddedServer, free_port, launch_server  # noqa: E402
from rubricforge_dspy.testing.fake_server import FakeOpenAI  # noqa: E402


def capture_bodies(config: LMConfig, judge: TrajectoryJudge, trajectories) -> list[dict]:
    """The exact JSON bodies the judge sends for `trajectories`, recorded by a fake server."""
    with FakeOpenAI() as fake:
        lm = make_lm(replace(config, api_base=fake.api_base, cache=False))
        with dspy.context(lm=lm):
            for trajectory in trajectories:
                judge(trajectory=trajectory)
        return fake.chat_bodies


def judge_pass(lm, judge, trajectories, concurrency: int) -> tuple[float, int]:
    def one(trajectory):
        with dspy.context(lm=lm):
            return judge(trajectory=trajectory)

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        verdicts = list(pool.map(one, trajectories))
    return time.perf_counter() - start, sum(not v.abstained for v in verdicts)


def bare_pass(client: httpx.Client, url: str, bodies: list[dict], concurrency: int) -> tuple[float, int]:
    def one(body):
        reply = client.post(url, json=body)
        reply.raise_for_status()
        return json.loads(reply.json()["choices"][0]["message"]["content"])

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        parsed = 0
        for future in [pool.submit(one, body) for body in bodies]:
            try:
                future.result()
                parsed += 1
            except (ValueError, KeyError, httpx.HTTPError):
                pass
    return time.perf_counter() - start, parsed


def throughput(config: LMConfig, trajectories, render: RenderConfig, concurrency: int, rounds: int) -> dict:
    judge = TrajectoryJudge(render_config=render)
    bodies = capture_bodies(config, judge, trajectories)
    lm = make_lm(replace(config, cache=False))
    url = f"{config.api_base}/chat/completions"
    passes = {"bare": [], "judge": []}
    with httpx.Client(timeout=config.timeout) as client:
        bare_pass(client, url, bodies[:1], 1)  # warm the server's prefix cache for both sides
        for _ in range(rounds):
            passes["bare"].append(bare_pass(client, url, bodies, concurrency))
            passes["judge"].append(judge_pass(lm, judge, trajectories, concurrency))
    n = len(trajectories)
    total = {side: sum(seconds for seconds, _ in runs) for side, runs in passes.items()}
    rate = {side: n * rounds / total[side] for side in total}
    return {
        "trajectories": n, "concurrency": concurrency, "rounds": rounds,
        "bare_traj_per_s": rate["bare"], "judge_traj_per_s": rate["judge"],
        "ratio_judge_over_bare": rate["judge"] / rate["bare"],
        "paired_ratios": [round(b / j, 3) for (b, _), (j, _) in zip(passes["bare"], passes["judge"], strict=True)],
        "per_round_s": {side: [round(s, 2) for s, _ in runs] for side, runs in passes.items()},
        "parsed_per_round": {side: [p for _, p in runs] for side, runs in passes.items()},
    }


def overhead(config: LMConfig, text: str, calls: int, warmup: int = 20) -> dict:
    """CPU seconds per call, judge vs bare client, against a fake server in another process."""
    port = free_port()
    server = launch_server([sys.executable, "-m", "evals.fake_server", "--port", str(port)],
                           f"http://127.0.0.1:{port}/v1/models", timeout=60, cwd=Path(__file__).resolve().parents[1])
    try:
        fake = replace(config, api_base=f"http://127.0.0.1:{port}/v1", cache=False)
        judge = TrajectoryJudge()
        lm = make_lm(fake)
        with dspy.context(lm=lm):
            for _ in range(warmup):
                judge(trajectory=text)
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(calls):
                verdict = judge(trajectory=text)
            judge_cpu, judge_wall = time.process_time() - cpu, time.perf_counter() - wall
        assert not verdict.abstained, verdict.error
        body = capture_bodies(fake, judge, [text])[0]
        with httpx.Client() as client:
            url = f"{fake.api_base}/chat/completions"
            for _ in range(warmup):
                client.post(url, json=body).json()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(calls):
                json.loads(client.post(url, json=body).json()["choices"][0]["message"]["content"])
            bare_cpu, bare_wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        server.stop()
        server.cleanup_log()
    ms = 1000.0 / calls
    return {"calls": calls, "judge_cpu_ms_per_call": judge_cpu * ms, "bare_cpu_ms_per_call": bare_cpu * ms,
            "framework_cpu_overhead_ms_per_call": (judge_cpu - bare_cpu) * ms,
            "judge_wall_ms_per_call": judge_wall * ms, "bare_wall_ms_per_call": bare_wall * ms}


def main(argv: list[str] | None = None) -> int:
    parser = add_lm_arguments(argparse.ArgumentParser(description=__doc__), reflection=False)
    parser.add_argument("-n", type=int, default=12, help="trajectories per pass")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--render-tokens", type=int, default=600)
    parser.add_argument("--overhead-calls", type=int, default=300)
    parser.add_argument("--skip-real", action="store_true", help="only the fake-server overhead measurement")
    args = parser.parse_args(argv)
    config = lm_config(args)
    trajectories = sample_trajectories(args.n)
    render = RenderConfig(max_tokens=args.render_tokens, max_step_chars=700)  # the step floor RESULTS.md measured with
    result = {"machine": machine(), "render_tokens": render.max_tokens}
    if not args.skip_real:
        if config.is_embedded:
            server = EmbeddedServer()
            with server as endpoint:
                result["lm"] = endpoint.describe()
                result["throughput"] = throughput(server.lm_config(config), trajectories, render,
                                                  args.concurrency, args.rounds)
        else:
            result["lm"] = config.describe()
            result["throughput"] = throughput(config, trajectories, render, args.concurrency, args.rounds)
    text = TrajectoryJudge(render_config=render).render(trajectories[0])
    endpoint = config if not config.is_embedded else LMConfig(model="fake-model@r0", api_base="http://unused/v1")
    result["overhead_vs_zero_latency_server"] = overhead(endpoint, text, args.overhead_calls)
    result["load_avg_at_end"] = round(__import__("os").getloadavg()[0], 1)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
