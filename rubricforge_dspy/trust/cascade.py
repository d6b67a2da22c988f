"""Fit a certified cascade: per-stage thresholds chosen on labeled calibration data by Learn-then-Test.

``fit_cascade(stages, labeled, alpha, delta, max_false_pass=None)`` returns a `judge.cascade.Cascade` whose
thresholds carry the guarantee of `metrics.risk_control` (the theorem, its assumptions and references
are stated there): with probability at least ``1 - delta`` over the calibration draw, among the items the
cascade decides, the disagreement with the label is at most ``alpha`` and, when asked, the false-pass rate
(failed trajectories passed, over the failed ones decided) is at most ``max_false_pass``. Disagreement is
always bounded: a cascade that fails everything has no false passes.

The unit is the task. Trials of one task are not independent, so by default one trial per task is kept
for calibration (drawn with `seed`; the number dropped is reported): the calibration units are then i.i.d.
draws of (a random task, a random trial of it), the population the guarantee speaks of. Split
calibration and later data by task (`data.split.split_by_task`).

Each stage's confidences on the calibration units are computed once (its own ``batch``), and an LLM stage
only on the units some threshold choice of the stages before it could leave (with the default grid, whose
levels include "never decide", that is every unit: calibrating costs one call per unit and LLM stage;
judging later costs calls only for what the earlier stages leave). An answer that is not a
verdict hands the unit on (as the cascade does when judging); an LM error stops the fit
(`CascadeStageError`, exit 3): a failed call is never read as a confidence. The stages must not have been
fit on the calibration data (assumption 3).

When no threshold vector is certified the fit refuses (`CascadeCalibrationError`, exit 2) and says how
many decided labels the requested alpha needs at the observed error rate (`risk_control.decided_needed`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from rubricforge_dspy.core.errors import InputError, ServerError
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.judge.cascade import ESCALATED, Cascade, CascadeVerdicts, StageRule, stage_confidence
from rubricforge_dspy.judge.contract import BaseJudge
from rubricforge_dspy.judge.floor import FloorJudge
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS
from rubricforge_dspy.metrics.intervals import proportion_ci
from rubricforge_dspy.metrics.risk_control import (
    FAIL_LEVELS,
    PASS_LEVELS,
    GridResult,
    cascade_outcomes,
    decided_needed,
    learn_then_test,
)
from rubricforge_dspy.report.cascade import format_token_spend

__all__ = ["CascadeCalibrationError", "CascadeStageError", "FitReport", "fit_cascade", "calibration_units",
           "stage_names", "cascade_summary", "measure_cascade", "format_fit_report", "format_cascade_summary",
           "THEOREM",
           "REFERENCES"]

THEOREM = ("With probability at least 1 - delta over the calibration draw, among the items the cascade decides "
           "the disagreement with the label is at most alpha and, when max_false_pass is set, the false-pass rate "
           "is at most max_false_pass. Assumes calibration and later tasks are exchangeable, one trial per task, "
           "and stages not fit on the calibration data.")
REFERENCES = ("Angelopoulos, Bates, Candes, Jordan, Lei 2021, Learn then Test, arXiv:2110.01052",
              "Jung, Brahman, Choi, ICLR 2025, Trust or Escalate",
              "Bates, Angelopoulos, Lei, Malik, Jordan 2021, Distribution-free risk-controlling prediction sets",
              "Berger 1982, Multiparameter hypothesis testing and acceptance sampling (intersection-union)")


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
    `GridResult`. ``units``: calibration units, tasks and trials dropped (one per task)."""

    chosen: dict
    stages: list[dict]
    units: dict
    escalated: int
    guarantee: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def calibration_units(trajectories: Sequence[Trajectory], one_per_task: bool = True, seed: int = 0) -> np.ndarray:
    """Indices of the calibration units: every trajectory, or (default) one trial drawn per task
    (``domain/task_id``) with `seed`."""
    if not one_per_task:
        return np.arange(len(trajectories))
    rng = np.random.default_rng(seed)
    by_task: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        by_task.setdefault(f"{t.domain}/{t.task_id}", []).append(i)
    return np.array(sorted(int(rng.choice(members)) for members in by_task.values()), dtype=np.int64)


def stage_names(stages: Sequence[BaseJudge]) -> list[str]:
    """Default stage names: a floor's own name (``floor``), ``judge``, ``judge2``... for the others."""
    names, seen = [], {}
    for stage in stages:
        base = stage.floor.name if isinstance(stage, FloorJudge) else "judge"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}{seen[base]}")
    return names


def _could_leave(conf: np.ndarray, pass_levels, fail_levels) -> np.ndarray:
    """Units some (t_pass, t_fail) pair of the grid hands on, given one stage's confidences."""
    pairs = [(tp, tf) for tp in pass_levels for tf in fail_levels if tf < tp]
    left = np.zeros(conf.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        for tp, tf in pairs:
            left |= ~((conf >= tp) | (conf <= tf))
    return left


def _stage_confidences(stage: BaseJudge, name: str, items: list[Trajectory], num_threads) -> tuple[np.ndarray, int]:
    verdicts = stage.batch(items, num_threads) if items else []
    failed = [v for v in verdicts if v.abstained and v.error_kind in LM_ERROR_KINDS]
    if failed:
        kinds = sorted({v.error_kind for v in failed})
        raise CascadeStageError(f"stage {name!r}: the LM failed on {len(failed)} of {len(items)} calibration items "
                                f"({', '.join(kinds)}; first: {failed[0].error}); fix the server and fit again")
    conf = np.array([np.nan if (c := stage_confidence(v)) is None else c for v in verdicts], dtype=np.float64)
    return conf, sum(v.abstained for v in verdicts)


def _refusal(result: GridResult, n_units: int, tasks: int) -> CascadeCalibrationError:
    sequence = result.method in ("fixed_sequence", "split_fixed_sequence")
    level = result.delta if sequence else result.delta / result.n_tested
    rate = result.disagreement if result.disagreement is not None else 0.0
    needed = decided_needed(result.alpha, level, rate) if rate < result.alpha else None
    labels = math.ceil(needed / result.coverage) if needed is not None and result.coverage > 0 else None
    bound = f" and false-pass <= {result.max_false_pass}" if result.max_false_pass is not None else ""
    seen = (f"the closest vector decides {result.n_decided} with {result.errors} disagreement(s) "
            f"(p = {result.p_value:.3g})")
    if needed is None:
        advice = (f"at its observed disagreement {rate:.3f} >= alpha {result.alpha} no number of labels suffices: "
                  "raise alpha, or use stronger stages")
    else:
        advice = (f"certifying needs at least {needed} decided labels at its observed disagreement {rate:.3f} "
                  f"(tested at {level:.3g}: delta {result.delta} over {result.n_tested} vectors, {result.method})"
                  + (f", about {labels} labeled tasks at its coverage {result.coverage:.2f}" if labels else ""))
    return CascadeCalibrationError(
        f"cascade fit refused: no threshold vector is certified for disagreement <= {result.alpha}{bound} with "
        f"probability >= {1 - result.delta:.2f} from {n_units} calibration units ({tasks} tasks); {seen}; {advice}",
        needed, labels)


def _stage_rows(names, conf, y, result: GridResult, calls, unparsed) -> tuple[list[dict], int]:
    grid = np.asarray(result.thresholds, dtype=np.float64)[None]
    decided, passed, stage = cascade_outcomes(conf, grid)
    rows, yb = [], y.astype(bool)
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


def fit_cascade(stages: Sequence[BaseJudge], trajectories: Sequence[Trajectory], alpha: float, delta: float,
                max_false_pass: float | None = None, method: str = "holm", *, names: Sequence[str] | None = None,
                pass_levels: Sequence[float] = PASS_LEVELS, fail_levels: Sequence[float] = FAIL_LEVELS,
                stage_costs: Sequence[float] | None = None, one_per_task: bool = True, seed: int = 0,
                p_values: str = "binomial", num_threads: int | None = None) -> Cascade:
    """Fit a cascade's thresholds by Learn-then-Test (see the module docstring for the guarantee).

    Args:
        stages: the judges, cheapest first (e.g. ``[FloorJudge(floor), load_judge("judge.json")]``), with
            their LMs attached or configured; none fit on `trajectories`.
        trajectories: labeled calibration trajectories (whole tasks).
        alpha: bound on disagreement among decided items.
        delta: the guarantee holds with probability at least ``1 - delta``.
        max_false_pass: bound on the false-pass rate among decided failed items (None: not bounded).
        method: ``"holm"`` (default), ``"bonferroni"``, ``"fixed_sequence"`` or ``"split_fixed_sequence"``
            over the threshold grid (`metrics.risk_control.learn_then_test`).
        names: stage names (default `stage_names`).
        pass_levels, fail_levels: per-stage threshold levels of the grid.
        stage_costs: cost per unit of each stage (default: 0 for a floor, 1 otherwise), to break ties.
        one_per_task: keep one trial per task (default; the guarantee's unit).
        seed: the draw of that trial (and of the ordering part of ``"split_fixed_sequence"``).
        p_values: ``"binomial"`` (exact) or ``"hoeffding_bentkus"``.
        num_threads: threads of each stage's batch.

    Returns:
        The `Cascade`; ``cascade.fit_report`` is the `FitReport` as a dict, ``cascade.guarantee`` the bound.

    Raises:
        CascadeCalibrationError: nothing can be certified (with the labels it would need).
        CascadeStageError: a stage's LM failed on calibration items.
        UnlabeledError: a trajectory has no label.
    """
    trajectories = require_labels(list(trajectories), "the cascade fit")
    if not stages:
        raise InputError("a cascade needs at least one stage")
    names = list(names) if names is not None else stage_names(stages)
    if len(names) != len(stages):
        raise InputError(f"one name per stage: {len(names)} names for {len(stages)} stages")
    units = calibration_units(trajectories, one_per_task, seed)
    items = [trajectories[i] for i in units]
    if not items:
        raise CascadeCalibrationError(f"no calibration data: certifying needs at least {decided_needed(alpha, delta)} "
                                      "decided labels", decided_needed(alpha, delta))
    y = np.array([t.label for t in items], dtype=np.int64)
    conf = np.full((len(stages), len(items)), np.nan)
    reach, calls, unparsed = np.ones(len(items), dtype=bool), [], []
    for k, (stage, name) in enumerate(zip(stages, names, strict=True)):
        where = np.flatnonzero(reach)
        conf[k, where], bad = _stage_confidences(stage, name, [items[i] for i in where], num_threads)
        calls.append(int(where.size))
        unparsed.append(int(bad))
        reach &= _could_leave(conf[k], pass_levels, fail_levels) | np.isnan(conf[k])
    costs = stage_costs if stage_costs is not None else [0.0 if isinstance(s, FloorJudge) else 1.0 for s in stages]
    result = learn_then_test(conf, y, alpha, delta, max_false_pass, method, pass_levels=pass_levels,
                             fail_levels=fail_levels, stage_costs=costs, p_values=p_values, seed=seed)
    tasks = len({f"{t.domain}/{t.task_id}" for t in trajectories})
    if not result.certified:
        raise _refusal(result, len(items), tasks)
    rows, escalated = _stage_rows(names, conf, y, result, calls, unparsed)
    guarantee = {"alpha": alpha, "delta": delta, "max_false_pass": max_false_pass, "method": method,
                 "p_values": p_values, "grid": {"pass_levels": [x if math.isfinite(x) else None for x in pass_levels],
                                                "fail_levels": [x if math.isfinite(x) else None for x in fail_levels],
                                                "vectors": result.n_tested},
                 "unit": "task: one trial per task" if one_per_task else "trajectory (all trials)",
                 "theorem": THEOREM, "references": list(REFERENCES)}
    report = FitReport(result.to_dict(), rows, {"calibration_units": len(items), "trajectories": len(trajectories),
                                                "tasks": tasks, "dropped_trials": len(trajectories) - len(items)},
                       escalated, guarantee)
    rules = [StageRule(name, tp, tf) for name, (tp, tf) in zip(names, result.thresholds, strict=True)]
    return Cascade(list(stages), rules, guarantee, report.to_dict())


def _rates(verdicts, labels, mask) -> dict:
    y = np.asarray(labels, dtype=bool)
    passed = np.array([v.passed for v in verdicts], dtype=bool)
    n, errors = int(mask.sum()), int((mask & (passed != y)).sum())
    failed, false_passes = int((mask & ~y).sum()), int((mask & passed & ~y).sum())
    return {"disagreement": errors / n if n else None,
            "disagreement_ci95": list(proportion_ci(errors, n)) if n else None,
            "false_pass": false_passes / failed if failed else None,
            "false_pass_ci95": list(proportion_ci(false_passes, failed)) if failed else None}


def cascade_summary(cascade: Cascade, verdicts: CascadeVerdicts, labels: Sequence[int] | None = None,
                    spend: dict | None = None) -> dict:
    """What a cascade's batch did, for reports, certificates and the demo: per stage the items decided, their
    share, the LM calls it made (a floor makes none), and with `labels` (held-out, 0/1, same order) the
    realized disagreement and false-pass rate with exact 95% intervals; the escalated items (for a
    person), and the LM calls (and, with `spend`, tokens) against judging everything with the last stage.

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
    rows, lm_calls = [], 0
    for stage, rule in zip(cascade.stages, cascade.rules, strict=True):
        calls = 0 if isinstance(stage, FloorJudge) else int(verdicts.stage_calls.get(rule.name, 0))
        lm_calls += calls
        mine = (stages == rule.name) & produced
        rows.append({"name": rule.name, **rule.to_dict(), "decided": int(mine.sum()),
                     "share": float(mine.sum()) / n if n else 0.0, "lm_calls": calls,
                     **(_rates(verdicts, labels, mine) if labels is not None else {})})
    decided = (stages != ESCALATED) & produced
    return {"n": n, "stages": rows, "escalated": int((stages == ESCALATED).sum()),
            "failed": int((~produced & (stages != ESCALATED)).sum()), "lm_calls": lm_calls,
            "lm_calls_judging_everything": n, "lm_calls_saved": n - lm_calls,
            "coverage": float(decided.sum()) / n if n else 0.0,
            **({"overall": _rates(verdicts, labels, decided)} if labels is not None else {}),
            "token_spend": spend, "guarantee": cascade.guarantee}


def _interval(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "[-]"


def _rate(value, ci) -> str:
    return "n/a" if value is None else f"{value:.3f} {_interval(ci)}"


def _threshold_text(row: dict) -> str:
    t_pass = "never" if row.get("t_pass") is None else f">= {row['t_pass']}"
    t_fail = "never" if row.get("t_fail") is None else f"<= {row['t_fail']}"
    return f"pass {t_pass}, fail {t_fail}"


def format_fit_report(report: dict, guarantee: dict | None = None) -> str:
    """A fitted cascade's report (``cascade.fit_report``) as `rubricforge cascade fit` prints it: the
    guarantee, then per stage its thresholds, what it decided on the calibration units and the realized
    disagreement and false-pass rate with exact 95% intervals (descriptive; the guarantee is the bound)."""
    guarantee = guarantee or report.get("guarantee") or {}
    units = report.get("units", {})
    bound = f" and false-pass <= {guarantee['max_false_pass']}" if guarantee.get("max_false_pass") is not None else ""
    lines = [f"certified: disagreement <= {guarantee.get('alpha')}{bound} among decided items, with probability "
             f">= {1 - guarantee.get('delta', 0):.2f} ({guarantee.get('method')}, "
             f"{guarantee.get('grid', {}).get('vectors')} threshold vectors tested)",
             f"calibration: {units.get('calibration_units')} units ({units.get('tasks')} tasks, one trial each; "
             f"{units.get('dropped_trials', 0)} further trial(s) not used)"]
    n = max(units.get("calibration_units") or 0, 1)
    for row in report.get("stages", []):
        lines.append(f"  {row['name']}: {_threshold_text(row)}; decided {row['decided']} of {row['reached']} reached "
                     f"({row['decided'] / n:.0%} of all); disagreement "
                     f"{_rate(row['disagreement'], row['disagreement_ci95'])}, false-pass "
                     f"{_rate(row['false_pass'], row['false_pass_ci95'])}; {row['calls']} run(s) in the fit")
    lines.append(f"  escalated to a person: {report.get('escalated')} of {n} calibration units")
    return "\n".join(lines)


def format_cascade_summary(summary: dict) -> str:
    """`cascade_summary` as text: coverage per stage, realized risks with exact 95% intervals (when labels
    were given), the escalated items, and LM calls against judging everything with the last stage."""
    n = summary["n"]
    lines = [f"cascade on {n} item(s): {summary['coverage']:.0%} decided, {summary['escalated']} escalated to a person"
             + (f", {summary['failed']} failed (no verdict)" if summary.get("failed") else "")]
    for row in summary["stages"]:
        risk = ""
        if "disagreement" in row:
            risk = (f"; disagreement {_rate(row['disagreement'], row['disagreement_ci95'])}, "
                    f"false-pass {_rate(row['false_pass'], row['false_pass_ci95'])}")
        lines.append(f"  {row['name']}: decided {row['decided']} ({row['share']:.0%}), {row['lm_calls']} LM call(s)"
                     + risk)
    overall = summary.get("overall")
    if overall:
        lines.append(f"  all decided: disagreement {_rate(overall['disagreement'], overall['disagreement_ci95'])}, "
                     f"false-pass {_rate(overall['false_pass'], overall['false_pass_ci95'])}")
    lines.append(f"  LM calls: {summary['lm_calls']}, against {summary['lm_calls_judging_everything']} judging "
                 f"everything with the last stage ({summary['lm_calls_saved']} saved)")
    if summary.get("token_spend") is not None:
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


def measure_cascade(cascade: Cascade, trajectories: Sequence[Trajectory], verdicts_out, *, lm=None,
                    concurrency: int = 4, cascade_file=None) -> dict:
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
    summary = cascade_summary(cascade, run.verdicts, [t.label for t in trajectories], run.token_spend())
    return {**summary, "verdicts": str(verdicts_out), "escalated_queue": run.escalated_path}
