"""Induction over HTTP against the SIMULATED GPU judge server (evals/simulator).

    PYTHONPATH=. python -m evals.bench_induce_http [--dataset airline] [--speedup 10]

Runs ``rubricforge induce --preset server`` (budget 200, minibatch 4, 32 GEPA threads, 8k-token renders)
as a subprocess against a fresh simulator process, for judge and reflection alike, then checks:
- a candidate was accepted (the frozen rubric is not the seed) and validation agreement beat the seed's;
- the frozen program, reloaded with `rubricforge_dspy.judge.loading.load`, reproduces its validation verdicts:
  the validation split is judged again through HTTP and the agreement / false-pass rate / abstentions
  recorded in the program's manifest at freeze time must come out equal, and a second pass must give
  identical per-item verdicts.
Reports wall time and judge-call counts (GEPA's metric calls, the server's verdict and reflection
requests). Writes evals/results/induce_http_<dataset>.json. Not a test.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from evals.simulator import harness
from evals.simulator.server import DEFAULT_MODEL_NAME

DATASETS = {"airline": harness.SHIPPED[0], "retail": harness.SHIPPED[1]}
SWEEP = re.compile(r"candidate\s+(\d+)\s+val agreement ([\d.]+)\s+score ([\d.]+)\s+at call (\d+)( <- best)?")


def reload_check(program: Path, dataset: str, api_base: str) -> dict:
    import dspy

    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.data.split import split_by_task
    from rubricforge_dspy.induction.inducer import validation_metrics
    from rubricforge_dspy.judge.execution import judge_verdict
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.program.store import read_program

    path, threshold = DATASETS[dataset]
    trajectories = load_trajectories(path, label_threshold=threshold)
    val = split_by_task(trajectories, seed=0).val
    lm = make_lm(LMConfig(model=DEFAULT_MODEL_NAME, api_base=api_base))
    judge = load_judge(program, lm=lm, check_certificate=False)
    with dspy.context(lm=lm):
        first = [judge_verdict(judge, t) for t in val]
        second = [judge_verdict(judge, t) for t in val]
    recorded = read_program(program)["rubricforge"]["metrics"]
    again = validation_metrics(first, val)
    keys = ("val_agreement", "false_pass_rate", "val_abstained", "val_size")
    return {
        "val_items": len(val),
        "recorded_at_freeze": {k: recorded.get(k) for k in keys},
        "reloaded": {k: again.get(k) for k in keys},
        "metrics_reproduced": all(recorded.get(k) == again.get(k) for k in keys),
        "two_passes_identical": [v.to_dict() for v in first] == [v.to_dict() for v in second],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="airline")
    parser.add_argument("--speedup", type=float, default=10.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    out = Path(args.out or harness.ROOT / "evals" / "results" / f"induce_http_{args.dataset}.json")
    work = Path(tempfile.mkdtemp(prefix="bench-induce-"))
    program = work / "induced.json"
    data, threshold = DATASETS[args.dataset]
    sim = harness.start_simulator("--speedup", str(args.speedup))
    cmd = [sys.executable, "-m", "rubricforge_dspy.cli.main", "induce", "--data", str(data), "--out", str(program),
           "--label-threshold", str(threshold), "--api-base", sim.api_base, "--model", DEFAULT_MODEL_NAME,
           "--preset", "server", "--log-dir", str(work / "gepa")]
    load_before = harness.load_avg()
    with harness.ChildCPU() as cpu:
        run = harness.run_measured(cmd)
    server_after_induce = sim.stats()
    if run["returncode"] != 0:
        sim.stop()
        raise RuntimeError(f"rubricforge induce failed ({run['returncode']}): {run['stderr'][-3000:]}")
    check = reload_check(program, args.dataset, sim.api_base)
    server = sim.stop()

    from rubricforge_dspy.program.store import read_program

    manifest = read_program(program)["rubricforge"]
    induction = manifest.get("induction", {})
    sweep = [{"candidate": int(m[1]), "val_agreement": float(m[2]), "val_score": float(m[3]),
              "discovered_at_metric_call": int(m[4]), "best": bool(m[5])} for m in SWEEP.finditer(run["stdout"])]
    metrics = manifest.get("metrics", {})
    counts = server_after_induce["counts"]
    result = {
        "benchmark": "induction over HTTP (evals/bench_induce_http.py)", "lm": harness.LM_LABEL,
        "simulated": True, "machine": harness.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "dataset": f"{args.dataset}: {Path(data).relative_to(harness.ROOT)}",
        "command": " ".join(["rubricforge"] + cmd[3:]).replace(str(work), "WORK").replace(str(harness.ROOT) + "/", ""),
        "speedup": args.speedup, "wall_s": run["wall_s"], "client_cpu_s": round(cpu.total, 2),
        "load_avg_before": load_before, "load_avg_after": harness.load_avg(),
        "accepted_candidates": max(0, len(sweep) - 1), "best_candidate": induction.get("best_candidate"),
        "beat_seed": induction.get("beat_seed"),
        "seed_val_agreement": metrics.get("seed_val_agreement"), "frozen_val_agreement": metrics.get("val_agreement"),
        "frozen_val_false_pass_rate": metrics.get("false_pass_rate"),
        "gepa_metric_calls": induction.get("metric_calls"), "paper_judge_calls": 208,
        "server_requests_during_induce": {"verdict": counts["verdict"], "reflection": counts["reflection"],
                                          "other": counts["other"], "total": counts["requests"]},
        "server_requests_note": "verdict requests = GEPA's metric calls + the freeze-time validation pass + "
                                "the certification of the test split",
        "lm_errors": induction.get("lm_errors"), "rejected_memorized": induction.get("rejected_memorized"),
        "reflection_failures": induction.get("reflection_failures"),
        "sweep": sweep, "frozen_rubric": manifest.get("rubric"), "reload_check": check,
        "certificate": (manifest.get("certificate") or {}).get("false_pass"),
        "modelled_gpu_busy_s": round(sum(e["busy_s"] for e in server["engines"]), 2),
        "server_cpu_s": server["server_cpu_s"], "server_lag": server["lag"],
        "stderr_tail": run["stderr"][-1500:],
    }
    harness.write_json(out, result)
    print(f"accepted {result['accepted_candidates']} candidate(s); val agreement {result['seed_val_agreement']} -> "
          f"{result['frozen_val_agreement']}; reload reproduces: {check['metrics_reproduced']}; "
          f"{run['wall_s']:.0f} s; wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
