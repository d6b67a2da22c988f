"""Confidence intervals: exact / Wilson intervals for rates, and the one bootstrap engine.

Rates (a false-pass rate, an accuracy, a contradiction rate) are binomial proportions ``k / n``;
their intervals come from :func:`proportion_ci` (Clopper-Pearson or Wilson via
:func:`scipy.stats.binomtest`), never from a percentile bootstrap: with 2 failed items both
passed, the bootstrap gives the degenerate "1.000 [1.000, 1.000]", the exact interval
[0.158, 1.000].

Everything else (kappa, AUC, a paired MAE difference, a stratum's false-pass gap) is bootstrapped
by :func:`bootstrap`, the single resampling engine of the package. It resamples *items*, or,
when ``clusters`` is given (e.g. the task id of each trajectory), *whole clusters*: trials of one
task are not independent, and resampling them as if they were gives intervals that are too
narrow (the cluster bootstrap: Davison & Hinkley, *Bootstrap Methods and their Application*,
1997, sec. 3.8; Field & Welsh, "Bootstrapping clustered data", *JRSS B* 69(3), 2007). Each
resample is a multiplicity matrix ``W`` (``W[r, j]`` = how often item ``j`` is in resample
``r``), so one draw serves every statistic of a report and weighted statistics reduce all
resamples at once.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats
from sklearn.exceptions import UndefinedMetricWarning

from rubricforge_dspy.metrics._checks import (
    as_1d,
    binary_pair,
    check_binary,
    check_bootstrap_params,
    check_finite,
    check_same_length,
    check_scores,
    graded_pair,
    undefined_metric,
)
from rubricforge_dspy.metrics.agreement import (
    accuracy,
    cohens_kappa,
    false_pass_rate,
    mean_abs_error,
    predicted_positive_rate,
    roc_auc,
)

CI_METHODS = ("exact", "wilson")
# Elements of one multiplicity block (float64: 16 MiB); larger bootstraps are drawn in row blocks.
MAX_WEIGHT_BLOCK = 1 << 21

WeightedStatistic = Callable[[np.ndarray], np.ndarray]


class ConfidenceInterval(NamedTuple):
    """A two-sided confidence interval ``(low, high)``; unpacks like a plain tuple."""

    low: float
    high: float


# -- rates ------------------------------------------------------------------------------------------

def proportion_ci(k: int, n: int, alpha: float = 0.05, method: str = "exact") -> tuple[float, float]:
    """Two-sided ``1 - alpha`` confidence interval of a binomial proportion ``k / n``.

    ``method="exact"``: Clopper-Pearson, the interval of all ``p`` not rejected by an exact
    binomial test (Clopper & Pearson, *Biometrika* 26(4), 1934): ``low = Beta(alpha/2; k, n-k+1)``,
    ``high = Beta(1-alpha/2; k+1, n-k)`` quantiles, 0 and 1 at the edges; conservative.
    ``method="wilson"``: the Wilson score interval without continuity correction (Wilson, *JASA*
    22(158), 1927), closer to nominal coverage. Both from
    ``scipy.stats.binomtest(k, n).proportion_ci``. Raises ``ValueError`` for ``n < 1``,
    ``k`` outside ``[0, n]``, non-integer counts, ``alpha`` outside ``(0, 1)`` or an unknown method.
    """
    for name, value in (("k", k), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{name} must be an integer count, got {value!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1 (a rate over no items has no interval), got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, n] = [0, {n}], got {k}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must be in the open interval (0, 1), got {alpha!r}")
    if method not in CI_METHODS:
        raise ValueError(f"method must be one of {CI_METHODS}, got {method!r}")
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=1.0 - float(alpha), method=method)
    return float(ci.low), float(ci.high)


# -- the bootstrap engine ---------------------------------------------------------------------------

def cluster_codes(clusters: ArrayLike, n: int) -> np.ndarray:
    """Integer codes ``0..G-1`` of the cluster labels (e.g. task ids) of ``n`` items."""
    labels = as_1d("clusters", clusters)
    if len(labels) != n:
        raise ValueError(f"Inconsistent numbers of items: clusters has {len(labels)}, the data has {n}")
    return np.unique(labels.astype(str), return_inverse=True)[1].reshape(-1)


def has_repeated_clusters(clusters: ArrayLike) -> bool:
    """True when some cluster (task) holds more than one item: the data needs the cluster bootstrap."""
    labels = as_1d("clusters", clusters).astype(str)
    return len(np.unique(labels)) < len(labels)


def resample_weights(n: int, n_resamples: int = 10_000, seed: int | np.random.Generator | None = 0,
                     clusters: ArrayLike | None = None) -> Iterator[np.ndarray]:
    """Multiplicity matrices of ``n_resamples`` bootstrap resamples, in row blocks of shape ``(m, n)``.

    Without ``clusters`` each resample draws ``n`` items uniformly with replacement (Efron &
    Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 6). With ``clusters`` (one label per
    item) it draws ``G`` whole clusters with replacement out of the ``G`` present and keeps all items
    of each drawn cluster, so resamples vary in size. ``W[r, j]`` is how often item ``j`` is in
    resample ``r``. Deterministic for an integer ``seed``.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    check_bootstrap_params(n_resamples, 0.95)
    codes = np.arange(n) if clusters is None else cluster_codes(clusters, n)
    groups = int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    rows = max(1, MAX_WEIGHT_BLOCK // max(n, groups))
    for start in range(0, n_resamples, rows):
        m = min(rows, n_resamples - start)
        draws = rng.integers(0, groups, size=(m, groups))
        flat = (np.arange(m, dtype=np.int64)[:, None] * groups + draws).ravel()
        counts = np.bincount(flat, minlength=m * groups).reshape(m, groups)
        if clusters is not None:  # every item of a cluster is in the resample as often as its cluster
            counts = np.take(counts, codes, axis=1)
        yield counts.astype(np.float64)


def bootstrap(statistics: Mapping[str, WeightedStatistic], n: int, *, n_resamples: int = 10_000,
              seed: int | np.random.Generator | None = 0, clusters: ArrayLike | None = None) -> dict[str, np.ndarray]:
    """Bootstrap replicates of several statistics on one set of resamples (see :func:`resample_weights`).

    Each statistic maps a multiplicity block ``W`` of shape ``(m, n)`` to its ``m`` values (see
    :func:`weighted_mean`, :func:`weighted_ratio`, :func:`weighted_kappa`, :func:`weighted_auc`).
    Returns ``{name: replicates}`` with ``n_resamples`` values each (nan where undefined).
    """
    out: dict[str, list[np.ndarray]] = {name: [] for name in statistics}
    with np.errstate(invalid="ignore", divide="ignore"):
        for w in resample_weights(n, n_resamples, seed, clusters):
            for name, statistic in statistics.items():
                values = np.asarray(statistic(w), dtype=np.float64).reshape(-1)
                if values.shape != (w.shape[0],):
                    raise ValueError(f"statistic {name!r} must return one value per resample row")
                out[name].append(values)
    return {name: np.concatenate(parts) for name, parts in out.items()}


def _exact(x: np.ndarray) -> bool:
    """True when ``W @ x`` is exact in float64 for integer weights (small integer ``x``, e.g. 0/1
    indicators): the sum then does not depend on the order it is taken in."""
    return bool(np.all(x == np.round(x))) and float(np.abs(x).max()) < 2.0 ** 20


def _fixed_order(w: np.ndarray) -> np.ndarray:
    """``W`` column-major: a sum of non-integer values is taken in the order this package has always
    taken it in (``W @ x`` of a column-major ``W``), so a statistic's last digit does not move with
    the engine's internals."""
    return np.asarray(w, order="F")


def weighted_mean(x: ArrayLike) -> WeightedStatistic:
    """``W -> sum_j W[:, j] x_j / sum_j W[:, j]``: the mean of ``x`` on each resample."""
    x = check_finite("x", x)
    if _exact(x):  # e.g. 0/1 indicators: an accuracy, a paired difference of verdicts
        return lambda w: (w @ x) / w.sum(axis=1)
    return lambda w: (_fixed_order(w) @ x) / w.sum(axis=1)


def weighted_ratio(numerator: ArrayLike, denominator: ArrayLike) -> WeightedStatistic:
    """``W -> (W @ numerator) / (W @ denominator)``, nan where a resample's denominator is 0
    (e.g. a false-pass rate on a resample with no failed item)."""
    num, den = check_finite("numerator", numerator), check_finite("denominator", denominator)
    check_same_length(numerator=num, denominator=den)
    exact = _exact(num) and _exact(den)

    def ratio(w: np.ndarray) -> np.ndarray:
        if not exact:
            w = _fixed_order(w)
        d = w @ den
        return np.where(d > 0, (w @ num) / np.where(d > 0, d, 1.0), np.nan)
    return ratio


def weighted_kappa(y_true: ArrayLike, y_pred: ArrayLike) -> WeightedStatistic:
    """Cohen's kappa ``(p_o - p_e) / (1 - p_e)`` of each resample (see :func:`cohens_kappa`), nan
    where ``p_e = 1``."""
    t, p = binary_pair(y_true, y_pred)
    columns = np.column_stack([t == p, t, p]).astype(np.float64)  # one pass over W for all three sums

    def kappa(w: np.ndarray) -> np.ndarray:
        total = w.sum(axis=1)
        agree, wt, wp = (w @ columns).T  # integer weights: every sum is exact
        po = agree / total
        pe = (wt * wp + (total - wt) * (total - wp)) / total ** 2
        return np.where(pe < 1.0, (po - pe) / np.where(pe < 1.0, 1.0 - pe, 1.0), np.nan)
    return kappa


def weighted_auc(y_true: ArrayLike, scores: ArrayLike) -> WeightedStatistic:
    """ROC AUC of each resample (see :func:`roc_auc`): the weighted share of (passed, failed) pairs
    the score orders correctly, ties counting 1/2; nan where a resample lacks a class.

    The weighted Mann-Whitney U statistic (Mann & Whitney, *Ann. Math. Statist.* 18(1), 1947; its
    identity with the AUC: Hanley & McNeil, *Radiology* 143(1), 1982), computed as scikit-learn's
    ``roc_auc_score(sample_weight=...)`` does: items are sorted by score once (``O(n log n)``); on each
    resample the passed and failed weight of every distinct score is summed in that order and each
    passed item wins the failed weight strictly below its score plus half the failed weight tied with
    it, so one resample costs ``O(n)`` whatever the number of distinct scores. Weights are integer
    multiplicities, so every sum is exact and the value does not depend on the order of summation.

    Args:
        y_true: 0/1 labels (1 = passed).
        scores: the judge's scores in ``[0, 1]``, same length.

    Returns:
        A statistic mapping a weight block ``W`` of shape ``(m, n)`` to the ``m`` AUCs (nan where a
        resample holds a single class).

    Raises:
        ValueError: labels not 0/1, scores outside ``[0, 1]`` or NaN, or lengths differ.
    """
    t = check_binary("y_true", y_true)
    s = check_scores("scores", scores)
    check_same_length(y_true=t, scores=s)
    order = np.argsort(s, kind="stable")
    ranked = s[order]
    level = np.r_[0, np.cumsum(ranked[1:] != ranked[:-1])]  # distinct-score index of each item, ascending
    n_levels = int(level[-1]) + 1
    passed = (t[order] == 1).astype(np.float64)
    codes: dict[int, np.ndarray] = {}  # block rows -> (row, level) bin of each weight, for one bincount

    def per_level(x: np.ndarray) -> np.ndarray:
        """Sum ``x`` (m, n) over the items of each distinct score: (m, levels)."""
        m = x.shape[0]
        if m not in codes:
            codes[m] = (level[None, :] + n_levels * np.arange(m, dtype=np.int64)[:, None]).ravel()
        return np.bincount(codes[m], weights=x.ravel(), minlength=m * n_levels).reshape(m, n_levels)

    def auc(w: np.ndarray) -> np.ndarray:
        ws = np.take(w, order, axis=1)  # resample weights in score order
        wp = ws * passed
        if n_levels < len(s):  # ties: the weight at each distinct score (integer sums, exact)
            wp, ws = per_level(wp), per_level(ws)
        wn = ws - wp  # failed weight at each score
        below = np.cumsum(wn, axis=1) - wn
        pairs = wp.sum(axis=1) * wn.sum(axis=1)
        wins = (wp * (below + 0.5 * wn)).sum(axis=1)
        return np.where(pairs > 0, wins / np.where(pairs > 0, pairs, 1.0), np.nan)
    return auc


def percentile_interval(replicates: ArrayLike, confidence: float, what: str) -> ConfidenceInterval:
    """The ``(1 - confidence)/2`` and ``(1 + confidence)/2`` percentiles of the finite replicates
    (Efron & Tibshirani 1993, ch. 13). Undefined (nan) replicates are excluded with one
    ``UndefinedMetricWarning`` naming ``what``; all undefined gives ``(nan, nan)``."""
    check_bootstrap_params(1, confidence)
    values = np.asarray(replicates, dtype=np.float64)
    finite = np.isfinite(values)
    n_bad = int((~finite).sum())
    if n_bad == values.size:
        nan = undefined_metric(f"{what}: the statistic was undefined on every bootstrap resample; returning nan")
        return ConfidenceInterval(nan, nan)
    if n_bad:
        warnings.warn(f"{what}: the statistic was undefined (nan) on {n_bad} of {values.size} bootstrap "
                      "resamples; they were excluded from the percentile interval", UndefinedMetricWarning,
                      stacklevel=2)
        values = values[finite]
    alpha = 1.0 - float(confidence)
    low, high = np.percentile(values, [100.0 * alpha / 2.0, 100.0 * (1.0 - alpha / 2.0)])
    return ConfidenceInterval(float(low), float(high))


def _weighted_form(statistic: Callable[..., Any], arrays: tuple[ArrayLike, ...]) -> WeightedStatistic | None:
    """The weighted version of a statistic of this package, validated like the statistic itself."""
    if statistic is accuracy:
        t, p = binary_pair(*arrays)
        return weighted_mean((t == p).astype(np.float64))
    if statistic is predicted_positive_rate:
        return weighted_mean(check_binary("y_pred", *arrays).astype(np.float64))
    if statistic is false_pass_rate:
        t, p = binary_pair(*arrays)
        return weighted_ratio(((t == 0) & (p == 1)).astype(np.float64), (t == 0).astype(np.float64))
    if statistic is mean_abs_error:
        s, r = graded_pair(*arrays)
        return weighted_mean(np.abs(s - r))
    if statistic is cohens_kappa:
        return weighted_kappa(*arrays)
    if statistic is roc_auc:
        return weighted_auc(*arrays)
    return None


def bootstrap_ci(statistic: Callable[..., Any], *arrays: ArrayLike, n_resamples: int = 10_000,
                 confidence: float = 0.95, seed: int | np.random.Generator | None = 0,
                 clusters: ArrayLike | None = None) -> ConfidenceInterval:
    """Percentile bootstrap CI of ``statistic(*arrays)``, resampling items (or whole ``clusters``).

    The same resamples (:func:`resample_weights`) are applied to every array. :func:`accuracy`,
    :func:`predicted_positive_rate`, :func:`false_pass_rate`, :func:`mean_abs_error`,
    :func:`cohens_kappa` and :func:`roc_auc` are computed for all resamples at once in weighted
    form; any other statistic is called once per resample on the resampled items. For a *rate*
    prefer :func:`proportion_ci`: percentile intervals of a rate from few items degenerate.
    """
    check_bootstrap_params(n_resamples, confidence)
    if not callable(statistic):
        raise ValueError(f"statistic must be callable, got {statistic!r}")
    if not arrays:
        raise ValueError("bootstrap_ci needs at least one array to resample")
    name = getattr(statistic, "__name__", "statistic")
    weighted = _weighted_form(statistic, arrays)
    if weighted is None:
        arrs = tuple(as_1d(f"arrays[{i}]", a) for i, a in enumerate(arrays))
        check_same_length(**{f"arrays[{i}]": a for i, a in enumerate(arrs)})
        statistic(*arrs)  # validate the inputs once, with the statistic's own errors
        weighted = _looped(statistic, arrs)
    n = len(np.asarray(arrays[0]))
    replicates = bootstrap({name: weighted}, n, n_resamples=n_resamples, seed=seed, clusters=clusters)[name]
    return percentile_interval(replicates, float(confidence), f"bootstrap_ci({name})")


def _looped(statistic: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> WeightedStatistic:
    """A plain statistic as a weighted one: called on each resample's items (generic, slow)."""
    index = np.arange(len(arrays[0]))

    def per_row(w: np.ndarray) -> np.ndarray:
        out = np.empty(w.shape[0])
        with warnings.catch_warnings():  # undefined resamples are counted once by percentile_interval
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            warnings.simplefilter("ignore", stats.ConstantInputWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            for r, row in enumerate(w):
                idx = np.repeat(index, row.astype(np.int64))
                out[r] = float(statistic(*(a[idx] for a in arrays)))
        return out
    return per_row


def accuracy_ci(y_true: ArrayLike, y_pred: ArrayLike, alpha: float = 0.05, method: str = "exact") -> ConfidenceInterval:
    """Exact (or Wilson) interval of :func:`accuracy`, a proportion of correct items (:func:`proportion_ci`)."""
    t, p = binary_pair(y_true, y_pred)
    return ConfidenceInterval(*proportion_ci(int((t == p).sum()), int(t.size), alpha, method))


def paired_bootstrap_abs_error(scores_a: ArrayLike, scores_b: ArrayLike, rewards: ArrayLike,
                               n_resamples: int = 10_000, seed: int | np.random.Generator | None = 0,
                               confidence: float = 0.95, clusters: ArrayLike | None = None) -> dict[str, float]:
    """Paired bootstrap of the difference in mean absolute error of two judges.

    ``d_i = |scores_a[i] - rewards[i]| - |scores_b[i] - rewards[i]|`` and ``mean_diff = mean(d)``:
    positive means judge A is *further* from the rewards. Items (or whole ``clusters``) are
    resampled with both judges together, giving a percentile CI for ``mean_diff`` (Efron &
    Tibshirani 1993, ch. 13; Koehn, "Statistical significance tests for machine translation
    evaluation", EMNLP 2004). The two-sided p-value inverts the percentile interval,
    ``p = min(1, 2 * (min(#{d* <= 0}, #{d* >= 0}) + 1) / (n_resamples + 1))``.

    Returns ``mean_diff, ci_low, ci_high, p_value, mae_a, mae_b``.
    """
    check_bootstrap_params(n_resamples, confidence)
    a = check_scores("scores_a", scores_a)
    b = check_scores("scores_b", scores_b)
    r = check_finite("rewards", rewards)
    check_same_length(scores_a=a, scores_b=b, rewards=r)
    err_a, err_b = np.abs(a - r), np.abs(b - r)
    d = err_a - err_b
    replicates = bootstrap({"d": weighted_mean(d)}, len(d), n_resamples=n_resamples, seed=seed,
                           clusters=clusters)["d"]
    ci = percentile_interval(replicates, float(confidence), "paired_bootstrap_abs_error")
    return {"mean_diff": float(d.mean()), "ci_low": ci.low, "ci_high": ci.high,
            "p_value": bootstrap_p_value(replicates), "mae_a": float(err_a.mean()), "mae_b": float(err_b.mean())}


def bootstrap_p_value(replicates: ArrayLike) -> float:
    """Two-sided p-value of "the statistic is 0" from its bootstrap replicates, inverting the
    percentile interval: ``min(1, 2 (min(#{x* <= 0}, #{x* >= 0}) + 1) / (B + 1))``."""
    rep = np.asarray(replicates, dtype=np.float64)
    rep = rep[np.isfinite(rep)]
    if rep.size == 0:
        return float("nan")
    k = min(np.count_nonzero(rep <= 0.0), np.count_nonzero(rep >= 0.0))
    return float(min(1.0, 2.0 * (k + 1) / (rep.size + 1)))
