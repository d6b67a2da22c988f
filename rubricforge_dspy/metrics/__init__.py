"""Agreement metrics and their intervals for grading an LLM judge against ground-truth outcomes.

Conventions (shared by every function here):

- ``y_true``: ground-truth labels, ``1`` = the trajectory *passed*, ``0`` = it failed.
- ``y_pred``: the judge's verdicts on the same items, same encoding (``1`` = judged pass).
- ``scores``: the judge's graded confidence that the trajectory passed, floats in ``[0, 1]``.
- ``rewards``: graded ground-truth rewards (finite floats) for the graded metrics.
- ``abstained``: boolean mask, ``True`` where the judge abstained.
- ``clusters``: one label per item (a task id); items sharing one are resampled together.

The *positive* class is ``1`` (passed). A **false pass** is a failed trajectory the judge passed
(FP); a **false fail** is a passed trajectory the judge failed (FN).

Everything is a pure function of its arguments in the spirit of ``sklearn.metrics``: inputs are
validated up front and a :class:`ValueError` names the offending argument. Where a statistic is
undefined on valid input (ROC AUC with a single class, false-pass rate with no failed
trajectories, ...) the function returns ``nan`` and emits a
:class:`sklearn.exceptions.UndefinedMetricWarning` saying why, rather than raising.

Modules: :mod:`.agreement` (point metrics, McNemar), :mod:`.intervals` (exact / Wilson intervals
for rates and the one bootstrap engine, item or task-clustered), :mod:`.calibration` (reliability
diagram, ECE, contradictions), :mod:`.summary` (one judge's row). Import them from here.
"""

from rubricforge_dspy.metrics.agreement import (
    McNemarResult,
    accuracy,
    cohens_kappa,
    compare_paired,
    confusion_counts,
    f1_positive,
    false_fail_count,
    false_pass_rate,
    graded_summary,
    kendall,
    mcnemar_exact,
    mean_abs_error,
    predicted_positive_rate,
    roc_auc,
    significance_mark,
    spearman,
)
from rubricforge_dspy.metrics.calibration import (
    BINNING,
    DEFAULT_BINS,
    contradiction_summary,
    expected_calibration_error,
    reliability_curve,
)
from rubricforge_dspy.metrics.intervals import (
    CI_METHODS,
    ConfidenceInterval,
    accuracy_ci,
    bootstrap,
    bootstrap_ci,
    bootstrap_p_value,
    cluster_codes,
    has_repeated_clusters,
    paired_bootstrap_abs_error,
    percentile_interval,
    proportion_ci,
    resample_weights,
    weighted_auc,
    weighted_kappa,
    weighted_mean,
    weighted_ratio,
)
from rubricforge_dspy.metrics.summary import binary_summary

__all__ = [
    "ConfidenceInterval", "McNemarResult", "CI_METHODS", "BINNING", "DEFAULT_BINS",
    "confusion_counts", "accuracy", "f1_positive", "cohens_kappa", "roc_auc", "predicted_positive_rate",
    "false_pass_rate", "false_fail_count", "spearman", "kendall", "mean_abs_error",
    "mcnemar_exact", "compare_paired", "significance_mark", "graded_summary", "binary_summary",
    "proportion_ci", "accuracy_ci", "resample_weights", "bootstrap", "bootstrap_ci", "bootstrap_p_value",
    "percentile_interval", "paired_bootstrap_abs_error", "cluster_codes", "has_repeated_clusters",
    "weighted_mean", "weighted_ratio", "weighted_kappa", "weighted_auc",
    "reliability_curve", "expected_calibration_error", "contradiction_summary",
]
