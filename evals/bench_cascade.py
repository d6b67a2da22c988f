"""The certified cascade on every labeled set: coverage per method and p-value, validity where the truth is known.

    PYTHONPATH=. python -m evals.bench_cascade                  # writes evals/results/cascade.json (~10 min, 2 cores)
    PYTHONPATH=. python -m evals.bench_cascade --quick          # 100 draws, 6 seeds, no (c) or (d): a smoke run
    PYTHONPATH=. python -m evals.bench_cascade --shipped-only   # the sets under evals/data/ only
    PYTHONPATH=. python -m evals.bench_cascade --table-only     # (e) and (f) only: evals/results/cascade_table.json
    PYTHONPATH=. python -m evals.bench_cascade --no-table       # (a)-(d) only: evals/results/cascade.json

Every labeled set: the files under evals/data/ (among them two public multi-agent sets, MINT ALFWorld and InterCode
NL2Bash, several agents per task), the shared raw sets (../shared/data/raw, when present) one file at a time, and the
four tau2-bench leaderboard airline submissions pooled by task (a multi-agent set: 4 agents x 50 tasks). The unit is
the task (``domain/task_id``); a set is *multi-trial* when some task has several trajectories (trials or agents).

P-value choices (`metrics.risk_control.learn_then_test`): ``auto`` (exact binomial when every task has one trial,
betting otherwise); on multi-trial sets also ``one_per_task`` (one drawn trial per task, exact binomial: what
``fit_cascade(one_per_task=True)`` does) and ``hoeffding_bentkus`` (task means); on one-trial sets also ``betting``.
Methods: every one of `LTT_METHODS` (split fixed sequence, Holm, Bonferroni, fail-first sequence). Delta 0.1.

(b) **Coverage** (what the issue's acceptance reads): per seed (20) a by-task 40/40/20 split; the symptom floor is
fit (`SymptomFloor.fit`) on the 40% fit share, a floor-only cascade is calibrated on the 40% calibration share (every
trial of its tasks, grouped by task) at alpha 0.05 and 0.1, and its thresholds judge the 20% test share: coverage =
share of the test trajectories decided (0 when nothing is certified), with the realized disagreement there, and the
floor's kappa (p >= 0.5) on the test share.

(a) **Validity** (what the guarantee says): the floor is fit once on 40% of the tasks; the other tasks are the
population (a random task, then a random trial of it: task-uniform weights). Each of the draws (500) takes as many
tasks as 40% of the whole set, with replacement, from the population (every trial of a drawn task; a task drawn k
times has multiplicity k: ``weights=``; with ``one_per_task`` each draw of a task picks its own trial), fits, and
computes the fitted vector's *exact* population disagreement D (and false-pass rate F when bounded, at alpha 0.1
with max_false_pass 0.05, ``auto`` p-values). A draw violates when a bounded risk exceeds its bound; the share of
violating draws with its exact 95% Clopper-Pearson interval must be <= delta within the interval.

(c) **Floor -> judge against the simulator** (the judge's verdicts are *simulated*: `evals.simulator`,
`judging.verdict` with a rubric holding the simulator's five trigger criteria; the floor's are real, out of fold):
20 task-grouped halves; each fits a floor -> judge cascade and a judge-only cascade at the same alpha and delta on
one half (every trial, grouped by task) and judges the other; at alpha 0.10 and 0.20, with the split fixed sequence
and Holm. Reported per 1,000 trajectories: LM calls, decided, escalated, and the realized D and F on the judged half.

(d) **Floor -> hybrid(judge) -> person against recorded verdicts of the simulated judge** (the issue's acceptance):
the simulated judge of (c) judges every item of `HYBRID_SETS` once; its verdicts are written as verdict lines
(`core.verdict.verdict_line`, as ``rubricforge judge`` writes them) and read back as a recorded stage
(`judge.recorded.RecordedJudge.from_file`). Per seed (5) a by-task 40/40/20 split: on the 40% fit share the floor
(`SymptomFloor.fit`) and the hybrid (`trust.hybrid_cv.fit_hybrid_stack` over the recorded verdicts, in a
`HybridJudge`: what ``rubricforge floor --judge-verdicts V --save-floor`` fits); on the 40% calibration share
`fit_cascade` (the library's default method) at alpha 0.2, delta 0.1; the fitted cascade judges the 20% test share
(`Cascade.batch`). Pooled over the seeds (a refused seed sends its whole test share to a person): certified seeds,
person share, the share of items that reach the judge (the hybrid needs the judge's verdict, so an item the floor
decides never reaches it; the LM calls a live judge would make), D and F on the decided items with exact 95%
intervals, and the judge alone on the same decided items and on every test item. Also floor -> judge -> person (the
recorded stage itself), each with the judge's calls costed 1 in the fit's tie-break (a live judge) and with the
library's default (a recorded stage costs 0), and floor -> hybrid with ``max_false_pass`` 0.3 / 0.25 / 0.2.

Real judges (issue 39 item 7): a set in `REAL_JUDGE_SETS` (DevAI, `evals.real_judges`: Agent-as-a-Judge's recorded
verdicts, GPT-4o, beside human labels) runs (c) and (d) with that judge's recorded verdicts (``real_floor_then_judge``,
``hybrid_cascade``, whose ``judge`` names the LM); the simulated judge stays beside it on `SIMULATED_SETS`, named
simulated. Nothing here calls an LM: a recorded judge's verdicts were given before.

(e) **The calibration-size table** (`evals.cascade_table`; ``--table-only``, `TABLE_OUT`): per set, per cascade
(floor -> person; floor -> judge -> person for each judge of the set), per method (the library's default, Holm,
main's split fixed sequence) and bound (per stage, pooled), at 20, 40, 80, 160 and 400 calibration tasks where the
population holds as many: the floor fit on 40% of the tasks (the fit share; the ordered sequence's ordering data
are its out-of-fold probabilities), calibration tasks drawn with replacement from the other tasks (the population),
and the fitted vector's exact population coverage, D, F, judge calls saved and the judge alone on the same items;
certified share and violation share (exact 95% interval) over ``--table-draws`` draws.

(f) **Floor-only at alpha 0.1 on the multi-agent sets** (`evals.cascade_table.FLOOR_ONLY_SETS`): certified seeds of
the issue's by-task 40/40/20 protocol (``--table-seeds``) and certified share of 50-task population draws, per
method and bound: the old default (split fixed sequence) against the new.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson
from scipy import stats

from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.features import FeatureTable
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.judge.cascade import ESCALATED, stage_confidence
from rubricforge_dspy.judge.floor import FloorError, FloorJudge, SymptomFloor
from rubricforge_dspy.judge.hybrid import HybridJudge
from rubricforge_dspy.judge.recorded import RecordedJudge
from rubricforge_dspy.metrics import cohens_kappa
from rubricforge_dspy.metrics.bounds import RATIO_STAKE_CAP
from rubricforge_dspy.metrics.risk_control import (
    DEFAULT_FALSE_PASS,
    DEFAULT_METHOD,
    FALSE_PASS_RATIOS,
    LTT_METHODS,
    cascade_outcomes,
    learn_then_test,
    threshold_grid,
)
from rubricforge_dspy.trust.cascade import CascadeCalibrationError, FitOptions, fit_cascade
from rubricforge_dspy.trust.floor_cv import cross_validate
from rubricforge_dspy.trust.hybrid_cv import fit_hybrid_stack

if TYPE_CHECKING:
    from evals.cascade_table import JudgeSource

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "evals" / "results" / "cascade.json"
DELTA = 0.1
ALPHAS = (0.05, 0.10)
F_CONFIG = {"alpha": 0.10, "max_false_pass": 0.05}  # validity of the false-pass bound (auto p-values)
METHODS = tuple(LTT_METHODS)
SIM_METHODS = ("split_fixed_sequence", "holm")
SIMULATED_ALPHAS = (0.10, 0.20)  # 0.20: where the simulated judge alone can be certified at all
SIMULATED_SETS = ("react-webshop-react-webshop-davinci002-500", "tau-bench-official-gpt-4o-airline")
SPLIT = (0.4, 0.4, 0.2)  # fit / calibrate / test shares of the tasks
TAU2_POOL = "tau2-leaderboard-airline-4-agents-pooled"
SIM_MODEL = "simulated-7b-judge@sim1"  # the simulator's model name (evals/simulator/README.md)
# sets that ship a real LLM judge's recorded verdicts (evals/real_judges.py): set name -> (real set, judge)
REAL_JUDGE_SETS = {"devai-devai-requirements": ("devai", "agent_as_a_judge_gray_box")}
HYBRID_ALPHA, HYBRID_SEEDS = 0.20, 5  # part (d): the acceptance (alpha 0.2, delta 0.1, 5 seeds)
# part (d)'s sets: the real-judge sets (their real judge), part (c)'s two, the two public multi-agent sets, and
# webshop with reward-1 labels (a weak floor)
HYBRID_SETS = (*REAL_JUDGE_SETS, *SIMULATED_SETS, "mint-alfworld-mint-alfworld-6agents",
               "intercode-bash-intercode-bash-7agents", "react-webshop-react-webshop-davinci002-500__reward-1")
# part (d)'s cascades: (stages, the judge stage's cost in the fit's tie-break, max_false_pass); the recorded stage
# stands in for a live judge (one call per item reaching it), so "judge_costs_1" is the primary row; the library's
# default costs a recorded stage 0. The max_false_pass rows check whether bounding F fixes the F criterion.
HYBRID_VARIANTS = (("floor_hybrid_person", "judge_costs_1", None), ("floor_hybrid_person", "library_default", None),
                   ("floor_judge_person", "judge_costs_1", None), ("floor_judge_person", "library_default", None),
                   *(("floor_hybrid_person", "judge_costs_1", beta) for beta in (0.30, 0.25, 0.20)))


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpus": os.cpu_count(), "cpu": cpu, "system": platform.system(), "python": platform.python_version(),
            "note": "a shared 2-core VM (other jobs may run)"}


def _shared() -> Path | None:
    from evals.floor_table import SHARED

    # the shared raw sets sit beside the repository (a worktree: beside the main checkout's parent)
    return next((p for p in (SHARED, ROOT.parents[1] / "shared" / "data" / "raw") if p.is_dir()), None)


def datasets(shipped_only: bool) -> list[dict]:
    """Every labeled set `evals.floor_table` runs (shipped files, and the shared raw sets when present), and the
    tau2 leaderboard's airline submissions pooled by task."""
    from evals.floor_table import GRADED, candidates

    shared = None if shipped_only else _shared()
    files, _ = candidates(shared)
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
    if shared is not None and (shared / "tau2_leaderboard").is_dir():
        pooled, where = [], []
        for path in sorted((shared / "tau2_leaderboard").rglob("*.json")):
            items = [t for t in load_trajectories(path, on_error="skip") if t.domain == "airline"]
            if items:
                pooled += items
                where.append(str(path.relative_to(shared.parent.parent)))
        if pooled:
            out.append({"name": TAU2_POOL, "file": " + ".join(where), "shipped": False, "items": pooled})
    return out


def cp(k: int, n: int) -> list[float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, "exact")
    return [round(ci.low, 4), round(ci.high, 4)]


class LabeledSet:
    """A set's features, labels and tasks, computed once."""

    def __init__(self, items):
        self.table = FeatureTable.build(items)
        self.y = self.table.labels.astype(np.int64)
        names, self.task_of = np.unique(np.array(self.table.groups, dtype=object).astype(str), return_inverse=True)
        self.n_tasks = len(names)
        self.members = [np.flatnonzero(self.task_of == k) for k in range(self.n_tasks)]
        self.trials = np.bincount(self.task_of, minlength=self.n_tasks)
        self.multi_trial = bool(self.trials.max() > 1)

    def items_of(self, tasks) -> np.ndarray:
        return np.concatenate([self.members[k] for k in tasks]) if len(tasks) else np.zeros(0, dtype=np.int64)

    def floor(self, tasks) -> np.ndarray | None:
        """P(pass) of every item from a floor fit on the items of `tasks` (None: one class only there)."""
        try:
            return SymptomFloor.fit(self.table.take(self.items_of(tasks))).predict_proba(self.table)
        except FloorError:
            return None


def p_value_choices(data: LabeledSet) -> tuple[str, ...]:
    return ("auto", "one_per_task", "hoeffding_bentkus") if data.multi_trial else ("auto", "betting")


def fit(data: LabeledSet, conf: np.ndarray, items: np.ndarray, choice: str, alpha: float, method: str, seed: int,
        max_false_pass: float | None = None, weights: np.ndarray | None = None):
    """`learn_then_test` on `items` (grouped by task; `weights`: each item's task multiplicity) with one p-value
    choice; ``one_per_task`` keeps one drawn trial per task occurrence (an occurrence is its own unit)."""
    groups = data.task_of[items]
    if choice == "one_per_task":
        rng = np.random.default_rng(10_000 + seed)
        tasks, first = np.unique(groups, return_index=True)
        counts = np.ones(tasks.size, dtype=np.int64) if weights is None else weights[first].astype(np.int64)
        picked = np.concatenate([rng.choice(data.members[k], size=c, replace=True)
                                 for k, c in zip(tasks, counts, strict=True)])
        return learn_then_test(conf[None, picked], data.y[picked], alpha, DELTA, max_false_pass, method,
                               groups=np.arange(picked.size), p_values="binomial", seed=seed)
    return learn_then_test(conf[None, items], data.y[items], alpha, DELTA, max_false_pass, method,
                           groups=groups, weights=weights, p_values=choice, seed=seed)


def coverage_part(data: LabeledSet, seeds: int) -> dict:
    """(b): per seed a by-task 40/40/20 split, the floor fit on 40%, calibrated on 40%, measured on 20%."""
    rows = {(m, c, a): [] for m in METHODS for c in p_value_choices(data) for a in ALPHAS}
    kappas, resolved = [], {}
    for seed in range(seeds):
        tasks = np.random.default_rng(seed).permutation(data.n_tasks)
        cut1, cut2 = int(round(SPLIT[0] * data.n_tasks)), int(round((SPLIT[0] + SPLIT[1]) * data.n_tasks))
        conf = data.floor(tasks[:cut1])
        if conf is None:
            continue
        cal, test = data.items_of(tasks[cut1:cut2]), data.items_of(tasks[cut2:])
        yt = data.y[test]
        if len(set(yt.tolist())) > 1:
            kappas.append(float(cohens_kappa(yt, (conf[test] >= 0.5).astype(int))))
        for (method, choice, alpha), runs in rows.items():
            result = fit(data, conf, cal, choice, alpha, method, seed)
            resolved[choice] = result.p_values
            if result.certified:
                decided, passed, _ = cascade_outcomes(conf[None, test], np.asarray(result.thresholds)[None])
                d, p = decided[0], passed[0]
                runs.append({"coverage": float(d.mean()), "decided": int(d.sum()), "errors": int((p[d] != yt[d]).sum()),
                             "n_test": int(test.size), "thresholds": result.to_dict()["thresholds"][0]})
            else:
                runs.append({"coverage": 0.0, "decided": 0, "errors": 0, "n_test": int(test.size), "thresholds": None})
    table = []
    for (method, choice, alpha), runs in rows.items():
        cov = np.array([r["coverage"] for r in runs]) if runs else np.zeros(0)
        decided, errors = sum(r["decided"] for r in runs), sum(r["errors"] for r in runs)
        table.append({"method": method, "p_values": choice, "resolved_p_values": resolved.get(choice), "alpha": alpha,
                      "delta": DELTA, "seeds": len(runs), "certified_seeds": int(sum(r["thresholds"] is not None
                                                                                        for r in runs)),
                      "mean_test_coverage": round(float(cov.mean()), 4) if runs else None,
                      "median_test_coverage": round(float(np.median(cov)), 4) if runs else None,
                      "share_seeds_coverage_ge_0_6": round(float((cov >= 0.6).mean()), 4) if runs else None,
                      "realized_test_disagreement": round(errors / decided, 4) if decided else None,
                      "realized_test_disagreement_ci95": cp(errors, decided) if decided else None})
    return {"seeds": seeds, "split": "by task: 40% floor fit, 40% calibration (every trial), 20% test",
            "floor_kappa_test_mean": round(float(np.mean(kappas)), 4) if kappas else None,
            "floor_kappa_test_min": round(float(np.min(kappas)), 4) if kappas else None, "rows": table}


def population_risks(conf: np.ndarray, y: np.ndarray, weight: np.ndarray, grid: np.ndarray) -> dict:
    """Exact population coverage, D and F of every vector of `grid` (item weights summing to 1)."""
    decided, passed, _ = cascade_outcomes(conf, grid)
    yb = y.astype(bool)
    cover = decided @ weight
    wrong = (decided & (passed != yb)) @ weight
    failed = (decided & ~yb) @ weight
    false_pass = (decided & passed & ~yb) @ weight
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"coverage": cover, "D": np.where(cover > 0, wrong / cover, 0.0),
                "F": np.where(failed > 0, false_pass / failed, 0.0)}


def validity_part(data: LabeledSet, draws: int, seed: int) -> dict:
    """(a): the floor fit once on 40% of the tasks; the other tasks are the population; `draws` calibration sets
    of 40% of the set's tasks drawn with replacement from the population."""
    tasks = np.random.default_rng(seed).permutation(data.n_tasks)
    cut = int(round(SPLIT[0] * data.n_tasks))
    conf = data.floor(tasks[:cut])
    if conf is None:
        return {"skipped": "the fit share holds one class only"}
    pop_tasks = np.sort(tasks[cut:])
    pop = data.items_of(pop_tasks)
    weight = np.zeros(data.y.size)
    weight[pop] = 1.0 / (pop_tasks.size * data.trials[data.task_of[pop]])
    grid = threshold_grid(1)
    risks = population_risks(conf[None, :], data.y, weight, grid)
    index = {tuple(v.ravel()): i for i, v in enumerate(grid)}
    n_cal = int(round(SPLIT[1] * data.n_tasks))
    configs = [(c, a, None) for c in p_value_choices(data) for a in ALPHAS] + [("auto", F_CONFIG["alpha"],
                                                                                F_CONFIG["max_false_pass"])]
    tallies = {(m, c, a, b): {"bad": 0, "certified": 0, "coverage": []} for m in METHODS for c, a, b in configs}
    rng = np.random.default_rng(seed + 1)
    for draw in range(draws):
        drawn = np.bincount(rng.integers(0, pop_tasks.size, size=n_cal), minlength=pop_tasks.size)
        chosen = pop_tasks[drawn > 0]
        items = data.items_of(chosen)
        weights = np.repeat(drawn[drawn > 0], data.trials[chosen]).astype(np.float64)
        for (method, choice, alpha, beta), tally in tallies.items():
            result = fit(data, conf, items, choice, alpha, method, draw, beta, weights)
            if not result.certified:
                tally["coverage"].append(0.0)
                continue
            v = index[tuple(np.array(result.thresholds).ravel())]
            tally["certified"] += 1
            tally["coverage"].append(float(risks["coverage"][v]))
            tally["bad"] += bool(risks["D"][v] > alpha + 1e-12 or (beta is not None and risks["F"][v] > beta + 1e-12))
    rows = []
    for (method, choice, alpha, beta), tally in tallies.items():
        ci = cp(tally["bad"], draws)
        rows.append({"method": method, "p_values": choice, "alpha": alpha, "max_false_pass": beta, "delta": DELTA,
                     "draws": draws, "violations": tally["bad"], "violation_share": round(tally["bad"] / draws, 4),
                     "violation_ci95": ci, "valid": ci[0] <= DELTA, "certified_draws": tally["certified"],
                     "mean_population_coverage": round(float(np.mean(tally["coverage"])), 4)})
    best = {str(a): round(float(np.max(np.where(risks["D"] <= a, risks["coverage"], 0.0))), 4) for a in ALPHAS}
    return {"draws": draws, "population_tasks": int(pop_tasks.size), "population_trials": int(pop.size),
            "calibration_tasks_per_draw": n_cal, "floor_fit_tasks": cut,
            "best_population_coverage_with_D_le_alpha": best, "rows": rows}


def population(items) -> dict:
    """For part (c): the whole set with the floor's out-of-fold probabilities."""
    tasks = [f"{t.domain}/{t.task_id}" for t in items]
    names, task_of = np.unique(tasks, return_inverse=True)
    y = np.array([t.label for t in items], dtype=np.int64)
    cv = cross_validate(items)
    return {"y": y, "floor": cv.scores, "task_of": task_of, "members": [np.flatnonzero(task_of == k)
                                                                         for k in range(len(names))],
            "notes": cv.notes}


SIM_RUBRIC = SEED_RUBRIC.replace("\n\nScoring:", "\n" + "\n".join(
    f"{n}. " + c for n, c in enumerate((
        "Unresolved tool error: fail when a tool result marked ERROR is never followed by a successful result.",
        "Claims success without evidence: fail when the answer claims success but no committing call succeeded.",
        "No committing call: fail when the user asked for a change and no committing tool call succeeded.",
        "Handed off to a human: fail when the agent transferred the user to a human agent."), 7)) + "\n\nScoring:")


def simulated_verdicts(items) -> list[Verdict]:
    """The simulated judge's verdict on every item (`judging.verdict` on the rendered episode, read as the judge
    reads an LM's answer: `Verdict.from_answer`, the contradiction rule applied)."""
    from evals.simulator.judging import verdict

    config = RenderConfig()
    answers = (verdict(SIM_RUBRIC, render_trajectory(t, config)) for t in items)
    return [Verdict.from_answer(bool(a["passed"]), float(a["score"]), a["reason"]) for a in answers]


def simulated_confidences(items) -> np.ndarray:
    """Part (c)'s judge row: each simulated verdict's confidence, NaN (hands on) where it contradicts itself."""
    return np.array([np.nan if (c := stage_confidence(v)) is None else c for v in simulated_verdicts(items)])


def simulated_judge(items) -> "JudgeSource":
    """The simulated judge as a `evals.cascade_table.JudgeSource` (its LM named simulated): the calibration-size
    table's judge on `SIMULATED_SETS` until a set with a real judge's recorded verdicts stands beside it."""
    from evals.cascade_table import JudgeSource

    verdicts = simulated_verdicts(items)
    conf = np.array([np.nan if (c := stage_confidence(v)) is None else c for v in verdicts])
    seen = set(conf[~np.isnan(conf)].tolist())
    return JudgeSource(lm=f"simulated: {SIM_MODEL}", confidence=conf, passed=np.array([v.passed for v in verdicts]),
                       levels=(0.0, 1.0) if seen <= {0.0, 1.0} else None, simulated=True)


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
        cal = np.concatenate([pop["members"][k] for k in cal_tasks])  # every trial, grouped by task
        test = np.setdiff1d(np.arange(len(items)), np.concatenate([pop["members"][k] for k in cal_tasks]))
        for name, conf, costs in (("floor_then_judge", np.vstack([pop["floor"], judge]), (0.0, 1.0)),
                                  ("judge_only", judge[None, :], (1.0,))):
            result = learn_then_test(conf[:, cal], pop["y"][cal], alpha, DELTA, method=method, stage_costs=costs,
                                     groups=pop["task_of"][cal], seed=seed)
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
            for method in SIM_METHODS for alpha in SIMULATED_ALPHAS]


def record_verdicts(items, path: Path) -> RecordedJudge:
    """Part (d)'s judge: the simulated judge's verdict on every item written as verdict lines (`verdict_line`, what
    ``rubricforge judge`` writes; model named simulated), read back as a recorded stage (`RecordedJudge.from_file`,
    as ``--judge-verdicts`` and ``cascade fit --stage V.jsonl`` read it)."""
    with path.open("wb") as out:
        for t, v in zip(items, simulated_verdicts(items), strict=True):
            out.write(orjson.dumps(verdict_line(t, v, model=SIM_MODEL)) + b"\n")
    return RecordedJudge.from_file(path)


def hybrid_stage(judge: RecordedJudge, fit_items) -> tuple[FloorJudge, HybridJudge]:
    """The floor and the hybrid fit on `fit_items` as ``rubricforge floor --judge-verdicts V --save-floor`` fits
    them (`SymptomFloor.fit`; `trust.hybrid_cv.fit_hybrid_stack` over the recorded verdicts, by id)."""
    table = FeatureTable.build(fit_items)
    stack = fit_hybrid_stack([judge.verdicts.get(i) for i in table.ids], table, str(judge.source))
    return FloorJudge(SymptomFloor.fit(table)), HybridJudge(judge, stack)


def _rate(k: int, n: int) -> dict:
    return {"rate": round(k / n, 4) if n else None, "k": k, "n": n, "ci95": cp(k, n) if n else None}


def judged_seed(cascade, judge: RecordedJudge, test_items, fit_report: dict | None) -> dict:
    """One seed's test share judged by the fitted cascade (`Cascade.batch`), with the judge alone on the same
    decided items and on all of them; None for `cascade`: nothing certified (every item goes to a person)."""
    y = np.array([t.label for t in test_items], dtype=bool)
    alone = np.array([judge.verdicts[t.id].passed for t in test_items], dtype=bool)
    n = len(test_items)
    if cascade is None:
        decided, passed, calls, by = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), 0, {}
    else:
        out = cascade.batch(test_items)
        decided = np.array([s != ESCALATED for s in out.stages], dtype=bool)
        passed = np.array([v.passed for v in out], dtype=bool)
        judging = [r.name for r, stage in zip(cascade.rules, cascade.stages, strict=True)
                   if not isinstance(stage, FloorJudge)]
        calls = sum(out.stage_calls.get(name, 0) for name in judging)
        by = out.decided_by
    return {"certified": cascade is not None, "n_test": n, "decided": int(decided.sum()), "decided_by": by,
            "escalated": int((~decided).sum()), "reached_judge": int(calls),
            "errors": int((decided & (passed != y)).sum()), "failed_decided": int((decided & ~y).sum()),
            "false_passes": int((decided & passed & ~y).sum()),
            "judge_errors_same_items": int((decided & (alone != y)).sum()),
            "judge_false_passes_same_items": int((decided & alone & ~y).sum()),
            "judge_errors_all": int((alone != y).sum()), "failed_all": int((~y).sum()),
            "judge_false_passes_all": int((alone & ~y).sum()),
            "thresholds": None if cascade is None else [r.to_dict() for r in cascade.rules],
            "dropped": [] if fit_report is None else [d["name"] for d in fit_report.get("dropped", [])]}


def pooled(runs: list[dict]) -> dict:
    """Part (d)'s pooled numbers over the seeds (an uncertified seed: every test item to a person, no call)."""
    total = {k: sum(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], int) and not isinstance(
        runs[0][k], bool)}
    n, decided = total["n_test"], total["decided"]
    return {"seeds": len(runs), "certified_seeds": sum(r["certified"] for r in runs), "n_test": n,
            "person_share": round(total["escalated"] / n, 4), "decided_share": round(decided / n, 4),
            "reach_judge_share": round(total["reached_judge"] / n, 4),
            "never_reach_judge_share": round(1 - total["reached_judge"] / n, 4),
            "lm_calls_saved_vs_judging_everything": round(1 - total["reached_judge"] / n, 4),
            "cascade_D_decided": _rate(total["errors"], decided),
            "cascade_FP_decided": _rate(total["false_passes"], total["failed_decided"]),
            "judge_alone_D_same_decided": _rate(total["judge_errors_same_items"], decided),
            "judge_alone_FP_same_decided": _rate(total["judge_false_passes_same_items"], total["failed_decided"]),
            "judge_alone_D_all_test": _rate(total["judge_errors_all"], n),
            "judge_alone_FP_all_test": _rate(total["judge_false_passes_all"], total["failed_all"])}


def hybrid_criteria(summary: dict) -> dict:
    """The issue's acceptance for floor -> hybrid(judge) -> person, on the pooled numbers."""
    def at_most(a: dict, b: dict) -> bool | None:
        return None if a["rate"] is None or b["rate"] is None else a["rate"] <= b["rate"]

    return {"certified_every_seed": summary["certified_seeds"] == summary["seeds"],
            "person_share_le_0_10": summary["person_share"] <= 0.10,
            "half_never_reach_judge": summary["never_reach_judge_share"] >= 0.5,
            "D_le_judge_alone_same_items": at_most(summary["cascade_D_decided"],
                                                   summary["judge_alone_D_same_decided"]),
            "FP_le_judge_alone_same_items": at_most(summary["cascade_FP_decided"],
                                                    summary["judge_alone_FP_same_decided"]),
            # issue 39's acceptance (alpha 0.2, default settings, 5 seeds)
            "issue39_certified_ge_4_of_5": summary["certified_seeds"] >= 4 * summary["seeds"] / 5,
            "issue39_person_share_le_0_25": summary["person_share"] <= 0.25,
            "issue39_never_reach_judge_ge_0_45": summary["never_reach_judge_share"] >= 0.45}


def order_kwargs(fit_items) -> dict:
    """``order_trajectories=`` for `fit_cascade` when the library orders its sequence from data the calibration
    never sees (issue 39 item 2: the fit share); {} when it does not take them."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(FitOptions)}
    return {"order_trajectories": fit_items} if "order_trajectories" in known else {}


def hybrid_part(data: dict, seeds: int, recorded: RecordedJudge | None = None) -> dict:
    """(d): per seed a by-task 40/40/20 split; the floor and the hybrid fit on 40%, `fit_cascade` on 40%, the
    test share judged (`HYBRID_VARIANTS`). The judge: `recorded` (a real LM's recorded verdicts), else the
    simulated judge recorded as verdict lines."""
    items = data["items"]
    task_of = np.unique([f"{t.domain}/{t.task_id}" for t in items], return_inverse=True)[1]
    n_tasks = int(task_of.max()) + 1
    runs: dict[tuple, list[dict]] = {variant: [] for variant in HYBRID_VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        judge = recorded if recorded is not None else record_verdicts(items,
                                                                     Path(folder) / "simulated_judge.verdicts.jsonl")
        for seed in range(seeds):
            tasks = np.random.default_rng(seed).permutation(n_tasks)
            cut1, cut2 = int(round(SPLIT[0] * n_tasks)), int(round((SPLIT[0] + SPLIT[1]) * n_tasks))
            fit_items, cal_items, test_items = ([items[i] for i in np.flatnonzero(np.isin(task_of, part))]
                                                for part in (tasks[:cut1], tasks[cut1:cut2], tasks[cut2:]))
            floor, hybrid = hybrid_stage(judge, fit_items)
            for variant in HYBRID_VARIANTS:
                name, costs, beta = variant
                stages = [floor, hybrid if name == "floor_hybrid_person" else judge]
                try:
                    cascade = fit_cascade(stages, cal_items, FitOptions(
                        HYBRID_ALPHA, DELTA, beta, seed=seed,
                        stage_costs=(0.0, 1.0) if costs == "judge_costs_1" else None, **order_kwargs(fit_items)))
                    run = judged_seed(cascade, judge, test_items, cascade.fit_report)
                except CascadeCalibrationError as error:
                    run = {**judged_seed(None, judge, test_items, None), "refusal": str(error)}
                runs[variant].append({"seed": seed, **run})
    rows = []
    for (name, costs, beta), seed_runs in runs.items():
        summary = pooled(seed_runs)
        rows.append({"cascade": name, "stage_costs": costs, "alpha": HYBRID_ALPHA, "max_false_pass": beta,
                     "delta": DELTA, "method": DEFAULT_METHOD, **summary,
                     **({"acceptance": hybrid_criteria(summary)} if name == "floor_hybrid_person" else {}),
                     "per_seed": seed_runs})
    y = np.array([t.label for t in items], dtype=bool)
    alone = np.array([judge.verdicts[t.id].passed for t in items], dtype=bool)
    return {"seeds": seeds, "split": "by task: 40% floor and hybrid fit, 40% calibration (every trial), 20% test",
            "judge": f"simulated ({SIM_MODEL}: evals/simulator judging.verdict, the part (c) rubric), written as "
                     "verdict lines and read back as a RecordedJudge" if recorded is None else
                     f"real: {recorded_lm(recorded)}, recorded verdicts {Path(recorded.source).name} "
                     "(evals/real_judges.py)", "judge_simulated": recorded is None,
            "judge_alone_whole_set": {"pass_rate": round(float(alone.mean()), 4),
                                      "kappa": round(float(cohens_kappa(y.astype(int), alone.astype(int))), 4),
                                      "D": _rate(int((alone != y).sum()), y.size),
                                      "FP": _rate(int((alone & ~y).sum()), int((~y).sum()))},
            "rows": rows}


def judge_parts(data: dict, args) -> dict:
    """Parts (c) and (d) of a set: with the real judge's recorded verdicts where the set ships them
    (``real_floor_then_judge``, ``hybrid_cascade``), and with the simulated judge on `SIMULATED_SETS`
    (``simulated_floor_then_judge``, and ``hybrid_cascade`` there: named simulated in its ``judge``)."""
    out: dict = {}
    real = real_judge(data)
    if real is not None:
        pop = population(data["items"])
        conf = recorded_source(data["items"], real).confidence
        out["real_floor_then_judge"] = [{**simulated(pop, conf, data["items"], args.splits, args.seed, method, alpha),
                                         "judge": f"real: {recorded_lm(real)}"}
                                        for method in SIM_METHODS for alpha in SIMULATED_ALPHAS]
        out["hybrid_cascade"] = hybrid_part(data, HYBRID_SEEDS, real)
    if data["name"] in SIMULATED_SETS:
        out["simulated_floor_then_judge"] = simulated_part(data, population(data["items"]), args)
    if real is None:
        out["hybrid_cascade"] = hybrid_part(data, HYBRID_SEEDS)
    return out


def real_judge(data: dict) -> RecordedJudge | None:
    """The real LLM judge's recorded verdicts of a set in `REAL_JUDGE_SETS` (`evals.real_judges`), as a recorded
    stage (`RecordedJudge.from_file`); None for another set."""
    if data["name"] not in REAL_JUDGE_SETS:
        return None
    from evals.real_judges import load_real_judge_set

    real, judge = REAL_JUDGE_SETS[data["name"]]
    recorded = RecordedJudge.from_file(load_real_judge_set(real).verdicts[judge])
    missing = [t.id for t in data["items"] if t.id not in recorded.verdicts]
    if missing:
        raise ValueError(f"{recorded.source}: no recorded verdict for {len(missing)} items (first {missing[0]!r})")
    return recorded


def recorded_lm(judge: RecordedJudge) -> str:
    """The LM a recorded verdict file names (its lines' ``model``)."""
    from rubricforge_dspy.core.verdict import read_verdicts

    models = sorted({str(line.get("model") or "") for line in read_verdicts(judge.source).values()} - {""})
    return "; ".join(models) or f"not recorded in {judge.source}"


def recorded_source(items, judge: RecordedJudge) -> "JudgeSource":
    """A recorded judge as a `evals.cascade_table.JudgeSource` (real: simulated=False)."""
    from evals.cascade_table import JudgeSource

    verdicts = [judge.verdicts[t.id] for t in items]
    conf = np.array([np.nan if (c := stage_confidence(v)) is None else c for v in verdicts])
    return JudgeSource(lm=recorded_lm(judge), confidence=conf, passed=np.array([bool(v.passed) for v in verdicts]),
                       levels=judge.confidence_levels, simulated=False)


def judge_sources(data: dict) -> dict:
    """The judges of a set for the calibration-size table, by name: a real LM's recorded verdicts where the set ships
    them (issue 39 item 7), and the simulated judge on `SIMULATED_SETS`, named as simulated."""
    out = {}
    real = real_judge(data)
    if real is not None:
        out[REAL_JUDGE_SETS[data["name"]][1]] = recorded_source(data["items"], real)
    if data["name"] in SIMULATED_SETS:
        out["simulated"] = simulated_judge(data["items"])
    return out


TABLE_OUT = ROOT / "evals" / "results" / "cascade_table.json"


def table_part(args) -> int:
    """(e) the calibration-size table and (f) the floor-only acceptance at alpha 0.1 (`evals.cascade_table`), written
    to `TABLE_OUT` (or ``--table-out``)."""
    from evals import cascade_table as ct
    from evals.cascade_table import FLOOR_ONLY_SETS

    started = time.perf_counter()
    ct.FALSE_PASS = args.false_pass
    sets, floor_only, skipped, judges_used = [], [], [], {}
    for data in datasets(args.shipped_only):
        if args.only and not any(word in data["name"] for word in args.only):
            continue
        t0 = time.perf_counter()
        table = FeatureTable.build(data["items"])
        judges = judge_sources(data)
        try:
            prep = ct.prepare(data["name"], data["items"], args.seed, judges, table)
        except ct.PrepareError as error:
            skipped.append({"dataset": data["name"], "reason": str(error)})
            continue
        judges_used.update({f"{data['name']}/{k}": j.lm for k, j in judges.items()})
        rows = [ct.table_row(prep, cascade, method, bound, size, alpha, args.table_draws, args.seed)
                for cascade in prep.cascades() for method in ct.methods() for bound in ct.BOUNDS
                for size in prep.sizes() for alpha in ct.TABLE_ALPHAS["floor" if cascade == "floor"
                                                                     else "floor_judge"]]
        sets.append({"dataset": data["name"], "file": data["file"], "shipped": data["shipped"],
                     "n": int(prep.y.size), "tasks": int(prep.fit_tasks.size + prep.pop_tasks.size),
                     "fit_tasks": int(prep.fit_tasks.size), "population_tasks": int(prep.pop_tasks.size),
                     "population_trials": int((prep.weight > 0).sum()),
                     "trials_per_task": round(float(prep.trials.mean()), 2),
                     "judges": {k: j.lm for k, j in judges.items()}, "floor_cv_notes": prep.notes,
                     "rows": rows, "wall_time_s": round(time.perf_counter() - t0, 1)})
        if data["name"] in FLOOR_ONLY_SETS:
            floor_only.append(ct.floor_only_acceptance(data["name"], data["items"], args.table_seeds,
                                                       args.table_draws, table))
        print(f"{data['name']}: {len(rows)} table rows, {sets[-1]['wall_time_s']} s", file=sys.stderr)
    features = ct.library_features()
    out = {"benchmark": "evals/bench_cascade.py --table-only (evals/cascade_table.py)", "machine": machine(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "lm": {"floor": "none: the symptom floor (real, fit on the fit share)",
                  "judges": judges_used or "none in this run",
                  "note": "a judge named 'simulated: ...' is the simulator (evals/simulator), not an LM"},
           "library": {"default_method": DEFAULT_METHOD, "methods": list(ct.methods()), **features,
                       "false_pass": args.false_pass or DEFAULT_FALSE_PASS,
                       "false_pass_ratio": FALSE_PASS_RATIOS[args.false_pass or DEFAULT_FALSE_PASS],
                       "betting_stake_cap": RATIO_STAKE_CAP},
           "protocol": {"fit_share_of_tasks": ct.FIT_SHARE, "sizes": list(ct.SIZES), "delta": ct.DELTA,
                        "alphas": ct.TABLE_ALPHAS, "draws_per_cell": args.table_draws, "seed": args.seed,
                        "population": "the tasks outside the fit share (task-uniform: a random task, a random "
                                      "trial); calibration tasks drawn from it with replacement; coverage, D and F "
                                      "exact on it",
                        "valid": "the violation share's exact 95% interval reaches delta or below",
                        "floor_only_acceptance": {"alpha": ct.FLOOR_ONLY_ALPHA, "tasks": ct.FLOOR_ONLY_TASKS,
                                                  "seeds": args.table_seeds}},
           "quick": bool(args.quick), "summary": ct.summarize(sets), "sets": sets, "skipped": skipped,
           "floor_only_acceptance": floor_only,
           "wall_time_s": round(time.perf_counter() - started, 1)}
    Path(args.table_out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.table_out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.table_out} in {out['wall_time_s']} s", file=sys.stderr)
    return 0


def simulated_only(args) -> int:
    out = json.loads(Path(args.out).read_text())
    rows = {row["dataset"]: row for row in out["datasets"]}
    for data in datasets(shipped_only=True):
        if data["name"] in HYBRID_SETS and data["name"] in rows:
            rows[data["name"]].update(judge_parts(data, args))
    out["acceptance"] = acceptance(out["datasets"])
    out["simulated_rerun"] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "splits": args.splits,
                              "note": "parts (c) and (d) recomputed with --simulated-only; parts (a) and (b) from the "
                                      "run above"}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def acceptance(results: list[dict]) -> dict:
    """The issue's acceptance: where the floor's out-of-fold kappa is >= 0.8, the floor-only cascade decides >= 60%
    of the test items at alpha 0.1 (delta 0.1) in at least 2 of 3 seeds (read: a share of seeds >= 2/3), per
    method and p-value choice; and every validity row is valid."""
    strong = [d for d in results if d["floor_kappa_out_of_fold"] >= 0.8 and "coverage" in d]
    out = {"strong_floor_sets": [d["dataset"] for d in strong], "coverage_ge_0_6_in_2_of_3_seeds": {}}
    for method in METHODS:
        for choice in ("auto", "one_per_task", "hoeffding_bentkus", "betting"):
            shares = {d["dataset"]: r["share_seeds_coverage_ge_0_6"] for d in strong for r in d["coverage"]["rows"]
                      if r["method"] == method and r["p_values"] == choice and r["alpha"] == 0.10}
            if shares:
                out["coverage_ge_0_6_in_2_of_3_seeds"][f"{method}/{choice}"] = {
                    "met_on_every_strong_set": all(v >= 2 / 3 for v in shares.values()), "share_of_seeds": shares}
    out["all_valid"] = all(r["valid"] for d in results for r in d.get("validity", {}).get("rows", []))
    out["issue39_hybrid_default_settings_alpha_0_2"] = {
        d["dataset"]: {"judge": d["hybrid_cascade"]["judge"], **next(
            {k: r[k] for k in ("certified_seeds", "seeds", "person_share", "never_reach_judge_share",
                               "cascade_D_decided", "judge_alone_D_same_decided", "cascade_FP_decided",
                               "judge_alone_FP_same_decided", "acceptance")}
            for r in d["hybrid_cascade"]["rows"] if r["cascade"] == "floor_hybrid_person"
            and r["stage_costs"] == "library_default" and r["max_false_pass"] is None)}
        for d in results if "hybrid_cascade" in d}
    out["hybrid_cascade_alpha_0_2"] = {
        d["dataset"]: next(r["acceptance"] for r in d["hybrid_cascade"]["rows"]
                           if r["cascade"] == "floor_hybrid_person" and r["stage_costs"] == "judge_costs_1"
                           and r["max_false_pass"] is None)
        for d in results if "hybrid_cascade" in d}
    return out


def summary_table(results: list[dict], alpha: float) -> str:
    """Markdown: per set and method, the mean test coverage at `alpha` for each p-value choice."""
    lines = ["| set (tasks, trials/task, floor κ OOF) | p-values | " + " | ".join(METHODS) + " |",
             "|---|---|" + "---|" * len(METHODS)]
    for d in results:
        if "coverage" not in d:
            continue
        label = f"{d['dataset']} ({d['tasks']}, {d['trials_per_task']}, {d['floor_kappa_out_of_fold']:.2f})"
        for choice in dict.fromkeys(r["p_values"] for r in d["coverage"]["rows"]):
            cells = []
            for method in METHODS:
                r = next(r for r in d["coverage"]["rows"] if r["method"] == method and r["p_values"] == choice
                         and r["alpha"] == alpha)
                cells.append(f"{r['mean_test_coverage']:.2f} ({r['share_seeds_coverage_ge_0_6']:.2f})")
            lines.append(f"| {label} | {choice} | " + " | ".join(cells) + " |")
            label = ""
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench_cascade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="100 draws, 6 seeds, no parts (c) and (d)")
    parser.add_argument("--only", nargs="*", help="only the sets whose name contains one of these")
    parser.add_argument("--shipped-only", action="store_true")
    parser.add_argument("--no-simulated", action="store_true", help="skip parts (c) and (d) (the simulated judge)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--simulated-only", action="store_true",
                        help="recompute parts (c) and (d) only, into the existing --out file (a and b kept)")
    parser.add_argument("--table-only", action="store_true",
                        help="parts (e) and (f) only: the calibration-size table and the floor-only acceptance")
    parser.add_argument("--no-table", action="store_true", help="skip parts (e) and (f)")
    parser.add_argument("--table-draws", type=int, default=100, help="calibration draws per table cell")
    parser.add_argument("--table-seeds", type=int, default=20, help="40/40/20 seeds of the floor-only acceptance")
    parser.add_argument("--table-out", default=str(TABLE_OUT))
    parser.add_argument("--false-pass", choices=("among_failed", "among_passes"), default=None,
                        help="the false-pass rate the per-stage bound tests in (e) and (f) (default: the library's)")
    args = parser.parse_args(argv)
    if args.quick:
        args.draws, args.seeds, args.no_simulated = min(args.draws, 100), min(args.seeds, 6), True
        args.table_draws, args.table_seeds = min(args.table_draws, 10), min(args.table_seeds, 3)
    if args.simulated_only:
        return simulated_only(args)
    if args.table_only:
        return table_part(args)
    started = time.perf_counter()
    results = []
    for data in datasets(args.shipped_only):
        if args.only and not any(word in data["name"] for word in args.only):
            continue
        t0 = time.perf_counter()
        labeled = LabeledSet(data["items"])
        cv = cross_validate(labeled.table)
        floor_kappa = float(cohens_kappa(labeled.y, (cv.scores >= 0.5).astype(int)))
        row = {"dataset": data["name"], "file": data["file"], "shipped": data["shipped"], "n": len(data["items"]),
               "tasks": labeled.n_tasks, "multi_trial": labeled.multi_trial,
               "trials_per_task": round(float(labeled.trials.mean()), 2),
               "max_trials_per_task": int(labeled.trials.max()), "pass_rate": round(float(labeled.y.mean()), 4),
               "floor_kappa_out_of_fold": round(floor_kappa, 4), "coverage": coverage_part(labeled, args.seeds),
               "validity": validity_part(labeled, args.draws, args.seed)}
        if data["name"] in HYBRID_SETS and not args.no_simulated:
            row.update(judge_parts(data, args))
        row["wall_time_s"] = round(time.perf_counter() - t0, 1)
        results.append(row)
        best = max((r for r in row["coverage"]["rows"] if r["alpha"] == 0.10), key=lambda r: r["mean_test_coverage"])
        print(f"{data['name']}: n {row['n']} tasks {row['tasks']} kappa {floor_kappa:.2f}; best cov@0.1 "
              f"{best['mean_test_coverage']:.2f} ({best['method']}/{best['p_values']}); violations max "
              f"{max((r['violation_share'] for r in row['validity'].get('rows', [])), default=0):.3f}; "
              f"{row['wall_time_s']} s", file=sys.stderr)
    out = {"benchmark": "evals/bench_cascade.py", "machine": machine(),
           "lm": {"floor": "none: the symptom floor (real; fit on a share of the tasks, see 'method')",
                  "judge": "parts (c) and (d) only: simulated (evals/simulator judging.verdict; in (d) recorded as "
                           "verdict lines); no real LM is called"},
           "method": {"ltt_methods": list(METHODS), "default_method_in_code": DEFAULT_METHOD,
                      "p_values": "auto (binomial with one trial per task, else betting); one_per_task (binomial on "
                                  "one drawn trial per task); hoeffding_bentkus; betting (on one-trial sets)",
                      "grid_vectors_per_stage": int(threshold_grid(1).shape[0]), "delta": DELTA, "alphas": list(ALPHAS),
                      "false_pass_validity": F_CONFIG, "unit": "task (every trial used, losses averaged per task)",
                      "coverage": "by-task 40/40/20 splits (floor fit / calibration / test)",
                      "validity": "floor fit on 40% of the tasks; population = the other tasks, task-uniform; "
                                  "calibration draws of 40% of the set's tasks with replacement from it"},
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "draws": args.draws, "seeds": args.seeds,
           "seed": args.seed, "quick": bool(args.quick), "acceptance": acceptance(results),
           "wall_time_s": round(time.perf_counter() - started, 1), "datasets": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(summary_table(results, 0.10))
    print(f"wrote {args.out} in {out['wall_time_s']} s; all valid: {out['acceptance']['all_valid']}", file=sys.stderr)
    return 0 if args.no_table else table_part(args)


if __name__ == "__main__":
    sys.exit(main())
