"""One judge's agreement metrics with their intervals, as a flat dict (one table row)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rubricforge_dspy.metrics._checks import (
    binary_pair,
    check_bootstrap_params,
    check_mask,
    check_same_length,
    check_scores,
)
from rubricforge_dspy.metrics.agreement import (
    accuracy,
    cohens_kappa,
    confusion_counts,
    f1_positive,
    false_pass_rate,
    predicted_positive_rate,
    roc_auc,
)
from rubricforge_dspy.metrics.intervals import (
    bootstrap,
    has_repeated_clusters,
    percentile_interval,
    proportion_ci,
    weighted_auc,
    weighted_kappa,
)


def binary_summary(
    y_true: ArrayLike,
    y_pred: ArrayLike,
    scores: ArrayLike | None = None,
    abstained: ArrayLike | None = None,
    n_resamples: int = 10_000,
    seed: int | np.random.Generator | None = 0,
    confidence: float = 0.95,
    *,
    clusters: ArrayLike | None = None,
) -> dict[str, Any]:
    """All pass/fail agreement metrics for one judge with their intervals.

    Metrics are computed over *all* ``n`` items using the verdicts in ``y_pred``; an abstention
    must already be mapped to a verdict by the caller (e.g. fail), so that judges compared on the
    same items stay paired. ``abstained`` (optional mask) is only counted.

    Intervals: accuracy and false-pass rate are proportions, with exact Clopper-Pearson intervals
    (:func:`proportion_ci`; None when the denominator is 0); kappa and AUC get percentile bootstrap
    intervals, resampling whole ``clusters`` (e.g. task ids) when some cluster holds several items
    (``bootstrap`` says ``"task-clustered"``), else items. ``auc`` is ``nan`` without ``scores``.
    """
    t, p = binary_pair(y_true, y_pred)
    check_bootstrap_params(n_resamples, confidence)
    alpha = 1.0 - float(confidence)
    n_abstained = 0
    if abstained is not None:
        m = check_mask("abstained", abstained)
        check_same_length(y_true=t, abstained=m)
        n_abstained = int(m.sum())
    clustered = clusters is not None and has_repeated_clusters(clusters)
    statistics = {"kappa": weighted_kappa(t, p)}
    auc = math.nan
    if scores is not None:
        s = check_scores("scores", scores)
        check_same_length(y_true=t, scores=s)
        auc = roc_auc(t, s)
        statistics["auc"] = weighted_auc(t, s)
    reps = bootstrap(statistics, int(t.size), n_resamples=n_resamples, seed=seed,
                     clusters=clusters if clustered else None)
    c = confusion_counts(t, p)
    negatives = c["fp"] + c["tn"]
    acc_ci = proportion_ci(c["tp"] + c["tn"], int(t.size), alpha)
    fpr_ci = proportion_ci(c["fp"], negatives, alpha) if negatives else (math.nan, math.nan)
    kappa_ci = percentile_interval(reps["kappa"], confidence, "kappa bootstrap")
    auc_ci = percentile_interval(reps["auc"], confidence, "AUC bootstrap") if "auc" in reps else (math.nan, math.nan)
    return {
        "n": int(t.size), **c,
        "accuracy": accuracy(t, p), "accuracy_ci_low": acc_ci[0], "accuracy_ci_high": acc_ci[1],
        "f1": f1_positive(t, p),
        "kappa": cohens_kappa(t, p), "kappa_ci_low": kappa_ci[0], "kappa_ci_high": kappa_ci[1],
        "auc": auc, "auc_ci_low": auc_ci[0], "auc_ci_high": auc_ci[1],
        "predicted_positive_rate": predicted_positive_rate(p),
        "false_pass_rate": false_pass_rate(t, p) if negatives else math.nan,
        "false_pass_ci_low": fpr_ci[0], "false_pass_ci_high": fpr_ci[1],
        "false_fail_count": c["fn"], "abstained": n_abstained,
        "bootstrap": "task-clustered" if clustered else "items",
    }
