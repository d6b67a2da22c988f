"""Client saturation against the SIMULATED GPU judge server (evals/simulator): can `rubricforge judge`
keep a continuous-batching server busy?

    PYTHONPATH=. python -m evals.bench_saturation [--n 2000] [--concurrency 1 8 64 256] [--speedup 4]

1. The shipped trajectories (915 in 4 files) repeated with distinct ids to `--n`, as one JSONL file.
2. The limit: what the simulator sustains with an ideal client holding every request queued, both
   computed from the performance model in virtual time (`model.run_all_queued`, no HTTP) and measured
   by an asyncio client posting all `--n` bodies at once to a fresh server process.
3. For each concurrency: a fresh server process, then ``rubricforge judge --preset server --concurrency C
   --no-cache`` as a subprocess; its throughput (verdicts over the batch's own wall time, as the command
   prints it) as a fraction of the limit, and its CPU (user + sys of that process, interpreter start
   and imports included) per verdict. The model's own bound at that concurrency (a closed loop with a
   zero-cost client, virtual time) is given too: no client can beat it.
Writes one JSON (default evals/results/saturation.json). Not a test: numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from evals.simulator import harness
from evals.simulator.model import GpuModel, SimRequest, estimate_tokens, run_all_queued, run_closed_loop
from evals.simulator.server import DEFAULT_MODEL_NAME, answer, prompt_text

SUMMARY = re.compile(r"judged (\d+): passed (\d+), failed \d+, abstained (\d+)")
WALL = re.compile(r"([\d.]+)s, ([\d.]+) verdicts/s")


def sim_requests(bodies: list[dict]) -> list[SimRequest]:
    return [SimRequest.from_prompt(prompt_text(b), estimate_tokens(answer(b)[1])) for b in bodies]


def judge_run(sim: harness.SimProcess, data: Path, out: Path, concurrency: int) -> dict:
    cmd = [sys.executable, "-m", "rubricforge_dspy.cli.main", "judge", "--data", str(data), "--out", str(out),
           "--api-base", sim.api_base, "--model", DEFAULT_MODEL_NAME, "--preset", "server",
           "--concurrency", str(concurrency), "--no-cache"]
    load_before = harness.load_avg()
    with harness.ChildCPU() as cpu:
        result = harness.run_measured(cmd)
    if result["returncode"] != 0:
        raise RuntimeError(f"rubricforge judge failed ({result['returncode']}): {result['stderr'][-2000:]}")
    summary, wall = SUMMARY.search(result["stderr"]), WALL.search(result["stderr"])
    judged = int(summary[1])
    return {
        "command": " ".join(["rubricforge"] + cmd[3:]).replace(str(harness.ROOT) + "/", ""),
        "judged": judged, "passed": int(summary[2]), "abstained": int(summary[3]),
        "batch_wall_s": float(wall[1]), "throughput_per_s": float(wall[2]),
        "process_wall_s": result["wall_s"], "client_cpu_s": round(cpu.total, 3),
        "client_cpu_user_s": round(cpu.user, 3), "client_cpu_sys_s": round(cpu.sys, 3),
        "client_cpu_ms_per_verdict": round(1000 * cpu.total / judged, 3),
        "load_avg_before": load_before, "load_avg_after": harness.load_avg(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--speedup", type=float, default=4.0)
    parser.add_argument("--out", default=str(harness.ROOT / "evals" / "results" / "saturation.json"))
    args = parser.parse_args(argv)
    model = GpuModel()
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="bench-saturation-"))
    data = work / "trajectories.jsonl"
    dataset = harness.write_repeated(args.n, data)
    print(f"[saturation] {dataset['note']}; capturing request bodies", file=sys.stderr)
    bodies = harness.capture_bodies(data, DEFAULT_MODEL_NAME)
    requests = sim_requests(bodies)
    dataset["prompt_tokens_mean"] = round(sum(r.prompt_tokens for r in requests) / len(requests), 1)
    dataset["output_tokens_mean"] = round(sum(r.output_tokens for r in requests) / len(requests), 1)
    limit = run_all_queued(requests, model)
    limit_real = limit.throughput * args.speedup
    bounds = {c: run_closed_loop(sim_requests(bodies), model, c).throughput * args.speedup for c in args.concurrency}
    print(f"[saturation] model limit {limit_real:.1f} req/s real ({limit.throughput:.2f} per modelled s)",
          file=sys.stderr)

    sim = harness.start_simulator("--speedup", str(args.speedup))
    ideal = harness.ideal_client(sim.api_base, bodies)
    ideal["server"] = sim.stop()
    ideal["load_avg_after"] = harness.load_avg()
    print(f"[saturation] ideal client {ideal['throughput_per_s']:.1f} req/s", file=sys.stderr)

    runs = []
    for concurrency in args.concurrency:
        sim = harness.start_simulator("--speedup", str(args.speedup))
        row = judge_run(sim, data, work / f"verdicts-c{concurrency}.jsonl", concurrency)
        server = sim.stop()
        busy = sum(e["busy_s"] for e in server["engines"])
        row.update({
            "concurrency": concurrency,
            "fraction_of_model_limit": round(row["throughput_per_s"] / limit_real, 4),
            "fraction_of_measured_ideal": round(row["throughput_per_s"] / ideal["throughput_per_s"], 4),
            "model_bound_at_this_concurrency_per_s": round(bounds[concurrency], 3),
            "fraction_of_model_bound_at_this_concurrency": round(row["throughput_per_s"] / bounds[concurrency], 4),
            "simulated_gpu_busy_fraction": round(busy / (row["batch_wall_s"] * args.speedup), 4),
            "server_cpu_s": server["server_cpu_s"], "server_lag": server["lag"],
            "server_cache_hit_rate": server["engines"][0]["cache_hit_rate"],
            "server_max_running": server["engines"][0]["max_running"],
        })
        runs.append(row)
        print(f"[saturation] c={concurrency}: {row['throughput_per_s']:.2f} verdicts/s = "
              f"{row['fraction_of_model_limit']:.3f} of the model limit, {row['client_cpu_ms_per_verdict']:.2f} ms "
              f"client CPU per verdict", file=sys.stderr)

    result = {
        "benchmark": "client saturation (evals/bench_saturation.py)",
        "lm": harness.LM_LABEL, "simulated": True,
        "machine": harness.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "speedup": args.speedup,
        "speedup_note": f"real time = modelled GPU time / {args.speedup}: the client faces {args.speedup}x the "
                        "request rate of the modelled GPU",
        "gpu_model": model.to_dict(), "dataset": dataset,
        "limit": {"model_all_queued": {**limit.to_dict(), "throughput_real_per_s": round(limit_real, 3)},
                  "measured_ideal_client": ideal},
        "goal": ">= 0.90 of the limit at concurrency >= 64",
        "runs": runs, "wall_time_s": round(time.time() - started, 1),
    }
    harness.write_json(Path(args.out), result)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
