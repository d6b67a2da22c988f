"""Risk control for selective verdicts: Learn-then-Test over a grid of per-stage thresholds.

A *stage* maps a trajectory to a confidence ``c`` in [0, 1] (or none: the stage cannot say) and has two
thresholds: it decides *pass* when ``c >= t_pass``, *fail* when ``c <= t_fail``, and otherwise hands the
item to the next stage. A cascade is a list of stages; what no stage decides is escalated (to a person).
For a threshold vector ``L = ((t_pass_1, t_fail_1), ..., (t_pass_K, t_fail_K))``, on the items it decides:

- disagreement ``D(L) = P(verdict != label | decided)``;
- false-pass rate ``F(L) = P(verdict = pass | decided, label = fail)``.

**Theorem** (Learn-then-Test; Angelopoulos, Bates, Candès, Jordan & Lei 2021, Thm. 1). Let ``L_hat`` be
the vector `learn_then_test` returns from a calibration set of ``n`` tasks and a finite grid ``G`` of
vectors fixed before the calibration labels are seen. For each ``L`` in ``G`` let ``p_L`` be a valid
p-value of its null ``H_L``, and let the rejected set come from a procedure controlling the family-wise error
rate at ``delta`` (Holm, Bonferroni, or a fixed sequence in an order fixed before the calibration labels are
seen). Then, with probability at least ``1 - delta`` over the calibration draw, ``H_L`` is false for every
vector returned as certified; ``L_hat`` is any function of the rejected set (here: most coverage, then least
cost). The null depends on the bound:

- ``bound="per_stage"`` (the default): for every stage ``k`` that ``L`` lets decide (a finite threshold),
  ``H_L = union_k {D_k(L) > alpha or F_k(L) > beta}``, where ``D_k`` is the disagreement among the items stage
  ``k`` decides and ``F_k`` its false-pass rate (tested only for a stage that can pass: one that never passes has
  ``F_k = 0``): by default (``false_pass="among_failed"``) its passes among the failed items it decides; or
  (``"among_passes"``) the share of its passes that are failures, which its own easy fails cannot dilute. ``beta =
  max_false_pass``, or ``FALSE_PASS_RATIOS[false_pass] * alpha`` when none is given (alpha / 2 over the failed
  items, alpha over the passes). ``p_L = max_k max(p_Dk, p_Fk)``
  is an intersection-union test of the union null (Berger 1982, "Multiparameter hypothesis testing and acceptance
  sampling", Technometrics 24(4)): if some component null is true, ``P(p_L <= u) <= P(p_that <= u) <= u``. No correction
  over stages is needed. Rejecting it bounds the pooled rates too: ``D(L) = sum_k w_k D_k(L)`` with ``w_k`` the
  share of the decided items stage ``k`` decides (a mixture), so each ``D_k <= alpha`` gives ``D(L) <= alpha``;
  likewise the cascade's false-pass rate of the same kind is a mixture of the ``F_k`` (weights: each stage's share
  of the passes, or of the decided failed items).
- ``bound="pooled"``: ``H_L = {D(L) > alpha}`` (or ``D(L) > alpha or F(L) > beta`` when `max_false_pass` is
  given), over everything the cascade decides: one stage's over-crediting can hide behind another's easy
  verdicts; kept as an option.

Why the p-values are valid. For one threshold vector and stage ``k``, let a task ``j`` with trials ``i = 1..n_j``
give ``W_jk`` (its share of trials stage ``k`` decides wrongly) and ``B_jk`` (its share stage ``k`` decides):
``Z_jk = W_jk - alpha B_jk``, i.i.d. across tasks, and ``D_k <= alpha`` for the population "a random task, a
random trial of it" iff ``E[Z_jk] <= 0``. The same over the passed (or failed) trials with ``beta`` for ``F_k``.
With one trial per task, given the number ``n_k`` of units stage ``k`` decides, the disagreements are ``Binomial(n_k,
D_k)`` and ``P(Bin(n_k, alpha) <= errors)`` (`binomial_p_value`) is super-uniform under ``D_k > alpha``; with
several trials per task the betting p-value (`betting_ratio_p_value`; Waudby-Smith & Ramdas 2024, JRSSB 86(1))
or Hoeffding-Bentkus (`hoeffding_bentkus_p_value`, on ``Z`` shifted into [0, 1]; Bates, Angelopoulos, Lei, Malik
& Jordan 2021, "Distribution-free, risk-controlling prediction sets", JACM 68(6)) test the mean of the ``Z``.

**Monotone in alpha** (``"ordered_sequence"``). The order (`sequence_order`) is a function of the grid and of
ordering data apart from the calibration, never of alpha, beta or the calibration labels. Each p-value is
non-increasing in its level: the binomial CDF ``P(Bin(n, a) <= k)`` falls as ``a`` grows, and every factor
``1 + lambda_t (a B_t - W_t)`` of the betting capital grows with ``a`` (``B_t >= 0``, stakes ``lambda_t >= 0``
chosen from past observations only, never from ``a``). With beta fixed or ``beta = FALSE_PASS_RATIO * alpha``,
every vector's ``p_L`` is non-increasing in alpha, so the prefix a fixed sequence rejects at level ``delta`` at
alpha is contained in the prefix at any ``alpha' > alpha``: a certificate at alpha is one at every larger alpha
(and the chosen vector's coverage never falls). Holm's rejected set is monotone for the same reason (its
thresholds ``delta / (m - i)`` do not depend on alpha and smaller p-values reject a superset). The split sequence
orders by p-values computed at alpha and is not monotone; Hoeffding-Bentkus on the shifted task means is not
guaranteed to be either (its argument moves with alpha).

Assumptions (and what breaks them):

1. The calibration tasks and the tasks judged later are exchangeable (i.i.d. from one distribution). A
   shift in agents, tasks or the judge's LM breaks the guarantee; the certificate's drift check
   (`program.drift`) is what detects the LM's side of it. Labels a person gave to escalated items are not a
   random sample of tasks: they break this assumption if fed back into calibration.
2. The unit is the *task*: trials of one task are not independent; their losses are averaged per task, and the
   guarantee is about a random trial of a random task.
3. The stages' confidences, the grid and the sequence's order are fixed functions of data apart from the
   calibration (the fit split, or nothing): none was fit or ordered on the calibration labels.

Used as in "Trust or Escalate" (Jung, Brahman & Choi, ICLR 2025), which calibrates when to trust each
judge of a cascade with fixed-sequence testing. How many decided labels a bound needs: `decided_needed` (22 at
alpha = delta = 0.1 with no errors, 45 at alpha = 0.05), `tasks_needed` for the betting p-value.

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
    betting_ratio_p_value,
    binomial_p_value,
    check_rate,
    decided_needed,
    group_index,
    hoeffding_bentkus_p_value,
    risk_upper_bound,
    task_means,
    tasks_needed,
)
from rubricforge_dspy.metrics.risk_grid import (
    FAIL_LEVELS,
    PASS_LEVELS,
    cascade_outcomes,
    prior_share,
    stage_pairs,
    threshold_grid,
)
from rubricforge_dspy.metrics.risk_methods import (
    BOUNDS,
    DEFAULT_BOUND,
    DEFAULT_FALSE_PASS,
    DEFAULT_METHOD,
    FALSE_PASS_RATES,
    FALSE_PASS_RATIO,
    FALSE_PASS_RATIOS,
    FWER_METHODS,
    LTT_METHODS,
    P_VALUES,
    SEQUENCE_METHODS,
)
from rubricforge_dspy.metrics.risk_order import sequence_order

__all__ = ["PASS_LEVELS", "FAIL_LEVELS", "FWER_METHODS", "LTT_METHODS", "SEQUENCE_METHODS", "DEFAULT_METHOD",
           "BOUNDS", "DEFAULT_BOUND", "FALSE_PASS_RATIO", "FALSE_PASS_RATES", "FALSE_PASS_RATIOS",
           "DEFAULT_FALSE_PASS", "P_VALUES", "GridResult", "binomial_p_value",
           "hoeffding_bentkus_p_value", "betting_p_value", "betting_ratio_p_value", "group_index", "task_means",
           "risk_upper_bound", "decided_needed", "tasks_needed", "fwer_reject", "stage_pairs", "threshold_grid",
           "prior_share", "cascade_outcomes", "sequence_order", "learn_then_test"]


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


@dataclass(frozen=True)
class GridResult:
    """What `learn_then_test` chose.

    Attributes:
        certified: some vector's null was rejected; the fields below describe the chosen one (when not
            certified: the vector where the procedure stopped, for the refusal's message: for a sequence the
            first vector not rejected, for Holm and Bonferroni the one with the smallest p-value).
        thresholds: per stage ``(t_pass, t_fail)`` (inf / -inf: never passes / never fails).
        coverage: share of the calibration units decided (weighted).
        n_decided, errors: decided units and disagreements among them.
        disagreement: empirical D; false_pass: empirical F (None when no failed unit was decided).
        n_failed_decided, false_passes: the decided units labeled fail, and those passed.
        p_value: the chosen vector's p-value (per stage: the largest over its stages' tests; pooled:
            ``max(p_D, p_F)``, p_F only with a false-pass bound).
        n_tested, n_rejected: vectors in the grid, vectors certified.
        method, p_values: the FWER procedure and the p-value kind.
        alpha, delta, max_false_pass: the requested bounds (``max_false_pass``: the beta tested, the default
            ``FALSE_PASS_RATIO * alpha`` under the per-stage bound when none was given; None: not bounded).
        cost: the chosen vector's cost (sum over stages of its cost times the units reaching it).
        n_tasks, n_trials, max_trials_per_task: the testing units (tasks) and the trials they hold, all used.
        n_order_tasks: the tasks that ordered the grid (``"split_fixed_sequence"``; not in the test).
        bound: ``"per_stage"`` or ``"pooled"``.
        level: the level the vector's p-value was compared with (``delta`` in a sequence; Holm's and
            Bonferroni's ``delta / m`` for the smallest p-value).
        order: where a sequence's order came from (``"ordering data"``, ``"label-free"``, ``"split"``,
            ``"fail-first"``; empty for Holm and Bonferroni).
        stages: per stage of the vector, its counts and tests: ``decided``, ``errors``, ``failed_decided``,
            ``false_passes``, ``passes``, ``tested`` (it can decide), ``p_disagreement``, ``p_false_pass``
            (None when not tested: a stage that never passes has no false pass), on the testing tasks' trials.
        false_pass_rate: the false-pass rate ``max_false_pass`` bounds: ``"among_passes"`` (false passes over the
            passes) or ``"among_failed"`` (over the failed units decided); `false_pass` above is always the latter.
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
    bound: str = "pooled"
    level: float = 0.0
    order: str = ""
    stages: tuple[dict[str, Any], ...] = ()
    false_pass_rate: str = DEFAULT_FALSE_PASS

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (infinite thresholds as null)."""
        out = dict(self.__dict__)
        out["thresholds"] = [[None if not math.isfinite(t) else t for t in pair] for pair in self.thresholds]
        out["stages"] = [dict(row) for row in self.stages]
        return out


def _p_values(kind: str, loss: _Bools, base: _Bools, level: float, units: "_Units", delta: float) -> _Floats:
    """One p-value per vector (row) of ``H0: E[loss] > level * E[base]`` over the units, where `loss` implies
    `base` per trial (a wrong decision is a decision). ``"binomial"``: the exact test of the weighted counts (one
    trial per task); ``"hoeffding_bentkus"``: on the task means of ``loss - level * base``, shifted into [0, 1];
    ``"betting"``: `betting_ratio_p_value` on the task means of `loss` and `base` (stakes free of `level`)."""
    if kind == "binomial":
        item_w = units.task_weight[units.index]
        k, n = loss.astype(np.float64) @ item_w, base.astype(np.float64) @ item_w
        return np.atleast_1d(binomial_p_value(k, n, level))
    w, b = units.means(loss.astype(np.float64)), units.means(base.astype(np.float64))
    if kind == "hoeffding_bentkus":
        x = np.clip(w - level * b + level, 0, 1)
        n = np.full(x.shape[0], float(x.shape[1]))
        return np.atleast_1d(hoeffding_bentkus_p_value(np.clip(x.sum(axis=1), 0, n), n, level))
    if kind == "betting":
        if not w.shape[1]:
            return np.ones(w.shape[0])
        return np.atleast_1d(betting_ratio_p_value(w, b, level, tune_delta=delta))
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



def _tally(decided: _Bools, passed: _Bools, stage: NDArray[np.int8], y: _Bools, units: _Units, grid: _Floats,
           alpha: float, beta: float | None, kind: str, delta: float, bound: str,
           false_pass: str = DEFAULT_FALSE_PASS) -> dict[str, Any]:
    """Per vector: decided trials, disagreements, decided failed, false passes (weighted by their tasks'
    multiplicity), and the p-value of its null: pooled, ``D > alpha`` (or ``F > beta``: the larger,
    intersection-union); per stage, the largest over the stages that can decide of the p-values of ``D_k >
    alpha`` and (for a stage that can pass) ``F_k > beta``, F over the failed items decided or over the passes
    (`false_pass`). Per stage also the counts and the two p-values
    (``"stage_*"``, shape ``(stages, vectors)``; p NaN where not tested)."""
    item_w = units.task_weight[units.index]
    wrong, fails = decided & (passed != y), decided & ~y
    fp = fails & passed
    tally: dict[str, Any] = {"n": decided.astype(np.float64) @ item_w, "errors": wrong.astype(np.float64) @ item_w,
                             "failed": fails.astype(np.float64) @ item_w, "fp": fp.astype(np.float64) @ item_w}
    k_stages = grid.shape[1]
    shape = (k_stages, decided.shape[0])
    stage_n, stage_err, stage_failed = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    stage_fp, stage_passes = np.zeros(shape), np.zeros(shape)
    p_d, p_f = np.full(shape, np.nan), np.full(shape, np.nan)
    for k in range(k_stages):
        mine = stage == k
        mine_wrong, mine_fails = mine & wrong, mine & fails
        mine_fp = mine_fails & passed
        stage_n[k], stage_err[k] = mine.astype(np.float64) @ item_w, mine_wrong.astype(np.float64) @ item_w
        stage_failed[k], stage_fp[k] = mine_fails.astype(np.float64) @ item_w, mine_fp.astype(np.float64) @ item_w
        stage_passes[k] = (mine & passed).astype(np.float64) @ item_w
        if bound != "per_stage":
            continue
        active = np.isfinite(grid[:, k, 0]) | np.isfinite(grid[:, k, 1])
        if active.any():
            p_d[k, active] = _p_values(kind, mine_wrong[active], mine[active], alpha, units, delta)
        can_pass = np.isfinite(grid[:, k, 0])
        if beta is not None and can_pass.any():
            base = mine_fails if false_pass == "among_failed" else mine & passed
            p_f[k, can_pass] = _p_values(kind, mine_fp[can_pass], base[can_pass], beta, units, delta)
    tally.update(stage_n=stage_n, stage_errors=stage_err, stage_failed=stage_failed, stage_fp=stage_fp,
                 stage_passes=stage_passes)
    if bound == "per_stage":
        both = np.concatenate([p_d, p_f])
        tested = ~np.isnan(both)
        p = np.where(tested.any(axis=0), np.where(tested, both, 0.0).max(axis=0), 1.0)
    else:
        p = _p_values(kind, wrong, decided, alpha, units, delta)
        if beta is not None:
            pf = _p_values(kind, fp, fails if false_pass == "among_failed" else decided & passed, beta, units, delta)
            p = np.maximum(p, pf)
            p_f[:] = np.nan
        p_d[:] = np.nan
    tally.update(p=np.minimum(p, 1.0), stage_p_d=p_d, stage_p_f=p_f)
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
                    p_values: str = "auto", order_fraction: float = 0.2, seed: int = 0,
                    bound: str = DEFAULT_BOUND, order_confidences: ArrayLike | None = None,
                    order_labels: ArrayLike | None = None, order_groups: ArrayLike | None = None,
                    false_pass: str = DEFAULT_FALSE_PASS) -> GridResult:
    """Certify a threshold vector of a cascade by Learn-then-Test over the grid (module docstring).

    Args:
        confidences: shape ``(n_stages, n)`` (or one row for one stage): each stage's confidence that the
            item passed, NaN where the stage cannot say (an unparseable answer: it hands the item on).
        labels: 0/1 per item (1 = passed).
        alpha: the bound on disagreement among decided items (per stage, or pooled: `bound`).
        delta: the family-wise error level (the guarantee holds with probability >= 1 - delta).
        max_false_pass: beta, the bound on the false-pass rate (`false_pass`). None: under the per-stage bound
            ``FALSE_PASS_RATIOS[false_pass] * alpha`` (alpha / 2 over the failed items, alpha over the passes; so
            that beta moves with alpha and the certified set stays monotone in alpha); under the pooled bound, not
            bounded.
        method: ``"ordered_sequence"`` (the default, `DEFAULT_METHOD`): every calibration task tests a fixed
            sequence at level `delta` each, stopping at the first non-rejection, in the order of `sequence_order`
            (from `order_confidences` / `order_labels` when given, else label-free): it does not depend on alpha,
            beta or the calibration labels. ``"holm"`` or ``"bonferroni"`` over the whole grid.
            ``"split_fixed_sequence"`` (the former default, kept for comparison): a random `order_fraction` of the
            tasks orders the grid by the p-values there (computed at alpha: not monotone in alpha) and the other
            tasks test the sequence. ``"fail_first_sequence"``: a fixed sequence ordered before the data, fail-only
            vectors first, by label-free decided share (measured: it certifies next to nothing).
        groups: each item's task (any hashable key); None: every item is its own task. Every trial is used;
            the task is the unit (its trials' losses are averaged, module docstring).
        levels: per stage, the values its confidence can take (None: continuous), `stage_pairs`.
        pass_levels, fail_levels: the thresholds of a continuous confidence (fixed in advance).
        weights: integer multiplicity per item (a resample of tasks: equal within a task), default 1 each.
        stage_costs: cost of running each stage on one item (default 1 each), to break coverage ties.
        p_values: ``"auto"`` (``"binomial"`` when every task has one trial, else ``"betting"``) or one of those.
        order_fraction, seed: the ordering part of ``"split_fixed_sequence"`` and its random draw; the seed
            also fixes the order in which the betting p-value reads the tasks.
        bound: ``"per_stage"`` (default, `DEFAULT_BOUND`): every stage the vector lets decide has ``D_k <= alpha``
            and, if it can pass, ``F_k <= beta``; ``"pooled"``: D (and F when `max_false_pass` is given) over
            everything the cascade decides.
        order_confidences, order_labels: the ordering data of ``"ordered_sequence"`` (shape ``(stages, n_order)``
            and n_order labels), apart from the calibration items (e.g. the fit split's out-of-fold
            confidences); a row all NaN: that stage has none (it gets a label-free position).
        order_groups: each ordering item's task (None: each its own task), read as the calibration's tasks.
        false_pass: the false-pass rate beta bounds (`FALSE_PASS_RATES`): ``"among_passes"``, the share of a stage's
            passes (pooled: of the cascade's) that are failures, or ``"among_failed"``, the passes among the failed
            items it decides (module docstring: which is the default and why).

    Returns:
        A `GridResult` (its counts are those of the testing tasks' trials).
    """
    alpha, delta, beta = _checked_options(alpha, delta, max_false_pass, method, bound, false_pass,
                                          order_confidences is not None)
    conf, y, units, costs = _checked_inputs(confidences, labels, weights, groups, stage_costs, seed)
    kind = _resolved_p_values(p_values, units)
    stages: Sequence[Sequence[float] | None] = levels if levels is not None else [None] * conf.shape[0]
    if len(stages) != conf.shape[0]:
        raise ValueError(f"levels needs one entry per stage ({conf.shape[0]}), got {len(stages)}")
    grid = threshold_grid(stages, pass_levels, fail_levels)
    decided, passed, stage = cascade_outcomes(conf, grid)
    order, units, order_units, source = _sequence(method, grid, stages, (decided, passed, stage, y), units, (
        alpha, beta, delta), kind, (bound, false_pass), order_fraction, seed,
        (order_confidences, order_labels, order_groups))
    tally = _tally(decided, passed, stage, y, units, grid, alpha, beta, kind, delta, bound, false_pass)
    p = tally["p"]
    rejected, stop, stop_level = _rejected(method, p, tally["n"], order if method in SEQUENCE_METHODS else None,
                                           delta)
    item_w = units.task_weight[units.index]
    reaches = [(stage == -1) | (stage >= k) for k in range(conf.shape[0])]
    cost = sum(costs[k] * (reaches[k].astype(np.float64) @ item_w) for k in range(conf.shape[0]))
    used = units.task_weight > 0
    return _chosen(grid, tally, p, rejected, stop, cost, float(item_w.sum()) or 1.0,
                   dict(method=method, p_values=kind, alpha=alpha, delta=delta, max_false_pass=beta,
                        n_tasks=int(units.task_weight.sum()), n_trials=int(item_w.sum()),
                        max_trials_per_task=int(units.trials[used].max()) if used.any() else 0,
                        n_order_tasks=order_units, bound=bound, order=source, false_pass_rate=false_pass), stop_level)


def _checked_options(alpha: float, delta: float, max_false_pass: float | None, method: str, bound: str,
                     false_pass: str, ordered: bool) -> tuple[float, float, float | None]:
    """`learn_then_test`'s rates and names checked (a `ValueError` naming the bad one): ``(alpha, delta, beta)``,
    beta being `max_false_pass` or, when None, its default under the per-stage bound (None under the pooled one).
    `ordered`: ordering data was given (only the ``"ordered_sequence"`` method reads it)."""
    alpha, delta = check_rate("alpha", alpha), check_rate("delta", delta)
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")
    if max_false_pass is not None:
        beta: float | None = check_rate("max_false_pass", max_false_pass)
    else:
        beta = FALSE_PASS_RATIOS.get(false_pass, FALSE_PASS_RATIO) * alpha if bound == "per_stage" else None
    if method not in LTT_METHODS:
        raise ValueError(f"method must be one of {LTT_METHODS}, got {method!r}")
    if false_pass not in FALSE_PASS_RATES:
        raise ValueError(f"false_pass must be one of {FALSE_PASS_RATES}, got {false_pass!r}")
    if ordered and method != "ordered_sequence":
        raise ValueError(f"order_confidences orders the 'ordered_sequence' method, not {method!r}")
    return alpha, delta, beta


def _sequence(method: str, grid: _Floats, stages: Sequence[Sequence[float] | None],
              outcomes: tuple[_Bools, _Bools, NDArray[np.int8], _Bools], units: _Units,
              rates: tuple[float, float | None, float], kind: str, bounds: tuple[str, str], order_fraction: float,
              seed: int,
              ordering: tuple[ArrayLike | None, ArrayLike | None, ArrayLike | None]
              ) -> tuple[NDArray[np.int64], _Units, int, str]:
    """A sequence method's order, the units that test it, the ordering units taken from them and the order's
    source (Holm and Bonferroni: an empty order)."""
    (decided, passed, stage, y), (alpha, beta, delta), (bound, false_pass) = outcomes, rates, bounds
    if method == "ordered_sequence":
        order, source = sequence_order(grid, stages, ordering[0], ordering[1],
                                       n_expected=float(units.task_weight[units.index].sum()), delta=delta,
                                       order_groups=ordering[2], n_tasks=int(units.task_weight.sum()),
                                       p_values=kind, bound=bound, test_false_pass=beta is not None,
                                       false_pass=false_pass)
        return order, units, 0, source
    if method == "split_fixed_sequence":
        w_order, w_test = _split_tasks(units.task_weight, check_rate("order_fraction", order_fraction), seed)
        first = _tally(decided, passed, stage, y, units.restricted(w_order), grid, alpha, beta, kind, delta, bound,
                       false_pass)
        order = np.lexsort((-first["n"], -_gap(first, alpha, beta), first["p"]))  # surest first, then most evidence
        return order, units.restricted(w_test), int(w_order.sum()), "split"
    if method == "fail_first_sequence":
        share = prior_share(grid, stages)
        fail_only = np.all(~np.isfinite(grid[:, :, 0]), axis=1)
        order = np.lexsort((share, ~fail_only))
        return order[share[order] > 0], units, 0, "fail-first"
    return np.zeros(0, dtype=np.int64), units, 0, ""


def _rejected(method: str, p: _Floats, n_decided: _Floats, order: NDArray[np.int64] | None,
              delta: float) -> tuple[_Bools, int, float]:
    """The rejected vectors, the vector where the procedure stopped (-1: none) and the level it was compared with."""
    if order is not None:
        rejected = np.zeros(p.size, dtype=bool)
        in_order = fwer_reject(p[order], delta, "fixed_sequence")
        rejected[order[in_order]] = True
        return rejected, int(order[np.flatnonzero(~in_order)[0]]) if (~in_order).any() else -1, delta
    return fwer_reject(p, delta, method), int(np.lexsort((-n_decided, p))[0]), delta / max(p.size, 1)


def _chosen(grid: _Floats, tally: dict[str, Any], p: _Floats, rejected: _Bools, stop: int, cost: _Floats,
            total: float, settings: dict[str, Any], stop_level: float) -> GridResult:
    """The `GridResult` of the rejected vector with most coverage, then least cost, then least disagreement
    (or, when none is rejected, of the vector `stop` where the procedure stopped)."""
    n_dec, errors, failed, fps = tally["n"], tally["errors"], tally["failed"], tally["fp"]
    if rejected.any():
        candidates = np.flatnonzero(rejected)
        best = int(candidates[np.lexsort((errors[candidates] / np.maximum(n_dec[candidates], 1), cost[candidates],
                                          -n_dec[candidates]))[0]])
        level = stop_level if settings["method"] in SEQUENCE_METHODS else float(settings["delta"])
    else:
        best = stop if stop >= 0 else int(np.lexsort((-n_dec, p))[0])
        level = stop_level
    rows = []
    for k in range(grid.shape[1]):
        p_d, p_f = tally["stage_p_d"][k, best], tally["stage_p_f"][k, best]
        rows.append({"decided": int(round(tally["stage_n"][k, best])),
                     "errors": int(round(tally["stage_errors"][k, best])),
                     "failed_decided": int(round(tally["stage_failed"][k, best])),
                     "false_passes": int(round(tally["stage_fp"][k, best])),
                     "passes": int(round(tally["stage_passes"][k, best])),
                     "tested": bool(np.isfinite(grid[best, k]).any()),
                     "p_disagreement": None if np.isnan(p_d) else float(p_d),
                     "p_false_pass": None if np.isnan(p_f) else float(p_f)})
    return GridResult(
        certified=bool(rejected.any()),
        thresholds=tuple((float(a), float(b)) for a, b in grid[best]),
        coverage=float(n_dec[best] / total), n_decided=int(round(n_dec[best])), errors=int(round(errors[best])),
        disagreement=float(errors[best] / n_dec[best]) if n_dec[best] else None,
        false_pass=float(fps[best] / failed[best]) if failed[best] else None,
        n_failed_decided=int(round(failed[best])), false_passes=int(round(fps[best])),
        p_value=float(p[best]), n_tested=int(grid.shape[0]), n_rejected=int(rejected.sum()),
        cost=float(cost[best]), level=float(level), stages=tuple(rows), **settings)
