"""``python -m evals.paper --preset server`` end to end against the SIMULATED GPU judge server.

    PYTHONPATH=. python -m evals.bench_paper_sim [--speedup 10] [--tasks 0] [--budget 200]

Starts a simulator process, runs the paper protocol on every dataset (airline, retail, WebShop: all
trajectories by default, GEPA budget 200, concurrency 64, 32 GEPA threads, 8k-token renders) with the
simulator as judge and reflection LM, and records whether the command completed, how long each dataset
took (run.json), how many requests the server answered, and the main table rows (report.json). The
verdicts are the simulator's caricature (see evals/simulator/README.md): only completion, time and
call counts are meaningful. Writes evals/results/paper_sim.json and the run's SUMMARY.md beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from evals.simulator import harness
from evals.simulator.server import DEFAULT_MODEL_NAME

SIMULATED_HEADER = """\
> **SIMULATED, NOT A RESULT ABOUT ANY REAL JUDGE.** Written by `python -m evals.bench_paper_sim`: the judge and
> reflection LM were the simulated server of evals/simulator (a keyword caricature of a 7B judge), so these
> rows only show that `python -m evals.paper --preset server` completes on every dataset. The links point into
> the run directory, which is not committed. Times and call counts: evals/results/paper_sim.json.

"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speedup", type=float, default=10.0)
    parser.add_argument("--tasks", type=int, default=0, help="tasks per dataset (0: all trajectories)")
    parser.add_argument("--budget", type=int, default=None, help="GEPA budget (default: the server preset's 200)")
    parser.add_argument("--out", default=str(harness.ROOT / "evals" / "results" / "paper_sim.json"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-paper-"))
    sim = harness.start_simulator("--speedup", str(args.speedup))
    cmd = [sys.executable, "-m", "evals.paper", "--preset", "server", "--api-base", sim.api_base,
           "--model", DEFAULT_MODEL_NAME, "--tasks", str(args.tasks), "--out", str(work / "paper")]
    if args.budget is not None:
        cmd += ["--budget", str(args.budget)]
    load_before = harness.load_avg()
    with harness.ChildCPU() as cpu:
        run = harness.run_measured(cmd)
    server = sim.stop()
    datasets = {}
    for name in ("airline", "retail", "webshop"):
        run_json = work / "paper" / name / "run.json"
        report = work / "paper" / name / "report.json"
        if not run_json.exists():
            continue
        meta = json.loads(run_json.read_text())
        rows = json.loads(report.read_text()).get("main", []) if report.exists() else []
        datasets[name] = {
            "wall_time_s": meta.get("wall_time_s"), "dataset": meta.get("dataset"),
            "sizes": meta.get("sizes") or meta.get("split"),
            "main": [{k: r.get(k) for k in ("judge", "n", "accuracy", "false_pass_rate", "kappa", "abstained")}
                     for r in rows],
        }
    summary = work / "paper" / "SUMMARY.md"
    out = Path(args.out)
    if summary.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_name("paper_sim_SUMMARY.md").write_text(SIMULATED_HEADER + summary.read_text())
    counts = server["counts"]
    result = {
        "benchmark": "python -m evals.paper --preset server against the simulator (evals/bench_paper_sim.py)",
        "lm": harness.LM_LABEL, "simulated": True, "machine": harness.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python"] + cmd[1:]).replace(str(work), "WORK"), "speedup": args.speedup,
        "completed": run["returncode"] == 0, "returncode": run["returncode"],
        "wall_s": run["wall_s"], "client_cpu_s": round(cpu.total, 1),
        "modelled_wall_s": round(run["wall_s"] * args.speedup, 1),
        "modelled_gpu_busy_s": round(sum(e["busy_s"] for e in server["engines"]), 1),
        "load_avg_before": load_before, "load_avg_after": harness.load_avg(),
        "server_requests": counts, "server_faults": server["faults_injected"], "server_lag": server["lag"],
        "server_cpu_s": server["server_cpu_s"], "datasets": datasets,
        "note": "verdicts come from the simulator's keyword caricature; only completion, times and call counts mean "
                "anything here",
        "stderr_tail": run["stderr"][-2000:],
    }
    harness.write_json(out, result)
    print(f"completed={result['completed']} in {run['wall_s']:.0f} s; wrote {out}", file=sys.stderr)
    return 0 if result["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
