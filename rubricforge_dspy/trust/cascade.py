"""Fit a certified cascade: per-stage thresholds chosen on labeled calibration data by Learn-then-Test.

``fit_cascade(stages, labeled, alpha, delta, max_false_pass=None)`` returns a `judge.cascade.Cascade` whose
thresholds carry the guarantee of `metrics.risk_control` (the theorem, its assumptions and references
are stated there): with probability at least ``1 - delta`` over the calibration draw, among the items the
cascade decides, the disagreement with the label is at most ``alpha`` and, when asked, the false-pass rate
(failed trajectories passed, over the failed ones decided) is at most ``max_false_pass``. Disagreement is
always bounded: a cascade that fails everything has no false passes.

The unit is the task, and every trial counts. Trials of one task are not independent, so each task contributes
the mean of its trials' losses (`metrics.risk_control`): the task means are i.i.d., and the guarantee speaks of
the population (a random task, a random trial of it). Every labeled trajectory is used (the fit reports the tasks
and trials); `one_per_task=True` keeps one drawn trial per task instead (counted as dropped). Split calibration
and later data by task (`data.split.split_by_task`).

Each stage's grid comes from the values its confidence can take (`BaseJudge.confidence_levels`: a pass/fail
verdict has two, so its thresholds are 6 distinct rules, not 56), fixed before any label is seen. A stage the
certified thresholds leave deciding nothing is dropped from the returned cascade (``fit_report["dropped"]``
says which and why): judging never pays for it.

Each stage's confidences on the calibration units are computed once (its own ``batch``), and an LLM stage
only on the units some threshold choice of the stages before it could leave (with the default grid, whose
levels include "never decide", that is every unit: calibrating costs one call per unit and LLM stage;
judging later costs calls only for what the earlier stages leave). An answer that is not a
verdict hands the unit on (as the cascade does when judging); an LM error stops the fit
(`CascadeStageError`, exit 3): a failed call is never read as a confidence. The stages must not have been
fit on the calibration data (assumption 3).

The guarantee records the label rule the calibration labels were made with (``guarantee["label_rule"]``:
``rules``, their ``source`` and the ``labels`` file, `label_rule_record`): disagreement is measured against
labels, and a bound certified under "reward > 0" means nothing under "reward >= 1". Labels read against the
cascade later are read by that rule (`report.cascade.cascade_label_rule`).

When no threshold vector is certified the fit refuses (`CascadeCalibrationError`, exit 2) and says how
many decided labels the requested alpha needs at the observed error rate (`risk_control.decided_needed`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rubricforge_dspy.core.errors import InputError, ServerError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import (
    ANY_POSITIVE_REWARD,
    LabelRule,
    Trajectory,
    parse_label_rule,
    require_labels,
)
from rubricforge_dspy.judge.cascade import ESCALATED, Cascade, CascadeVerdicts, StageRule, stage_confidence
from rubricforge_dspy.judge.contract import BaseJudge
from rubricforge_dspy.judge.floor import FloorJudge
from rubricforge_dspy.judge.recorded import as_stage
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS
from rubricforge_dspy.metrics.intervals import proportion_ci
from rubricforge_dspy.metrics.risk_control import (
    DEFAULT_METHOD,
    FAIL_LEVELS,
    PASS_LEVELS,
    GridResult,
    cascade_outcomes,
    decided_needed,
    learn_then_test,
    stage_pairs,
    tasks_needed,
)
from rubricforge_dspy.report.cascade import format_token_spend

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.core.verdict import Verdict

__all__ = ["CascadeCalibrationError", "CascadeStageError", "FitReport", "fit_cascade", "calibration_units",
           "stage_names", "stage_cost", "cascade_summary", "measure_cascade", "format_fit_report",
           "format_cascade_summary", "THEOREM", "REFERENCES", "label_rule_record"]

THEOREM = ("With probability at least 1 - delta over the calibration draw, among the items the cascade decides "
           "the disagreement with the label is at most alpha and, when max_false_pass is set, the false-pass rate "
           "is at most max_false_pass, for the population of a random task and a random trial of it. Assumes "
           "calibration and later tasks are i.i.d. (trials within a task may be dependent: their losses are "
           "averaged per task), the threshold grid fixed before the labels, and stages not fit on the "
           "calibration data.")
REFERENCES = ("Angelopoulos, Bates, Candes, Jordan, Lei 2021, Learn then Test, arXiv:2110.01052",
              "Waudby-Smith, Ramdas 2024, Estimating means of bounded random variables by betting, JRSSB 86(1)",
              "Jung, Brahman, Choi, ICLR 2025, Trust or Escalate",
              "Bates, Angelopoulos, Lei, Malik, Jordan 2021, Distribution-free risk-controlling prediction sets",
              "Berger 1982, Multiparameter hypothesis testing and acceptance sampling (intersection-union)")


DROPPED_WHY = ("certified to decide nothing (its thresholds never pass and never fail): judging would pay for it "
               "and throw its answers away")
METHOD_WHY = {
    "split_fixed_sequence": "the default: the most coverage at equal validity on the benchmark sets "
                            "(evals/bench_cascade.py); an order learned on a share of the tasks, no multiplicity cost",
    "holm": "Holm over every distinct threshold vector",
    "bonferroni": "Bonferroni over every distinct threshold vector",
    "fail_first_sequence": "a fixed sequence ordered before the data, fail-only vectors first",
}


class CascadeCalibrationError(InputError):
    """No threshold vector could be certified on the calibration data (exit 2); the message says how many
    decided labels would be needed. ``needed_decided`` / ``needed_labels``: those counts (None: none suffices
    at the observed error rate)."""

    def __init__(self, message: str, needed_decided: int | None = None, needed_labels: int | None = None):
        super().__init__(message)
        self.needed_decided, self.needed_labels = needed_decided, needed_labels


class CascadeStageError(ServerError):
    """A stage's LM failed on calibration items (exit 3): its confidences cannot be computed."""


@dataclass(frozen=True)
class FitReport:
    """What the fit saw and chose (JSON-safe through `to_dict`; stored in the cascade's manifest).

    ``stages``: per stage, its name, thresholds, units reached and decided, share decided, realized
    disagreement and false-pass rate on the calibration units with exact (Clopper-Pearson) 95% intervals,
    unparseable answers, and ``calls``: the units it was run on during the fit. ``chosen``: the
    `GridResult`. ``units``: calibration tasks and trials used (tested, ordering) and trials dropped (only
    with ``one_per_task``). ``dropped``: the stages certified to decide nothing, removed from the cascade."""

    chosen: dict[str, Any]
    stages: list[dict[str, Any]]
    units: dict[str, Any]
    escalated: int
    guarantee: dict[str, Any] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def calibration_units(trajectories: Sequence[Trajectory], one_per_task: bool = False, seed: int = 0) -> np.ndarray:
    """Indices of the calibration items: every trajectory (default), or one trial drawn per task
    (``domain/task_id``) with `seed`."""
    if not one_per_task:
        return np.arange(len(trajectories))
    rng = np.random.default_rng(seed)
    by_task: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        by_task.setdefault(f"{t.domain}/{t.task_id}", []).append(i)
    return np.array(sorted(int(rng.choice(members)) for members in by_task.values()), dtype=np.int64)


def stage_names(stages: Sequence[BaseJudge]) -> list[str]:
    """Default stage names: a floor's own name (``floor``), a stage's ``stage_name`` when it has one (``recorded``,
    ``hybrid``), ``judge``, ``judge2``... for the others."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for stage in stages:
        base = stage.floor.name if isinstance(stage, FloorJudge) else getattr(stage, "stage_name", None) or "judge"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}{seen[base]}")
    return names


def _could_leave(conf: np.ndarray, levels: Sequence[float] | None, pass_levels: Sequence[float],
                 fail_levels: Sequence[float]) -> np.ndarray:
    """Units some (t_pass, t_fail) pair of the stage's grid hands on, given its confidences."""
    pairs = stage_pairs(levels, pass_levels, fail_levels)
    left = np.zeros(conf.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        for tp, tf in pairs:
            left |= ~((conf >= tp) | (conf <= tf))
    return left


def _stage_confidences(stage: BaseJudge, name: str, items: list[Trajectory],
                       num_threads: int | None) -> tuple[np.ndarray, int]:
    verdicts = stage.batch(items, num_threads) if items else []
    failed = [v for v in verdicts if v.abstained and v.error_kind in LM_ERROR_KINDS]
    if failed:
        kinds = sorted({v.error_kind for v in failed if v.error_kind is not None})
        raise CascadeStageError(f"stage {name!r}: the LM failed on {len(failed)} of {len(items)} calibration items "
                                f"({', '.join(kinds)}; first: {failed[0].error}); fix the server and fit again")
    conf = np.array([np.nan if (c := stage_confidence(v)) is None else c for v in verdicts], dtype=np.float64)
    return conf, sum(v.abstained for v in verdicts)


def _refusal(result: GridResult, n_items: int, tasks: int) -> CascadeCalibrationError:
    """Why nothing was certified, and what more labels of this kind of data can and cannot buy."""
    sequence = result.method in ("split_fixed_sequence", "fail_first_sequence")
    level = result.delta if sequence else result.delta / result.n_tested
    rate = result.disagreement if result.disagreement is not None else 0.0
    bound = f" and false-pass <= {result.max_false_pass}" if result.max_false_pass is not None else ""
    used = (f"{result.n_trials} trials of {result.n_tasks} tasks tested"
            + (f", {result.n_order_tasks} more tasks ordered the grid (split fixed sequence: "
               f"{result.n_order_tasks / max(result.n_order_tasks + result.n_tasks, 1):.0%} of the tasks)"
               if result.n_order_tasks else "")
            + f"; {n_items} calibration trajectories of {tasks} tasks given")
    seen = (f"the closest vector decides {result.n_decided} trials with {result.errors} disagreement(s)"
            + (f" and {result.false_passes} false pass(es) of {result.n_failed_decided} failed"
               if result.max_false_pass is not None else "") + f" (p = {result.p_value:.3g}, needs <= {level:.3g}: "
            f"delta {result.delta}" + ("" if sequence else f" over {result.n_tested} vectors") + f", {result.method}, "
            f"{result.p_values} p-values)")
    share = result.coverage
    needed = labels = None
    if rate >= result.alpha:
        advice = (f"at its observed disagreement {rate:.3f} >= alpha {result.alpha} no number of labels suffices: "
                  "raise alpha, or use stronger stages")
    else:
        trials = max(result.n_trials / max(result.n_tasks, 1), 1.0)
        if result.p_values == "binomial":
            needed = decided_needed(result.alpha, level, rate)
            labels = math.ceil(needed / share) if needed is not None and share > 0 else None
            need_tasks = labels
        else:
            need_tasks = tasks_needed(result.alpha, level, share, rate)
            needed = math.ceil(need_tasks * share * trials) if need_tasks is not None else None
            labels = math.ceil(need_tasks * trials) if need_tasks is not None else None
        if need_tasks is None:
            advice = "no number of tasks suffices at this coverage and error rate: raise alpha or use stronger stages"
        else:
            total = (math.ceil(need_tasks * (result.n_order_tasks + result.n_tasks) / max(result.n_tasks, 1))
                     if result.n_order_tasks else need_tasks)
            advice = (f"certifying it needs about {need_tasks} labeled tasks in the test"
                      + (f" (about {total} with the ordering share)" if total != need_tasks else "")
                      + f" at its coverage {share:.2f} and disagreement {rate:.3f}"
                      + (f": more trials of the same {tasks} tasks cannot replace tasks (the task is the unit)"
                         if result.p_values != "binomial" else ""))
    return CascadeCalibrationError(
        f"cascade fit refused: no threshold vector is certified for disagreement <= {result.alpha}{bound} with "
        f"probability >= {1 - result.delta:.2f} ({used}); {seen}; {advice}", needed, labels)


def _stage_rows(names: Sequence[str], conf: np.ndarray, y: np.ndarray, result: GridResult, calls: Sequence[int],
                unparsed: Sequence[int]) -> tuple[list[dict[str, Any]], int]:
    grid = np.asarray(result.thresholds, dtype=np.float64)[None]
    decided, passed, stage = cascade_outcomes(conf, grid)
    rows: list[dict[str, Any]] = []
    yb = y.astype(bool)
    for k, name in enumerate(names):
        mine = stage[0] == k
        n, errors = int(mine.sum()), int((passed[0][mine] != yb[mine]).sum())
        failed, false_passes = int((mine & ~yb).sum()), int((mine & passed[0] & ~yb).sum())
        d_ci = proportion_ci(errors, n) if n else (0.0, 1.0)
        f_ci = proportion_ci(false_passes, failed) if failed else (0.0, 1.0)
        t_pass = result.thresholds[k][0]
        rows.append({"name": name, "t_pass": t_pass if math.isfinite(t_pass) else None,
                     "t_fail": result.thresholds[k][1] if math.isfinite(result.thresholds[k][1]) else None,
                     "reached": int(((stage[0] == -1) | (stage[0] >= k)).sum()), "decided": n,
                     "decided_pass": int((mine & passed[0]).sum()), "share_decided": n / max(len(y), 1),
                     "disagreement": errors / n if n else None, "disagreement_ci95": list(d_ci),
                     "false_pass": false_passes / failed if failed else None, "false_pass_ci95": list(f_ci),
                     "unparseable": unparsed[k], "calls": calls[k]})
    return rows, int((~decided[0]).sum())


def label_rule_record(trajectories: Sequence[Trajectory], label_rule: LabelRule | str | float | None = None,
                      labels: str | None = None) -> dict[str, Any]:
    """The label rule a cascade's calibration labels were made with, as its guarantee records it.

    Args:
        trajectories: the labeled calibration trajectories (each carries the rule that labeled it,
            ``hidden["label_rule"]``).
        label_rule: the rule given (``--label-threshold``); None: each format's own rule, as the trajectories
            record it.
        labels: the label file joined (``--labels``), or None.

    Returns:
        ``{"rules": [...], "source": "given" | "each format's own rule", "labels": labels}``: one rule, or the
        formats' several rules (sorted).
    """
    if label_rule is not None:
        return {"rules": [str(parse_label_rule(label_rule))], "source": "given", "labels": labels}
    rules = sorted({str(t.hidden.get("label_rule") or ANY_POSITIVE_REWARD) for t in trajectories})
    return {"rules": rules, "source": "each format's own rule", "labels": labels}


def fit_cascade(stages: Sequence[BaseJudge], trajectories: Sequence[Trajectory], alpha: float, delta: float,
                max_false_pass: float | None = None, method: str = DEFAULT_METHOD, *,
                names: Sequence[str] | None = None, pass_levels: Sequence[float] = PASS_LEVELS,
                fail_levels: Sequence[float] = FAIL_LEVELS, stage_costs: Sequence[float] | None = None,
                one_per_task: bool = False, seed: int = 0, p_values: str = "auto",
                num_threads: int | None = None, label_rule: LabelRule | str | float | dict[str, Any] | None = None,
                labels: str | None = None) -> Cascade:
    """Fit a cascade's thresholds by Learn-then-Test (see the module docstring for the guarantee).

    Args:
        stages: the judges, cheapest first (e.g. ``[FloorJudge(floor), load_judge("judge.json")]``; any
            `BaseJudge`, or a callable returning a `Verdict`, `judge.recorded.as_stage`), with
            their LMs attached or configured; none fit on `trajectories`.
        trajectories: labeled calibration trajectories (whole tasks; every trial is used).
        alpha: bound on disagreement among decided items.
        delta: the guarantee holds with probability at least ``1 - delta``.
        max_false_pass: bound on the false-pass rate among decided failed items (None: not bounded).
        method: ``"split_fixed_sequence"`` (default), ``"holm"``, ``"bonferroni"`` or ``"fail_first_sequence"``
            (`metrics.risk_control.learn_then_test`).
        names: stage names (default `stage_names`).
        pass_levels, fail_levels: the thresholds of a stage with a continuous confidence; a stage whose
            ``confidence_levels`` are set gets one threshold per level instead.
        stage_costs: cost per item of each stage (default: 0 for a floor, 1 otherwise), to break ties.
        one_per_task: keep one drawn trial per task (the rest counted as dropped); default: every trial.
        seed: the order of the tasks (betting p-values), the ordering share of the split, the drawn trial.
        p_values: ``"auto"`` (exact binomial with one trial per task, else betting), ``"binomial"``,
            ``"betting"`` or ``"hoeffding_bentkus"``.
        num_threads: threads of each stage's batch.
        label_rule: the rule that made the labels from rewards (``--label-threshold``), stored in the guarantee
            (`label_rule_record`; a dict is taken as such a record); None: each format's own, as the trajectories
            record it.
        labels: the label file joined onto the trajectories (``--labels``), recorded with the rule.

    Returns:
        The `Cascade` (stages certified to decide nothing dropped); ``cascade.fit_report`` is the `FitReport` as
        a dict, ``cascade.guarantee`` the bound.

    Raises:
        CascadeCalibrationError: nothing can be certified (with the labels it would need).
        CascadeStageError: a stage's LM failed on calibration items.
        UnlabeledError: a trajectory has no label.
    """
    trajectories = require_labels(list(trajectories), "the cascade fit")
    rule_record = (dict(label_rule) if isinstance(label_rule, dict)
                   else label_rule_record(trajectories, label_rule, None if labels is None else str(labels)))
    if not stages:
        raise InputError("a cascade needs at least one stage")
    stages = [as_stage(stage) for stage in stages]  # a callable returning a Verdict is a stage too
    names = list(names) if names is not None else stage_names(stages)
    if len(names) != len(stages):
        raise InputError(f"one name per stage: {len(names)} names for {len(stages)} stages")
    units = calibration_units(trajectories, one_per_task, seed)
    items = [trajectories[i] for i in units]
    if not items:
        raise CascadeCalibrationError(f"no calibration data: certifying needs at least {decided_needed(alpha, delta)} "
                                      "decided labels", decided_needed(alpha, delta))
    y = np.array([t.label for t in items], dtype=np.int64)
    groups = np.array([f"{t.domain}/{t.task_id}" for t in items], dtype=object)
    levels = [stage_levels(stage) for stage in stages]
    conf, calls, unparsed = _confidences(stages, names, items, levels, pass_levels, fail_levels, num_threads)
    costs = stage_costs if stage_costs is not None else [stage_cost(s) for s in stages]
    result = learn_then_test(conf, y, alpha, delta, max_false_pass, method, groups=groups.astype(str),
                             levels=levels, pass_levels=pass_levels, fail_levels=fail_levels, stage_costs=costs,
                             p_values=p_values, seed=seed)
    tasks = len({f"{t.domain}/{t.task_id}" for t in trajectories})
    if not result.certified:
        raise _refusal(result, len(items), tasks)
    rows, escalated = _stage_rows(names, conf, y, result, calls, unparsed)
    guarantee = _guarantee(result, max_false_pass, method, pass_levels, fail_levels, levels, one_per_task,
                           rule_record)
    kept = [k for k, row in enumerate(rows) if row["decided"] > 0 or _decides_something(result.thresholds[k])]
    dropped = [{"name": names[k], "reason": DROPPED_WHY} for k in range(len(stages)) if k not in kept]
    report = FitReport(result.to_dict(), rows, {
        "calibration_units": int(result.n_tasks + result.n_order_tasks), "trajectories": len(trajectories),
        "trials_used": len(items), "tasks": tasks, "tested_tasks": result.n_tasks,
        "ordering_tasks": result.n_order_tasks, "dropped_trials": len(trajectories) - len(items)},
        escalated, guarantee, dropped)
    rules = [StageRule(names[k], *result.thresholds[k]) for k in kept]
    return Cascade([stages[k] for k in kept], rules, guarantee, report.to_dict())


def _confidences(stages: Sequence[BaseJudge], names: Sequence[str], items: list[Trajectory],
                 levels: Sequence[Sequence[float] | None], pass_levels: Sequence[float], fail_levels: Sequence[float],
                 num_threads: int | None) -> tuple[np.ndarray, list[int], list[int]]:
    """Each stage's confidences on the calibration items it could be left (NaN elsewhere), the items it was run on
    and its unparseable answers: stage k runs only on what some threshold choice of stages < k hands on."""
    conf = np.full((len(stages), len(items)), np.nan)
    reach = np.ones(len(items), dtype=bool)
    calls: list[int] = []
    unparsed: list[int] = []
    for k, (stage, name) in enumerate(zip(stages, names, strict=True)):
        where = np.flatnonzero(reach)
        conf[k, where], bad = _stage_confidences(stage, name, [items[i] for i in where], num_threads)
        calls.append(int(where.size))
        unparsed.append(int(bad))
        reach &= _could_leave(conf[k], levels[k], pass_levels, fail_levels) | np.isnan(conf[k])
    return conf, calls, unparsed


def _guarantee(result: GridResult, max_false_pass: float | None, method: str, pass_levels: Sequence[float],
               fail_levels: Sequence[float], levels: Sequence[Sequence[float] | None], one_per_task: bool,
               rule_record: dict[str, Any]) -> dict[str, Any]:
    """What the thresholds are certified for (stored in the cascade's manifest)."""
    return {"alpha": result.alpha, "delta": result.delta, "max_false_pass": max_false_pass, "method": method,
            "method_why": METHOD_WHY.get(method, "chosen by the caller"),
            "p_values": result.p_values, "grid": {
                "pass_levels": [x if math.isfinite(x) else None for x in pass_levels],
                "fail_levels": [x if math.isfinite(x) else None for x in fail_levels],
                "stage_levels": [None if lv is None else list(lv) for lv in levels],
                "vectors": result.n_tested},
            "unit": ("task: one trial per task" if one_per_task else
                     "task: every trial, losses averaged within a task"),
            "label_rule": rule_record, "theorem": THEOREM, "references": list(REFERENCES)}


def stage_cost(stage: BaseJudge) -> float:
    """A stage's cost per item (the fit's tie-break): its ``cost_per_item`` when it declares one (a recorded
    stage, and a hybrid over one: 1, the judge's call it stands for), 0 for a floor, else 1 (one LM call)."""
    declared = getattr(stage, "cost_per_item", None)
    if declared is not None:
        return float(declared)
    return 0.0 if isinstance(stage, FloorJudge) else 1.0


def _decides_something(thresholds: tuple[float, float]) -> bool:
    return math.isfinite(thresholds[0]) or math.isfinite(thresholds[1])


def stage_levels(stage: BaseJudge) -> tuple[float, ...] | None:
    """The values a stage's confidence can take (`BaseJudge.confidence_levels`), None when continuous."""
    levels = getattr(stage, "confidence_levels", None)
    return None if levels is None else tuple(sorted({float(v) for v in levels}))


def _rates(verdicts: Sequence[Verdict], labels: Sequence[int], mask: np.ndarray) -> dict[str, Any]:
    y = np.asarray(labels, dtype=bool)
    passed = np.array([v.passed for v in verdicts], dtype=bool)
    n, errors = int(mask.sum()), int((mask & (passed != y)).sum())
    failed, false_passes = int((mask & ~y).sum()), int((mask & passed & ~y).sum())
    return {"disagreement": errors / n if n else None,
            "disagreement_ci95": list(proportion_ci(errors, n)) if n else None,
            "false_pass": false_passes / failed if failed else None,
            "false_pass_ci95": list(proportion_ci(false_passes, failed)) if failed else None}


def _makes_lm_calls(stage: BaseJudge) -> bool:
    """A stage with a predictor calls an LM; a floor (or a cascade of floors) does not."""
    return bool(stage.predictors()) if hasattr(stage, "predictors") else not isinstance(stage, FloorJudge)


def cascade_summary(cascade: Cascade, verdicts: CascadeVerdicts, labels: Sequence[int] | None = None,
                    spend: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a cascade's batch did, for reports, certificates and the demo: per stage the items decided, their
    share, the judge verdicts and LM calls it needed (a floor needs none; a recorded or Python stage needs a
    judge verdict per item and makes no LM call), and with `labels` (held-out, 0/1, same order) the
    realized disagreement and false-pass rate with exact 95% intervals; the escalated items (for a
    person); the judge verdicts needed against judging every item with the judge (``judge_verdicts``,
    ``judge_stages``: what a user pays, another tool's recorded verdicts included,
    `apply.cascade_job.gives_judge_verdicts`); and the LM calls (and, with `spend`, tokens) against judging
    everything with the last stage: ``lm_calls_saved`` and ``lm_calls_judging_everything`` are None when no
    stage of the cascade makes LM calls (nothing to save against; a stage the fit dropped is not in the cascade).

    Args:
        cascade: the cascade that judged.
        verdicts: its `CascadeVerdicts` (``cascade.batch(...)``).
        labels: the items' labels, to report realized risks (never used to decide anything).
        spend: the tokens spent and the estimate of judging everything (`report.cascade.token_spend`; a
            cascade run's ``token_spend()``), reported as ``token_spend``.

    Returns:
        A JSON-safe dict.
    """
    n = len(verdicts)
    if labels is not None and len(labels) != n:
        raise InputError(f"one label per verdict: {len(labels)} labels for {n} verdicts")
    stages = np.array(verdicts.stages, dtype=object)
    produced = np.array([not v.abstained for v in verdicts], dtype=bool)
    from rubricforge_dspy.apply.cascade_job import gives_judge_verdicts

    rows: list[dict[str, Any]] = []
    lm_calls = judge_verdicts = 0
    has_lm = any(_makes_lm_calls(stage) for stage in cascade.stages)
    judge_stages = [rule.name for stage, rule in zip(cascade.stages, cascade.rules, strict=True)
                    if gives_judge_verdicts(stage)]
    for stage, rule in zip(cascade.stages, cascade.rules, strict=True):
        ran = int(verdicts.stage_calls.get(rule.name, 0))
        calls = ran if _makes_lm_calls(stage) else 0
        needed = ran if rule.name in judge_stages else 0
        lm_calls += calls
        judge_verdicts += needed
        mine = (stages == rule.name) & produced
        rows.append({"name": rule.name, **rule.to_dict(), "decided": int(mine.sum()),
                     "share": float(mine.sum()) / n if n else 0.0, "lm_calls": calls, "judge_verdicts": needed,
                     "lm": _makes_lm_calls(stage), "judge": rule.name in judge_stages,
                     **(_rates(verdicts, labels, mine) if labels is not None else {})})
    decided = (stages != ESCALATED) & produced
    return {"n": n, "stages": rows, "escalated": int((stages == ESCALATED).sum()),
            "failed": int((~produced & (stages != ESCALATED)).sum()), "judge_verdicts": judge_verdicts,
            "judge_stages": judge_stages, "lm_calls": lm_calls, "lm_stages": [
                rule.name for stage, rule in zip(cascade.stages, cascade.rules, strict=True) if _makes_lm_calls(stage)],
            "lm_calls_judging_everything": n if has_lm else None, "lm_calls_saved": n - lm_calls if has_lm else None,
            "coverage": float(decided.sum()) / n if n else 0.0,
            **({"overall": _rates(verdicts, labels, decided)} if labels is not None else {}),
            "token_spend": spend, "guarantee": cascade.guarantee}


def _interval(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "[-]"


def _rate(value: float | None, ci: Sequence[float] | None) -> str:
    return "n/a (none decided)" if value is None else f"{value:.3f} {_interval(ci)}"


def _threshold_text(row: dict[str, Any]) -> str:
    t_pass = "never" if row.get("t_pass") is None else f">= {row['t_pass']}"
    t_fail = "never" if row.get("t_fail") is None else f"<= {row['t_fail']}"
    return f"pass {t_pass}, fail {t_fail}"


def format_fit_report(report: dict[str, Any], guarantee: dict[str, Any] | None = None) -> str:
    """A fitted cascade's report (``cascade.fit_report``) as `rubricforge cascade fit` prints it: the
    guarantee (alpha, delta, method), then per stage kept its thresholds, its decided share of all calibration
    trajectories and the realized disagreement (D) and false-pass rate (FP) with exact 95% intervals
    (descriptive; the guarantee is the bound), the escalated share, and each stage the fit dropped."""
    guarantee = guarantee or report.get("guarantee") or {}
    units = report.get("units", {})
    bound = f" and false-pass <= {guarantee['max_false_pass']}" if guarantee.get("max_false_pass") is not None else ""
    lines = [f"certified: disagreement <= {guarantee.get('alpha')}{bound} among decided items, with probability "
             f">= {1 - guarantee.get('delta', 0):.2f} (alpha {guarantee.get('alpha')}, delta {guarantee.get('delta')}; "
             f"{guarantee.get('method')}, "
             f"{guarantee.get('p_values', 'binomial')} p-values, "
             f"{guarantee.get('grid', {}).get('vectors')} distinct threshold vectors)"]
    if guarantee.get("method_why"):
        lines.append(f"method: {guarantee['method']}: {guarantee['method_why']}")
    rule = guarantee.get("label_rule")
    if isinstance(rule, dict) and rule.get("rules"):
        lines.append(f"labels: {'; '.join(map(str, rule['rules']))} ({rule.get('source')}"
                     + (f"; joined from {rule['labels']}" if rule.get("labels") else "")
                     + "): labels read against this cascade are read by this rule")
    if "trials_used" in units:
        lines.append(f"calibration: {units['trials_used']} trajectories of {units.get('tasks')} tasks used"
                     + (f" ({units.get('tested_tasks')} tasks tested, {units['ordering_tasks']} ordered the grid)"
                        if units.get("ordering_tasks") else "")
                     + (f"; {units['dropped_trials']} trial(s) dropped (one per task kept)"
                        if units.get("dropped_trials") else "; none dropped"))
    else:  # a cascade fit before every trial counted
        lines.append(f"calibration: {units.get('calibration_units')} units ({units.get('tasks')} tasks, one trial "
                     f"each; {units.get('dropped_trials', 0)} further trial(s) not used)")
    n = max(units.get("trials_used") or units.get("calibration_units") or 0, 1)
    dropped = {row["name"]: row for row in report.get("dropped", [])}
    lines.append(f"per stage, on the {n} calibration trajectories (share of all of them; disagreement D and "
                 "false-pass FP realized, with exact 95% intervals: descriptive, the certificate is the bound):")
    calls: dict[str, int] = {}
    for row in report.get("stages", []):
        calls[row["name"]] = row["calls"]
        if row["name"] in dropped:  # not in the cascade: said below, never as a stage that decides
            continue
        lines.append(f"  {row['name']}: {_threshold_text(row)}; decided {row['decided']} ({row['decided'] / n:.0%} of "
                     f"all; {row['reached']} reached it): D {_rate(row['disagreement'], row['disagreement_ci95'])}, "
                     f"FP {_rate(row['false_pass'], row['false_pass_ci95'])}; {row['calls']} run(s) in the fit")
    lines.append(f"  escalated to a person: {report.get('escalated')} ({report.get('escalated', 0) / n:.0%} of all)")
    for name, row in dropped.items():
        ran = f" (it ran on {calls[name]} in the fit)" if name in calls else ""
        lines.append(f"  dropped stage {name}{ran}: {row['reason']}; not in the cascade")
    return "\n".join(lines)


def format_cascade_summary(summary: dict[str, Any]) -> str:
    """`cascade_summary` as text: coverage per stage, realized risks with exact 95% intervals (when labels
    were given), the escalated items, the judge verdicts needed against judging every item with the judge
    (``judge verdicts needed: 101 of 188 (46% saved)``: recorded and Python stages' verdicts count, they are
    what a user pays another tool for), and the LM calls this process made against judging everything with
    the last stage (the calls saved only when a stage makes LM calls; a cascade whose judge stage is recorded
    says it makes none, never that its cost is 0)."""
    from rubricforge_dspy.report.cascade import format_judge_verdicts

    n = summary["n"]
    lines = [f"cascade on {n} item(s): {summary['coverage']:.0%} decided, {summary['escalated']} escalated to a person"
             + (f", {summary['failed']} failed (no verdict)" if summary.get("failed") else "")]
    for row in summary["stages"]:
        risk = ""
        if "disagreement" in row:
            risk = (f"; disagreement {_rate(row['disagreement'], row['disagreement_ci95'])}, "
                    f"false-pass {_rate(row['false_pass'], row['false_pass_ci95'])}")
        if row.get("lm", row["lm_calls"] > 0):
            cost = f"{row['lm_calls']} LM call(s)"
        elif row.get("judge"):
            cost = f"{row['judge_verdicts']} judge verdict(s), recorded or computed: no LM call"
        else:
            cost = "no LM call"
        lines.append(f"  {row['name']}: decided {row['decided']} ({row['share']:.0%}), {cost}" + risk)
    overall = summary.get("overall")
    if overall:
        lines.append(f"  all decided: disagreement {_rate(overall['disagreement'], overall['disagreement_ci95'])}, "
                     f"false-pass {_rate(overall['false_pass'], overall['false_pass_ci95'])}")
    judges = summary.get("judge_stages")
    if judges:
        lines.append(f"  {format_judge_verdicts(summary['judge_verdicts'], n)}, by the judge stage(s) "
                     f"{', '.join(judges)}")
    recorded = [name for name in judges or [] if name not in summary.get("lm_stages", [])]
    if summary.get("lm_calls_saved") is None and recorded:
        lines.append(f"  LM calls: none made by this process ({', '.join(recorded)}: verdicts recorded by another tool "
                     "or computed, paid for where they were made, counted above)")
    elif summary.get("lm_calls_saved") is None:
        lines.append("  LM calls: 0 (no stage of the cascade makes LM calls)")
    else:
        lines.append(f"  LM calls: {summary['lm_calls']}, against {summary['lm_calls_judging_everything']} judging "
                     f"everything with the last stage ({summary['lm_calls_saved']} saved)")
    if summary.get("token_spend") is not None and (summary.get("lm_calls_saved") is not None or not recorded):
        lines.append("  " + format_token_spend(summary["token_spend"], summary["lm_calls"]))
    guarantee = summary.get("guarantee")
    if guarantee:
        bound = (f" and false-pass <= {guarantee['max_false_pass']}" if guarantee.get("max_false_pass") is not None
                 else "")
        lines.append(f"  certified at fit: disagreement <= {guarantee['alpha']}{bound} with probability >= "
                     f"{1 - guarantee['delta']:.2f} (the rates above are realized on these items, not the bound)")
    else:
        lines.append("  no certificate: hand-set thresholds (fit them with `rubricforge cascade fit`)")
    return "\n".join(lines)


def measure_cascade(cascade: Cascade, trajectories: Sequence[Trajectory], verdicts_out: PathArg, *,
                    lm: dspy.BaseLM | None = None, concurrency: int = 4,
                    cascade_file: PathArg | None = None) -> dict[str, Any]:
    """Judge labeled held-out `trajectories` with `cascade` (`apply.cascade.run_cascade`: the verdict lines into
    `verdicts_out`, the escalated ones into its labeling queue beside it) and return `cascade_summary` with the
    labels: coverage per stage, realized risks with exact intervals, LM calls and tokens against judging
    everything. The labels are read after judging, never shown to a stage; nothing is written into the cascade
    (its guarantee is its fit's). `cascade_file`: the file it was loaded from (in the job's fingerprint).

    Raises:
        UnlabeledError: a trajectory has no label. InputError: `verdicts_out` exists (a measurement is of one
        whole run: it is never resumed).
    """
    from pathlib import Path

    from rubricforge_dspy.apply.cascade import run_cascade

    trajectories = require_labels(list(trajectories), "measuring a cascade")
    if Path(verdicts_out).exists():
        raise InputError(f"{verdicts_out} exists: certify measures a cascade in one whole run; give a new "
                         "--verdicts-out or remove it")
    run = run_cascade(cascade, trajectories, verdicts_out, lm=lm, concurrency=concurrency, cascade_file=cascade_file)
    labels: list[int] = []
    for t in trajectories:
        assert t.label is not None  # require_labels above
        labels.append(t.label)
    if run.verdicts is None:  # only a complete run keeps its verdicts; an incomplete one raised above
        raise InputError(f"{verdicts_out}: the cascade run did not complete ({run.outcome}); nothing to measure")
    summary = cascade_summary(cascade, run.verdicts, labels, run.token_spend())
    return {**summary, "verdicts": str(verdicts_out), "escalated_queue": run.escalated_path}
