"""The certified cascade on every labeled set: validity where the truth is known, coverage, LM calls saved.

    PYTHONPATH=. python -m evals.bench_cascade            # writes evals/results/cascade.json
    PYTHONPATH=. python -m evals.bench_cascade --draws 200 --shipped-only   # quicker

(a) **Validity.** The whole labeled set is the population (one trial of a task drawn uniformly: each
item weighs ``1 / (tasks * trials of its task)``). The floor's confidences are its out-of-fold
probabilities (`trust.floor_cv.cross_validate`, task-grouped 5-fold), so they are fixed functions of
each trajectory, as the theorem assumes. Each draw takes as many tasks as the set has, with replacement,
one trial of each (the fit's unit), fits a floor-only cascade by Learn-then-Test
(`metrics.risk_control.learn_then_test`, exact binomial p-values; Holm over the 56-vector grid, and the
split fixed sequence: 30% of the units order the grid, the rest test it), and
computes the fitted cascade's *exact* disagreement D and false-pass rate F on the population. A draw
violates when a bounded risk exceeds its bound; the share of violating draws, with its exact 95%
Clopper-Pearson interval, must be at most delta (within the interval). A draw that certifies nothing
cannot violate (it decides nothing); the share of such draws is reported.

(b) **Coverage** of the floor-only cascade: the population share its fitted thresholds decide, averaged
over the draws (0 for a draw that certifies nothing), and the coverage of one fit on the whole set.

(c) **Floor -> judge against the simulator** (the judge's verdicts are *simulated*: `evals.simulator`,
`judging.verdict` with a rubric holding the simulator's five trigger criteria; the floor's are real):
20 task-grouped halves; each fits a floor -> judge cascade and a judge-only cascade at the same alpha and
delta on one half (one trial per task) and judges the other; at alpha 0.10 and 0.20 (where the simulated
judge alone is certifiable at all), with Holm and with the split fixed sequence. Reported per 1,000
trajectories: LM calls (the judge-only cascade calls the LM on every one), decided, escalated, and the
realized D and F on the judged half.

No real LM is called. Runtime: a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.metrics import cohens_kappa
from rubricforge_dspy.metrics.risk_control import cascade_outcomes, learn_then_test, threshold_grid
from rubricforge_dspy.trust.floor_cv import cross_validate

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "evals" / "results" / "cascade.json"
CONFIGS = ({"alpha": 0.05, "max_false_pass": None}, {"alpha": 0.10, "max_false_pass": None},
           {"alpha": 0.10, "max_false_pass": 0.05})
DELTA = 0.1
METHODS = ("holm", "split_fixed_sequence")
SIMULATED_ALPHAS = (0.10, 0.20)  # 0.20: where the simulated judge alone can be certified at all
SIMULATED_SETS = ("react-webshop-react-webshop-davinci002-500", "tau-bench-official-gpt-4o-airline")


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpus": os.cpu_count(), "cpu": cpu, "system": platform.system(), "python": platform.python_version(),
            "note": "a shared 2-core VM (other jobs may run)"}


def datasets(shipped_only: bool) -> list[dict]:
    """Every labeled set `evals.floor_table` runs (shipped files, and the shared raw sets when present)."""
    from evals.floor_table import GRADED, SHARED, candidates

    # the shared raw sets sit beside the repository (a worktree: beside the main checkout's parent)
    shared = next((p for p in (SHARED, ROOT.parents[1] / "shared" / "data" / "raw") if p.is_dir()), None)
    files, _ = candidates(None if shipped_only else shared)
    out = []
    for name, path, where in files:
        for threshold in ((0.0, 0.999) if path.parent.name in GRADED else (0.0,)):
            try:
                items = load_trajectories(path, label_threshold=threshold, on_error="skip")
            except (ValueError, OSError):
                break
            if not len(items) or any(t.label is None for t in items) or len({t.label for t in items}) < 2:
                break
            out.append({"name": name + ("" if threshold == 0.0 else "__reward-1"), "file": where,
                        "shipped": where.startswith("evals/data"), "items": list(items)})
    return out


def population(items) -> dict:
    tasks = [f"{t.domain}/{t.task_id}" for t in items]
    names, task_of = np.unique(tasks, return_inverse=True)
    trials = np.bincount(task_of)
    y = np.array([t.label for t in items], dtype=np.int64)
    cv = cross_validate(items)
    return {"y": y, "floor": cv.scores, "task_of": task_of, "members": [np.flatnonzero(task_of == k)
                                                                         for k in range(len(names))],
            "weight": 1.0 / (len(names) * trials[task_of]), "notes": cv.notes}


def population_risks(conf: np.ndarray, pop: dict, grid: np.ndarray) -> dict:
    """Exact population coverage, D and F of every vector of `grid` (task-uniform weights)."""
    decided, passed, _ = cascade_outcomes(conf, grid)
    y, w = pop["y"].astype(bool), pop["weight"]
    cover = decided @ w
    wrong = (decided & (passed != y)) @ w
    failed = (decided & ~y) @ w
    false_pass = (decided & passed & ~y) @ w
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"coverage": cover, "D": np.where(cover > 0, wrong / cover, 0.0),
                "F": np.where(failed > 0, false_pass / failed, 0.0)}


def draw_units(pop: dict, rng) -> np.ndarray:
    tasks = rng.integers(0, len(pop["members"]), size=len(pop["members"]))
    return np.array([rng.choice(pop["members"][k]) for k in tasks])


def cp(k: int, n: int) -> list[float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, "exact")
    return [round(ci.low, 4), round(ci.high, 4)]


def one_per_task(pop: dict, rng) -> np.ndarray:
    """One trial of each task: the calibration units a user's fit on the whole set takes."""
    return np.array([rng.choice(members) for members in pop["members"]])


def validity(pop: dict, draws: int, seed: int, method: str) -> list[dict]:
    grid = threshold_grid(1)
    risks = population_risks(pop["floor"][None, :], pop, grid)
    index = {tuple(v.ravel()): i for i, v in enumerate(grid)}
    rows = []
    for config in CONFIGS:
        rng = np.random.default_rng(seed)
        bad = certified = 0
        coverage = []
        for draw in range(draws):
            units = draw_units(pop, rng)
            result = learn_then_test(pop["floor"][None, units], pop["y"][units], config["alpha"], DELTA,
                                     config["max_false_pass"], method, seed=draw)
            if not result.certified:
                coverage.append(0.0)
                continue
            certified += 1
            v = index[tuple(np.array(result.thresholds).ravel())]
            coverage.append(float(risks["coverage"][v]))
            beta = config["max_false_pass"]
            bad += bool(risks["D"][v] > config["alpha"] + 1e-12 or (beta is not None and risks["F"][v] > beta + 1e-12))
        units = one_per_task(pop, np.random.default_rng(seed))
        whole = learn_then_test(pop["floor"][None, units], pop["y"][units], config["alpha"], DELTA,
                                config["max_false_pass"], method, seed=seed)
        v = index[tuple(np.array(whole.thresholds).ravel())]
        rows.append({**config, "method": method, "delta": DELTA, "draws": draws, "violations": bad,
                     "violation_share": bad / draws, "violation_ci95": cp(bad, draws),
                     "valid": cp(bad, draws)[0] <= DELTA, "certified_draws": certified,
                     "mean_population_coverage": round(float(np.mean(coverage)), 4),
                     "fit_on_whole_set": {"certified": whole.certified, "thresholds": whole.to_dict()["thresholds"][0],
                                          "calibration_coverage": round(whole.coverage, 4),
                                          "population_coverage": round(float(risks["coverage"][v]), 4)
                                          if whole.certified else 0.0,
                                          "population_disagreement": round(float(risks["D"][v]), 4)
                                          if whole.certified else None}})
    return rows


SIM_RUBRIC = SEED_RUBRIC.replace("\n\nScoring:", "\n" + "\n".join(
    f"{n}. " + c for n, c in enumerate((
        "Unresolved tool error: fail when a tool result marked ERROR is never followed by a successful result.",
        "Claims success without evidence: fail when the answer claims success but no committing call succeeded.",
        "No committing call: fail when the user asked for a change and no committing tool call succeeded.",
        "Handed off to a human: fail when the agent transferred the user to a human agent."), 7)) + "\n\nScoring:")


def simulated_confidences(items) -> np.ndarray:
    from evals.simulator.judging import verdict

    config = RenderConfig()
    out = []
    for t in items:
        answer = verdict(SIM_RUBRIC, render_trajectory(t, config))
        score = float(answer["score"])
        out.append(np.nan if bool(answer["passed"]) != (score >= 0.5) else score)  # a contradiction hands on
    return np.array(out)


def realized(conf, y, thresholds) -> dict:
    decided, passed, stage = cascade_outcomes(conf, np.asarray(thresholds, dtype=np.float64)[None])
    d, p, s, yb = decided[0], passed[0], stage[0], y.astype(bool)
    return {"decided": int(d.sum()), "escalated": int((~d).sum()),
            "lm_calls": int(((s == -1) | (s >= conf.shape[0] - 1)).sum()),
            "errors": int((p[d] != yb[d]).sum()), "failed_decided": int((d & ~yb).sum()),
            "false_passes": int((d & p & ~yb).sum())}


def simulated(pop: dict, judge: np.ndarray, items, splits: int, seed: int, method: str, alpha: float) -> dict:
    rng = np.random.default_rng(seed)
    rows = {"floor_then_judge": [], "judge_only": []}
    for _ in range(splits):
        tasks = rng.permutation(len(pop["members"]))
        cal_tasks = tasks[: len(tasks) // 2]
        cal = np.concatenate([[rng.choice(pop["members"][k])] for k in cal_tasks])
        test = np.setdiff1d(np.arange(len(items)), np.concatenate([pop["members"][k] for k in cal_tasks]))
        for name, conf, costs in (("floor_then_judge", np.vstack([pop["floor"], judge]), (0.0, 1.0)),
                                  ("judge_only", judge[None, :], (1.0,))):
            result = learn_then_test(conf[:, cal], pop["y"][cal], alpha, DELTA, method=method, stage_costs=costs,
                                     seed=seed)
            outcome = realized(conf[:, test], pop["y"][test], result.thresholds) if result.certified else \
                {"decided": 0, "escalated": int(test.size), "lm_calls": 0,
                 "errors": 0, "failed_decided": 0, "false_passes": 0}
            rows[name].append({"certified": result.certified, "n_test": int(test.size), **outcome})
    summary = {}
    for name, runs in rows.items():
        done = [r for r in runs if r["certified"]]  # an uncertified split decides nothing and calls no LM
        n = sum(r["n_test"] for r in done)
        decided = sum(r["decided"] for r in done)
        errors, failed, fps = (sum(r[k] for r in done) for k in ("errors", "failed_decided", "false_passes"))
        summary[name] = {"certified_splits": len(done), "splits": len(runs),
                         "per_1000_of_certified_splits": {
                             "lm_calls": round(1000 * sum(r["lm_calls"] for r in done) / n, 1) if n else None,
                             "decided": round(1000 * decided / n, 1) if n else None,
                             "escalated": round(1000 * sum(r["escalated"] for r in done) / n, 1) if n else None},
                         "realized_disagreement": round(errors / decided, 4) if decided else None,
                         "realized_disagreement_ci95": cp(errors, decided) if decided else None,
                         "realized_false_pass": round(fps / failed, 4) if failed else None}
    summary["judging_everything_lm_calls_per_1000"] = 1000.0
    summary["alpha"], summary["delta"], summary["method"] = alpha, DELTA, method
    return summary


def simulated_part(data: dict, pop: dict, args) -> list[dict]:
    judge = simulated_confidences(data["items"])
    return [simulated(pop, judge, data["items"], args.splits, args.seed, method, alpha)
            for method in METHODS for alpha in SIMULATED_ALPHAS]


def simulated_only(args) -> int:
    out = json.loads(Path(args.out).read_text())
    rows = {row["dataset"]: row for row in out["datasets"]}
    for data in datasets(shipped_only=True):
        if data["name"] in SIMULATED_SETS and data["name"] in rows:
            rows[data["name"]]["simulated_floor_then_judge"] = simulated_part(data, population(data["items"]), args)
    out["simulated_rerun"] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "splits": args.splits,
                              "note": "part (c) recomputed with --simulated-only; parts (a) and (b) from the run above"}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench_cascade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shipped-only", action="store_true")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--simulated-only", action="store_true",
                        help="recompute part (c) only, into the existing --out file (parts a and b kept)")
    args = parser.parse_args(argv)
    if args.simulated_only:
        return simulated_only(args)
    started = time.perf_counter()
    results = []
    for data in datasets(args.shipped_only):
        pop = population(data["items"])
        floor_kappa = float(cohens_kappa(pop["y"], (pop["floor"] >= 0.5).astype(int)))
        row = {"dataset": data["name"], "file": data["file"], "shipped": data["shipped"], "n": len(data["items"]),
               "tasks": len(pop["members"]), "pass_rate": round(float(pop["y"].mean()), 4),
               "floor_kappa_out_of_fold": round(floor_kappa, 4),
               "validity": [r for method in METHODS for r in validity(pop, args.draws, args.seed, method)]}
        if data["name"] in SIMULATED_SETS:
            row["simulated_floor_then_judge"] = simulated_part(data, pop, args)
        results.append(row)
        print(f"{data['name']}: n {row['n']}, kappa {floor_kappa:.2f}, " + ", ".join(
            f"{r['method'][:5]} a={r['alpha']}{'/F' + str(r['max_false_pass']) if r['max_false_pass'] else ''}: viol "
            f"{r['violations']}/{r['draws']} cov {r['mean_population_coverage']:.2f}" for r in row["validity"]),
            file=sys.stderr)
    out = {"benchmark": "evals/bench_cascade.py", "machine": machine(),
           "lm": {"floor": "none: the symptom floor (real, out-of-fold probabilities)",
                  "judge": "simulated (evals/simulator judging.verdict; no real LM)"},
           "method": {"fwer": list(METHODS), "p_values": "exact binomial", "grid_vectors_per_stage": 56, "delta": DELTA,
                      "unit": "task: one trial per task", "population": "the whole labeled set, task-uniform"},
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "draws": args.draws, "seed": args.seed,
           "all_valid": all(r["valid"] for d in results for r in d["validity"]),
           "floor_decides_where_kappa_ge_0_6": {method: {str(alpha): all(
               r["mean_population_coverage"] > 0 for d in results if d["floor_kappa_out_of_fold"] >= 0.6
               for r in d["validity"] if r["method"] == method and r["alpha"] == alpha and r["max_false_pass"] is None)
               for alpha in (0.05, 0.10)} for method in METHODS},
           "wall_time_s": round(time.perf_counter() - started, 1), "datasets": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out} in {out['wall_time_s']} s; all valid: {out['all_valid']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
