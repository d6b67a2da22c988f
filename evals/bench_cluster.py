"""Scaling past one machine, measured by SIMULATION: N simulated SGLang workers behind a router.

    PYTHONPATH=. python -m evals.bench_cluster [--n 2000] [--workers 1 2 4 8] [--http]

The exact request bodies of ``rubricforge judge --preset server`` on the shipped data (repeated to
`--n` distinct ids, each repeat tagged so that its prompt differs after the rubric) run through the
performance model (evals/simulator/model.py) in virtual time:
- the limit of N workers (every request queued at once), per routing policy: ``round_robin`` and
  ``cache_aware`` (sglang-router's policy: prefix match above a threshold, else the smallest tree,
  shortest queue when loads are imbalanced; the current SGLang gateway defaults: cache_threshold 0.3,
  balance_abs_threshold 64, balance_rel_threshold 1.5);
- the client concurrency that keeps them busy: throughput of a closed loop with C requests in flight,
  for C = 8 ... 2048, and the smallest C reaching 0.90 of the N-worker limit;
- two workloads: one rubric (a `judge` batch), and 8 rubrics mixed at random (e.g. criterion ablations
  run together), where a prompt goes decides whether its rubric is cached;
- cost per 10,000 judgments at the limit, from modelled GPU-hours and stated $/GPU-hour assumptions.
With `--http`, also a real-time check: the simulator with 2 workers (each policy) and `rubricforge judge`
at concurrency 128 over HTTP, against the model's prediction for the same setting.
Writes evals/results/cluster.json. Times are modelled GPU seconds (virtual), not this machine's.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

from evals.simulator import harness
from evals.simulator.model import GpuModel, SimRequest, estimate_tokens, run_all_queued, run_closed_loop
from evals.simulator.server import DEFAULT_MODEL_NAME, answer, prompt_text

PRICES = {"H100 80GB, $2.50/GPU-hour (assumption)": 2.50, "H100 80GB, $4.00/GPU-hour (assumption)": 4.00,
          "A100-class price, $1.50/GPU-hour (assumption; the model's speeds are H100's)": 1.50}
CONCURRENCIES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def prompts_of(bodies: list[dict]) -> list[tuple[str, int]]:
    return [(prompt_text(b), estimate_tokens(answer(b)[1])) for b in bodies]


def with_rubrics(bodies: list[dict], k: int) -> list[dict]:
    """The bodies with their instruction varied over `k` rubrics, mixed: request i gets a seeded-random one
    (not i % k, which round-robin routing over k workers would turn into one rubric per worker)."""
    import random

    rng = random.Random(0)
    out = []
    marker = "your objective is:"
    for body in bodies:
        body = copy.deepcopy(body)
        system = body["messages"][0]
        at = system["content"].find(marker)
        at = at + len(marker) if at >= 0 else 0
        system["content"] = system["content"][:at] + f" [rubric variant {rng.randrange(k)}]" + system["content"][at:]
        out.append(body)
    return out


def distinct_copies(bodies: list[dict], n_distinct: int) -> list[dict]:
    """The bodies with each repeated copy of a trajectory made distinct (a ``[copy K]`` tag at the start of the
    episode), so that across several workers' caches a repeat is not a free cache hit: real batches hold
    distinct episodes, which share only the rubric."""
    out = []
    for i, body in enumerate(bodies):
        copy_index = i // n_distinct
        if copy_index:
            body = copy.deepcopy(body)
            user = body["messages"][-1]
            user["content"] = user["content"].replace("[[ ## trajectory ## ]]\n",
                                                      f"[[ ## trajectory ## ]]\n[copy {copy_index}] ", 1)
        out.append(body)
    return out


def requests(prompts) -> list[SimRequest]:
    return [SimRequest.from_prompt(p, o) for p, o in prompts]


def sweep(prompts, model: GpuModel, workers: int, policy: str) -> dict:
    limit = run_all_queued(requests(prompts), model, workers, policy)
    rows, needed = [], None
    for c in CONCURRENCIES:
        run = run_closed_loop(requests(prompts), model, c, workers, policy)
        fraction = run.throughput / limit.throughput
        rows.append({"concurrency": c, "throughput_per_modelled_s": round(run.throughput, 3),
                     "fraction_of_limit": round(fraction, 4), "latency_p50_s": run.latency_p50_s})
        if needed is None and fraction >= 0.9:
            needed = c
    hit = sum(e["cached_tokens"] for e in limit.engines) / max(1, sum(e["prompt_tokens"] for e in limit.engines))
    gpu_hours = workers * 10_000 / limit.throughput / 3600
    return {
        "workers": workers, "policy": policy,
        "limit_per_modelled_s": round(limit.throughput, 3),
        "per_worker_per_modelled_s": round(limit.throughput / workers, 3),
        "prefix_cache_hit_rate": round(hit, 4), "router_decisions": (limit.router or {}).get("decisions"),
        "concurrency_for_90pct": needed, "closed_loop": rows,
        "gpu_hours_per_10k": round(gpu_hours, 4),
        "wall_hours_per_10k": round(10_000 / limit.throughput / 3600, 4),
        "usd_per_10k": {name: round(gpu_hours * price, 3) for name, price in PRICES.items()},
    }


def http_check(data: Path, prompts, model: GpuModel, speedup: float, concurrency: int = 128) -> list[dict]:
    from evals.bench_saturation import judge_run

    out = []
    predicted_limit = {}
    for policy in ("round_robin", "cache_aware"):
        predicted = run_closed_loop(requests(prompts), model, concurrency, 2, policy).throughput * speedup
        predicted_limit[policy] = run_all_queued(requests(prompts), model, 2, policy).throughput * speedup
        sim = harness.start_simulator("--speedup", str(speedup), "--workers", "2", "--policy", policy)
        row = judge_run(sim, data, data.with_name(f"verdicts-{policy}.jsonl"), concurrency)
        server = sim.stop()
        row.update({"workers": 2, "policy": policy, "speedup": speedup,
                    "model_prediction_per_s": round(predicted, 3),
                    "measured_over_predicted": round(row["throughput_per_s"] / predicted, 4),
                    "measured_over_model_limit": round(row["throughput_per_s"] / predicted_limit[policy], 4),
                    "per_worker_finished": [e["finished"] for e in server["engines"]],
                    "cache_hit_rate": [e["cache_hit_rate"] for e in server["engines"]],
                    "router_decisions": server["router"], "server_lag": server["lag"]})
        out.append(row)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--http", action="store_true", help="also run 2 workers over HTTP (a few minutes)")
    parser.add_argument("--http-n", type=int, default=1000)
    parser.add_argument("--speedup", type=float, default=4.0, help="speedup of the --http check")
    parser.add_argument("--out", default=str(harness.ROOT / "evals" / "results" / "cluster.json"))
    args = parser.parse_args(argv)
    started = time.time()
    model = GpuModel()
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    data = work / "trajectories.jsonl"
    dataset = harness.write_repeated(args.n, data)
    bodies = distinct_copies(harness.capture_bodies(data, DEFAULT_MODEL_NAME), dataset["distinct_shipped"])
    workloads = {"one rubric (a judge batch)": prompts_of(bodies),
                 "8 rubrics mixed at random": prompts_of(with_rubrics(bodies, 8))}
    results = {}
    for name, prompts in workloads.items():
        results[name] = [sweep(prompts, model, n, policy) for n in args.workers
                         for policy in (("round_robin",) if n == 1 else ("round_robin", "cache_aware"))]
        for row in results[name]:
            print(f"[cluster] {name}: {row['workers']} x {row['policy']}: {row['limit_per_modelled_s']:.2f} req/s, "
                  f"C90={row['concurrency_for_90pct']}, hit {row['prefix_cache_hit_rate']:.2f}", file=sys.stderr)
    http = None
    if args.http:
        small = work / "http.jsonl"
        harness.write_repeated(args.http_n, small)
        http = http_check(small, prompts_of(harness.capture_bodies(small, DEFAULT_MODEL_NAME)), model, args.speedup)
    dataset["copies_made_distinct"] = "each repeat's episode starts with a [copy K] tag (virtual runs only)"
    result = {
        "benchmark": "scaling past one machine (evals/bench_cluster.py)", "lm": harness.LM_LABEL, "simulated": True,
        "note": "virtual time: every throughput is per modelled GPU second, independent of this machine",
        "machine": harness.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu_model": model.to_dict(), "dataset": dataset,
        "router_defaults": {"cache_threshold": 0.3, "balance_abs_threshold": 64, "balance_rel_threshold": 1.5,
                            "source": "SGLang model gateway / vLLM router defaults as documented at "
                                      "https://docs.gpustack.ai/gpustack-operator/main/docs/modules/model-deployment/"
                                      "routing/ and lightseekorg/smg docs/getting-started/load-balancing.md (older "
                                      "sglang-router README: cache_threshold 0.5)"},
        "prices": PRICES, "workloads": results, "http_check": http,
        "wall_time_s": round(time.time() - started, 1),
    }
    harness.write_json(Path(args.out), result)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
