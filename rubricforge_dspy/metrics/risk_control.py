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

from rubricforge_dspy.metrics.bounds import (
    betting_p_value,
    binomial_p_value,
    check_rate,
    decided_needed,
    group_index,
    hoeffding_bentkus_p_value,
    risk_upper_bound,
    task_means,
    tasks_needed,
)
from rubricforge_dspy.metrics.risk_methods import (
    DEFAULT_METHOD,
    FWER_METHODS,
    LTT_METHODS,
    P_VALUES,
    SEQUENCE_METHODS,
)

__all__ = ["PASS_LEVELS", "FAIL_LEVELS", "FWER_METHODS", "LTT_METHODS", "SEQUENCE_METHODS", "DEFAULT_METHOD",
           "P_VALUES", "GridResult", "binomial_p_value", "hoeffding_bentkus_p_value", "betting_p_value",
           "group_index", "task_means", "risk_upper_bound", "decided_needed", "tasks_needed", "fwer_reject",
           "stage_pairs", "threshold_grid", "prior_share", "cascade_outcomes", "learn_then_test"]

PASS_LEVELS: tuple[float, ...] = (math.inf, 0.99, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)
FAIL_LEVELS: tuple[float, ...] = (-math.inf, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4)
# a stage's verdict is pass at confidence >= 0.5 (core.verdict.PASS_THRESHOLD; metrics imports nothing above it):
# every threshold pair straddles it (`stage_pairs`), so no rule reverses a stage's verdict
VERDICT_SPLIT = 0.5

_Floats = NDArray[np.float64]
_Bools = NDArray[np.bool_]


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
    delta = check_rate("delta", delta)
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
            and ``t_fail`` in ``{-inf} + levels`` are distinct rules: 4 pairs for a pass/fail verdict.
        pass_levels, fail_levels: the thresholds of a continuous confidence.

    Every pair straddles the stage's own verdict, ``t_fail < VERDICT_SPLIT <= t_pass`` (0.5,
    ``core.verdict.PASS_THRESHOLD``): a stage's rule may hand its verdict on but never reverses it (never passes
    an item at a confidence below 0.5 nor fails one at or above it; a recorded stage keeps a pass line's
    confidence in [0.5, 1] and a fail line's below 0.5, `judge.recorded.recorded_confidence`, so no pair turns
    another tool's pass into a fail or back). The default continuous thresholds already do.

    Returns:
        The pairs, "never decides" ``(inf, -inf)`` first.
    """
    if levels is not None:
        values = sorted({float(v) for v in levels})
        if not values or any(not 0.0 <= v <= 1.0 for v in values):
            raise ValueError(f"a stage's confidence levels must be values in [0, 1], got {levels!r}")
        pass_levels, fail_levels = (math.inf, *reversed(values)), (-math.inf, *values)
    pairs = [(tp, tf) for tp in pass_levels for tf in fail_levels if tf < VERDICT_SPLIT <= tp]
    if not pairs:
        raise ValueError(f"no (t_pass, t_fail) pair with t_fail < {VERDICT_SPLIT} <= t_pass in the levels given")
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
            share (`prior_share`), vectors that can decide nothing left out; measured in evals/bench_cascade.py,
            it certifies nothing on the shipped and multi-agent sets (its first, narrowest vectors decide too few
            items to pass): kept as a measured option, never the default.
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
    alpha, delta = check_rate("alpha", alpha), check_rate("delta", delta)
    beta = None if max_false_pass is None else check_rate("max_false_pass", max_false_pass)
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
        w_order, w_test = _split_tasks(units.task_weight, check_rate("order_fraction", order_fraction), seed)
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
