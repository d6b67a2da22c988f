"""The cascade benchmark's configurations, in one place: the calibration-size table (issue 39 item 2), the floor-only
acceptance at alpha 0.1, and the alpha grid the monotonicity test walks (tests/metrics/test_cascade_monotone_bench.py).

A *configuration* is (labeled set, cascade, method, bound, calibration size). For each set:

- the tasks are permuted (seed); the first `FIT_SHARE` of them are the **fit share**: the symptom floor is fit there
  (`SymptomFloor.fit`), and a method that orders its sequence from data the calibration never sees gets the fit
  share's *out-of-fold* floor probabilities (`trust.floor_cv.cross_validate`) with their labels and tasks;
- the other tasks are the **population** (a random task, then a random trial of it: task-uniform weights); a
  calibration set of ``size`` tasks is drawn from it by task, with replacement (every trial of a drawn task; a task
  drawn k times has multiplicity k), so that calibration and fit never share a task;
- the fitted vector's coverage, D and F are computed *exactly* on the population: the quantity the guarantee is
  about, never a noisy test-split rate.

Cascades: ``floor`` (floor -> person) on every set; ``floor_judge`` (floor -> judge -> person, the judge's recorded
verdicts as a stage: `judge.cascade.stage_confidence`, its two thresholds on the score) on sets with a judge. A judge
is a `JudgeSource`: its verdicts per item and the LM that gave them (``simulated`` where the simulator answered).

Methods: the library's `DEFAULT_METHOD`, ``"holm"`` and ``"split_fixed_sequence"`` (main's default), each with the
*pooled* bound (D over everything the cascade decides) and, where the library offers it, the *per-stage* bound (each
stage's D and F). What the library offers is read from `learn_then_test`'s signature (`library_features`); a
configuration it cannot run is listed as unavailable, with why, never silently dropped.

Pure evaluation code: numpy and the package; no LM is called.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from rubricforge_dspy.evidence.features import FeatureTable
from rubricforge_dspy.judge.floor import FloorError, SymptomFloor
from rubricforge_dspy.metrics.risk_control import DEFAULT_METHOD, cascade_outcomes, learn_then_test
from rubricforge_dspy.trust.floor_cv import cross_validate

DELTA = 0.1
FIT_SHARE = 0.4  # of the tasks: floor fit (and a data-ordered sequence's ordering data)
SIZES = (20, 40, 80, 160, 400)  # calibration tasks, where the population holds as many
ALPHA_GRID = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)  # the monotonicity test's grid
TABLE_ALPHAS = {"floor": (0.10, 0.20), "floor_judge": (0.10, 0.20)}
BOUNDS = ("pooled", "per_stage")
OLD_DEFAULT = "split_fixed_sequence"  # main's default before issue 39
FLOOR_ONLY_SETS = ("mint-alfworld-mint-alfworld-6agents", "intercode-bash-intercode-bash-7agents",
                   "tau2-leaderboard-airline-4-agents-pooled")  # issue 39's multi-agent acceptance sets
FLOOR_ONLY_ALPHA, FLOOR_ONLY_TASKS = 0.10, 50
# the false-pass rate the per-stage bound tests (`learn_then_test`'s ``false_pass``); None: the library's default.
# ``python -m evals.bench_cascade --table-only --false-pass among_passes`` sets it (the alternative, measured)
FALSE_PASS: str | None = None


def methods() -> tuple[str, ...]:
    """The methods the table compares: the library's default, Holm, and main's split fixed sequence."""
    return tuple(dict.fromkeys((DEFAULT_METHOD, "holm", OLD_DEFAULT)))


def library_features() -> dict[str, bool]:
    """What this checkout's `learn_then_test` can do beyond main's: a per-stage bound (``bound=``), and an ordering
    taken from data the calibration never sees (``order_confidences=``, ``order_labels=``; the ``ordered_sequence``
    method's)."""
    params = inspect.signature(learn_then_test).parameters
    return {"per_stage": "bound" in params, "order_data": "order_confidences" in params}


def available(method: str, bound: str) -> str | None:
    """None when the library runs (method, bound); else why not."""
    if bound == "per_stage" and not library_features()["per_stage"]:
        return "this library has no per-stage bound (learn_then_test has no 'bound' argument)"
    return None


@dataclass
class JudgeSource:
    """A judge's recorded verdicts on a set: confidence per item (NaN: the verdict contradicts itself, handed on),
    its pass/fail verdicts, and the LM that gave them (``"simulated: ..."`` where the simulator answered)."""

    lm: str
    confidence: np.ndarray
    passed: np.ndarray
    levels: tuple[float, ...] | None = None  # the values the confidence can take (None: continuous)
    simulated: bool = True


@dataclass
class Prepared:
    """A set split into fit share and population, with the floor's probabilities on every item."""

    name: str
    y: np.ndarray
    task_of: np.ndarray
    members: list[np.ndarray]
    trials: np.ndarray
    fit_tasks: np.ndarray
    pop_tasks: np.ndarray
    floor: np.ndarray  # P(pass) from the floor fit on the fit share, every item
    order_floor: np.ndarray  # out-of-fold P(pass) on the fit share's items (ordering data)
    order_items: np.ndarray
    weight: np.ndarray  # population weight of each item (task-uniform; 0 outside the population)
    judges: dict[str, JudgeSource] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def multi_trial(self) -> bool:
        return bool(self.trials.max() > 1)

    def items_of(self, tasks: np.ndarray) -> np.ndarray:
        return np.concatenate([self.members[k] for k in tasks]) if len(tasks) else np.zeros(0, dtype=np.int64)

    def sizes(self) -> list[int]:
        return [s for s in SIZES if s <= self.pop_tasks.size]

    def cascades(self) -> list[str]:
        """``floor``, and ``floor_judge:<judge>`` for each judge of the set."""
        return ["floor"] + [f"floor_judge:{name}" for name in self.judges]

    def judge(self, cascade: str) -> JudgeSource | None:
        return self.judges[cascade.split(":", 1)[1]] if cascade.startswith("floor_judge:") else None

    def confidences(self, cascade: str) -> np.ndarray:
        judge = self.judge(cascade)
        return self.floor[None, :] if judge is None else np.vstack([self.floor, judge.confidence])

    def levels(self, cascade: str) -> list | None:
        judge = self.judge(cascade)
        return None if judge is None else [None, judge.levels]


class PrepareError(ValueError):
    """The set cannot be benchmarked (one class in the fit share)."""


def prepare(name: str, items, seed: int = 0, judges: dict[str, JudgeSource] | None = None,
            table: FeatureTable | None = None) -> Prepared:
    """Split `items` by task into the fit share and the population; fit the floor on the fit share."""
    table = table if table is not None else FeatureTable.build(items)
    y = table.labels.astype(np.int64)
    names, task_of = np.unique(np.array(table.groups, dtype=object).astype(str), return_inverse=True)
    members = [np.flatnonzero(task_of == k) for k in range(len(names))]
    trials = np.bincount(task_of, minlength=len(names))
    tasks = np.random.default_rng(seed).permutation(len(names))
    cut = int(round(FIT_SHARE * len(names)))
    fit_tasks, pop_tasks = np.sort(tasks[:cut]), np.sort(tasks[cut:])
    fit_items = np.concatenate([members[k] for k in fit_tasks])
    try:
        floor = SymptomFloor.fit(table.take(fit_items)).predict_proba(table)
    except FloorError as error:
        raise PrepareError(f"{name}: {error}") from error
    cv = cross_validate(table.take(fit_items), seed=seed)
    pop = np.concatenate([members[k] for k in pop_tasks])
    weight = np.zeros(y.size)
    weight[pop] = 1.0 / (pop_tasks.size * trials[task_of[pop]])
    return Prepared(name, y, task_of, members, trials, fit_tasks, pop_tasks, floor, np.asarray(cv.scores),
                    fit_items, weight, dict(judges or {}), list(cv.notes))


def draw(prep: Prepared, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A calibration set of `size` tasks drawn with replacement from the population: (items, multiplicities)."""
    drawn = np.bincount(rng.integers(0, prep.pop_tasks.size, size=size), minlength=prep.pop_tasks.size)
    chosen = prep.pop_tasks[drawn > 0]
    items = prep.items_of(chosen)
    return items, np.repeat(drawn[drawn > 0], prep.trials[chosen]).astype(np.float64)


def certify(prep: Prepared, cascade: str, items: np.ndarray, weights: np.ndarray, alpha: float, method: str,
            bound: str, seed: int):
    """`learn_then_test` on one calibration draw with (method, bound), the library's default p-values."""
    why = available(method, bound)
    if why is not None:
        raise PrepareError(why)
    conf = prep.confidences(cascade)
    kwargs: dict[str, Any] = {"groups": prep.task_of[items], "weights": weights, "seed": seed,
                              "levels": prep.levels(cascade),
                              "stage_costs": None if cascade == "floor" else (0.0, 1.0)}  # a live judge's call
    features = library_features()
    if features["per_stage"]:
        kwargs["bound"] = bound
    if FALSE_PASS is not None:
        kwargs["false_pass"] = FALSE_PASS
    if features["order_data"] and method == "ordered_sequence":  # data the calibration never sees: the fit share
        order = prep.order_items
        judge = prep.judge(cascade)
        kwargs.update(order_confidences=(prep.order_floor[None, :] if judge is None else
                                         np.vstack([prep.order_floor, judge.confidence[order]])),
                      order_labels=prep.y[order])
        if "order_groups" in inspect.signature(learn_then_test).parameters:
            kwargs["order_groups"] = prep.task_of[order]
    return learn_then_test(conf[:, items], prep.y[items], alpha, DELTA, None, method, **kwargs)


def population_outcome(prep: Prepared, cascade: str, thresholds) -> dict[str, float | None]:
    """The vector's exact population coverage, D, F, per-stage D and F, judge reach and the judge alone on the
    same decided items (task-uniform weights)."""
    conf = prep.confidences(cascade)
    decided, passed, stage = cascade_outcomes(conf, np.asarray(thresholds, dtype=np.float64)[None])
    d, p, s, w = decided[0], passed[0], stage[0], prep.weight
    yb = prep.y.astype(bool)
    failed = ~yb

    def rate(num: np.ndarray, den: np.ndarray) -> float | None:
        total = float(den @ w)
        return float(num @ w) / total if total > 0 else None

    out: dict[str, float | None] = {"coverage": float(d @ w), "D": rate(d & (p != yb), d),
                                    "F": rate(d & p & failed, d & failed)}
    for k in range(conf.shape[0]):
        mine = s == k
        out[f"D_stage{k}"], out[f"F_stage{k}"] = rate(mine & (p != yb), mine), rate(mine & p & failed,
                                                                                    mine & failed)
    judge = prep.judge(cascade)
    if judge is not None:
        alone = judge.passed.astype(bool)
        out["reach_judge"] = float(((s == -1) | (s >= 1)) @ w)
        out["judge_D_same"] = rate(d & (alone != yb), d)
        out["judge_F_same"] = rate(d & alone & failed, d & failed)
    return out


def violates(outcome: dict, alpha: float, bound: str, beta: float | None) -> bool:
    """A bound the certificate states is broken on the population: pooled D; per stage, each stage's D and (when
    the library bounds it) F."""
    eps = 1e-12
    if (outcome["D"] or 0.0) > alpha + eps:
        return True
    if bound == "per_stage":
        for key, value in outcome.items():
            if value is None:
                continue
            if key.startswith("D_stage") and value > alpha + eps:
                return True
            if key.startswith("F_stage") and beta is not None and value > beta + eps:
                return True
    return False


def cp(k: int, n: int) -> list[float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, "exact")
    return [round(ci.low, 4), round(ci.high, 4)]


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(float(np.mean(values)), 4) if values else None


def table_row(prep: Prepared, cascade: str, method: str, bound: str, size: int, alpha: float, draws: int,
              seed: int = 0) -> dict:
    """One cell of the calibration-size table: `draws` calibration draws of `size` tasks."""
    row: dict[str, Any] = {"cascade": cascade, "method": method, "bound": bound, "calibration_tasks": size,
                           "alpha": alpha, "delta": DELTA, "draws": draws}
    why = available(method, bound)
    if why is not None:
        return {**row, "unavailable": why}
    rng = np.random.default_rng(1_000 + seed * 7919 + size)
    outcomes, bad, certified, resolved, beta = [], 0, 0, None, None
    for i in range(draws):
        items, weights = draw(prep, size, rng)
        result = certify(prep, cascade, items, weights, alpha, method, bound, seed=i)
        resolved = result.p_values
        beta = getattr(result, "max_false_pass", None)
        if not result.certified:
            outcomes.append(None)
            continue
        certified += 1
        outcome = population_outcome(prep, cascade, result.thresholds)
        outcomes.append(outcome)
        bad += violates(outcome, alpha, bound, beta)
    done = [o for o in outcomes if o is not None]
    cover = [0.0 if o is None else o["coverage"] for o in outcomes]
    row.update({"p_values": resolved, "certified_share": round(certified / draws, 4), "certified": certified,
                "mean_coverage": round(float(np.mean(cover)), 4),
                "mean_coverage_when_certified": _mean([o["coverage"] for o in done]),
                "mean_person_share": round(1 - float(np.mean(cover)), 4),
                "mean_D_when_certified": _mean([o["D"] for o in done]),
                "mean_F_when_certified": _mean([o["F"] for o in done]),
                "violations": bad, "violation_share": round(bad / draws, 4), "violation_ci95": cp(bad, draws),
                "valid": cp(bad, draws)[0] <= DELTA})
    if prep.judge(cascade) is not None:
        row["judge_lm"] = prep.judge(cascade).lm
        reach = [1.0 if o is None else o["reach_judge"] for o in outcomes]  # refused: a person, or the judge alone
        row.update({"mean_judge_calls_saved": round(1 - float(np.mean(reach)), 4),
                    "mean_judge_calls_saved_when_certified": _mean([1 - o["reach_judge"] for o in done]),
                    "judge_alone_D_same_items_when_certified": _mean([o["judge_D_same"] for o in done]),
                    "judge_alone_F_same_items_when_certified": _mean([o["judge_F_same"] for o in done])})
    return row


def certified_over_alphas(prep: Prepared, cascade: str, method: str, bound: str, size: int, draw_index: int = 0,
                          alphas=ALPHA_GRID) -> list[bool]:
    """The monotonicity check's record: one calibration draw (fixed by `draw_index`), certified or not at each
    alpha of the grid."""
    rng = np.random.default_rng(50_000 + 31 * draw_index + size)
    items, weights = draw(prep, size, rng)
    return [certify(prep, cascade, items, weights, a, method, bound, seed=draw_index).certified for a in alphas]


def lost_certificates(certified: list[bool], alphas=ALPHA_GRID) -> list[tuple[float, float]]:
    """Every (alpha, larger alpha) where the certificate at alpha is lost at the larger one."""
    return [(alphas[i], alphas[j]) for i in range(len(alphas)) for j in range(i + 1, len(alphas))
            if certified[i] and not certified[j]]


def configurations(prep: Prepared) -> list[tuple[str, str, str, int]]:
    """Every (cascade, method, bound, calibration size) the benchmark runs on the set, the library permitting."""
    return [(c, m, b, s) for c in prep.cascades() for m in methods() for b in BOUNDS for s in prep.sizes()
            if available(m, b) is None]


def split_certified(name: str, items, seeds: int, alpha: float, method: str, bound: str,
                    judges: dict[str, JudgeSource] | None = None, cascade: str = "floor",
                    table: FeatureTable | None = None) -> dict:
    """The issue's protocol: per seed a by-task 40/40/20 split (the floor fit on 40%, calibration on 40%, every trial
    of its tasks, the fitted vector applied to the other 20%): certified seeds, and the decided share and D, F of
    the decided test items pooled over the seeds (a refused seed decides nothing)."""
    table = table if table is not None else FeatureTable.build(items)
    runs = []
    for seed in range(seeds):
        prep = prepare(name, items, seed, judges, table)
        n_tasks = prep.fit_tasks.size + prep.pop_tasks.size
        cal_n = int(round(FIT_SHARE * n_tasks))
        order = np.random.default_rng(seed).permutation(prep.pop_tasks)
        cal, test = prep.items_of(order[:cal_n]), prep.items_of(order[cal_n:])
        result = certify(prep, cascade, cal, np.ones(cal.size), alpha, method, bound, seed)
        yb = prep.y[test].astype(bool)
        if result.certified:
            decided, passed, _ = cascade_outcomes(prep.confidences(cascade)[:, test],
                                                  np.asarray(result.thresholds, dtype=np.float64)[None])
            d, p = decided[0], passed[0]
        else:
            d = p = np.zeros(test.size, dtype=bool)
        runs.append({"seed": seed, "certified": bool(result.certified), "calibration_tasks": cal_n,
                     "n_test": int(test.size), "decided": int(d.sum()), "errors": int((d & (p != yb)).sum()),
                     "failed_decided": int((d & ~yb).sum()), "false_passes": int((d & p & ~yb).sum()),
                     "p_value": round(float(result.p_value), 6), "n_order_tasks": int(result.n_order_tasks)})
    n, decided = sum(r["n_test"] for r in runs), sum(r["decided"] for r in runs)
    errors, failed, fps = (sum(r[k] for r in runs) for k in ("errors", "failed_decided", "false_passes"))
    return {"method": method, "bound": bound, "alpha": alpha, "delta": DELTA, "cascade": cascade, "seeds": seeds,
            "certified_seeds": sum(r["certified"] for r in runs),
            "calibration_tasks": runs[0]["calibration_tasks"] if runs else None,
            "decided_share_test_pooled": round(decided / n, 4) if n else None,
            "D_decided_test_pooled": round(errors / decided, 4) if decided else None,
            "F_decided_test_pooled": round(fps / failed, 4) if failed else None, "per_seed": runs}


def floor_only_acceptance(name: str, items, seeds: int, draws: int, table: FeatureTable | None = None) -> dict:
    """Issue 39's floor-only criterion on a multi-agent set: at alpha 0.1, the new default against the old, (i) by
    the issue's 40/40/20 protocol over `seeds`, (ii) on `draws` calibration draws of `FLOOR_ONLY_TASKS` tasks from
    the population (validity counted there)."""
    table = table if table is not None else FeatureTable.build(items)
    prep = prepare(name, items, 0, None, table)
    rows = []
    for method in methods():
        for bound in BOUNDS:
            if available(method, bound) is not None:
                rows.append({"method": method, "bound": bound, "unavailable": available(method, bound)})
                continue
            rows.append({"method": method, "bound": bound,
                         "split_40_40_20": split_certified(name, items, seeds, FLOOR_ONLY_ALPHA, method, bound,
                                                           table=table),
                         "population_draws": table_row(prep, "floor", method, bound,
                                                       min(FLOOR_ONLY_TASKS, prep.pop_tasks.size), FLOOR_ONLY_ALPHA,
                                                       draws)})
    return {"dataset": name, "alpha": FLOOR_ONLY_ALPHA, "rows": rows}


def summarize(sets: list[dict]) -> dict:
    """Which method certifies most at equal validity over the whole table: per (method, bound), over the cells
    (set, cascade, size, alpha) where every method ran and some method (of either bound) certifies in some draw, the
    mean certified share and mean population coverage, the cells where it certifies most (ties shared) and alone,
    and whether every one of its cells is valid. Methods are compared within a bound (same hypotheses)."""
    cells: dict[tuple, dict] = {}
    for d in sets:
        for r in d["rows"]:
            if "unavailable" in r:
                continue
            key = (d["dataset"], r["cascade"], r["bound"], r["calibration_tasks"], r["alpha"])
            cells.setdefault(key, {})[r["method"]] = r
    names = methods()
    full = {k: v for k, v in cells.items() if set(v) >= set(names)}
    # a cell where no method of either bound certifies anything tells the methods apart in nothing: left out
    live = {k[:2] + k[3:] for k, v in full.items() if any(r["certified"] for r in v.values())}
    full = {k: v for k, v in full.items() if k[:2] + k[3:] in live}
    out: dict[str, Any] = {"cells_where_something_certifies": len(full), "by_method_and_bound": {}}
    for bound in BOUNDS:
        mine = {k: v for k, v in full.items() if k[2] == bound}
        for method in names:
            rows = [v[method] for v in mine.values()]
            if not rows:
                continue
            most = sum(v[method]["certified_share"] >= max(v[m]["certified_share"] for m in names)
                       for v in mine.values())
            cover = sum(v[method]["mean_coverage"] >= max(v[m]["mean_coverage"] for m in names) for v in mine.values())
            out["by_method_and_bound"][f"{method}/{bound}"] = {
                "cells": len(rows),
                "mean_certified_share": round(float(np.mean([r["certified_share"] for r in rows])), 4),
                "mean_coverage": round(float(np.mean([r["mean_coverage"] for r in rows])), 4),
                "cells_certifying_most": most, "cells_covering_most": cover,
                "cells_certifying_most_alone": sum(v[method]["certified_share"] > max(
                    v[m]["certified_share"] for m in names if m != method) for v in mine.values()),
                "all_valid": all(r["valid"] for r in rows),
                "max_violation_share": max(r["violation_share"] for r in rows)}
    return out


if __name__ == "__main__":  # python -m evals.cascade_table FILE: (re)compute a table JSON's summary from its rows
    import json
    import sys
    from pathlib import Path

    path = Path(sys.argv[1])
    data = json.loads(path.read_text())
    data["summary"] = summarize(data["sets"])
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["summary"], indent=1))
