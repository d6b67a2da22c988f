"""`rubricforge report` on 10k / 100k / 1M verdict lines with continuous scores: wall, CPU, peak RSS.

For each size, a verdict JSONL is generated deterministically in a temporary directory (one judge;
ids ``s-0000000..``, four trials per task, three domains, four agents, ``n_steps``, a short reason,
3% abstentions, scores drawn from a continuous distribution so nearly every score is distinct; the
kind of file ``rubricforge judge --out`` writes), then

    python -m rubricforge_dspy report --predictions FILE --out OUT/report.md

runs as a child process (the report with its figures and the default 10^4 bootstrap resamples, the
CLI's settings). Wall time is measured around the child; CPU time (user + system) and peak RSS come
from ``os.wait4`` (the child's own ``getrusage``). Results go to ``evals/results/report_scale.json``
with the machine it ran on; a run that fails or produces no figures is recorded as such (and the
script exits 1).

    PYTHONPATH=$PWD python3 evals/bench_report_scale.py [--sizes 10000 100000 1000000] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 100_000


def write_verdicts(path: Path, n: int, seed: int = 0) -> dict:
    """``n`` verdict lines in a shuffled order, written in chunks (the generator holds one chunk)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    domains, agents = ("airline", "retail", "telecom"), ("agent-0", "agent-1", "agent-2", "agent-3")
    passed_total = 0
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, n, CHUNK):
            idx = perm[start:start + CHUNK]
            m = len(idx)
            label = (rng.random(m) < 0.4).astype(int)
            # the judge's score: informative (AUC ~0.8), continuous
            score = np.clip(rng.beta(2.0, 2.0, m) * 0.7 + 0.3 * label * rng.random(m), 0.0, 1.0).round(6)
            abstained = rng.random(m) < 0.03
            passed = (score >= 0.5) & ~abstained
            steps = rng.integers(3, 60, m)
            passed_total += int(passed.sum())
            lines = []
            for j, i in enumerate(idx.tolist()):
                a = bool(abstained[j])
                lines.append(json.dumps({
                    "id": f"s-{i:07d}", "task_id": f"t-{i // 4:06d}", "domain": domains[i % 3], "agent": agents[i % 4],
                    "n_steps": int(steps[j]), "label": int(label[j]), "reward": float(label[j]),
                    "passed": bool(passed[j]), "score": 0.0 if a else float(score[j]),
                    "reason": "" if a else f"Criterion {1 + i % 6} {'holds' if passed[j] else 'is violated'} at step "
                                           f"{1 + i % int(steps[j])}.",
                    "abstained": a, "error": "TimeoutError: judge timed out" if a else None,
                    "error_kind": "timeout" if a else None, "contradiction": False, "cached": False, "attempts": 1,
                    "model": "bench/judge"}))
            out.write("\n".join(lines) + "\n")
    return {"lines": n, "bytes": path.stat().st_size, "judged_pass": passed_total}


def run_report(predictions: Path, out_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "rubricforge_dspy", "report", "--predictions", str(predictions),
           "--out", str(out_dir / "report.md")]
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "stderr.txt").open("wb") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage (CPU, peak RSS)
        wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
    stderr = (out_dir / "stderr.txt").read_bytes()
    code = os.waitstatus_to_exitcode(status)
    figures = sorted(p.name for p in (out_dir / "figures").glob("*.png")) if (out_dir / "figures").is_dir() else []
    result = {"exit_code": code, "wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
              "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "figures": figures}
    if code != 0:
        result["stderr_tail"] = stderr.decode(errors="replace")[-2000:]
    else:
        report = json.loads((out_dir / "report.json").read_text())
        main = report["main"][0]
        result["numbers"] = {k: main[k] for k in ("n", "accuracy", "kappa", "kappa_ci_low", "kappa_ci_high", "auc",
                                                  "auc_ci_low", "auc_ci_high", "false_pass_rate", "bootstrap")}
        result["n_resamples"] = report["settings"]["n_resamples"]
    return result


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), None)
    return {"cpu": model, "cores": os.cpu_count(), "memory_mb": mem, "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform(), "load_average_at_start": os.getloadavg(),
            "note": "shared 2-core machine (other jobs running): CPU time is the fairer number than wall time"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "report_scale.json")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    results = {"benchmark": "rubricforge report, one verdict file, continuous scores, figures included",
               "commit": commit or None,
               "lm": "none (a report reads persisted verdicts; the verdict lines are generated, not judged)",
               "machine": machine(),
               "command": "python -m rubricforge_dspy report --predictions FILE --out DIR/report.md",
               "runs": []}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"verdicts_{n}.jsonl"
            t0 = time.perf_counter()
            data = write_verdicts(path, n)
            data["generate_s"] = round(time.perf_counter() - t0, 1)
            out_dir = Path(tmp) / f"report_{n}"
            run = {"lines": n, "input": data, **run_report(path, out_dir)}
            ok &= run["exit_code"] == 0 and len(run["figures"]) >= 4
            results["runs"].append(run)
            print(json.dumps(run), flush=True)
            path.unlink()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
