"""Risk control for selective verdicts: Learn-then-Test over a grid of per-stage thresholds.

A *stage* maps a trajectory to a confidence ``c`` in [0, 1] (or none: the stage cannot say) and has two
thresholds: it decides *pass* when ``c >= t_pass``, *fail* when ``c <= t_fail``, and otherwise hands the
item to the next stage. A cascade is a list of stages; what no stage decides is escalated (to a person).
For a threshold vector ``L = ((t_pass_1, t_fail_1), ..., (t_pass_K, t_fail_K))``, on the items it decides:

- disagreement ``D(L) = P(verdict != label | decided)``;
- false-pass rate ``F(L) = P(verdict = pass | decided, label = fail)``.

**Theorem** (Learn-then-Test; Angelopoulos, Bates, Candès, Jordan & Lei 2021, Thm. 1). Let ``L_hat`` be
the vector `learn_then_test` returns from a calibration set of ``n`` units and a finite grid ``G`` of
vectors fixed before the calibration labels are seen. For each ``L`` in ``G`` let ``p_L`` be a valid
p-value of ``H_L: D(L) > alpha`` (and, when ``beta = max_false_pass`` is set, of ``H_L: D(L) > alpha or
F(L) > beta``), and let the rejected set come from a procedure controlling the family-wise error rate at
``delta`` (Holm, Bonferroni, or a fixed sequence in an order fixed in advance or learned on units held
apart from the test). Then, with probability at
least ``1 - delta`` over the calibration draw, ``D(L_hat) <= alpha`` and (if asked) ``F(L_hat) <= beta``
for every vector returned as certified; ``L_hat`` is any function of the rejected set (here: most
coverage, then least cost).

Why the p-values are valid. Conditional on the number ``n_L`` of calibration units ``L`` decides, the
disagreements among them are ``Binomial(n_L, D(L))`` when the units are i.i.d.; so
``P(Bin(n_L, alpha) <= k)`` (`binomial_p_value`) is super-uniform under ``D(L) > alpha``, as is
Hoeffding-Bentkus (`hoeffding_bentkus_p_value`; Bates, Angelopoulos, Lei, Malik & Jordan 2021,
"Distribution-free, risk-controlling prediction sets" (RCPS), JACM 68(6)). The false-pass test is the
same on the decided failed items. Both bounds at once: ``p_L = max(p_D, p_F)`` is an intersection-union
test (Berger 1982, "Multiparameter hypothesis testing and acceptance sampling", Technometrics 24(4)):
``H_L`` is the union of the two nulls and needs no further correction.

Assumptions (and what breaks them):

1. The calibration units and the units judged later are exchangeable (i.i.d. from one distribution). A
   shift in agents, tasks or the judge's LM breaks the guarantee; the certificate's drift check
   (`program.drift`) is what detects the LM's side of it.
2. The unit is the *task*: trials of one task are not independent. Calibrate on whole tasks and count one
   trial per task (`rubricforge_dspy.trust.cascade` keeps one per task by default); the guarantee is then
   about a random trial of a random task.
3. The stages' confidences are fixed functions: the stages (the floor, the judge's calibration map)
   were not fit on the calibration data.

Used as in "Trust or Escalate" (Jung, Brahman & Choi, ICLR 2025), which calibrates when to trust each
judge of a cascade with fixed-sequence testing; here the whole grid is tested with Holm by default, so
small calibration sets do not stop at the first, tiny-sample test. ``"split_fixed_sequence"`` orders the
grid on a random part of the units and tests the sequence on the rest at level ``delta`` each: no
multiplicity penalty, which often certifies more on small sets than Holm over 56 or 3136 vectors. How many
decided labels a bound needs: `decided_needed` (22 at alpha = delta = 0.1 with no errors, 45 at alpha = 0.05).

Pure statistics: numpy and scipy only, nothing else of the package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

__all__ = ["PASS_LEVELS", "FAIL_LEVELS", "FWER_METHODS", "LTT_METHODS", "SEQUENCE_METHODS", "DEFAULT_METHOD",
           "P_VALUES", "GridResult", "binomial_p_value", "hoeffding_bentkus_p_value", "betting_p_value",
           "group_index", "task_means", "risk_upper_bound", "decided_needed", "tasks_needed", "fwer_reject",
           "stage_pairs", "threshold_grid", "prior_share", "cascade_outcomes", "learn_then_test"]

PASS_LEVELS: tuple[float, ...] = (math.inf, 0.99, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)
FAIL_LEVELS: tuple[float, ...] = (-math.inf, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4)
FWER_METHODS = ("holm", "bonferroni", "fixed_sequence")
SEQUENCE_METHODS = ("split_fixed_sequence", "fail_first_sequence")
# a fixed sequence in raw grid order starts at "never decide" and stops there: not offered
LTT_METHODS = ("split_fixed_sequence", "holm", "bonferroni", "fail_first_sequence")
DEFAULT_METHOD = "split_fixed_sequence"  # the most coverage at equal validity (evals/bench_cascade.py)
P_VALUES = ("binomial", "hoeffding_bentkus", "betting")

_Floats = NDArray[np.float64]
_Bools = NDArray[np.bool_]


def _check_rate(name: str, value: float) -> float:
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
    alpha = _check_rate("alpha", alpha)
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
    alpha = _check_rate("alpha", alpha)
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
    m = _check_rate("m", m)
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
    delta = _check_rate("delta", delta)
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
    alpha, delta = _check_rate("alpha", alpha), _check_rate("delta", delta)
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


def tasks_needed(alpha: float, level: float, coverage: float, error_rate: float = 0.0, c: float = 0.9,
                 max_n: int = 10_000_000) -> int | None:
    """About how many tasks a betting p-value (`betting_p_value`, stake cap `c`) needs to reach `level` when a
    share `coverage` of each task's trials is decided with disagreement `error_rate`: the task means sit near
    ``x = alpha (1 - coverage) + error_rate * coverage``, and the capital grows by at most
    ``1 + c (alpha - x) / (1 - alpha)`` a task, so ``n >= log(1 / level) / log(that)``. An estimate for a
    refusal's message (it ignores the noise of the task means), not a guarantee; None when no count suffices.
    """
    alpha, level = _check_rate("alpha", alpha), _check_rate("level", level)
    gap = alpha - (alpha * (1.0 - coverage) + error_rate * coverage)
    if gap <= 0:
        return None
    n = math.ceil(math.log(1.0 / level) / math.log1p(c * gap / (1.0 - alpha)))
    return n if n <= max_n else None


def fwer_reject(p_values: Sequence[float] | _Floats, delta: float, method: str = "holm") -> _Bools:
    """Which hypotheses to reject with family-wise error at most `delta`.

    Args:
        p_values: one valid p-value per hypothesis; for ``"fixed_sequence"`` in the testing order, which
            must be fixed before the data are seen.
        delta: the family-wise error level, in (0, 1).
        method: ``"holm"`` (step-down Bonferroni; Holm 1979), ``"bonferroni"`` (each at ``delta / m``) or
            ``"fixed_sequence"`` (each at ``delta``, in order, stopping at the first non-rejection).

    Returns:
        A boolean array, True where rejected.
    """
    delta = _check_rate("delta", delta)
    p = np.asarray(p_values, dtype=np.float64).ravel()
    if np.any(np.isnan(p)) or np.any(p < 0) or np.any(p > 1 + 1e-12):
        raise ValueError("p-values must lie in [0, 1]")
    m = p.size
    rejected = np.zeros(m, dtype=bool)
    if m == 0:
        return rejected
    if method == "bonferroni":
        return p <= delta / m
    if method == "fixed_sequence":
        failed = np.flatnonzero(p > delta)
        rejected[: failed[0] if failed.size else m] = True
        return rejected
    if method == "holm":
        order = np.argsort(p, kind="stable")
        ok = p[order] <= delta / (m - np.arange(m))
        stop = np.flatnonzero(~ok)
        rejected[order[: stop[0] if stop.size else m]] = True
        return rejected
    raise ValueError(f"method must be one of {FWER_METHODS}, got {method!r}")


def stage_pairs(levels: Sequence[float] | None = None, pass_levels: Sequence[float] = PASS_LEVELS,
                fail_levels: Sequence[float] = FAIL_LEVELS) -> list[tuple[float, float]]:
    """One stage's distinct ``(t_pass, t_fail)`` pairs (``t_fail < t_pass``), fixed before any label is seen.

    Args:
        levels: the values the stage's confidence can take, when it takes few (a pass/fail verdict: ``(0, 1)``;
            a score in steps of 0.1: eleven values); None for a continuous confidence (the floor's probability).
            With levels, a threshold between two of them changes nothing, so only ``t_pass`` in ``{inf} + levels``
            and ``t_fail`` in ``{-inf} + levels`` are distinct rules: 6 pairs for a pass/fail verdict.
        pass_levels, fail_levels: the thresholds of a continuous confidence.

    Returns:
        The pairs, "never decides" ``(inf, -inf)`` first.
    """
    if levels is not None:
        values = sorted({float(v) for v in levels})
        if not values or any(not 0.0 <= v <= 1.0 for v in values):
            raise ValueError(f"a stage's confidence levels must be values in [0, 1], got {levels!r}")
        pass_levels, fail_levels = (math.inf, *reversed(values)), (-math.inf, *values)
    pairs = [(tp, tf) for tp in pass_levels for tf in fail_levels if tf < tp]
    if not pairs:
        raise ValueError("no (t_pass, t_fail) pair with t_fail < t_pass in the levels given")
    return pairs


def threshold_grid(stages: int | Sequence[Sequence[float] | None], pass_levels: Sequence[float] = PASS_LEVELS,
                   fail_levels: Sequence[float] = FAIL_LEVELS) -> np.ndarray:
    """The product grid of per-stage ``(t_pass, t_fail)`` pairs (`stage_pairs`), shape ``(vectors, stages, 2)``;
    the first stage varies slowest.

    Args:
        stages: the number of stages (each with a continuous confidence), or per stage its confidence levels
            (None: continuous).
        pass_levels, fail_levels: the thresholds of a continuous confidence.
    """
    per_stage = [None] * stages if isinstance(stages, int) else list(stages)
    if len(per_stage) < 1:
        raise ValueError("a cascade has at least one stage")
    pairs = [np.asarray(stage_pairs(levels, pass_levels, fail_levels), dtype=np.float64) for levels in per_stage]
    index = np.stack(np.meshgrid(*[np.arange(len(p)) for p in pairs], indexing="ij"), -1).reshape(-1, len(pairs))
    return np.stack([pairs[k][index[:, k]] for k in range(len(pairs))], axis=1)


def prior_share(grid: np.ndarray, stages: int | Sequence[Sequence[float] | None]) -> _Floats:
    """A label-free guess of each vector's decided share, to order a fixed sequence before any data: a
    continuous confidence taken as uniform on [0, 1], a discrete one as uniform on its levels."""
    per_stage = [None] * grid.shape[1] if isinstance(stages, int) else list(stages)
    undecided = np.ones(grid.shape[0])
    for k, levels in enumerate(per_stage):
        tp, tf = grid[:, k, 0], grid[:, k, 1]
        if levels is None:
            share = np.clip(1.0 - np.where(np.isfinite(tp), tp, 1.0), 0, 1) + np.clip(np.where(np.isfinite(tf), tf,
                                                                                                  0.0), 0, 1)
        else:
            values = np.asarray(sorted({float(v) for v in levels}))
            share = ((values[None, :] >= tp[:, None]) | (values[None, :] <= tf[:, None])).mean(axis=1)
        undecided *= 1.0 - np.clip(share, 0, 1)
    return 1.0 - undecided


def cascade_outcomes(confidences: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What each vector of `grid` does with each item.

    Args:
        confidences: shape ``(n_stages, n)``; NaN where a stage has no confidence (hands on).
        grid: shape ``(vectors, n_stages, 2)`` (`threshold_grid`).

    Returns:
        ``(decided, passed, stage)``, each of shape ``(vectors, n)``: decided by some stage, the verdict,
        and the index of the deciding stage (-1: escalated).
    """
    conf = np.asarray(confidences, dtype=np.float64)
    if conf.ndim != 2 or conf.shape[0] != grid.shape[1]:
        raise ValueError(f"confidences must have shape (stages={grid.shape[1]}, n), got {conf.shape}")
    v, n = grid.shape[0], conf.shape[1]
    decided = np.zeros((v, n), dtype=bool)
    passed = np.zeros((v, n), dtype=bool)
    stage = np.full((v, n), -1, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        for k in range(grid.shape[1]):
            c = conf[k][None, :]
            says_pass = c >= grid[:, k, 0][:, None]
            says_fail = c <= grid[:, k, 1][:, None]
            new = ~decided & (says_pass | says_fail)
            passed |= new & says_pass
            stage[new] = k
            decided |= new
    return decided, passed, stage


@dataclass(frozen=True)
class GridResult:
    """What `learn_then_test` chose.

    Attributes:
        certified: some vector's null was rejected; the fields below describe the chosen one (when not
            certified: the vector with the smallest p-value, for the refusal's message).
        thresholds: per stage ``(t_pass, t_fail)`` (inf / -inf: never passes / never fails).
        coverage: share of the calibration units decided (weighted).
        n_decided, errors: decided units and disagreements among them.
        disagreement: empirical D; false_pass: empirical F (None when no failed unit was decided).
        n_failed_decided, false_passes: the decided units labeled fail, and those passed.
        p_value: ``max(p_D, p_F)`` of the chosen vector (p_F only with a false-pass bound).
        n_tested, n_rejected: vectors in the grid, vectors certified.
        method, p_values: the FWER procedure and the p-value kind.
        alpha, delta, max_false_pass: the requested bounds.
        cost: the chosen vector's cost (sum over stages of its cost times the units reaching it).
        n_tasks, n_trials, max_trials_per_task: the testing units (tasks) and the trials they hold, all used.
        n_order_tasks: the tasks that ordered the grid (``"split_fixed_sequence"``; not in the test).
    """

    certified: bool
    thresholds: tuple[tuple[float, float], ...]
    coverage: float
    n_decided: int
    errors: int
    disagreement: float | None
    false_pass: float | None
    n_failed_decided: int
    false_passes: int
    p_value: float
    n_tested: int
    n_rejected: int
    method: str
    p_values: str
    alpha: float
    delta: float
    max_false_pass: float | None
    cost: float
    n_tasks: int = 0
    n_trials: int = 0
    max_trials_per_task: int = 0
    n_order_tasks: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (infinite thresholds as null)."""
        out = dict(self.__dict__)
        out["thresholds"] = [[None if not math.isfinite(t) else t for t in pair] for pair in self.thresholds]
        return out


def _p_values(kind: str, x: _Floats, m: float, delta: float, counts: tuple[_Floats, _Floats] | None) -> _Floats:
    """One p-value per row of task means `x` (in [0, 1]) for ``H0: E[x] > m``.

    ``"binomial"`` uses the 0/1 counts of one trial per task (`counts`: errors, decided), exact given the
    number decided; ``"hoeffding_bentkus"`` and ``"betting"`` the bounded task means."""
    if kind == "binomial":
        assert counts is not None
        return np.atleast_1d(binomial_p_value(counts[0], counts[1], m))
    if kind == "hoeffding_bentkus":
        n = np.full(x.shape[0], float(x.shape[1]))
        return np.atleast_1d(hoeffding_bentkus_p_value(np.clip(x.sum(axis=1), 0, n), n, m))
    if kind == "betting":
        return np.atleast_1d(betting_p_value(x, m, tune_delta=delta)) if x.shape[1] else np.ones(x.shape[0])
    raise ValueError(f"p_values must be one of {P_VALUES}, got {kind!r}")


@dataclass(frozen=True)
class _Units:
    """The calibration data as the tests see it: items grouped into tasks, each task a unit (repeated by its
    multiplicity in a resample)."""

    index: NDArray[np.int64]  # item -> task (0..J-1)
    n_tasks: int
    task_weight: _Floats  # multiplicity of each task
    trials: NDArray[np.int64]  # items per task

    @property
    def one_trial_each(self) -> bool:
        return bool(np.all(self.trials[self.task_weight > 0] <= 1))

    def means(self, values: _Floats) -> _Floats:
        """Task means of `values` (rows: vectors), each task repeated by its multiplicity: shape (rows, units)."""
        means = task_means(values, self.index, self.n_tasks)
        return np.repeat(means, self.task_weight.astype(np.int64), axis=1)

    def restricted(self, task_weight: _Floats) -> "_Units":
        return _Units(self.index, self.n_tasks, task_weight, self.trials)


def _tally(decided: _Bools, passed: _Bools, y: _Bools, units: _Units, alpha: float, beta: float | None,
           kind: str, delta: float) -> dict[str, _Floats]:
    """Per vector: decided trials, disagreements, decided failed, false passes (weighted by their tasks'
    multiplicity), and the p-value of ``D > alpha`` (or ``F > beta``: the larger, intersection-union)."""
    item_w = units.task_weight[units.index]
    wrong, fails = decided & (passed != y), decided & ~y
    fp = fails & passed
    tally = {"n": decided.astype(np.float64) @ item_w, "errors": wrong.astype(np.float64) @ item_w,
             "failed": fails.astype(np.float64) @ item_w, "fp": fp.astype(np.float64) @ item_w}
    # loss in [-alpha, 1 - alpha] per trial, averaged within a task, shifted by alpha into [0, 1]
    x_d = units.means(wrong.astype(np.float64) - alpha * decided) + alpha
    p = _p_values(kind, np.clip(x_d, 0, 1), alpha, delta, (tally["errors"], tally["n"]))
    if beta is not None:
        x_f = units.means(fp.astype(np.float64) - beta * fails) + beta
        p = np.maximum(p, _p_values(kind, np.clip(x_f, 0, 1), beta, delta, (tally["fp"], tally["failed"])))
    tally["p"] = np.minimum(p, 1.0)
    return tally


def _gap(tally: dict[str, _Floats], alpha: float, beta: float | None) -> _Floats:
    """The evidence against each vector's null on the ordering share: the smaller of the gaps
    ``alpha * decided - errors`` (and ``beta * failed decided - false passes``), per ordering trial."""
    n = max(float(tally["n"].max(initial=0.0)), 1.0)
    gap = alpha * tally["n"] - tally["errors"]
    if beta is not None:
        gap = np.minimum(gap, beta * tally["failed"] - tally["fp"])
    return gap / n


def _split_tasks(task_weight: _Floats, fraction: float, seed: int) -> tuple[_Floats, _Floats]:
    """Multiplicities of a random ordering part (`fraction` of the task units) and of the testing part."""
    units = np.repeat(np.arange(task_weight.size), task_weight.astype(np.int64))
    order = np.random.default_rng(seed).permutation(units.size)
    cut = int(round(fraction * units.size))
    return (np.bincount(units[order[:cut]], minlength=task_weight.size).astype(np.float64),
            np.bincount(units[order[cut:]], minlength=task_weight.size).astype(np.float64))


def _checked_inputs(confidences: ArrayLike, labels: ArrayLike, weights: ArrayLike | None, groups: ArrayLike | None,
                    stage_costs: ArrayLike | None, seed: int) -> tuple[_Floats, _Bools, _Units, _Floats]:
    conf = np.atleast_2d(np.asarray(confidences, dtype=np.float64))
    y = np.asarray(labels)
    if y.ndim != 1 or y.size != conf.shape[1] or not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be {conf.shape[1]} values in {{0, 1}}")
    finite = conf[~np.isnan(conf)]
    if finite.size and (finite.min() < 0 or finite.max() > 1):
        raise ValueError("confidences must lie in [0, 1] (or be NaN)")
    w = np.ones(y.size) if weights is None else np.asarray(weights, dtype=np.float64)
    costs = np.ones(conf.shape[0]) if stage_costs is None else np.asarray(stage_costs, dtype=np.float64)
    if w.shape != y.shape or np.any(w < 0) or np.any(w != np.round(w)) or costs.shape != (conf.shape[0],):
        raise ValueError("weights need one non-negative integer (a multiplicity) per unit, stage_costs one "
                         "value per stage")
    index, n_tasks = group_index(groups, y.size)
    task_weight = np.zeros(n_tasks)
    np.maximum.at(task_weight, index, w)
    if np.any(w[w > 0] != task_weight[index][w > 0]):
        raise ValueError("weights are a task's multiplicity: every trial of a task needs the same weight")
    # the betting p-value reads the tasks in order: a fixed random order, independent of their values
    order = np.random.default_rng(seed).permutation(n_tasks)
    rank = np.empty(n_tasks, dtype=np.int64)
    rank[order] = np.arange(n_tasks)
    index, task_weight = rank[index], task_weight[order]
    trials = np.bincount(index, weights=(w > 0).astype(np.float64), minlength=n_tasks).astype(np.int64)
    return conf, y.astype(bool), _Units(index, n_tasks, task_weight, trials), costs


def _resolved_p_values(kind: str, units: _Units) -> str:
    if kind == "auto":
        return "binomial" if units.one_trial_each else "betting"
    if kind == "binomial" and not units.one_trial_each:
        raise ValueError("p_values='binomial' needs one trial per task (the exact test counts i.i.d. units); with "
                         "several trials per task use 'betting' or 'hoeffding_bentkus' (or 'auto')")
    if kind not in P_VALUES:
        raise ValueError(f"p_values must be one of {('auto', *P_VALUES)}, got {kind!r}")
    return kind


def learn_then_test(confidences: ArrayLike, labels: ArrayLike, alpha: float, delta: float,
                    max_false_pass: float | None = None, method: str = DEFAULT_METHOD, *,
                    groups: ArrayLike | None = None, levels: Sequence[Sequence[float] | None] | None = None,
                    pass_levels: Sequence[float] = PASS_LEVELS, fail_levels: Sequence[float] = FAIL_LEVELS,
                    weights: ArrayLike | None = None, stage_costs: ArrayLike | None = None,
                    p_values: str = "auto", order_fraction: float = 0.2, seed: int = 0) -> GridResult:
    """Certify a threshold vector of a cascade by Learn-then-Test over the grid (module docstring).

    Args:
        confidences: shape ``(n_stages, n)`` (or one row for one stage): each stage's confidence that the
            item passed, NaN where the stage cannot say (an unparseable answer: it hands the item on).
        labels: 0/1 per item (1 = passed).
        alpha: the bound on disagreement among decided items.
        delta: the family-wise error level (the guarantee holds with probability >= 1 - delta).
        max_false_pass: the bound on the false-pass rate among decided failed items (None: not bounded).
        method: ``"split_fixed_sequence"`` (default): a random `order_fraction` of the tasks orders the grid
            surest first (by the p-values there, ties by the evidence against each vector's null,
            ``alpha * decided - errors`` and the same for false passes: the smaller; 20% measured best on the
            benchmark sets), and the other tasks test that sequence at level `delta` each
            (Angelopoulos et al. 2021, sec. 4: an order learned on held-apart data keeps the fixed-sequence
            guarantee);
            ``"holm"`` or ``"bonferroni"`` over the whole grid; ``"fail_first_sequence"``: a fixed sequence in
            an order fixed before the data, "fail only" vectors first, each group by its label-free decided
            share (`prior_share`), vectors that can decide nothing left out.
        groups: each item's task (any hashable key); None: every item is its own task. Every trial is used;
            the task is the unit (its trials' losses are averaged, module docstring).
        levels: per stage, the values its confidence can take (None: continuous), `stage_pairs`.
        pass_levels, fail_levels: the thresholds of a continuous confidence (fixed in advance).
        weights: integer multiplicity per item (a resample of tasks: equal within a task), default 1 each.
        stage_costs: cost of running each stage on one item (default 1 each), to break coverage ties.
        p_values: ``"auto"`` (default: ``"binomial"``, exact, when every task has one trial, else
            ``"betting"``), ``"binomial"``, ``"hoeffding_bentkus"`` or ``"betting"``.
        order_fraction, seed: the ordering part of ``"split_fixed_sequence"`` and its random draw; the seed
            also fixes the order in which the betting p-value reads the tasks.

    Returns:
        A `GridResult` (its counts are those of the testing tasks' trials).
    """
    alpha, delta = _check_rate("alpha", alpha), _check_rate("delta", delta)
    beta = None if max_false_pass is None else _check_rate("max_false_pass", max_false_pass)
    if method not in LTT_METHODS:
        raise ValueError(f"method must be one of {LTT_METHODS}, got {method!r}")
    conf, y, units, costs = _checked_inputs(confidences, labels, weights, groups, stage_costs, seed)
    kind = _resolved_p_values(p_values, units)
    stages: Sequence[Sequence[float] | None] = levels if levels is not None else [None] * conf.shape[0]
    if len(stages) != conf.shape[0]:
        raise ValueError(f"levels needs one entry per stage ({conf.shape[0]}), got {len(stages)}")
    grid = threshold_grid(stages, pass_levels, fail_levels)
    decided, passed, stage = cascade_outcomes(conf, grid)
    order_units = 0
    if method == "split_fixed_sequence":
        w_order, w_test = _split_tasks(units.task_weight, _check_rate("order_fraction", order_fraction), seed)
        first = _tally(decided, passed, y, units.restricted(w_order), alpha, beta, kind, delta)
        order = np.lexsort((-first["n"], -_gap(first, alpha, beta), first["p"]))  # surest first, then most evidence
        units, order_units = units.restricted(w_test), int(w_order.sum())
    elif method == "fail_first_sequence":
        share = prior_share(grid, stages)
        fail_only = np.all(~np.isfinite(grid[:, :, 0]), axis=1)
        order = np.lexsort((share, ~fail_only))
        order = order[share[order] > 0]
    tally = _tally(decided, passed, y, units, alpha, beta, kind, delta)
    p = tally["p"]
    if method in SEQUENCE_METHODS:
        rejected = np.zeros(p.size, dtype=bool)
        rejected[order[fwer_reject(p[order], delta, "fixed_sequence")]] = True
    else:
        rejected = fwer_reject(p, delta, method)
    item_w = units.task_weight[units.index]
    reaches = [(stage == -1) | (stage >= k) for k in range(conf.shape[0])]
    cost = sum(costs[k] * (reaches[k].astype(np.float64) @ item_w) for k in range(conf.shape[0]))
    used = units.task_weight > 0
    return _chosen(grid, tally, p, rejected, cost, float(item_w.sum()) or 1.0,
                   dict(method=method, p_values=kind, alpha=alpha, delta=delta, max_false_pass=beta,
                        n_tasks=int(units.task_weight.sum()), n_trials=int(item_w.sum()),
                        max_trials_per_task=int(units.trials[used].max()) if used.any() else 0,
                        n_order_tasks=order_units))


def _chosen(grid: _Floats, tally: dict[str, _Floats], p: _Floats, rejected: _Bools, cost: _Floats, total: float,
            settings: dict[str, Any]) -> GridResult:
    """The `GridResult` of the rejected vector with most coverage, then least cost, then least disagreement
    (or, when none is rejected, of the vector with the smallest p-value, then most coverage)."""
    n_dec, errors, failed, fps = tally["n"], tally["errors"], tally["failed"], tally["fp"]
    if rejected.any():
        candidates = np.flatnonzero(rejected)
        best = candidates[np.lexsort((errors[candidates] / np.maximum(n_dec[candidates], 1), cost[candidates],
                                      -n_dec[candidates]))[0]]
    else:
        best = int(np.lexsort((-n_dec, p))[0])
    return GridResult(
        certified=bool(rejected.any()),
        thresholds=tuple((float(a), float(b)) for a, b in grid[best]),
        coverage=float(n_dec[best] / total), n_decided=int(round(n_dec[best])), errors=int(round(errors[best])),
        disagreement=float(errors[best] / n_dec[best]) if n_dec[best] else None,
        false_pass=float(fps[best] / failed[best]) if failed[best] else None,
        n_failed_decided=int(round(failed[best])), false_passes=int(round(fps[best])),
        p_value=float(p[best]), n_tested=int(grid.shape[0]), n_rejected=int(rejected.sum()),
        cost=float(cost[best]), **settings)
