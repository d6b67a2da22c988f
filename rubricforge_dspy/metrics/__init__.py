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

Modules: :mod:`.agreement` (point metrics, McNemar), :mod:`.labelers` (the agreement between several labelers:
Cohen's kappa per pair, Krippendorff's nominal alpha, `labeler_agreement` with item-bootstrap
intervals), :mod:`.intervals` (exact / Wilson intervals for rates and the one bootstrap engine, item
or task-clustered), :mod:`.calibration` (reliability diagram, ECE, contradictions), :mod:`.summary`
(one judge's row). Import them from here; they load on first use (`_lazy.lazy_exports`), so a command
that only names a method (`risk_methods`) never imports numpy or scipy.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.metrics.agreement": [
        "McNemarResult", "confusion_counts", "accuracy", "f1_positive", "cohens_kappa", "roc_auc",
        "predicted_positive_rate", "false_pass_rate", "false_fail_count", "spearman", "kendall", "mean_abs_error",
        "mcnemar_exact", "compare_paired", "significance_mark", "graded_summary",
    ],
    "rubricforge_dspy.metrics.labelers": [
        "krippendorff_alpha_nominal", "labeler_agreement", "format_labeler_agreement", "LABELER_RESAMPLES"
    ],
    "rubricforge_dspy.metrics.calibration": [
        "BINNING", "DEFAULT_BINS", "reliability_curve", "expected_calibration_error", "contradiction_summary"
    ],
    "rubricforge_dspy.metrics.intervals": [
        "ConfidenceInterval", "CI_METHODS", "proportion_ci", "accuracy_ci", "resample_weights", "bootstrap",
        "bootstrap_ci", "bootstrap_p_value", "percentile_interval", "paired_bootstrap_abs_error", "cluster_codes",
        "has_repeated_clusters", "weighted_mean", "weighted_ratio", "weighted_kappa", "weighted_auc"
    ],
    "rubricforge_dspy.metrics.summary": ["binary_summary"],
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
