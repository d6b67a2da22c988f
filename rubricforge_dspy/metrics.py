"""Agreement metrics for grading an LLM judge against ground-truth outcomes.

Conventions (shared by every function here):

- ``y_true``: ground-truth labels, ``1`` = the trajectory *passed*, ``0`` = it failed.
- ``y_pred``: the judge's verdicts on the same items, same encoding (``1`` = judged pass).
- ``scores``: the judge's graded confidence that the trajectory passed, floats in ``[0, 1]``.
- ``rewards``: graded ground-truth rewards (finite floats) for the graded metrics.
- ``abstained``: boolean mask, ``True`` where the judge abstained.

The *positive* class is ``1`` (passed). A **false pass** is a failed trajectory the judge
passed (FP); a **false fail** is a passed trajectory the judge failed (FN).

Everything is a pure function of its arguments in the spirit of ``sklearn.metrics``:
inputs are validated up front and a :class:`ValueError` names the offending argument
(empty input, mismatched lengths, non-binary labels, NaN / non-finite values, scores
outside ``[0, 1]``). Where a statistic is undefined on valid input (ROC AUC with a single
class, false-pass rate with no failed trajectories, ...) the function returns ``nan`` and
emits a :class:`sklearn.exceptions.UndefinedMetricWarning` saying why, rather than raising.

Statistics that scipy / scikit-learn implement are delegated to them (``confusion_matrix``,
``accuracy_score``, ``f1_score``, ``cohen_kappa_score``, ``roc_auc_score``,
``mean_absolute_error``, ``scipy.stats.binomtest``, ``spearmanr``, ``kendalltau``). The
percentile bootstrap is implemented here with numpy so that one resample-index matrix
drives all statistics of a call and the common statistics (accuracy, rates, mean absolute
error) are computed for all resamples in a single vectorized reduction.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats
from sklearn import metrics as skm
from sklearn.exceptions import UndefinedMetricWarning

__all__ = [
    "ConfidenceInterval",
    "McNemarResult",
    "confusion_counts",
    "accuracy",
    "f1_positive",
    "cohens_kappa",
    "roc_auc",
    "predicted_positive_rate",
    "false_pass_rate",
    "false_fail_count",
    "bootstrap_ci",
    "accuracy_ci",
    "mcnemar_exact",
    "paired_bootstrap_abs_error",
    "significance_mark",
    "spearman",
    "kendall",
    "mean_abs_error",
    "binary_summary",
    "graded_summary",
    "compare_paired",
    "proportion_ci",
    "cluster_bootstrap_ci",
    "expected_calibration_error",
]


class ConfidenceInterval(NamedTuple):
    """A two-sided confidence interval ``(low, high)``; unpacks like a plain tuple."""

    low: float
    high: float


class McNemarResult(NamedTuple):
    """Result of :func:`mcnemar_exact`; unpacks like ``(b, c, p_value)``."""

    b: int
    c: int
    p_value: float


# --------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------


def _as_1d(name: str, x: ArrayLike) -> np.ndarray:
    if x is None:
        raise ValueError(f"{name} is required, got None")
    arr = np.asarray(x)
    if arr.ndim != 1:
        shape = "a scalar" if arr.ndim == 0 else f"shape {arr.shape}"
        raise ValueError(f"{name} must be a 1-D array-like, got {shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; at least one item is required")
    return arr


def _require_real(name: str, arr: np.ndarray, what: str) -> None:
    if arr.dtype == bool:
        return
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must contain {what}, got an array of dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        n_nan = int(np.isnan(arr).sum())
        if n_nan:
            raise ValueError(f"{name} contains {n_nan} NaN value(s); metrics need a value for every item")


def _check_binary(name: str, y: ArrayLike) -> np.ndarray:
    """1-D array of 0/1 labels (bools and 0.0/1.0 floats accepted) -> int64 array."""
    arr = _as_1d(name, y)
    _require_real(name, arr, "binary 0/1 labels")
    if arr.dtype != bool:
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            found = np.unique(arr[bad])[:5].tolist()
            raise ValueError(
                f"{name} must contain only binary labels 0 (fail) / 1 (pass); found {found}"
            )
    return arr.astype(np.int64)


def _check_mask(name: str, m: ArrayLike) -> np.ndarray:
    return _check_binary(name, m).astype(bool)


def _check_finite(name: str, x: ArrayLike) -> np.ndarray:
    arr = _as_1d(name, x)
    _require_real(name, arr, "real numbers")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains non-finite values (inf)")
    return arr


def _check_scores(name: str, s: ArrayLike) -> np.ndarray:
    arr = _check_finite(name, s)
    if arr.min() < 0.0 or arr.max() > 1.0:
        raise ValueError(
            f"{name} must lie in [0, 1]; got values in [{arr.min():.6g}, {arr.max():.6g}]"
        )
    return arr


def _check_same_length(**arrays: np.ndarray) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise ValueError(f"Inconsistent numbers of items: {desc}")
    return next(iter(lengths.values()))


def _binary_pair(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    t = _check_binary("y_true", y_true)
    p = _check_binary("y_pred", y_pred)
    _check_same_length(y_true=t, y_pred=p)
    return t, p


def _check_bootstrap_params(n_resamples: Any, confidence: Any) -> None:
    if not isinstance(n_resamples, numbers.Integral) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not isinstance(confidence, numbers.Real) or not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be in the open interval (0, 1), got {confidence!r}")


def _undefined(reason: str) -> float:
    warnings.warn(reason, UndefinedMetricWarning, stacklevel=3)
    return math.nan


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
    t, p = _binary_pair(y_true, y_pred)
    tn, fp, fn, tp = skm.confusion_matrix(t, p, labels=[0, 1]).ravel()
    return {"tp": int(tp), "fp": int(fp), "fn": int(fn), "tn": int(tn)}


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Fraction of items where the verdict equals the label: ``(TP + TN) / n``.

    Delegates to :func:`sklearn.metrics.accuracy_score`.
    """
    t, p = _binary_pair(y_true, y_pred)
    return float(skm.accuracy_score(t, p))


def f1_positive(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """F1 score of the *passed* class: ``2 TP / (2 TP + FP + FN)``.

    The harmonic mean of precision and recall for ``pos_label=1`` (van Rijsbergen,
    *Information Retrieval*, 2nd ed., 1979, ch. 7). Delegates to
    :func:`sklearn.metrics.f1_score`. Returns ``nan`` when there is no positive anywhere
    (``TP + FP + FN == 0``), where F1 is undefined (``zero_division=nan``).
    """
    t, p = _binary_pair(y_true, y_pred)
    return float(skm.f1_score(t, p, pos_label=1, average="binary", zero_division=np.nan))


def cohens_kappa(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Cohen's kappa between labels and verdicts: ``(p_o - p_e) / (1 - p_e)``.

    ``p_o`` is observed agreement (accuracy) and ``p_e`` the agreement expected by chance
    from the two marginal distributions (Cohen, "A coefficient of agreement for nominal
    scales", *Educational and Psychological Measurement* 20(1), 1960). Delegates to
    :func:`sklearn.metrics.cohen_kappa_score`; ``nan`` (with scikit-learn's warning) when
    ``p_e == 1``, i.e. labels and verdicts are the same single class.
    """
    t, p = _binary_pair(y_true, y_pred)
    return float(skm.cohen_kappa_score(t, p, labels=[0, 1]))


def roc_auc(y_true: ArrayLike, scores: ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for separating passed from failed items.

    Equals the probability that a random passed item scores higher than a random failed
    one, ties counting 1/2 (Fawcett, "An introduction to ROC analysis", *Pattern
    Recognition Letters* 27(8), 2006). Delegates to :func:`sklearn.metrics.roc_auc_score`.

    Returns ``nan`` and emits an ``UndefinedMetricWarning`` giving the reason when
    ``y_true`` contains a single class (the curve is undefined), instead of raising.
    """
    t = _check_binary("y_true", y_true)
    s = _check_scores("scores", scores)
    _check_same_length(y_true=t, scores=s)
    classes = np.unique(t)
    if classes.size < 2:
        only = "passed" if classes[0] == 1 else "failed"
        return _undefined(
            f"ROC AUC is undefined: every trajectory in y_true {only} (one class present); "
            "returning nan"
        )
    return float(skm.roc_auc_score(t, s))


def predicted_positive_rate(y_pred: ArrayLike) -> float:
    """Fraction of items the judge passed: ``(TP + FP) / n``."""
    p = _check_binary("y_pred", y_pred)
    return float(p.mean())


def false_pass_rate(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """False passes over truly failed trajectories: ``FP / (FP + TN)``.

    This is the false-positive rate with *passed* as the positive class (Fawcett 2006).
    Returns ``nan`` with an ``UndefinedMetricWarning`` when no trajectory failed.
    """
    c = confusion_counts(y_true, y_pred)
    negatives = c["fp"] + c["tn"]
    if negatives == 0:
        return _undefined("false_pass_rate is undefined: no failed trajectories in y_true; returning nan")
    return c["fp"] / negatives


def false_fail_count(y_true: ArrayLike, y_pred: ArrayLike) -> int:
    """Number of passed trajectories the judge failed (false negatives, ``FN``)."""
    return confusion_counts(y_true, y_pred)["fn"]


# --------------------------------------------------------------------------------------
# Graded rewards
# --------------------------------------------------------------------------------------


def _graded_pair(scores: ArrayLike, rewards: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = _check_scores("scores", scores)
    r = _check_finite("rewards", rewards)
    _check_same_length(scores=s, rewards=r)
    return s, r


def spearman(scores: ArrayLike, rewards: ArrayLike) -> float:
    """Spearman rank correlation ``rho`` between judge scores and graded rewards.

    Pearson correlation of the (average-tie) ranks (Spearman, "The proof and measurement
    of association between two things", *Am. J. Psychol.* 15(1), 1904). Delegates to
    :func:`scipy.stats.spearmanr`; ``nan`` when either input is constant or has < 2 items.
    """
    s, r = _graded_pair(scores, rewards)
    if s.size < 2:
        return _undefined("spearman is undefined for fewer than 2 items; returning nan")
    return float(stats.spearmanr(s, r).statistic)


def kendall(scores: ArrayLike, rewards: ArrayLike) -> float:
    """Kendall's tau-b between judge scores and graded rewards.

    ``(concordant - discordant) / sqrt((n0 - n1)(n0 - n2))`` with tie corrections
    (Kendall, "The treatment of ties in ranking problems", *Biometrika* 33(3), 1945).
    Delegates to :func:`scipy.stats.kendalltau` (``variant='b'``); ``nan`` when either
    input is constant or has < 2 items.
    """
    s, r = _graded_pair(scores, rewards)
    if s.size < 2:
        return _undefined("kendall is undefined for fewer than 2 items; returning nan")
    return float(stats.kendalltau(s, r, variant="b").statistic)


def mean_abs_error(scores: ArrayLike, rewards: ArrayLike) -> float:
    """Mean absolute error ``mean(|score - reward|)``.

    Delegates to :func:`sklearn.metrics.mean_absolute_error`.
    """
    s, r = _graded_pair(scores, rewards)
    return float(skm.mean_absolute_error(r, s))


# --------------------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------------------

# Elements of the resample-index matrix materialised at once (int32: 32 MiB). With
# n_resamples=10_000 this is a single block for up to ~800 items; larger inputs are
# processed in row blocks so memory stays bounded.
_MAX_INDEX_BLOCK = 1 << 23


def _index_blocks(n: int, n_resamples: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Yield the bootstrap index matrix, shape ``(n_resamples, n)``, in row blocks.

    Each row is one resample of the ``n`` items drawn uniformly with replacement. int32
    draws are ~10x faster than int64 and suffice for any realistic ``n``.
    """
    dtype = np.int32 if n < 2**31 else np.int64
    rows = max(1, _MAX_INDEX_BLOCK // n)
    for start in range(0, n_resamples, rows):
        yield rng.integers(0, n, size=(min(rows, n_resamples - start), n), dtype=dtype)


def _bootstrap_replicates(
    row_statistic: Callable[..., np.ndarray],
    arrays: tuple[np.ndarray, ...],
    n_resamples: int,
    seed: int | np.random.Generator | None,
) -> np.ndarray:
    """Vectorized replicates: ``row_statistic`` maps ``(m, n)`` arrays to ``(m,)``."""
    rng = np.random.default_rng(seed)
    n = len(arrays[0])
    blocks = [
        np.asarray(row_statistic(*(a[idx] for a in arrays)), dtype=np.float64).reshape(-1)
        for idx in _index_blocks(n, n_resamples, rng)
    ]
    return np.concatenate(blocks)


def _looped_replicates(
    statistic: Callable[..., Any],
    arrays: tuple[np.ndarray, ...],
    n_resamples: int,
    seed: int | np.random.Generator | None,
) -> np.ndarray:
    """Generic fallback: call ``statistic`` once per resample (same index matrix)."""
    rng = np.random.default_rng(seed)
    n = len(arrays[0])
    out = np.empty(n_resamples, dtype=np.float64)
    i = 0
    with warnings.catch_warnings():
        # Undefined resamples are counted and reported once by the caller.
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for idx in _index_blocks(n, n_resamples, rng):
            for row in idx:
                out[i] = float(statistic(*(a[row] for a in arrays)))
                i += 1
    return out


def _rows_mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=1)


def _rows_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    d = den.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d > 0, num.sum(axis=1) / np.maximum(d, 1), np.nan)


def _prep_accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, ...]:
    t, p = _binary_pair(y_true, y_pred)
    return ((t == p).astype(np.float64),)


def _prep_predicted_positive_rate(y_pred: ArrayLike) -> tuple[np.ndarray, ...]:
    return (_check_binary("y_pred", y_pred).astype(np.float64),)


def _prep_false_pass_rate(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, ...]:
    t, p = _binary_pair(y_true, y_pred)
    failed = t == 0
    return ((failed & (p == 1)).astype(np.float64), failed.astype(np.float64))


def _prep_mean_abs_error(scores: ArrayLike, rewards: ArrayLike) -> tuple[np.ndarray, ...]:
    s, r = _graded_pair(scores, rewards)
    return (np.abs(s - r),)


# Fast paths for statistics of this module: a per-item transform that validates the
# inputs exactly as the statistic does, and a row-wise reduction over resampled items.
_VECTORIZED: dict[Callable[..., Any], tuple[Callable[..., tuple[np.ndarray, ...]], Callable[..., np.ndarray]]] = {
    accuracy: (_prep_accuracy, _rows_mean),
    predicted_positive_rate: (_prep_predicted_positive_rate, _rows_mean),
    false_pass_rate: (_prep_false_pass_rate, _rows_ratio),
    mean_abs_error: (_prep_mean_abs_error, _rows_mean),
}


def _percentile_interval(replicates: np.ndarray, confidence: float, what: str) -> ConfidenceInterval:
    finite = np.isfinite(replicates)
    n_bad = int((~finite).sum())
    if n_bad == replicates.size:
        nan = _undefined(f"{what}: the statistic was undefined on every bootstrap resample; returning nan")
        return ConfidenceInterval(nan, nan)
    if n_bad:
        warnings.warn(
            f"{what}: the statistic was undefined (nan) on {n_bad} of {replicates.size} bootstrap "
            "resamples; they were excluded from the percentile interval",
            UndefinedMetricWarning,
            stacklevel=3,
        )
        replicates = replicates[finite]
    alpha = 1.0 - confidence
    low, high = np.percentile(replicates, [100.0 * alpha / 2.0, 100.0 * (1.0 - alpha / 2.0)])
    return ConfidenceInterval(float(low), float(high))


def bootstrap_ci(
    statistic: Callable[..., Any],
    *arrays: ArrayLike,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = 0,
    vectorized: bool = False,
) -> ConfidenceInterval:
    """Percentile bootstrap confidence interval for ``statistic(*arrays)``, resampling items.

    Each resample draws ``n`` item indices uniformly with replacement and applies the same
    indices to every array (a paired / case resample). The interval is the
    ``(1 - confidence)/2`` and ``(1 + confidence)/2`` percentiles of the ``n_resamples``
    replicates (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13).

    Implementation: the ``(n_resamples, n)`` index matrix is drawn once (in bounded row
    blocks for very large ``n``) from ``numpy.random.default_rng(seed)``, so results are
    deterministic for an integer seed, and every statistic evaluated on the same number of
    items with the same seed sees the same resamples. Three evaluation paths share it:

    - :func:`accuracy`, :func:`predicted_positive_rate`, :func:`false_pass_rate` and
      :func:`mean_abs_error` are recognised and computed for all resamples in one
      vectorized numpy reduction;
    - ``vectorized=True``: ``statistic`` is called with 2-D arrays of shape
      ``(m, n)`` (one resample per row) and must return shape ``(m,)``;
    - otherwise ``statistic`` is called once per resample with 1-D arrays (generic, slow
      for large ``n_resamples``; e.g. :func:`cohens_kappa`, :func:`f1_positive`).

    Resamples on which the statistic is undefined (nan, e.g. no failed item drawn for the
    false-pass rate) are excluded with a single ``UndefinedMetricWarning``. A hand-rolled
    loop rather than :func:`scipy.stats.bootstrap` is used so the index matrix is shared
    and int32-generated; the intervals agree with scipy's ``method='percentile'`` up to
    Monte-Carlo error.

    Parameters
    ----------
    statistic : callable
        Function of the arrays returning a scalar.
    *arrays : array-like
        One or more 1-D arrays with one entry per item, all the same length.
    n_resamples : int, default 10_000
    confidence : float, default 0.95
    seed : int, Generator or None, default 0
    vectorized : bool, default False

    Returns
    -------
    ConfidenceInterval
        ``(low, high)``.
    """
    _check_bootstrap_params(n_resamples, confidence)
    if not callable(statistic):
        raise ValueError(f"statistic must be callable, got {statistic!r}")
    if not arrays:
        raise ValueError("bootstrap_ci needs at least one array to resample")
    name = getattr(statistic, "__name__", "statistic")
    fast = _VECTORIZED.get(statistic)
    if fast is not None:
        prepare, row_stat = fast
        replicates = _bootstrap_replicates(row_stat, prepare(*arrays), n_resamples, seed)
    else:
        arrs = tuple(_as_1d(f"arrays[{i}]", a) for i, a in enumerate(arrays))
        _check_same_length(**{f"arrays[{i}]": a for i, a in enumerate(arrs)})
        if vectorized:
            replicates = _bootstrap_replicates(statistic, arrs, n_resamples, seed)
            if replicates.shape != (n_resamples,):
                raise ValueError(
                    f"a vectorized statistic must return one value per resample row; got "
                    f"{replicates.size} values for {n_resamples} resamples"
                )
        else:
            statistic(*arrs)  # validate the inputs once, with the statistic's own errors
            replicates = _looped_replicates(statistic, arrs, n_resamples, seed)
    return _percentile_interval(replicates, float(confidence), f"bootstrap_ci({name})")


def accuracy_ci(
    y_true: ArrayLike,
    y_pred: ArrayLike,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = 0,
) -> ConfidenceInterval:
    """Percentile bootstrap CI of :func:`accuracy` over items (see :func:`bootstrap_ci`)."""
    return bootstrap_ci(accuracy, y_true, y_pred, n_resamples=n_resamples, confidence=confidence, seed=seed)


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
    a = _check_mask("correct_a", correct_a)
    bb = _check_mask("correct_b", correct_b)
    _check_same_length(correct_a=a, correct_b=bb)
    b = int(np.count_nonzero(a & ~bb))
    c = int(np.count_nonzero(~a & bb))
    if b + c == 0:
        return McNemarResult(b, c, 1.0)
    p = float(stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)
    return McNemarResult(b, c, min(1.0, p))


def paired_bootstrap_abs_error(
    scores_a: ArrayLike,
    scores_b: ArrayLike,
    rewards: ArrayLike,
    n_resamples: int = 10_000,
    seed: int | np.random.Generator | None = 0,
    confidence: float = 0.95,
) -> dict[str, float]:
    """Paired bootstrap of the difference in mean absolute error of two judges.

    ``d_i = |scores_a[i] - rewards[i]| - |scores_b[i] - rewards[i]|`` and
    ``mean_diff = mean(d)``: positive means judge A is *further* from the rewards. Items
    are resampled with replacement (both judges together), giving a percentile CI for
    ``mean_diff`` (Efron & Tibshirani 1993, ch. 13; Koehn, "Statistical significance tests
    for machine translation evaluation", EMNLP 2004).

    The two-sided p-value inverts the percentile interval,
    ``p = min(1, 2 * (min(#{d* <= 0}, #{d* >= 0}) + 1) / (n_resamples + 1))``, so
    ``p < 1 - confidence`` essentially when the CI excludes 0; the ``+1`` keeps ``p > 0``
    (the smallest attainable value is about ``2 / n_resamples``).

    Returns
    -------
    dict with ``mean_diff``, ``ci_low``, ``ci_high``, ``p_value``, and for reference
    ``mae_a``, ``mae_b``.
    """
    _check_bootstrap_params(n_resamples, confidence)
    a = _check_scores("scores_a", scores_a)
    b = _check_scores("scores_b", scores_b)
    r = _check_finite("rewards", rewards)
    _check_same_length(scores_a=a, scores_b=b, rewards=r)
    err_a, err_b = np.abs(a - r), np.abs(b - r)
    d = err_a - err_b
    replicates = _bootstrap_replicates(_rows_mean, (d,), n_resamples, seed)
    ci = _percentile_interval(replicates, float(confidence), "paired_bootstrap_abs_error")
    k = min(np.count_nonzero(replicates <= 0.0), np.count_nonzero(replicates >= 0.0))
    p = min(1.0, 2.0 * (k + 1) / (n_resamples + 1))
    return {
        "mean_diff": float(d.mean()),
        "ci_low": ci.low,
        "ci_high": ci.high,
        "p_value": float(p),
        "mae_a": float(err_a.mean()),
        "mae_b": float(err_b.mean()),
    }


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


# --------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------


def binary_summary(
    y_true: ArrayLike,
    y_pred: ArrayLike,
    scores: ArrayLike | None = None,
    abstained: ArrayLike | None = None,
    n_resamples: int = 10_000,
    seed: int | np.random.Generator | None = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """All pass/fail agreement metrics for one judge, as a flat dict (one table row).

    Metrics are computed over *all* ``n`` items using the verdicts in ``y_pred``; an
    abstention must already be mapped to a verdict by the caller (e.g. fail), so that
    judges compared on the same items stay paired. ``abstained`` (optional mask) is only
    counted. ``auc`` is ``nan`` when ``scores`` is None (or undefined, see :func:`roc_auc`).

    Returns
    -------
    dict with keys ``n, tp, fp, fn, tn, accuracy, accuracy_ci_low, accuracy_ci_high, f1,
    kappa, auc, predicted_positive_rate, false_pass_rate, false_fail_count, abstained``.
    """
    t, p = _binary_pair(y_true, y_pred)
    n_abstained = 0
    if abstained is not None:
        m = _check_mask("abstained", abstained)
        _check_same_length(y_true=t, abstained=m)
        n_abstained = int(m.sum())
    auc = math.nan
    if scores is not None:
        s = _check_scores("scores", scores)
        _check_same_length(y_true=t, scores=s)
        auc = roc_auc(t, s)
    c = confusion_counts(t, p)
    ci = accuracy_ci(t, p, n_resamples=n_resamples, confidence=confidence, seed=seed)
    return {
        "n": int(t.size),
        **c,
        "accuracy": accuracy(t, p),
        "accuracy_ci_low": ci.low,
        "accuracy_ci_high": ci.high,
        "f1": f1_positive(t, p),
        "kappa": cohens_kappa(t, p),
        "auc": auc,
        "predicted_positive_rate": predicted_positive_rate(p),
        "false_pass_rate": false_pass_rate(t, p),
        "false_fail_count": c["fn"],
        "abstained": n_abstained,
    }


def graded_summary(scores: ArrayLike, rewards: ArrayLike) -> dict[str, Any]:
    """Graded agreement of judge scores with rewards: ``n, spearman, kendall, mae``."""
    s, r = _graded_pair(scores, rewards)
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
    t = _check_binary("y_true", y_true)
    a = _check_binary("pred_a", pred_a)
    b = _check_binary("pred_b", pred_b)
    _check_same_length(y_true=t, pred_a=a, pred_b=b)
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
# Exact intervals, task-clustered bootstrap, calibration error
# --------------------------------------------------------------------------------------


def proportion_ci(k: int, n: int, alpha: float = 0.05, method: str = "exact") -> ConfidenceInterval:
    """Two-sided ``1 - alpha`` confidence interval for a binomial proportion ``k / n``.

    ``method="exact"``: Clopper-Pearson (Clopper & Pearson, *Biometrika* 26(4), 1934), the
    interval that inverts two one-sided exact binomial tests; ``method="wilson"``: Wilson's
    score interval (Wilson, *JASA* 22(158), 1927). Both delegate to
    ``scipy.stats.binomtest(k, n).proportion_ci``. Unlike a percentile bootstrap, they are
    not degenerate at 0/n or n/n: 2 of 2 false passes gives ``[0.158, 1.0]``, not ``[1, 1]``.
    ``nan`` interval (with an ``UndefinedMetricWarning``) when ``n == 0``.
    """
    for name, value in (("k", k), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if k > n:
        raise ValueError(f"k must be <= n, got k={k}, n={n}")
    if not isinstance(alpha, numbers.Real) or not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must be in the open interval (0, 1), got {alpha!r}")
    methods = {"exact": "exact", "clopper-pearson": "exact", "wilson": "wilson"}
    if method not in methods:
        raise ValueError(f"method must be one of {sorted(methods)}, got {method!r}")
    if n == 0:
        nan = _undefined("proportion_ci is undefined for n == 0; returning nan")
        return ConfidenceInterval(nan, nan)
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=1.0 - float(alpha), method=methods[method])
    return ConfidenceInterval(float(ci.low), float(ci.high))


def cluster_bootstrap_ci(
    statistic: Callable[..., Any],
    clusters: ArrayLike,
    *arrays: ArrayLike,
    n_resamples: int = 2_000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = 0,
) -> ConfidenceInterval:
    """Percentile bootstrap interval of ``statistic(*arrays)`` resampling whole clusters.

    When items come in clusters (tau-bench airline runs 4 trials of each task), items of one
    cluster are not independent and an item bootstrap is too narrow. Each resample draws the
    ``G`` distinct cluster ids uniformly with replacement (``numpy.random.default_rng(seed)``)
    and takes every item of each drawn cluster (the cluster bootstrap of Davison & Hinkley,
    *Bootstrap Methods and their Application*, 1997, sec. 3.8; Field & Welsh, *JRSS B* 69(3),
    2007). Resamples where the statistic is undefined (nan) are excluded with one warning.
    With one item per cluster this is the ordinary case bootstrap.
    """
    _check_bootstrap_params(n_resamples, confidence)
    if not arrays:
        raise ValueError("cluster_bootstrap_ci needs at least one array to resample")
    groups = _as_1d("clusters", clusters)
    arrs = tuple(_as_1d(f"arrays[{i}]", a) for i, a in enumerate(arrays))
    _check_same_length(clusters=groups, **{f"arrays[{i}]": a for i, a in enumerate(arrs)})
    statistic(*arrs)  # validate once, with the statistic's own errors
    _, codes = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(codes == g) for g in range(codes.max() + 1)]
    rng = np.random.default_rng(seed)
    replicates = np.empty(n_resamples, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in range(n_resamples):
            drawn = rng.integers(0, len(members), size=len(members))
            idx = np.concatenate([members[g] for g in drawn])
            replicates[i] = float(statistic(*(a[idx] for a in arrs)))
    name = getattr(statistic, "__name__", "statistic")
    return _percentile_interval(replicates, float(confidence), f"cluster_bootstrap_ci({name})")


def expected_calibration_error(y_true: ArrayLike, scores: ArrayLike, n_bins: int = 10) -> float:
    """Expected calibration error of ``scores`` as probabilities that the item passed.

    ``ECE = sum_b (n_b / n) * |mean(y_true in b) - mean(scores in b)|`` over ``n_bins``
    equal-width bins of ``[0, 1]`` (bin ``b`` holds ``b/n_bins <= s < (b+1)/n_bins``; a score
    of exactly 1 falls in the last bin); empty bins contribute nothing (Naeini, Cooper &
    Hauskrecht, "Obtaining well calibrated probabilities using Bayesian binning", AAAI 2015;
    Guo et al., "On calibration of modern neural networks", ICML 2017).
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    t = _check_binary("y_true", y_true).astype(np.float64)
    s = _check_scores("scores", scores)
    _check_same_length(y_true=t, scores=s)
    bins = np.minimum((s * n_bins).astype(np.int64), n_bins - 1)
    total = 0.0
    for b in np.unique(bins):
        mask = bins == b
        total += mask.mean() * abs(t[mask].mean() - s[mask].mean())
    return float(total)
