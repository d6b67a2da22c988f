"""Time the report on a synthetic run: 5 judges x 200 items, 10^4 bootstrap resamples.

Writes a synthetic run directory (predictions for induced, geval, fewshot, heuristic, majority;
a 6-criterion leave-one-out ablation; a sweep) into a temporary directory, then times

- ``load_run``                        (read + validate the JSONL files),
- ``compute_report``                  (every number: bootstraps, McNemar, strata, ...),
- ``render_markdown``,
- ``write_figures``                   (the four PNGs, separately),

and the full ``write_report`` (all of the above plus writing the files). Target: the full
report under 2 s on a 2-core CPU.

    PYTHONPATH=/work/main python evals/bench_report.py [--items 200] [--graded] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

JUDGES = ["induced", "geval", "fewshot", "heuristic", "majority"]
FLIPS = {"induced": (0.10, 0.15), "geval": (0.45, 0.05), "fewshot": (0.30, 0.20), "heuristic": (0.35, 0.30)}


def write_synthetic_run(root: Path, n: int, graded: bool, n_criteria: int = 6, seed: int = 0) -> Path:
    from rubricforge_dspy.core.rubric import SEED_RUBRIC, parse_criteria

    rng = np.random.default_rng(seed)
    criteria = parse_criteria(SEED_RUBRIC)[:n_criteria]
    reward = rng.random(n).round(3) if graded else (rng.random(n) < 0.35).astype(float)
    label = (reward >= 0.5).astype(int)
    items = [{"id": f"bench-{i:04d}", "task_id": f"t{i // 3}", "domain": ["airline", "retail", "telecom"][i % 3],
              "agent": f"agent-{i % 4}", "n_steps": int(rng.integers(3, 60)), "label": int(label[i]),
              "reward": float(reward[i])} for i in range(n)]

    def lines(ff: float, fp: float, abstain: float = 0.03) -> list[dict]:
        out = []
        for it in items:
            truth = it["label"] == 1
            passed = bool(rng.random() >= fp) if truth else bool(rng.random() < ff)
            score = float(np.clip((0.5 + 0.5 * rng.random()) if passed else 0.49 * rng.random(), 0, 1))
            abst = bool(rng.random() < abstain)
            c = criteria[int(rng.integers(len(criteria)))]
            out.append({**it, "passed": passed and not abst, "score": 0.0 if abst else score,
                        "reason": "" if abst else f"{c.name} {'holds' if passed else 'is violated'}.",
                        "abstained": abst, "error": "TimeoutError" if abst else None})
        return out

    def dump(path: Path, rows: list[dict]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(rows[k]) + "\n" for k in rng.permutation(len(rows))))

    for judge in JUDGES:
        rows = lines(*FLIPS[judge]) if judge in FLIPS else [
            {**it, "passed": False, "score": 0.0, "reason": "majority: fail", "abstained": False, "error": None}
            for it in items]
        dump(root / "predictions" / f"{judge}.jsonl", rows)
    for c in criteria:
        dump(root / "ablation" / f"{c.number}_{c.name.lower().replace(' ', '-')}.jsonl", lines(0.15, 0.15))
    (root / "ablation" / "criteria.json").write_text(json.dumps([{"number": c.number, "name": c.name}
                                                                  for c in criteria]))
    sweep = [{"candidate": k, "parents": [k - 1] if k else [], "val_score": round(0.6 + 0.03 * k, 3),
              "val_agreement": round(0.6 + 0.028 * k, 3), "discovered_at_metric_call": 25 * k,
              "rubric_sha256": f"{k:064x}", "rubric_chars": 2000 + 50 * k} for k in range(8)]
    (root / "run.json").write_text(json.dumps({
        "lm": "bench/judge", "reflection_lm": "bench/reflector", "dataset": "bench", "induced": "induced",
        "judges": JUDGES, "graded": graded, "rubric": SEED_RUBRIC, "sweep": sweep,
        "split": {"test": {"trajectories": n, "positives": int(label.sum())}}}))
    return root


CPU: dict[str, list[float]] = {}


def _timed(fn, repeats: int, name: str = ""):
    """Wall times of ``repeats`` calls; CPU time of this process recorded under ``name`` (a fairer
    number when other jobs share the cores)."""
    times, result = [], None
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        CPU.setdefault(name, []).append(time.process_time() - c0)
    return result, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--graded", action="store_true", help="graded rewards (adds the ranking/calibration table)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    t0 = time.perf_counter()
    from rubricforge_dspy.report import compute_report, load_run, render_markdown, write_report
    from rubricforge_dspy.report.figures import write_figures
    import_s = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp:
        root = write_synthetic_run(Path(tmp) / "RUN", args.items, args.graded)
        run, t_load = _timed(lambda: load_run(root), args.repeats, "load_run")
        report, t_compute = _timed(lambda: compute_report(run, n_resamples=args.resamples), args.repeats,
                                   "compute_report")
        _, t_render = _timed(lambda: render_markdown(report), args.repeats, "render_markdown")
        _, t_fig = _timed(lambda: write_figures(run, report, Path(tmp) / "figs"), args.repeats,
                          "write_figures (4 PNGs)")
        _, t_full = _timed(lambda: write_report(root, Path(tmp) / "out" / "report.md",
                                                n_resamples=args.resamples), args.repeats,
                          "write_report, full (with figures)")
        _, t_nofig = _timed(lambda: write_report(root, Path(tmp) / "out2" / "report.md", figures=False,
                                                 n_resamples=args.resamples), args.repeats,
                             "write_report, no figures")

    def fmt(name: str, ts: list[float]) -> str:
        cpu = CPU.get(name)
        if cpu is None and name.startswith("compute_report +"):
            cpu = [a + b for a, b in zip(CPU["compute_report"], CPU["render_markdown"], strict=True)]
        return (f"  {name:<36} wall best {min(ts):6.3f} s  mean {statistics.mean(ts):6.3f} s  first {ts[0]:6.3f} s"
                f"   | CPU best {min(cpu):6.3f} s")

    print(f"{len(JUDGES)} judges x {args.items} items, {args.resamples} bootstrap resamples, "
          f"{'graded' if args.graded else 'binary'} rewards, 6-criterion ablation, 8-row sweep; "
          f"{args.repeats} repeats")
    print(f"  {'import report + figures':<36} {import_s:7.3f} s (once)")
    print(fmt("load_run", t_load))
    print(fmt("compute_report", t_compute))
    print(fmt("render_markdown", t_render))
    print(fmt("compute_report + render_markdown", [a + b for a, b in zip(t_compute, t_render, strict=True)]))
    print(fmt("write_figures (4 PNGs)", t_fig))
    print(fmt("write_report, no figures", t_nofig))
    print(fmt("write_report, full (with figures)", t_full))
    target = min(t_full)
    print(f"target < 2 s for the full report: {'met' if target < 2.0 else 'NOT met'} ({target:.3f} s best wall)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
