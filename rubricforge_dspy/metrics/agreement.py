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
# ``ratings``: one mapping per item, ``{labeler: value}``, over nominal values (any hashable: 0/1, words). An
# item rated by one labeler only carries no information on agreement and is left out of every statistic here
# (counted as ``single``).

LABELER_RESAMPLES = 2000  # bootstrap resamples of the labeler-agreement intervals (over items)


def _multiply_rated(ratings: Any) -> list[dict[Any, Any]]:
    out = []
    for item in ratings:
        if not hasattr(item, "items"):
            raise ValueError(f"ratings must be mappings {{labeler: value}}, got {type(item).__name__}")
        present = {who: value for who, value in item.items() if value is not None}
        if len(present) >= 2:
            out.append(present)
    return out


def krippendorff_alpha_nominal(units: Any) -> float:
    """Krippendorff's alpha for nominal values: ``1 - D_o / D_e`` from the coincidence matrix.

    ``units`` holds, per item, the values its labelers gave (a sequence of hashables; missing values are
    simply absent). A unit with ``m_u >= 2`` values adds ``1 / (m_u - 1)`` to ``o[c, k]`` for each ordered
    pair of its values; with ``n_c = sum_k o[c, k]`` and ``n = sum_c n_c``,
    ``alpha = 1 - (n - 1) * sum_{c != k} o[c, k] / sum_{c != k} n_c n_k`` (Krippendorff, *Content Analysis*,
    4th ed., 2019, ch. 12; "Computing Krippendorff's alpha-reliability", 2011, section C, whose nominal
    example with missing values gives 0.743). Units with fewer than two values are not pairable and are left
    out. ``nan`` (with an ``UndefinedMetricWarning``) when fewer than two pairable values exist or every
    value is the same (``D_e = 0``).
    """
    values: list[list[Any]] = []
    for unit in units:
        present = [v for v in unit if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if len(present) >= 2:
            values.append(present)
    categories = sorted({v for unit in values for v in unit}, key=repr)
    index = {c: i for i, c in enumerate(categories)}
    o = np.zeros((len(categories), len(categories)))
    for unit in values:
        counts = np.bincount([index[v] for v in unit], minlength=len(categories)).astype(float)
        o += (np.outer(counts, counts) - np.diag(counts)) / (len(unit) - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    expected = n_c.sum() ** 2 - float((n_c ** 2).sum())  # sum_{c != k} n_c n_k
    if n < 2 or expected == 0:
        return undefined_metric("Krippendorff's alpha is undefined: fewer than two pairable values, or every "
                                "value is the same; returning nan")
    observed = float(o.sum() - np.trace(o))
    return float(1.0 - (n - 1) * observed / expected)


def _kappa_from_confusion(confusion: np.ndarray) -> np.ndarray:
    """Cohen's kappa from confusion counts of shape ``(..., K, K)`` (rows: one labeler, columns: the other);
    nan where it is undefined (no items, or chance agreement 1)."""
    total = confusion.sum(axis=(-2, -1))
    safe = np.where(total > 0, total, 1.0)
    p_o = np.trace(confusion, axis1=-2, axis2=-1) / safe
    p_e = (confusion.sum(axis=-1) * confusion.sum(axis=-2)).sum(axis=-1) / safe ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((total > 0) & (p_e < 1), (p_o - p_e) / np.where(p_e < 1, 1 - p_e, 1.0), np.nan)


def _alpha_from_coincidences(o: np.ndarray) -> np.ndarray:
    """Krippendorff's nominal alpha from coincidence matrices of shape ``(..., K, K)``; nan where undefined."""
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    expected = n ** 2 - (n_c ** 2).sum(axis=-1)
    observed = o.sum(axis=(-2, -1)) - np.trace(o, axis1=-2, axis2=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n >= 2) & (expected > 0), 1.0 - (n - 1) * observed / np.where(expected > 0, expected, 1.0),
                        np.nan)


def labeler_agreement(ratings: Any, *, confidence: float = 0.95, resamples: int = LABELER_RESAMPLES,
                      seed: int = 0) -> dict[str, Any]:
    """Agreement between the labelers of the same items, each statistic with a bootstrap interval.

    Args:
        ratings: per item, a mapping ``{labeler: value}`` (nominal values; None is no value). Items with
            fewer than two values are counted (``single``) and left out.
        confidence: the level of the intervals.
        resamples: bootstrap resamples (over items: the items labeled at least twice are resampled with
            replacement, each keeping all its labels, the same resamples for every statistic; Efron & Tibshirani
            1993, percentile interval, `metrics.intervals.resample_weights`).
        seed: the bootstrap's seed (reported in the result).

    Returns:
        ``{"items", "single", "labelers", "raw_agreement", "alpha", "pairs", "interval"}``:
        ``raw_agreement`` is the share of the items rated at least twice on which all their labelers gave the
        same value; ``alpha`` Krippendorff's nominal alpha over all labelers (as `krippendorff_alpha_nominal`);
        ``pairs`` one record per pair of labelers sharing items (``n``, ``agreement``: share of the shared
        items with the same value; ``kappa``: Cohen's kappa, equal to `sklearn.metrics.cohen_kappa_score` on
        them). Every statistic is ``{"value", "low", "high"}`` (nan where undefined, e.g. kappa when both gave
        one value throughout); ``interval`` says how the intervals were made (method, confidence, resamples, seed).

    Raises:
        ValueError: an item is not a mapping, or a bad confidence / resample count.
    """
    import warnings

    from rubricforge_dspy.metrics.intervals import percentile_interval, resample_weights

    all_items = list(ratings)
    rated = _multiply_rated(all_items)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if isinstance(resamples, bool) or not isinstance(resamples, numbers.Integral) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    labelers = sorted({who for r in rated for who in r}, key=str)
    interval_info = {"method": "percentile bootstrap over items", "confidence": confidence,
                     "resamples": resamples, "seed": seed}
    nan_stat = {"value": math.nan, "low": math.nan, "high": math.nan}
    if not rated:
        return {"items": 0, "single": len(all_items), "labelers": labelers, "raw_agreement": dict(nan_stat),
                "alpha": dict(nan_stat), "pairs": [], "interval": interval_info}
    categories = sorted({v for r in rated for v in r.values()}, key=repr)
    k = len(categories)
    code = {c: i for i, c in enumerate(categories)}
    n = len(rated)
    matrix = np.full((n, len(labelers)), -1, dtype=np.int64)  # item x labeler category codes, -1: no value
    for i, r in enumerate(rated):
        for j, who in enumerate(labelers):
            if who in r:
                matrix[i, j] = code[r[who]]
    counts = np.stack([(matrix == c).sum(axis=1) for c in range(k)], axis=1).astype(np.float64)  # n x K
    m_u = counts.sum(axis=1)
    coincidences = ((counts[:, :, None] * counts[:, None, :]) - np.einsum("ic,cd->icd", counts, np.eye(k))) \
        / (m_u - 1)[:, None, None]  # n x K x K: each item's contribution to the coincidence matrix
    agree = (counts.max(axis=1) == m_u).astype(np.float64)
    point = np.ones((1, n))
    weights = np.concatenate([point, *resample_weights(n, resamples, seed)])  # row 0: the data as they are

    def stat(values: np.ndarray, what: str) -> dict[str, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=UserWarning)  # nan replicates are reported as nan bounds
            low, high = percentile_interval(values[1:], confidence, what)
        return {"value": float(values[0]), "low": low, "high": high}

    def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), np.nan)

    pairs = []
    for a in range(len(labelers)):
        for b in range(a + 1, len(labelers)):
            shared = (matrix[:, a] >= 0) & (matrix[:, b] >= 0)
            if not shared.any():
                continue
            onehot = np.zeros((n, k * k))
            onehot[shared, matrix[shared, a] * k + matrix[shared, b]] = 1.0
            confusion = (weights @ onehot).reshape(-1, k, k)
            same = (matrix[:, a] == matrix[:, b]) & shared
            pairs.append({
                "a": labelers[a], "b": labelers[b], "n": int(shared.sum()),
                "agreement": stat(ratio(weights @ same.astype(float), weights @ shared.astype(float)),
                                  f"agreement {labelers[a]}/{labelers[b]}"),
                "kappa": stat(_kappa_from_confusion(confusion), f"kappa {labelers[a]}/{labelers[b]}"),
            })
    alpha = _alpha_from_coincidences((weights @ coincidences.reshape(n, k * k)).reshape(-1, k, k))
    return {
        "items": n, "single": len(all_items) - n, "labelers": labelers,
        "raw_agreement": stat(ratio(weights @ agree, weights.sum(axis=1)), "raw agreement"),
        "alpha": stat(alpha, "Krippendorff's alpha"),
        "pairs": pairs,
        "interval": interval_info,
    }


def format_labeler_agreement(agreement: dict[str, Any], rater_word: str = "labelers") -> list[str]:
    """`labeler_agreement`'s result as lines: ``"2 labelers agree on 87.0% of 106 items [80.2%, 92.5%];
    Krippendorff's alpha 0.74 [..]"`` then one line per pair (agreement, Cohen's kappa)."""
    def pct(stat: dict[str, float]) -> str:
        return f"{stat['value']:.1%} [{stat['low']:.1%}, {stat['high']:.1%}]"

    def num(stat: dict[str, float]) -> str:
        return f"{stat['value']:.2f} [{stat['low']:.2f}, {stat['high']:.2f}]"

    if not agreement["items"]:
        return [f"no item has labels from two {rater_word}: no agreement to measure"]
    iv = agreement["interval"]
    lines = [f"{len(agreement['labelers'])} {rater_word} agree on {pct(agreement['raw_agreement'])} of "
             f"{agreement['items']} items labeled at least twice; Krippendorff's alpha (nominal) "
             f"{num(agreement['alpha'])}"]
    for pair in agreement["pairs"]:
        lines.append(f"  {pair['a']} vs {pair['b']}: agree on {pct(pair['agreement'])} of {pair['n']}; "
                     f"Cohen's kappa {num(pair['kappa'])}")
    lines.append(f"  ({iv['confidence']:.0%} intervals: {iv['method']}, {iv['resamples']} resamples, "
                 f"seed {iv['seed']})")
    return lines
