"""Which default beta (max_false_pass) and false-pass rate the per-stage bound uses, measured (issue 39 item 1).

floor -> hybrid(judge) -> person at alpha 0.2, delta 0.1, method ordered_sequence ordered on the fit split, per-stage
bound, beta = alpha or alpha / 2 over the failed items decided, beta = alpha over the passes (`learn_then_test`'s
``false_pass``), and the pooled bound for reference, on the hybrid sets `evals/bench_cascade.py`
part (d) uses, 5 by-task 40/40/20 splits each (its `hybrid_stage`, `judged_seed`, `pooled`). The judge is the
simulator's (simulated-7b-judge@sim1, evals/simulator), written as verdict lines and read back as a recorded stage.
Machine: the 2-core VM. Output: evals/results/cascade_false_pass_default.json.

    PYTHONPATH=. python -m evals.measure_false_pass_default [--sets NAME ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from evals.bench_cascade import (
    DELTA,
    HYBRID_SETS,
    SIM_MODEL,
    SPLIT,
    datasets,
    hybrid_stage,
    judged_seed,
    machine,
    pooled,
    record_verdicts,
)
from rubricforge_dspy.metrics.bounds import RATIO_STAKE_CAP
from rubricforge_dspy.trust.cascade import CascadeCalibrationError, fit_cascade

ALPHA, SEEDS = 0.2, 5
# (bound, beta, false-pass rate): the rate over the failed items decided (the default) at alpha and alpha / 2, the
# share of the passes that are failures at alpha (the alternative; docs/CASCADE.md), and the pooled bound
VARIANTS = (("per_stage", ALPHA, "among_failed"), ("per_stage", ALPHA / 2, "among_failed"),
            ("per_stage", ALPHA, "among_passes"), ("pooled", None, "among_failed"))
OUT = Path(__file__).resolve().parent / "results" / "cascade_false_pass_default.json"


def run(data: dict) -> list[dict]:
    items = data["items"]
    task_of = np.unique([f"{t.domain}/{t.task_id}" for t in items], return_inverse=True)[1]
    n_tasks = int(task_of.max()) + 1
    runs: dict[tuple, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        judge = record_verdicts(items, Path(folder) / "judge.verdicts.jsonl")
        for seed in range(SEEDS):
            tasks = np.random.default_rng(seed).permutation(n_tasks)
            cut1, cut2 = int(round(SPLIT[0] * n_tasks)), int(round((SPLIT[0] + SPLIT[1]) * n_tasks))
            fit_items, cal_items, test_items = ([items[i] for i in np.flatnonzero(np.isin(task_of, part))]
                                                for part in (tasks[:cut1], tasks[cut1:cut2], tasks[cut2:]))
            floor, hybrid = hybrid_stage(judge, fit_items)
            for bound, beta, rate in VARIANTS:
                try:
                    cascade = fit_cascade([floor, hybrid], cal_items, ALPHA, DELTA, beta, seed=seed, bound=bound,
                                          stage_costs=(0.0, 1.0), order_trajectories=fit_items, false_pass=rate)
                    result = judged_seed(cascade, judge, test_items, cascade.fit_report)
                except CascadeCalibrationError as error:
                    result = {**judged_seed(None, judge, test_items, None), "refusal": str(error)[:400]}
                runs[(bound, beta, rate)].append({"seed": seed, **result})
    return [{"bound": bound, "max_false_pass": beta, "false_pass_rate": rate if beta is not None else None,
             **pooled(seed_runs)} for (bound, beta, rate), seed_runs in runs.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="*", default=None)
    args = parser.parse_args()
    started = time.time()
    rows = []
    for data in datasets(shipped_only=True):
        if data["name"] in HYBRID_SETS and (not args.sets or data["name"] in args.sets):
            rows.append({"dataset": data["name"], "file": data["file"], "rows": run(data)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"alpha": ALPHA, "delta": DELTA, "seeds": SEEDS, "method": "ordered_sequence",
                               "order": "the fit split (floor out-of-fold, the hybrid's in-sample verdicts)",
                               "judge": f"simulated ({SIM_MODEL})", "machine": machine(),
                               "betting_stake_cap": RATIO_STAKE_CAP,
                               "seconds": round(time.time() - started, 1), "datasets": rows}, indent=1) + "\n")
    print(OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
