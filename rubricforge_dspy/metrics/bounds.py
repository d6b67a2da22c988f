"""Valid p-values and bounds for a rate or the mean of bounded i.i.d. variables, and the label counts they need:
the exact binomial (Clopper & Pearson 1934), Hoeffding-Bentkus (Bates, Angelopoulos, Lei, Malik & Jordan 2021,
"Distribution-free, risk-controlling prediction sets", JACM 68(6)) and the betting p-value (Waudby-Smith & Ramdas
2024, "Estimating means of bounded random variables by betting", JRSSB 86(1)); task means of per-trial losses
(the task as the unit). The building blocks of `metrics.risk_control`; numpy and scipy only.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

__all__ = ["RATIO_STAKE_CAP", "check_rate", "binomial_p_value", "hoeffding_bentkus_p_value", "betting_p_value",
           "betting_ratio_p_value", "group_index", "task_means", "risk_upper_bound", "decided_needed", "tasks_needed"]

_Floats = NDArray[np.float64]
# the cap of `betting_ratio_p_value`'s stakes: each factor 1 + lambda (level B - W) >= 1 - lambda (1 - level) stays
# >= level > 0 for every lambda <= 1 whatever the level, so 1 is the largest cap free of the level (the p-value stays
# non-increasing in it). A task where everything decided is wrong then costs a factor `level`, the most a valid
# bet can lose there; 0.9 (before) grew at most log(1 + 0.9 g) a task against log(1 + g).
RATIO_STAKE_CAP = 1.0


def check_rate(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


def binomial_p_value(k: ArrayLike, n: ArrayLike, alpha: float) -> float | _Floats:
    """Exact p-value of ``H0: risk > alpha`` from ``k`` errors in ``n`` i.i.d. trials: ``P(Bin(n, alpha) <= k)``.

    Args:
        k: errors (an integer or an array of them).
        n: trials (same shape); ``n = 0`` gives 1 (nothing to reject with).
        alpha: the risk level tested, in (0, 1).

    Returns:
        A float (or an array of the shape of ``k``).
    """
    alpha = check_rate("alpha", alpha)
    ks, ns = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if np.any(ks < 0) or np.any(ks > ns + 1e-9):
        raise ValueError("errors k must lie in [0, n]")
    ks = np.minimum(ks, ns)  # weighted counts: rounding must not put k above n
    p = np.where(ns > 0, stats.binom.cdf(ks, np.maximum(ns, 1), alpha), 1.0)
    return float(p) if p.ndim == 0 else p


def _kl_bernoulli(a: _Floats, b: float) -> _Floats:
    a = np.clip(a, 1e-300, 1 - 1e-16)
    return a * np.log(a / b) + (1 - a) * np.log((1 - a) / (1 - b))


def hoeffding_bentkus_p_value(k: ArrayLike, n: ArrayLike, alpha: float) -> float | _Floats:
    """Hoeffding-Bentkus p-value of ``H0: risk > alpha`` for a mean of ``n`` losses in [0, 1] summing to ``k``.

    ``min(exp(-n h(min(r, alpha), alpha)), e P(Bin(n, alpha) <= ceil(n r)))`` with ``r = k / n`` and
    ``h(a, b) = a log(a/b) + (1-a) log((1-a)/(1-b))`` (Bates et al. 2021, RCPS, Prop. 3.5); for 0/1
    losses never smaller than `binomial_p_value`.

    Args:
        k: summed losses (errors); may be fractional for losses in [0, 1].
        n: number of losses; ``n = 0`` gives 1.
        alpha: the risk level tested, in (0, 1).

    Returns:
        A float (or an array), capped at 1.
    """
    alpha = check_rate("alpha", alpha)
    ks, ns = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if np.any(ks < 0) or np.any(ks > ns + 1e-9):
        raise ValueError("summed losses k must lie in [0, n]")
    ks = np.minimum(ks, ns)
    safe = np.maximum(ns, 1)
    r = ks / safe
    hoeffding = np.exp(-safe * _kl_bernoulli(np.minimum(r, alpha), alpha))
    bentkus = math.e * stats.binom.cdf(np.ceil(ks - 1e-9), safe, alpha)
    p = np.where(ns > 0, np.minimum(1.0, np.minimum(hoeffding, bentkus)), 1.0)
    return float(p) if p.ndim == 0 else p


def betting_p_value(x: ArrayLike, m: float, *, tune_delta: float = 0.1, c: float = 0.9) -> float | _Floats:
    """Betting p-value of ``H0: E[X] >= m`` for i.i.d. ``X`` in [0, 1] (Waudby-Smith & Ramdas 2024).

    The capital ``K_t = prod_{i<=t} (1 + lambda_i (m - X_i))`` bets on a mean below ``m`` with a predictable
    stake ``lambda_i`` in ``[0, c / (1 - m)]`` (the predictable plug-in of Waudby-Smith & Ramdas, "Estimating
    means of bounded random variables by betting", JRSSB 86(1) 2024, eq. 26, one-sided); each factor is
    non-negative and has mean at most 1 under ``H0``, so ``K`` is a non-negative supermartingale and, by Ville's
    inequality, ``p = min(1, 1 / max_t K_t)`` is a valid p-value (``P(p <= u) <= u`` for every ``u``).
    The observations are taken in the order given, which must not depend on their values (the caller
    shuffles the units with a fixed seed). Far tighter than Hoeffding-Bentkus when the ``X`` vary little
    around their mean (a low variance is bet on, not assumed).

    Args:
        x: observations in [0, 1], shape ``(n,)`` or ``(rows, n)`` (one test per row, same order).
        m: the null mean tested, in (0, 1).
        tune_delta: the level the stakes are tuned for (any fixed value keeps validity; power is best near
            the level actually used).
        c: the stake's cap as a share of the largest safe stake ``1 / (1 - m)``.

    Returns:
        A float (or one p-value per row), in (0, 1].
    """
    m = check_rate("m", m)
    xs = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(xs)
    if rows.size and (np.isnan(rows).any() or rows.min() < -1e-12 or rows.max() > 1 + 1e-12):
        raise ValueError("betting_p_value needs observations in [0, 1]")
    rows = np.clip(rows, 0.0, 1.0)
    v, n = rows.shape
    log_k = np.zeros(v)
    best = np.zeros(v)
    total = np.zeros(v)
    squares = np.zeros(v)
    mean = np.full(v, 0.5)
    cap = c / (1.0 - m)
    log_term = math.log(1.0 / tune_delta)
    for t in range(1, n + 1):
        variance = (0.25 + squares) / t
        stake = np.minimum(np.sqrt(2.0 * log_term / (variance * t * math.log1p(t))), cap)
        xt = rows[:, t - 1]
        log_k += np.log1p(stake * (m - xt))
        best = np.maximum(best, log_k)
        squares += (xt - mean) ** 2
        total += xt
        mean = (0.5 + total) / (t + 1)
    p = np.minimum(1.0, np.exp(-best))
    return float(p[0]) if xs.ndim <= 1 else p


def betting_ratio_p_value(losses: ArrayLike, base: ArrayLike, level: float, *, tune_delta: float = 0.1,
                          c: float = RATIO_STAKE_CAP) -> float | _Floats:
    """Betting p-value of ``H0: E[W] > level * E[B]`` for i.i.d. pairs ``(W, B)`` with ``0 <= W <= B <= 1``, with
    stakes that do not depend on `level`: the p-value is non-increasing in `level` (monotone in alpha).

    The use: ``W`` a task's share of trials decided wrongly, ``B`` its share decided, so ``H0`` is "the disagreement
    among decided trials exceeds `level`" (the task-mean construction of `metrics.risk_control`). The capital
    ``K_t = prod_{i<=t} (1 + lambda_i (level * B_i - W_i))`` bets on ``H0`` being false. Each factor is at least
    ``1 - c (1 - level) >= level > 0`` (as ``W <= B`` and ``c <= 1``) and has mean at most 1 under ``H0``, so ``K``
    is a non-negative
    supermartingale and, by Ville's inequality, ``p = min(1, 1 / max_t K_t)`` is valid (Waudby-Smith & Ramdas
    2024, JRSSB 86(1), sec. 3-4). The stake ``lambda_i = min(c, sqrt(2 log(1/tune_delta) / (s_i^2 i log(1+i))))``
    is their predictable plug-in with the variance ``s_i^2`` of the past ``W - r B`` (``r``: the past ratio
    ``sum W / sum B``, shrunk to 1/2): a function of the past observations only, never of `level`. As each
    factor is non-decreasing in `level`, so is every ``K_t``, and ``p`` is non-increasing in `level`.
    The observations are read in the order given, which must not depend on their values.

    Args:
        losses: ``W``, shape ``(n,)`` or ``(rows, n)`` (one test per row).
        base: ``B``, the same shape, ``W <= B`` elementwise.
        level: the rate tested, in (0, 1).
        tune_delta: the level the stakes are tuned for (any fixed value keeps validity).
        c: the stake's cap, in (0, 1] (default `RATIO_STAKE_CAP`, 1: the largest cap that keeps every factor
            positive at every level, so it needs no level; measured against 0.9 in docs/CASCADE.md).

    Returns:
        A float (or one p-value per row), in (0, 1].
    """
    level = check_rate("level", level)
    ws, bs = np.asarray(losses, dtype=np.float64), np.asarray(base, dtype=np.float64)
    w_rows, b_rows = np.atleast_2d(ws), np.atleast_2d(bs)
    if w_rows.shape != b_rows.shape:
        raise ValueError(f"losses and base need the same shape, got {w_rows.shape} and {b_rows.shape}")
    if w_rows.size and (np.isnan(w_rows).any() or np.isnan(b_rows).any() or w_rows.min() < -1e-12
                        or b_rows.max() > 1 + 1e-12 or np.any(w_rows > b_rows + 1e-9)):
        raise ValueError("betting_ratio_p_value needs 0 <= losses <= base <= 1")
    if not 0.0 < c <= 1.0:
        raise ValueError(f"the stake cap c must be in (0, 1] (a larger stake can make the capital negative), got {c!r}")
    w_rows, b_rows = np.clip(w_rows, 0.0, 1.0), np.clip(b_rows, 0.0, 1.0)
    w_rows = np.minimum(w_rows, b_rows)
    stakes = betting_ratio_stakes(w_rows, b_rows, tune_delta=tune_delta, c=c)
    log_k = np.cumsum(np.log1p(stakes * (level * b_rows - w_rows)), axis=1)
    best = np.maximum(log_k.max(axis=1, initial=0.0), 0.0)
    p = np.minimum(1.0, np.exp(-best))
    return float(p[0]) if ws.ndim <= 1 else p


def betting_ratio_stakes(losses: _Floats, base: _Floats, *, tune_delta: float = 0.1,
                         c: float = RATIO_STAKE_CAP) -> _Floats:
    """The stakes ``lambda_t`` of `betting_ratio_p_value` (shape of `losses`: rows, n), from the past observations
    only and never from the level tested: the capital at any level is ``prod (1 + lambda_t (level B_t - W_t))``."""
    v, n = losses.shape
    stakes = np.empty((v, n))
    sum_w, sum_b, squares = np.zeros(v), np.zeros(v), np.zeros(v)
    log_term = math.log(1.0 / check_rate("tune_delta", tune_delta))
    for t in range(1, n + 1):
        variance = (0.25 + squares) / t
        stakes[:, t - 1] = np.minimum(np.sqrt(2.0 * log_term / (variance * t * math.log1p(t))), c)
        wt, bt = losses[:, t - 1], base[:, t - 1]
        ratio = (0.5 + sum_w) / (1.0 + sum_b)
        squares += (wt - ratio * bt) ** 2
        sum_w += wt
        sum_b += bt
    return stakes


def group_index(groups: ArrayLike | None, n: int) -> tuple[NDArray[np.int64], int]:
    """Dense task indices ``0..J-1`` of `n` items from their task keys (None: every item its own task)."""
    if groups is None:
        return np.arange(n, dtype=np.int64), n
    keys = np.asarray(groups)
    if keys.shape != (n,):
        raise ValueError(f"groups needs one task key per item ({n}), got shape {keys.shape}")
    _, index = np.unique(keys, return_inverse=True)
    index = index.astype(np.int64).ravel()
    return index, int(index.max()) + 1 if n else 0


def task_means(values: ArrayLike, index: NDArray[np.int64], n_tasks: int,
               weights: ArrayLike | None = None) -> _Floats:
    """Per task, the mean of `values` over its trials (rows of `values`: one per hypothesis).

    Args:
        values: shape ``(rows, n)``: one number per hypothesis and item.
        index: the item's task (`group_index`).
        n_tasks: ``J``.
        weights: multiplicity of each item (a resample; default 1): a task's mean weighs its items by them.

    Returns:
        Shape ``(rows, J)``; a task all of whose items weigh 0 gets NaN (not drawn).
    """
    vals = np.atleast_2d(np.asarray(values, dtype=np.float64))
    w = np.ones(vals.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    sums = np.zeros((vals.shape[0], n_tasks))
    np.add.at(sums.T, index, (vals * w).T)
    counts = np.bincount(index, weights=w, minlength=n_tasks)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / np.where(counts > 0, counts, np.nan)


def risk_upper_bound(k: int, n: int, delta: float) -> float:
    """One-sided ``1 - delta`` Clopper-Pearson upper bound of a rate with ``k`` errors in ``n`` trials.

    The largest ``p`` an exact binomial test does not reject: ``Beta(1 - delta; k + 1, n - k)``, 1 when
    ``k = n`` or ``n = 0`` (Clopper & Pearson 1934). ``risk_upper_bound(k, n, delta) <= alpha`` exactly when
    ``binomial_p_value(k, n, alpha) <= delta``.
    """
    delta = check_rate("delta", delta)
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0 or k == n:
        return 1.0
    return float(stats.beta.ppf(1.0 - delta, k + 1, n - k))


def decided_needed(alpha: float, delta: float, error_rate: float = 0.0, max_n: int = 10_000_000) -> int | None:
    """The fewest decided labeled units whose exact test certifies ``risk <= alpha`` at level `delta` when
    a share `error_rate` of them are errors: the least ``n`` with ``risk_upper_bound(rate * n, n, delta) <=
    alpha`` (the Clopper-Pearson bound, its Beta form continued to fractional counts so that the answer
    does not jump with the rounding of ``rate * n``).

    With no errors this is ``ceil(log(delta) / log(1 - alpha))``: 22 at alpha = delta = 0.1, 45 at
    alpha = 0.05. For a grid of ``m`` vectors tested with Bonferroni (or Holm's first step), pass
    ``delta / m``.

    Returns:
        The count, or None when no count up to `max_n` suffices (``error_rate >= alpha`` never does).
    """
    alpha, delta = check_rate("alpha", alpha), check_rate("delta", delta)
    if not 0.0 <= error_rate < 1.0:
        raise ValueError(f"error_rate must be in [0, 1), got {error_rate!r}")
    if error_rate >= alpha:
        return None
    if error_rate == 0.0:
        n = math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12)
        return n if binomial_p_value(0, n, alpha) <= delta else n + 1
    start, chunk = 1, 4096
    while start <= max_n:
        ns = np.arange(start, min(start + chunk, max_n + 1))
        k = error_rate * ns  # the Clopper-Pearson bound with k = rate * n (continuous in k: monotone in n)
        ok = np.flatnonzero(stats.beta.ppf(1.0 - delta, k + 1, ns - k) <= alpha)
        if ok.size:
            return int(ns[ok[0]])
        start, chunk = start + chunk, chunk * 2
    return None


def tasks_needed(alpha: float, level: float, coverage: float, error_rate: float = 0.0, c: float = RATIO_STAKE_CAP,
                 max_n: int = 10_000_000) -> int | None:
    """About how many tasks a betting p-value (`betting_ratio_p_value`, stake cap `c`) needs to reach `level` when
    a share `coverage` of each task's trials is decided with disagreement `error_rate`: each task's bet
    ``alpha * B - W`` sits near ``gap = coverage (alpha - error_rate)``, and the capital grows by at most
    ``1 + c * gap`` a task, so ``n >= log(1 / level) / log(that)``. An estimate for a
    refusal's message (it ignores the noise of the task means), not a guarantee; None when no count suffices.
    """
    alpha, level = check_rate("alpha", alpha), check_rate("level", level)
    gap = coverage * (alpha - error_rate)
    if gap <= 0:
        return None
    n = math.ceil(math.log(1.0 / level) / math.log1p(c * gap))
    return n if n <= max_n else None


