"""The per-judge tables of the report, one function per table (named after its section):

- :func:`main_table` ("Main table" and "Error decomposition"): false-pass rate and accuracy with
  exact Clopper-Pearson intervals, kappa and AUC with bootstrap intervals (task-clustered when
  tasks repeat), confusion counts, abstentions, McNemar against the induced judge;
- :func:`task_clustered_table` ("Task-clustered intervals", only when tasks repeat);
- :func:`calibration_table` ("Calibration": ECE and reliability-diagram data per judge, before and
  after calibration when verdicts carry ``score_calibrated``);
- :func:`contradictions_table` ("Contradictions": ``passed`` disagreeing with ``score``);
- :func:`ranking_table` ("Ranking vs calibration", graded runs).

Every statistic comes from :mod:`rubricforge_dspy.metrics`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rubricforge_dspy import metrics as M
from rubricforge_dspy.report.notes import collect
from rubricforge_dspy.report.run import Run

__all__ = ["clusters_of", "main_table", "task_clustered_table", "calibration_table", "contradictions_table",
           "ranking_table"]


def clusters_of(run: Run) -> tuple[str, ...] | None:
    """The task ids when some task has several items (the bootstrap then resamples whole tasks)."""
    return run.items.task_id if M.has_repeated_clusters(run.items.task_id) else None


def main_table(run: Run, *, n_resamples: int, seed: int, confidence: float, notes: list[str]) -> list[dict[str, Any]]:
    y = run.items.label
    induced = run.predictions[run.induced]
    clusters = clusters_of(run)
    rows = []
    for judge in run.judges:
        p = run.predictions[judge]
        with collect(notes, judge):
            summary = M.binary_summary(y, p.verdict, p.score, p.abstained, n_resamples=n_resamples, seed=seed,
                                       confidence=confidence, clusters=clusters)
        row = {"judge": judge, "induced": judge == run.induced, **summary,
               "abstained_on_passed": int((p.abstained & (y == 1)).sum()),
               "abstained_on_failed": int((p.abstained & (y == 0)).sum()), "mcnemar": None}
        if judge != run.induced:
            cmp = M.compare_paired(y, induced.verdict, p.verdict)
            row["mcnemar"] = {"b": cmp["b"], "c": cmp["c"], "p_value": cmp["p_value"], "mark": cmp["mark"]}
        rows.append(row)
    return rows


def task_clustered_table(run: Run, *, n_resamples: int, seed: int, confidence: float,
                         notes: list[str]) -> dict[str, Any] | None:
    """Accuracy and false-pass rate with percentile intervals from resampling whole tasks: the exact
    intervals of the main table treat trials of one task as independent, which they are not."""
    clusters = clusters_of(run)
    if clusters is None:
        return None
    y = run.items.label
    failed = (y == 0).astype(np.float64)
    statistics = {}
    for judge in run.judges:
        v = run.predictions[judge].verdict
        statistics[f"{judge}/accuracy"] = M.weighted_mean((v == y).astype(np.float64))
        statistics[f"{judge}/false_pass_rate"] = M.weighted_ratio(((v == 1) & (y == 0)).astype(np.float64), failed)
    reps = M.bootstrap(statistics, len(y), n_resamples=n_resamples, seed=seed, clusters=clusters)
    rows = []
    for judge in run.judges:
        with collect(notes, f"{judge} (task-clustered)"):
            acc = M.percentile_interval(reps[f"{judge}/accuracy"], confidence, "task-clustered accuracy")
            fpr = M.percentile_interval(reps[f"{judge}/false_pass_rate"], confidence,
                                        "task-clustered false-pass rate")
        rows.append({"judge": judge, "induced": judge == run.induced, "accuracy_ci_low": acc.low,
                     "accuracy_ci_high": acc.high, "false_pass_ci_low": fpr.low, "false_pass_ci_high": fpr.high})
    per_task = np.unique(np.asarray(clusters, dtype=str), return_counts=True)[1]  # O(n log n), not items x tasks
    return {"n_tasks": len(per_task), "n_items": len(y), "max_items_per_task": int(per_task.max()), "rows": rows}


def calibration_table(run: Run, *, n_bins: int = M.DEFAULT_BINS) -> dict[str, Any]:
    """ECE and reliability-diagram data of each judge's score against the pass/fail label."""
    y = run.items.label
    rows = []
    for judge in run.judges:
        p = run.predictions[judge]
        row = {"judge": judge, "induced": judge == run.induced, "ece": M.expected_calibration_error(y, p.score, n_bins),
               "reliability": M.reliability_curve(y, p.score, n_bins), "ece_calibrated": None,
               "reliability_calibrated": None}
        if p.score_calibrated is not None:
            row["ece_calibrated"] = M.expected_calibration_error(y, p.score_calibrated, n_bins)
            row["reliability_calibrated"] = M.reliability_curve(y, p.score_calibrated, n_bins)
        rows.append(row)
    return {"n_bins": n_bins, "binning": M.BINNING, "rows": rows}


def contradictions_table(run: Run, *, confidence: float) -> list[dict[str, Any]]:
    """Per judge, produced verdicts whose ``passed`` contradicted ``score`` (resolved to fail)."""
    return [{"judge": judge, "induced": judge == run.induced,
             **M.contradiction_summary(p.contradiction, p.abstained, 1.0 - confidence)}
            for judge, p in run.predictions.items()]


def ranking_table(run: Run, *, n_resamples: int, seed: int, confidence: float,
                  notes: list[str]) -> list[dict[str, Any]]:
    """Spearman / Kendall / MAE per judge against graded rewards, and a paired bootstrap of
    ``|score - reward|`` against the induced judge (task-clustered when tasks repeat)."""
    r = run.items.reward
    ind = run.predictions[run.induced].score
    clusters = clusters_of(run)
    rows = []
    for judge in run.judges:
        p = run.predictions[judge]
        with collect(notes, f"{judge} (graded)"):
            g = M.graded_summary(p.score, r)
            cmp = None
            if judge != run.induced:
                cmp = M.paired_bootstrap_abs_error(p.score, ind, r, n_resamples=n_resamples, seed=seed,
                                                   confidence=confidence, clusters=clusters)
                cmp["mark"] = M.significance_mark(cmp["p_value"])
        rows.append({"judge": judge, "induced": judge == run.induced, "spearman": g["spearman"],
                     "kendall": g["kendall"], "mae": g["mae"], "vs_induced": cmp})
    return rows


_EVIDENCE_KINDS = (("complete", 1), ("cut", 0), ("unknown", -1))


def evidence_table(run: Run, *, confidence: float) -> list[dict[str, Any]] | None:
    """Per judge, its verdicts split by what the judge read (the verdict line's ``evidence``, issue 40): on
    the whole episode (``complete``), on a cut one (``cut``: steps clipped or elided), or not said
    (``unknown``: an older line, another tool's). For each kind: the items, the share of all items, the
    disagreement rate with the labels and the false-pass rate (passes among the labeled failures), each
    with its exact (Clopper-Pearson) interval. None when no judge's line says what it read."""
    if all(p.evidence is None or not (p.evidence >= 0).any() for p in run.predictions.values()):
        return None
    y = run.items.label
    alpha = 1.0 - confidence
    rows = []
    for judge in run.judges:
        p = run.predictions[judge]
        codes = p.evidence if p.evidence is not None else np.full(len(y), -1, dtype=np.int8)
        row: dict[str, Any] = {"judge": judge, "n": len(y)}
        for kind, code in _EVIDENCE_KINDS:
            member = codes == code
            n, failed = int(member.sum()), member & (y == 0)
            disagree = int((p.verdict[member] != y[member]).sum())
            false_passes, n_failed = int(p.passed[failed].sum()), int(failed.sum())
            row[kind] = {
                "n": n, "share": n / len(y) if len(y) else float("nan"),
                "disagreements": disagree, "disagreement_rate": disagree / n if n else float("nan"),
                "disagreement_ci": list(M.proportion_ci(disagree, n, alpha)) if n else [float("nan")] * 2,
                "n_failed": n_failed, "false_passes": false_passes,
                "false_pass_rate": false_passes / n_failed if n_failed else float("nan"),
                "false_pass_ci": list(M.proportion_ci(false_passes, n_failed, alpha)) if n_failed
                else [float("nan")] * 2,
            }
        rows.append(row)
    return rows
