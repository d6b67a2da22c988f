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
from typing import Any, Sequence

import numpy as np

from rubricforge_dspy.core.errors import InputError, ServerError
from rubricforge_dspy.core.terminal import check_name, is_name
from rubricforge_dspy.core.trajectory import (
    ANY_POSITIVE_REWARD,
    LabelRule,
    Trajectory,
    parse_label_rule,
    require_labels,
)
from rubricforge_dspy.judge.cascade import Cascade, StageRule, stage_confidence
from rubricforge_dspy.judge.contract import BaseJudge
from rubricforge_dspy.judge.floor import FloorError, FloorJudge
from rubricforge_dspy.judge.recorded import as_stage
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS
from rubricforge_dspy.metrics.intervals import proportion_ci
from rubricforge_dspy.metrics.risk_control import (
    DEFAULT_METHOD,
    GridResult,
    cascade_outcomes,
    decided_needed,
    learn_then_test,
    stage_pairs,
)
from rubricforge_dspy.trust.cascade_measure import cascade_summary, measure_cascade
from rubricforge_dspy.trust.cascade_options import FitOptions
from rubricforge_dspy.trust.cascade_text import (
    format_cascade_summary,
    format_fit_report,
    judge_verdicts_line,
    refusal_message,
)

__all__ = ["CascadeCalibrationError", "CascadeStageError", "FitReport", "FitOptions", "fit_cascade",
           "calibration_units", "stage_names", "order_confidences", "judge_verdicts_line", "stage_cost",
           "cascade_summary", "measure_cascade", "format_fit_report", "format_cascade_summary", "THEOREM", "REFERENCES",
           "label_rule_record"]

THEOREM = ("With probability at least 1 - delta over the calibration draw, for the population of a random task and "
           "a random trial of it: with the per-stage bound (the default), for every stage that decides, the "
           "disagreement among the items it decides is at most alpha and its false-pass rate (by default passed "
           "among the failed items it decides; or the share of its passes that are failures) is at most "
           "max_false_pass (default alpha / 2), so the same holds for "
           "everything the cascade decides; with the pooled bound, the disagreement among all decided items is at "
           "most alpha (and the false-pass rate at most max_false_pass when set). Assumes calibration and later "
           "tasks are i.i.d. (trials within a task may be dependent: their losses are averaged per task), the "
           "threshold grid and the testing order fixed before the calibration labels (ordered on the fit split, "
           "or label-free), and stages not fit on the calibration data.")
REFERENCES = ("Angelopoulos, Bates, Candes, Jordan, Lei 2021, Learn then Test, arXiv:2110.01052",
              "Waudby-Smith, Ramdas 2024, Estimating means of bounded random variables by betting, JRSSB 86(1)",
              "Jung, Brahman, Choi, ICLR 2025, Trust or Escalate",
              "Bates, Angelopoulos, Lei, Malik, Jordan 2021, Distribution-free risk-controlling prediction sets",
              "Berger 1982, Multiparameter hypothesis testing and acceptance sampling (intersection-union)")



DROPPED_WHY = ("certified to decide nothing (its thresholds never pass and never fail): judging would pay for it "
               "and throw its answers away")
METHOD_WHY = {
    "ordered_sequence": "a fixed sequence tested on every calibration task, in an order fixed before the calibration "
                        "(from the ordering data's out-of-fold confidences, or label-free) that does not depend on "
                        "alpha: a certificate at alpha is one at every larger alpha",
    "split_fixed_sequence": "an order learned at alpha on a share of the calibration tasks, tested on the rest (not "
                            "monotone in alpha)",
    "holm": "Holm over every distinct threshold vector",
    "bonferroni": "Bonferroni over every distinct threshold vector",
    "fail_first_sequence": "a fixed sequence ordered before the data, fail-only vectors first",
}


BOUND_WHY = {
    "per_stage": "every stage that decides is bounded: its disagreement D <= alpha and its false-pass rate <= beta, "
                 "so no stage's over-crediting hides behind another's easy verdicts. The default rate is FP, false "
                 "passes over the failed items it decides: it does not move with the share of failures that reach "
                 "the stage, and the cascade's FP is a mixture of it; the other choice, the share of its passes "
                 "that are failures, is not diluted by its own easy fails and needs fewer tasks where most items "
                 "pass, but a stage reached mostly by passes looks clean however it treats failures. Each is a "
                 "mixture over stages, so the per-stage bound bounds the cascade's rate of the same kind",
    "pooled": "the disagreement (and, when asked, the false-pass rate) over everything the cascade decides: one "
              "stage's over-crediting can hide behind another's easy verdicts",
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
    with ``one_per_task``), where the sequence's order came from. ``dropped``: the stages certified to decide
    nothing, removed from the cascade. ``judge_verdicts``: the verdicts of its judge stages (LLM, recorded or
    external) the cascade needs on the calibration trajectories against judging all of them (`judge_verdicts_line`).
    Per stage also the false passes over the failed items it decides (FP, the bounded rate with the per-stage
    bound) and the share of its passes that are failures, each with an exact 95% interval, and its p-values."""

    chosen: dict[str, Any]
    stages: list[dict[str, Any]]
    units: dict[str, Any]
    escalated: int
    guarantee: dict[str, Any] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    judge_verdicts: dict[str, Any] | None = None

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
        base = stage.stage_name or "judge"
        base = base if is_name(base) else "judge"  # a Python stage named `<lambda>`...
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
        passes = int((mine & passed[0]).sum())
        tests = result.stages[k] if k < len(result.stages) else {}
        extra = {"failed_decided": failed, "false_passes": false_passes,
                 "failures_among_passes": false_passes / passes if passes else None,
                 "failures_among_passes_ci95": list(proportion_ci(false_passes, passes)) if passes else [0.0, 1.0],
                 "p_disagreement": tests.get("p_disagreement"), "p_false_pass": tests.get("p_false_pass")}
        rows.append({"name": name, "t_pass": t_pass if math.isfinite(t_pass) else None,
                     "t_fail": result.thresholds[k][1] if math.isfinite(result.thresholds[k][1]) else None,
                     "reached": int(((stage[0] == -1) | (stage[0] >= k)).sum()), "decided": n,
                     "decided_pass": int((mine & passed[0]).sum()), "share_decided": n / max(len(y), 1),
                     "disagreement": errors / n if n else None, "disagreement_ci95": list(d_ci),
                     "false_pass": false_passes / failed if failed else None, "false_pass_ci95": list(f_ci),
                     "unparseable": unparsed[k], "calls": calls[k], **extra})
    return rows, int((~decided[0]).sum())


def _judge_verdicts(stages: Sequence[BaseJudge], rows: Sequence[dict[str, Any]], kept: Sequence[int],
                    n: int) -> dict[str, Any] | None:
    """Verdicts of the judge stages (every stage but a floor: an LLM, a recorded or external tool's verdicts, a
    hybrid over one) the certified cascade needs on the calibration trajectories, against judging every one with
    the last such stage; None when no stage is a judge."""
    judges = [k for k in kept if stages[k].gives_judge_verdicts]
    if not judges:
        return None
    needed = sum(int(rows[k]["reached"]) for k in judges)
    return {"needed": needed, "of": n, "stages": [rows[k]["name"] for k in judges],
            "line": judge_verdicts_line(needed, n)}


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


def fit_cascade(stages: Sequence[BaseJudge], trajectories: Sequence[Trajectory], alpha: float | FitOptions,
                delta: float | None = None, max_false_pass: float | None = None, method: str = DEFAULT_METHOD,
                **options: Any) -> Cascade:
    """Fit a cascade's thresholds by Learn-then-Test (see the module docstring for the guarantee).

    Args:
        stages: the judges, cheapest first (e.g. ``[FloorJudge(floor), load_judge("judge.json")]``; any
            `BaseJudge`, or a callable returning a `Verdict`, `judge.recorded.as_stage`), with
            their LMs attached or configured; none fit on `trajectories`.
        trajectories: labeled calibration trajectories (whole tasks; every trial is used).
        alpha: the `FitOptions` (what is certified and how); or, the compatible form, alpha itself with
            `delta`, `max_false_pass`, `method` and the other options as keywords (`FitOptions`'s fields).
        delta, max_false_pass, method: `FitOptions`'s fields, when `alpha` is a number.
        **options: `FitOptions`'s other fields, when `alpha` is a number.

    Returns:
        The `Cascade` (stages certified to decide nothing dropped); ``cascade.fit_report`` is the `FitReport` as
        a dict, ``cascade.guarantee`` the bound.

    Raises:
        CascadeCalibrationError: nothing can be certified (with the labels it would need).
        CascadeStageError: a stage's LM failed on calibration items.
        UnlabeledError: a trajectory has no label.
        InputError: no stage, one name per stage not given, bad options (`FitOptions`).
    """
    if isinstance(alpha, FitOptions):
        if delta is not None or max_false_pass is not None or method != DEFAULT_METHOD or options:
            raise InputError("fit_cascade takes FitOptions or alpha, delta and keywords, not both")
        spec = alpha
    else:
        spec = FitOptions.of(alpha=alpha, delta=delta, max_false_pass=max_false_pass, method=method, **options)
    trajectories = require_labels(list(trajectories), "the cascade fit")
    rule_record = (dict(spec.label_rule) if isinstance(spec.label_rule, dict)
                   else label_rule_record(trajectories, spec.label_rule, None if spec.labels is None
                                          else str(spec.labels)))
    if not stages:
        raise InputError("a cascade needs at least one stage")
    stages = [as_stage(stage) for stage in stages]  # a callable returning a Verdict is a stage too
    names = list(spec.names) if spec.names is not None else stage_names(stages)
    for name in names:  # before any work: a name is stored and makes a file name (`<out>.<name>.json`)
        check_name(name)
    if len(names) != len(stages):
        raise InputError(f"one name per stage: {len(names)} names for {len(stages)} stages")
    items = [trajectories[i] for i in calibration_units(trajectories, spec.one_per_task, spec.seed)]
    if not items:
        raise CascadeCalibrationError(f"no calibration data: certifying needs at least "
                                      f"{decided_needed(spec.alpha, spec.delta)} decided labels",
                                      decided_needed(spec.alpha, spec.delta))
    y = np.array([t.label for t in items], dtype=np.int64)
    groups = np.array([f"{t.domain}/{t.task_id}" for t in items], dtype=str)
    levels = [stage_levels(stage) for stage in stages]
    ordering, order_kwargs = _ordering(stages, names, trajectories, spec)
    conf, calls, unparsed = _confidences(stages, names, items, levels, spec.pass_levels, spec.fail_levels,
                                         spec.num_threads)
    costs = spec.stage_costs if spec.stage_costs is not None else [stage_cost(s) for s in stages]
    result = learn_then_test(conf, y, spec.alpha, spec.delta, spec.max_false_pass, spec.method, groups=groups,
                             levels=levels, pass_levels=spec.pass_levels, fail_levels=spec.fail_levels,
                             stage_costs=costs, p_values=spec.p_values, seed=spec.seed, bound=spec.bound,
                             false_pass=spec.false_pass, **order_kwargs)
    tasks = len({f"{t.domain}/{t.task_id}" for t in trajectories})
    if not result.certified:
        raise CascadeCalibrationError(*refusal_message(result, len(items), tasks, names))
    return _fitted(stages, names, (conf, y, calls, unparsed), result, spec, rule_record,
                   {"trajectories": len(trajectories), "tasks": tasks, "ordering_data": ordering or None,
                    "trials_used": len(items)})


def _ordering(stages: Sequence[BaseJudge], names: Sequence[str], trajectories: Sequence[Trajectory],
              spec: FitOptions) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ordering data's record for the report and the keywords it gives `learn_then_test` (none without it)."""
    if spec.order_trajectories is None:
        return {}, {}
    if spec.method != "ordered_sequence":
        raise InputError(f"ordering data orders the 'ordered_sequence' method, not {spec.method!r}: drop "
                         "--order-data or use --method ordered_sequence")
    order_conf, order_y, how = order_confidences(stages, names, spec.order_trajectories, trajectories, seed=spec.seed,
                                                 num_threads=spec.num_threads, llm_stages=spec.order_llm_stages)
    for stage in stages:  # a recorded stage's missing-verdict counts are the calibration's, reported after the fit
        part = getattr(stage, "llm", stage)
        if hasattr(part, "reset_counts"):
            part.reset_counts()
    return ({"trajectories": int(order_y.size), "stages": how},
            {"order_confidences": order_conf, "order_labels": order_y,
             "order_groups": [f"{t.domain}/{t.task_id}" for t in spec.order_trajectories]})


def _fitted(stages: Sequence[BaseJudge], names: Sequence[str],
            seen: tuple[np.ndarray, np.ndarray, Sequence[int], Sequence[int]], result: GridResult, spec: FitOptions,
            rule_record: dict[str, Any], counts: dict[str, Any]) -> Cascade:
    """The certified cascade: the stages that decide something, their rules, the guarantee and the fit report."""
    conf, y, calls, unparsed = seen
    rows, escalated = _stage_rows(names, conf, y, result, calls, unparsed)
    levels = [stage_levels(stage) for stage in stages]
    guarantee = _guarantee(result, result.max_false_pass, spec.method, spec.pass_levels, spec.fail_levels, levels,
                           spec.one_per_task, rule_record)
    kept = [k for k, row in enumerate(rows) if row["decided"] > 0 or _decides_something(result.thresholds[k])]
    dropped = [{"name": names[k], "reason": DROPPED_WHY} for k in range(len(stages)) if k not in kept]
    used = int(counts["trials_used"])
    report = FitReport(result.to_dict(), rows, {
        "calibration_units": int(result.n_tasks + result.n_order_tasks), "trajectories": counts["trajectories"],
        "trials_used": used, "tasks": counts["tasks"], "tested_tasks": result.n_tasks,
        "ordering_tasks": result.n_order_tasks, "dropped_trials": counts["trajectories"] - used,
        "order": result.order, "ordering_data": counts["ordering_data"]},
        escalated, guarantee, dropped, _judge_verdicts(stages, rows, kept, used))
    rules = [StageRule(names[k], *result.thresholds[k]) for k in kept]
    return Cascade([stages[k] for k in kept], rules, guarantee, report.to_dict())


def order_confidences(stages: Sequence[BaseJudge], names: Sequence[str], order_trajectories: Sequence[Trajectory],
                      calibration: Sequence[Trajectory] = (), *, seed: int = 0, num_threads: int | None = None,
                      llm_stages: bool = True) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The ordering data of an ``"ordered_sequence"``: each stage's confidences on labeled trajectories apart from
    the calibration (the fit split), with their labels, and how each row was made.

    - A floor: out-of-fold probabilities, its features refit per task-grouped fold (`trust.floor_cv.cross_validate`):
      the floor was fit on these tasks, so its in-sample probabilities would look surer than they are.
    - Any other stage (a recorded or external tool's verdicts, a hybrid, an LLM judge): its confidences on those
      items (a stage fit on them is in-sample: it only orders, the calibration still tests). An LLM stage is run:
      one call per ordering item, counted in the report. A label-free position for it was tried and rejected: it
      takes the stage's confidence as calibrated, so a confident but poor judge goes first and stops the sequence
      before the vectors that do not use it (a guessing judge that says 0.95 / 0.05 certified nothing); its own
      verdicts on labeled items order it by what it does. With ``llm_stages=False`` it is not run and gets that
      label-free position (its row NaN, `metrics.risk_control.sequence_order`).

    Raises:
        InputError: a task is both in the ordering data and in the calibration (the order must come from data the
            calibration never sees). UnlabeledError: an ordering trajectory has no label.
    """
    from rubricforge_dspy.trust.floor_cv import cross_validate

    order = require_labels(list(order_trajectories), "the cascade's ordering data")
    if not order:
        raise InputError("the ordering data holds no trajectory: give the fit split's labeled trajectories, or none")
    shared = {f"{t.domain}/{t.task_id}" for t in order} & {f"{t.domain}/{t.task_id}" for t in calibration}
    if shared:
        raise InputError(f"{len(shared)} task(s) are both in the ordering data and in the calibration (first: "
                         f"{sorted(shared)[0]!r}): the order must come from tasks the calibration never sees; split by "
                         "task (data.split.split_by_task)")
    y = np.array([t.label for t in order], dtype=np.int64)
    conf = np.full((len(stages), len(order)), np.nan)
    how: list[str] = []
    for k, (stage, name) in enumerate(zip(stages, names, strict=True)):
        if isinstance(stage, FloorJudge):
            try:
                conf[k] = cross_validate(order, stage.floor.features, name=stage.floor.name, seed=seed).scores
                how.append(f"{name}: out-of-fold probabilities (features refit per task-grouped fold)")
            except FloorError as error:
                how.append(f"{name}: label-free position (no out-of-fold fit: {error})")
        elif not llm_stages and stage.calls_lm:
            how.append(f"{name}: label-free position (an LLM stage not run on the ordering data)")
        else:
            conf[k], _ = _stage_confidences(stage, name, order, num_threads)
            none = int(np.isnan(conf[k]).sum())
            how.append(f"{name}: its verdicts on the ordering items"
                       + (f" ({len(order)} LM calls)" if stage.calls_lm else "")
                       + (f" ({none} of {len(order)} without one: handed on"
                          + ("; a label-free position" if none == len(order) else "") + ")" if none else ""))
    return conf, y, how


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
            "method_why": METHOD_WHY.get(method, "chosen by the caller"), "bound": result.bound,
            "bound_why": BOUND_WHY.get(result.bound, ""), "order": result.order,
            "false_pass_rate": result.false_pass_rate if max_false_pass is not None else None,
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
    return float(stage.cost_per_item)


def _decides_something(thresholds: tuple[float, float]) -> bool:
    return math.isfinite(thresholds[0]) or math.isfinite(thresholds[1])


def stage_levels(stage: BaseJudge) -> tuple[float, ...] | None:
    """The values a stage's confidence can take (`BaseJudge.confidence_levels`), None when continuous."""
    levels = stage.confidence_levels
    return None if levels is None else tuple(sorted({float(v) for v in levels}))


