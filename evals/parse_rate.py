"""Parse rate of the judge on real trajectories: how many calls give a well-formed verdict.

    PYTHONPATH=. python evals/parse_rate.py                    # the embedded llama.cpp server
    PYTHONPATH=. python evals/parse_rate.py --api-base http://host:30000/v1 --model qwen2.5-7b@rev

Judges 50 bundled trajectories (a fixed, evenly spaced sample over the four evals/data files),
one at a time, with DSPy's response cache off, and prints a JSON summary: parse rate (non-abstained
verdicts / n), latency per trajectory, prompt sizes, and prompt-prefix cache reuse (from the
server's usage.cached_tokens when it reports them, else from llama_cpp.server's log).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import dspy

from rubricforge_dspy.cli.lm_options import add_lm_arguments, lm_config
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.serve import EmbeddedServer

MEASURED_RENDER = RenderConfig(max_tokens=1800, max_step_chars=700)

DATA = Path(__file__).resolve().parent / "data"
SAMPLE = [  # (file under evals/data, how many)
    ("tau_bench_official/gpt-4o-airline.json", 20),
    ("tau_bench_grok/tool-calling-grok-4-fast-reasoning-0.0_range_0--1_"
     "user-grok-4-fast-reasoning-llm_1129144541.json", 10),
    ("react_webshop/react_webshop_davinci002_500.jsonl", 10),
    ("adapt/ADaPT_maxd3_webshop_gpt-3.5-turbo.json", 10),
]


def sample_trajectories(total: int = 50):
    """A deterministic, evenly spaced sample over the bundled files, `total` in all, split in
    proportion to SAMPLE (remainders go to the first files)."""
    weights = [count for _, count in SAMPLE]
    quotas = [total * w // sum(weights) for w in weights]
    for i in range(total - sum(quotas)):
        quotas[i % len(quotas)] += 1
    chosen = []
    for (relative, _), k in zip(SAMPLE, quotas, strict=True):
        if k == 0:
            continue
        loaded = load_trajectories(DATA / relative)
        step = len(loaded) / k
        chosen += [loaded[int(i * step)] for i in range(k)]
    return chosen


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()}-core {platform.machine()} CPU, {platform.system()}, load avg {load:.1f} at start"


def run(config: LMConfig, trajectories, render: RenderConfig) -> dict:
    judge = TrajectoryJudge(render_config=render)
    lm = make_lm(replace(config, cache=False))
    rows = []
    with dspy.context(lm=lm):
        for trajectory in trajectories:
            start = time.perf_counter()
            verdict = judge(trajectory=trajectory)
            seconds = time.perf_counter() - start
            usage = lm.history[-1]["usage"] if lm.history and not verdict.abstained else {}
            details = usage.get("prompt_tokens_details") or {}
            rows.append({"id": trajectory.id, "seconds": round(seconds, 3), "abstained": verdict.abstained,
                         "passed": verdict.passed, "score": verdict.score, "error": verdict.error,
                         "prompt_tokens": usage.get("prompt_tokens"),
                         "completion_tokens": usage.get("completion_tokens"),
                         "cached_tokens": details.get("cached_tokens")})
    latencies = [r["seconds"] for r in rows]
    prompts = [r["prompt_tokens"] for r in rows if r["prompt_tokens"]]
    cached = [r["cached_tokens"] for r in rows if r["cached_tokens"] is not None]
    return {
        "n": len(rows),
        "parsed": sum(not r["abstained"] for r in rows),
        "parse_rate": sum(not r["abstained"] for r in rows) / len(rows),
        "latency_s": {"mean": statistics.mean(latencies), "median": statistics.median(latencies),
                      "p90": sorted(latencies)[int(0.9 * (len(latencies) - 1))], "max": max(latencies),
                      "first": latencies[0]},
        "prompt_tokens": {"mean": statistics.mean(prompts), "max": max(prompts)} if prompts else None,
        "server_cached_tokens": sum(cached) if cached else None,
        "passed_fraction": sum(r["passed"] for r in rows) / len(rows),
        "errors": sorted({(r["error"] or "")[:160] for r in rows if r["abstained"]}),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = add_lm_arguments(argparse.ArgumentParser(description=__doc__), reflection=False)
    parser.add_argument("-n", type=int, default=50)
    # The sizes evals/RESULTS.md's parse rates were measured with (before the presets; RenderConfig() is now
    # the server preset's, too long for the embedded model's context).
    parser.add_argument("--render-tokens", type=int, default=MEASURED_RENDER.max_tokens)
    parser.add_argument("--out", type=Path, default=None, help="also write the full JSON here")
    args = parser.parse_args(argv)
    config = lm_config(args)
    trajectories = sample_trajectories(args.n)
    render = RenderConfig(max_tokens=args.render_tokens, max_step_chars=MEASURED_RENDER.max_step_chars)
    header = {"machine": machine(), "python": sys.version.split()[0], "render_tokens": render.max_tokens}
    if config.is_embedded:
        server = EmbeddedServer()
        with server as endpoint:
            header["lm"] = endpoint.describe()
            header["server_startup_s"] = round(server.server.startup_seconds, 2)
            result = run(server.lm_config(config), trajectories, render)
            result["llama_cpp_prefix_cache"] = server.cache_stats()
    else:
        header["lm"] = config.describe()
        result = run(config, trajectories, render)
    summary = {**header, **result, "load_avg_at_end": round(os.getloadavg()[0], 1)}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
