"""Time rubricforge_dspy.metrics.binary_summary with 10^4 bootstrap resamples.

Simulates the report's workload: 5 judges scored on the same 200 items, one
binary_summary per judge (accuracy CI from 10_000 percentile-bootstrap resamples),
plus the paired McNemar comparisons of every judge against the first.

    PYTHONPATH=/work/main python evals/bench_report_metrics.py [--items 200] [--judges 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rubricforge_dspy import metrics as M


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--judges", type=int, default=5)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    y_true = (rng.random(args.items) < 0.3).astype(int)
    judges = []
    for _ in range(args.judges):
        flip = rng.random(args.items) < rng.uniform(0.15, 0.35)
        y_pred = np.where(flip, 1 - y_true, y_true)
        scores = np.clip(0.6 * y_pred + 0.4 * rng.random(args.items), 0, 1)
        abstained = rng.random(args.items) < 0.05
        judges.append((y_pred, scores, abstained))

    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        rows = [
            M.binary_summary(y_true, p, scores=s, abstained=a, n_resamples=args.resamples, seed=0)
            for p, s, a in judges
        ]
        pairs = [M.compare_paired(y_true, judges[0][0], p) for p, _, _ in judges[1:]]
        times.append(time.perf_counter() - t0)

    print(f"{args.judges} judges x {args.items} items, {args.resamples} bootstrap resamples each")
    for i, r in enumerate(rows):
        print(f"  judge {i}: acc {r['accuracy']:.3f} [{r['accuracy_ci_low']:.3f}, {r['accuracy_ci_high']:.3f}]"
              f"  kappa {r['kappa']:.3f}  auc {r['auc']:.3f}  false-pass {r['false_pass_rate']:.3f}")
    for i, c in enumerate(pairs, start=1):
        print(f"  judge 0 vs {i}: b={c['b']} c={c['c']} p={c['p_value']:.3g} {c['mark']}")
    print(f"total time: best {min(times):.3f} s, mean {np.mean(times):.3f} s over {args.repeats} runs")


if __name__ == "__main__":
    main()
