"""Point metrics of a judge against ground truth: confusion counts, accuracy, F1, kappa, AUC,
false-pass rate, graded rank correlations and MAE, and the exact McNemar test.

Conventions: see :mod:`rubricforge_dspy.metrics`. Statistics that scipy / scikit-learn implement
are delegated to them.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats
from sklearn import metrics as skm

from rubricforge_dspy.metrics._checks import (
    binary_pair,
    check_binary,
    check_mask,
    check_same_length,
    check_scores,
    graded_pair,
    undefined_metric,
)


class McNemarResult(NamedTuple):
    """Result of :func:`mcnemar_exact`; unpacks like ``(b, c, p_value)``."""

    b: int
    c: int
    p_value: float


# --------------------------------------------------------------------------------------
# Binary verdicts
# --------------------------------------------------------------------------------------


def confusion_counts(y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, int]:
    """Confusion-matrix counts with *passed* (``1``) as the positive class.

    ``tp``: passed and judged pass; ``fp``: failed but judged pass (false pass);
    ``fn``: passed but judged fail (false fail); ``tn``: failed and judged fail.
    Computed with :func:`sklearn.metrics.confusion_matrix` using ``labels=[0, 1]`` so the
    matrix is always 2x2 even when a class is absent.

    Returns
    -------
    dict with int keys ``tp``, ``fp``, ``fn``, ``tn``.
    """
    t, p = binary_pair(y_true, y_pred)
    tn, fp, fn, tp = skm.confusion_matrix(t, p, labels=[0, 1]).ravel()
    return {"tp": int(tp), "fp": int(fp), "fn": int(fn), "tn": int(tn)}


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Fraction of items where the verdict equals the label: ``(TP + TN) / n``.

    Delegates to :func:`sklearn.metrics.accuracy_score`.
    """
    t, p = binary_pair(y_true, y_pred)
    return float(skm.accuracy_score(t, p))


def f1_positive(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """F1 score of the *passed* class: ``2 TP / (2 TP + FP + FN)``.

    The harmonic mean of precision and recall for ``pos_label=1`` (van Rijsbergen,
    *Information Retrieval*, 2nd ed., 1979, ch. 7). Delegates to
    :func:`sklearn.metrics.f1_score`. Returns ``nan`` when there is no positive anywhere
    (``TP + FP + FN == 0``), where F1 is undefined (``zero_division=nan``).
    """
    t, p = binary_pair(y_true, y_pred)
    return float(skm.f1_score(t, p, pos_label=1, average="binary", zero_division=np.nan))


def cohens_kappa(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Cohen's kappa between labels and verdicts: ``(p_o - p_e) / (1 - p_e)``.

    ``p_o`` is observed agreement (accuracy) and ``p_e`` the agreement expected by chance
    from the two marginal distributions (Cohen, "A coefficient of agreement for nominal
    scales", *Educational and Psychological Measurement* 20(1), 1960). Delegates to
    :func:`sklearn.metrics.cohen_kappa_score`; ``nan`` (with scikit-learn's warning) when
    ``p_e == 1``, i.e. labels and verdicts are the same single class.
    """
    t, p = binary_pair(y_true, y_pred)
    return float(skm.cohen_kappa_score(t, p, labels=[0, 1]))


def roc_auc(y_true: ArrayLike, scores: ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for separating passed from failed items.

    Equals the probability that a random passed item scores higher than a random failed
    one, ties counting 1/2 (Fawcett, "An introduction to ROC analysis", *Pattern
    Recognition Letters* 27(8), 2006). Delegates to :func:`sklearn.metrics.roc_auc_score`.

    Returns ``nan`` and emits an ``UndefinedMetricWarning`` giving the reason when
    ``y_true`` contains a single class (the curve is undefined), instead of raising.
    """
    t = check_binary("y_true", y_true)
    s = check_scores("scores", scores)
    check_same_length(y_true=t, scores=s)
    classes = np.unique(t)
    if classes.size < 2:
        only = "passed" if classes[0] == 1 else "failed"
        return undefined_metric(
            f"ROC AUC is undefined: every trajectory in y_true {only} (one class present); "
            "returning nan"
        )
    return float(skm.roc_auc_score(t, s))


def predicted_positive_rate(y_pred: ArrayLike) -> float:
    """Fraction of items the judge passed: ``(TP + FP) / n``."""
    p = check_binary("y_pred", y_pred)
    return float(p.mean())


def false_pass_rate(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """False passes over truly failed trajectories: ``FP / (FP + TN)``.

    This is the false-positive rate with *passed* as the positive class (Fawcett 2006).
    Returns ``nan`` with an ``UndefinedMetricWarning`` when no trajectory failed.
    """
    c = confusion_counts(y_true, y_pred)
    negatives = c["fp"] + c["tn"]
    if negatives == 0:
        return undefined_metric("false_pass_rate is undefined: no failed trajectories in y_true; returning nan")
    return c["fp"] / negatives


def false_fail_count(y_true: ArrayLike, y_pred: ArrayLike) -> int:
    """Number of passed trajectories the judge failed (false negatives, ``FN``)."""
    return confusion_counts(y_true, y_pred)["fn"]


# --------------------------------------------------------------------------------------
# Graded rewards
# --------------------------------------------------------------------------------------

def spearman(scores: ArrayLike, rewards: ArrayLike) -> float:
    """Spearman rank correlation ``rho`` between judge scores and graded rewards.

    Pearson correlation of the (average-tie) ranks (Spearman, "The proof and measurement
    of association between two things", *Am. J. Psychol.* 15(1), 1904). Delegates to
    :func:`scipy.stats.spearmanr`; ``nan`` when either input is constant or has < 2 items.
    """
    s, r = graded_pair(scores, rewards)
    if s.size < 2:
        return undefined_metric("spearman is undefined for fewer than 2 items; returning nan")
    return float(stats.spearmanr(s, r).statistic)


def kendall(scores: ArrayLike, rewards: ArrayLike) -> float:
    """Kendall's tau-b between judge scores and graded rewards.

    ``(concordant - discordant) / sqrt((n0 - n1)(n0 - n2))`` with tie corrections
    (Kendall, "The treatment of ties in ranking problems", *Biometrika* 33(3), 1945).
    Delegates to :func:`scipy.stats.kendalltau` (``variant='b'``); ``nan`` when either
    input is constant or has < 2 items.
    """
    s, r = graded_pair(scores, rewards)
    if s.size < 2:
        return undefined_metric("kendall is undefined for fewer than 2 items; returning nan")
    return float(stats.kendalltau(s, r, variant="b").statistic)


def mean_abs_error(scores: ArrayLike, rewards: ArrayLike) -> float:
    """Mean absolute error ``mean(|score - reward|)``.

    Delegates to :func:`sklearn.metrics.mean_absolute_error`.
    """
    s, r = graded_pair(scores, rewards)
    return float(skm.mean_absolute_error(r, s))


# --------------------------------------------------------------------------------------
# Paired comparisons
# --------------------------------------------------------------------------------------


def mcnemar_exact(correct_a: ArrayLike, correct_b: ArrayLike) -> McNemarResult:
    """Exact (conditional) McNemar test that two judges have the same accuracy.

    ``correct_a`` / ``correct_b`` are per-item 0/1 (or bool) indicators that judge A / B
    got the item right, on the same items. Only discordant items carry information:
    ``b`` = items A got right and B wrong, ``c`` = items A got wrong and B right. Under
    H0 each discordant item is equally likely to go either way, so ``b ~ Binomial(b + c,
    1/2)``; the p-value is the two-sided exact binomial test
    (:func:`scipy.stats.binomtest`). McNemar, *Psychometrika* 12(2), 1947; for comparing
    classifiers, Dietterich, *Neural Computation* 10(7), 1998; on the exact version,
    Fagerland, Lydersen & Laake, *BMC Med. Res. Methodol.* 13:91, 2013.

    With no discordant items there is no evidence of a difference and ``p_value = 1.0``.
    Example: three discordant items all favouring A give ``b=3, c=0, p=2 * 0.5**3 = 0.25``.

    Returns
    -------
    McNemarResult
        ``(b, c, p_value)``.
    """
    a = check_mask("correct_a", correct_a)
    bb = check_mask("correct_b", correct_b)
    check_same_length(correct_a=a, correct_b=bb)
    b = int(np.count_nonzero(a & ~bb))
    c = int(np.count_nonzero(~a & bb))
    if b + c == 0:
        return McNemarResult(b, c, 1.0)
    p = float(stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)
    return McNemarResult(b, c, min(1.0, p))


def significance_mark(p: float) -> str:
    """Conventional stars: ``"***"`` p < 0.001, ``"**"`` p < 0.01, ``"*"`` p < 0.05, else ``"ns"``.

    ``nan`` (no test possible) is reported as ``"ns"``. Raises ``ValueError`` for values
    outside ``[0, 1]``.
    """
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise ValueError(f"p must be a real number in [0, 1], got {p!r}")
    p = float(p)
    if math.isnan(p):
        return "ns"
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if p < 0.001:
        return "***"
    if p < 0.01:
        return "**"
    if p < 0.05:
        return "*"
    return "ns"


def graded_summary(scores: ArrayLike, rewards: ArrayLike) -> dict[str, Any]:
    """Graded agreement of judge scores with rewards: ``n, spearman, kendall, mae``."""
    s, r = graded_pair(scores, rewards)
    return {
        "n": int(s.size),
        "spearman": spearman(s, r),
        "kendall": kendall(s, r),
        "mae": mean_abs_error(s, r),
    }


def compare_paired(y_true: ArrayLike, pred_a: ArrayLike, pred_b: ArrayLike) -> dict[str, Any]:
    """Compare two judges' verdicts on the same items with the exact McNemar test.

    Per-item correctness ``pred == y_true`` feeds :func:`mcnemar_exact`. ``b`` counts
    items only judge A got right, ``c`` items only judge B got right.

    Returns
    -------
    dict with ``n, accuracy_a, accuracy_b, b, c, p_value, mark``.
    """
    t = check_binary("y_true", y_true)
    a = check_binary("pred_a", pred_a)
    b = check_binary("pred_b", pred_b)
    check_same_length(y_true=t, pred_a=a, pred_b=b)
    res = mcnemar_exact(a == t, b == t)
    return {
        "n": int(t.size),
        "accuracy_a": float(np.mean(a == t)),
        "accuracy_b": float(np.mean(b == t)),
        "b": res.b,
        "c": res.c,
        "p_value": res.p_value,
        "mark": significance_mark(res.p_value),
    }


# --------------------------------------------------------------------------------------
# Agreement between labelers (several people labeling the same items)
# --------------------------------------------------------------------------------------
#
