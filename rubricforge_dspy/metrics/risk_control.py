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

__all__ = ["PASS_LEVELS", "FAIL_LEVELS", "FWER_METHODS", "LTT_METHODS", "GridResult", "binomial_p_value",
           "hoeffding_bentkus_p_value", "risk_upper_bound", "decided_needed", "fwer_reject", "threshold_grid",
           "cascade_outcomes", "learn_then_test"]

PASS_LEVELS: tuple[float, ...] = (math.inf, 0.99, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)
FAIL_LEVELS: tuple[float, ...] = (-math.inf, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4)
FWER_METHODS = ("holm", "bonferroni", "fixed_sequence")
LTT_METHODS = (*FWER_METHODS, "split_fixed_sequence")
P_VALUES = ("binomial", "hoeffding_bentkus")

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


def threshold_grid(n_stages: int, pass_levels: Sequence[float] = PASS_LEVELS,
                   fail_levels: Sequence[float] = FAIL_LEVELS) -> np.ndarray:
    """The product grid of per-stage ``(t_pass, t_fail)`` pairs (``t_fail < t_pass``), shape
    ``(vectors, n_stages, 2)``; the first stage varies slowest. Its order is the fixed-sequence order."""
    if n_stages < 1:
        raise ValueError("a cascade has at least one stage")
    pairs = [(tp, tf) for tp in pass_levels for tf in fail_levels if tf < tp]
    if not pairs:
        raise ValueError("no (t_pass, t_fail) pair with t_fail < t_pass in the levels given")
    index = np.stack(np.meshgrid(*[np.arange(len(pairs))] * n_stages, indexing="ij"), -1).reshape(-1, n_stages)
    return np.asarray(pairs, dtype=np.float64)[index]


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

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (infinite thresholds as null)."""
        out = dict(self.__dict__)
        out["thresholds"] = [[None if not math.isfinite(t) else t for t in pair] for pair in self.thresholds]
        return out


def _p_values(kind: str, k: _Floats, n: _Floats, level: float) -> _Floats:
    if kind == "binomial":
        return np.atleast_1d(binomial_p_value(k, n, level))
    if kind == "hoeffding_bentkus":
        return np.atleast_1d(hoeffding_bentkus_p_value(k, n, level))
    raise ValueError(f"p_values must be one of {P_VALUES}, got {kind!r}")


def _tally(decided: _Bools, passed: _Bools, y: _Bools, w: _Floats) -> dict[str, _Floats]:
    """Weighted counts of each vector: decided, disagreements, decided failed, false passes."""
    return {"n": decided.astype(np.float64) @ w, "errors": (decided & (passed != y)).astype(np.float64) @ w,
            "failed": (decided & ~y).astype(np.float64) @ w, "fp": (decided & passed & ~y).astype(np.float64) @ w}


def _vector_p(tally: dict[str, _Floats], alpha: float, beta: float | None, kind: str) -> _Floats:
    """``max(p_D, p_F)`` of each vector (p_F only with a false-pass bound `beta`): the intersection-union test."""
    p = _p_values(kind, tally["errors"], tally["n"], alpha)
    if beta is not None:
        p = np.maximum(p, _p_values(kind, tally["fp"], tally["failed"], beta))
    return np.minimum(p, 1.0)


def _split(w: _Floats, fraction: float, seed: int) -> tuple[_Floats, _Floats]:
    """Multiplicities of a random ordering part (`fraction` of the units) and of the testing part."""
    units = np.repeat(np.arange(w.size), w.astype(np.int64))
    order = np.random.default_rng(seed).permutation(units.size)
    cut = int(round(fraction * units.size))
    return (np.bincount(units[order[:cut]], minlength=w.size).astype(np.float64),
            np.bincount(units[order[cut:]], minlength=w.size).astype(np.float64))


def _checked_inputs(confidences: ArrayLike, labels: ArrayLike, weights: ArrayLike | None,
                    stage_costs: ArrayLike | None) -> tuple[_Floats, _Bools, _Floats, _Floats]:
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
    return conf, y.astype(bool), w, costs


def learn_then_test(confidences: ArrayLike, labels: ArrayLike, alpha: float, delta: float,
                    max_false_pass: float | None = None, method: str = "holm", *,
                    pass_levels: Sequence[float] = PASS_LEVELS, fail_levels: Sequence[float] = FAIL_LEVELS,
                    weights: ArrayLike | None = None, stage_costs: ArrayLike | None = None,
                    p_values: str = "binomial", order_fraction: float = 0.3, seed: int = 0) -> GridResult:
    """Certify a threshold vector of a cascade by Learn-then-Test over the product grid (module docstring).

    Args:
        confidences: shape ``(n_stages, n)`` (or one row for one stage): each stage's confidence that the
            unit passed, NaN where the stage cannot say (an unparseable answer: it hands the unit on).
        labels: 0/1 per unit (1 = passed).
        alpha: the bound on disagreement among decided units.
        delta: the family-wise error level (the guarantee holds with probability >= 1 - delta).
        max_false_pass: the bound on the false-pass rate among decided failed units (None: not bounded).
        method: ``"holm"`` (default) or ``"bonferroni"`` over the whole grid; ``"fixed_sequence"`` in grid
            order; ``"split_fixed_sequence"``: a random `order_fraction` of the units orders the grid by
            its p-values there (ascending), and the other units test that sequence at level `delta`
            each (Angelopoulos et al. 2021, sec. 4: an order learned on held-apart data keeps the
            fixed-sequence guarantee; no multiplicity penalty, at the cost of the ordering units).
        pass_levels, fail_levels: the per-stage threshold levels (fixed in advance).
        weights: integer multiplicity per unit (a resample), default 1 each.
        stage_costs: cost of running each stage on one unit (default 1 each), to break coverage ties.
        p_values: ``"binomial"`` (exact, default) or ``"hoeffding_bentkus"``.
        order_fraction, seed: the ordering part of ``"split_fixed_sequence"`` and its random draw.

    Returns:
        A `GridResult` (its counts are those of the testing units).
    """
    alpha, delta = _check_rate("alpha", alpha), _check_rate("delta", delta)
    beta = None if max_false_pass is None else _check_rate("max_false_pass", max_false_pass)
    if method not in LTT_METHODS:
        raise ValueError(f"method must be one of {LTT_METHODS}, got {method!r}")
    conf, y, w, costs = _checked_inputs(confidences, labels, weights, stage_costs)
    grid = threshold_grid(conf.shape[0], pass_levels, fail_levels)
    decided, passed, stage = cascade_outcomes(conf, grid)
    if method == "split_fixed_sequence":
        w_order, w = _split(w, _check_rate("order_fraction", order_fraction), seed)
        first = _tally(decided, passed, y, w_order)
        order = np.lexsort((-first["n"], _vector_p(first, alpha, beta, p_values)))
    tally = _tally(decided, passed, y, w)
    p = _vector_p(tally, alpha, beta, p_values)
    if method == "split_fixed_sequence":
        rejected = np.zeros(p.size, dtype=bool)
        rejected[order[fwer_reject(p[order], delta, "fixed_sequence")]] = True
    else:
        rejected = fwer_reject(p, delta, method)
    reaches = [(stage == -1) | (stage >= k) for k in range(conf.shape[0])]
    cost = sum(costs[k] * (reaches[k].astype(np.float64) @ w) for k in range(conf.shape[0]))
    return _chosen(grid, tally, p, rejected, cost, float(w.sum()) or 1.0,
                   dict(method=method, p_values=p_values, alpha=alpha, delta=delta, max_false_pass=beta))


def _chosen(grid: _Floats, tally: dict[str, _Floats], p: _Floats, rejected: _Bools, cost: _Floats, total: float,
            settings: dict[str, Any]) -> GridResult:
    """The `GridResult` of the rejected vector with most coverage, then least cost, then least disagreement
    (or, when none is rejected, of the vector with the smallest p-value)."""
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
