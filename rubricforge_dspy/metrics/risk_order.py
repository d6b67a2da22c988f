"""The order of the ``"ordered_sequence"`` (`sequence_order`): a function of the grid and of ordering data apart
from the calibration, never of alpha, beta or a calibration label (`metrics.risk_control`'s module docstring:
why that makes the certified set monotone in alpha). Pure statistics: numpy and scipy only."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from rubricforge_dspy.metrics.bounds import betting_ratio_stakes, group_index
from rubricforge_dspy.metrics.risk_grid import cascade_outcomes, prior_share
from rubricforge_dspy.metrics.risk_methods import (
    DEFAULT_FALSE_PASS,
    FALSE_PASS_RATES,
    FALSE_PASS_RATIO,
    FALSE_PASS_RATIOS,
)

__all__ = ["sequence_order"]

_Floats = NDArray[np.float64]
_Bools = NDArray[np.bool_]
PRIOR_DOUBT = 0.05  # the label-free order's least chance that a stage's surest verdict is wrong
NEVER = 2.0  # the key of a vector whose test would not reject at any level below 1
_BISECTIONS = 24  # the betting key's precision: 2 ** -24 in the level
_CACHED = 64  # orders kept (a pure function of its inputs: a benchmark asks for the same order per draw and alpha)
_ORDERS: dict[str, tuple[NDArray[np.int64], str]] = {}


def _stage_prior_risk(grid: _Floats, k: int, levels: Sequence[float] | None,
                      false_pass: str = "among_failed") -> tuple[_Floats, ...]:
    """Label-free guesses, per vector, of stage k's disagreement, false-pass rate (`false_pass`: among the failed
    items it decides, or among its passes), decided share and the share its false-pass rate counts over (of the
    items reaching it), taking its confidence as calibrated (an item of confidence c passes with
    probability c, never surer than ``PRIOR_DOUBT``) and uniform on its levels (or on [0, 1]); the rates are 0
    where it decides nothing."""
    values = (np.asarray(sorted({float(v) for v in levels})) if levels is not None
              else (np.arange(200) + 0.5) / 200.0)
    tp, tf = grid[:, k, 0][:, None], grid[:, k, 1][:, None]
    says_pass, says_fail = values[None, :] >= tp, values[None, :] <= tf
    decided = says_pass | says_fail
    # never surer than PRIOR_DOUBT: a stage sure of a narrow extreme would otherwise look risk-free and go first
    chance = np.clip(values, PRIOR_DOUBT, 1.0 - PRIOR_DOUBT)
    wrong = np.where(says_pass, 1.0 - chance, 0.0) + np.where(says_fail & ~says_pass, chance, 0.0)
    fails = np.where(decided, 1.0 - chance, 0.0) if false_pass == "among_failed" else says_pass.astype(np.float64)
    share, fail_share = decided.mean(axis=1), fails.mean(axis=1)
    d = wrong.mean(axis=1) / np.maximum(share, 1e-12)
    f = np.where(says_pass, 1.0 - chance, 0.0).mean(axis=1) / np.maximum(fail_share, 1e-12)
    return d, f, share, fail_share


def _upper(k: _Floats, n: _Floats, scale: float, delta: float) -> _Floats:
    """One-sided ``1 - delta`` Clopper-Pearson upper bounds of ``k / n`` as if ``scale`` times as many items had
    been seen at the same rate (fractional counts, the Beta form); 1 where nothing was seen."""
    a, b = k * scale + 1.0, (n - k) * scale
    out = np.ones_like(n, dtype=np.float64)
    ok = (n > 0) & (b > 0)
    out[ok] = stats.beta.ppf(1.0 - delta, a[ok], b[ok])
    return out


def _pseudo_tasks(n_order_tasks: int, n_tasks: int) -> NDArray[np.int64]:
    """The ordering tasks a pseudo-calibration of `n_tasks` tasks reads, in order: a fixed permutation (seed 0, free
    of their values), repeated cyclically when the calibration is larger, evenly thinned when it is smaller."""
    perm = np.random.default_rng(0).permutation(n_order_tasks)
    if n_tasks >= n_order_tasks:
        return perm[np.arange(n_tasks) % n_order_tasks]
    return perm[(np.arange(n_tasks) * n_order_tasks) // n_tasks]


def _binomial_level(k: _Floats, n: _Floats, delta: float) -> _Floats:
    """Per row, the smallest level ``a`` with ``P(Bin(n, a) <= k) <= delta`` (the Clopper-Pearson upper bound; the
    exact test's p-value is non-increasing in ``a``); `NEVER` where no ``a < 1`` rejects (nothing decided)."""
    k = np.floor(np.minimum(k, n) + 1e-9)
    out = np.full(k.shape, NEVER)
    ok = (n > 0) & (k < n)
    out[ok] = stats.beta.ppf(1.0 - delta, k[ok] + 1.0, n[ok] - k[ok])
    return out


def _betting_level(w: _Floats, b: _Floats, delta: float) -> _Floats:
    """Per row (task means ``W <= B``, rows: vectors), the smallest level at which `betting_ratio_p_value` (its
    stakes, the same at every level) would reject at `delta`, by bisection (the capital grows with the level);
    `NEVER` where it would not at level 1."""
    stakes = betting_ratio_stakes(w, b, tune_delta=delta)
    bar = np.log(1.0 / delta)

    def rejects(level: _Floats) -> _Bools:
        log_k = np.cumsum(np.log1p(stakes * (level[:, None] * b - w)), axis=1)
        return np.asarray(log_k.max(axis=1, initial=0.0) >= bar)

    lo, hi = np.zeros(w.shape[0]), np.ones(w.shape[0])
    ever = rejects(hi)
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2.0
        yes = rejects(mid)
        hi, lo = np.where(yes, mid, hi), np.where(yes, lo, mid)
    return np.where(ever, hi, NEVER)


def _level_needed(loss: _Bools, base: _Bools, tasks: NDArray[np.int64], n_tasks: int, picks: NDArray[np.int64],
                  kind: str, delta: float) -> _Floats:
    """Per vector, the smallest level at which the calibration's p-value (`kind`) of ``E[loss] > level E[base]``
    would reject at `delta` on the pseudo-calibration: the ordering tasks `picks` (task means)."""
    if not loss.shape[0]:
        return np.zeros(0)
    # vectors that do the same on the ordering items share their key: compute it once per distinct row
    packed = np.ascontiguousarray(np.packbits(np.concatenate([loss, base], axis=1), axis=1))
    _, first, inverse = np.unique(packed.view(np.dtype((np.void, packed.shape[1]))).ravel(), return_index=True,
                                  return_inverse=True)
    if first.size < loss.shape[0]:
        return _level_needed(loss[first], base[first], tasks, n_tasks, picks, kind, delta)[inverse.reshape(-1)]
    # task means as one matrix product (each ordering task has a trial: group_index numbers the tasks seen)
    mean_of = np.zeros((tasks.size, n_tasks))
    mean_of[np.arange(tasks.size), tasks] = 1.0
    mean_of /= mean_of.sum(axis=0)
    w, b = (loss.astype(np.float64) @ mean_of)[:, picks], (base.astype(np.float64) @ mean_of)[:, picks]
    if kind == "binomial":
        return _binomial_level(w.sum(axis=1), b.sum(axis=1), delta)
    return _betting_level(np.minimum(w, b), b, delta)


class _DataLevels:
    """The ordering data read as the calibration's test will read its tasks (`sequence_order`)."""

    def __init__(self, grid: _Floats, decided: _Bools, passed: _Bools, y: _Bools, tasks: NDArray[np.int64],
                 n_order_tasks: int, p_values: str, n_tasks: int | None, delta: float) -> None:
        trials = np.bincount(tasks, minlength=n_order_tasks)
        kind = ("binomial" if bool(np.all(trials <= 1)) else "betting") if p_values == "auto" else p_values
        self.kind = "binomial" if kind == "binomial" else "betting"  # hoeffding_bentkus is ordered as betting
        self.picks = _pseudo_tasks(n_order_tasks, int(n_tasks) if n_tasks else n_order_tasks)
        self.tasks, self.n_order_tasks, self.delta, self.rows = tasks, n_order_tasks, delta, grid.shape[0]
        self.wrong, self.fails, self.passed = decided & (passed != y), decided & ~y, passed

    def _level(self, loss: _Bools, base: _Bools, rows: _Bools, ratio: float = 1.0) -> _Floats:
        out = np.zeros(self.rows)
        out[rows] = _level_needed(loss[rows], base[rows], self.tasks, self.n_order_tasks, self.picks, self.kind,
                                  self.delta) / ratio
        return out

    def need(self, mine: _Bools, decides: _Bools, passes: _Bools, false_pass: str | None,
             ratio: float = FALSE_PASS_RATIO) -> _Floats:
        """Per vector, the alpha its test of the items in `mine` would need (D at alpha, and where `false_pass` is
        not None and the vector `passes`, its false-pass rate, `false_pass` as in `learn_then_test`, at ``ratio *
        alpha``); 0 where it does not decide."""
        out = self._level(mine & self.wrong, mine, decides)
        if false_pass is not None:
            base = mine & (self.fails if false_pass == "among_failed" else self.passed)
            out = np.maximum(out, self._level(base & self.passed & self.fails, base, passes, ratio))
        return out


def _ordering_data(order_confidences: ArrayLike, order_labels: ArrayLike | None, order_groups: ArrayLike | None,
                   k_stages: int) -> tuple[_Floats, _Bools, NDArray[np.int64], int]:
    conf = np.atleast_2d(np.asarray(order_confidences, dtype=np.float64))
    y = np.asarray(order_labels if order_labels is not None else [], dtype=np.float64).astype(bool)
    if conf.shape != (k_stages, y.size) or y.size == 0:
        raise ValueError(f"order_confidences needs shape (stages={k_stages}, n) and order_labels n > 0 labels, "
                         f"got {conf.shape} and {y.size}")
    tasks, n_order_tasks = group_index(order_groups, y.size)
    return conf, y, tasks, n_order_tasks


def sequence_order(grid: _Floats, levels: Sequence[Sequence[float] | None] | None = None,
                   order_confidences: ArrayLike | None = None, order_labels: ArrayLike | None = None, *,
                   n_expected: float | None = None, delta: float = 0.1, order_groups: ArrayLike | None = None,
                   n_tasks: int | None = None, p_values: str = "auto", bound: str = "per_stage",
                   test_false_pass: bool = True, false_pass: str = DEFAULT_FALSE_PASS,
                   false_pass_ratio: float | None = None) -> tuple[NDArray[np.int64], str]:
    """The order of an ``"ordered_sequence"``: the vectors that can decide something, by the level (alpha) each
    would need, ascending, then by coverage, descending, then by their label-free decided share (`prior_share`),
    descending: of vectors that act alike on the ordering data, the wider goes first, and with ordering data the
    later ones (the same decision and verdict on every ordering item) are left out of the sequence. Nothing here
    depends on alpha, beta or the calibration labels, so the sequence is fixed before the calibration labels are
    seen and the same at every alpha (which makes the certified set monotone in alpha, `metrics.risk_control`).

    The level a vector would need:

    - with ordering data (`order_confidences`, `order_labels`, `order_groups`: labeled items apart from the
      calibration, e.g. the fit split's out-of-fold confidences), the smallest alpha at which the p-value the
      calibration will use (`p_values`: the exact binomial on one-trial tasks, else the betting p-value of the task
      means; ``"hoeffding_bentkus"`` is ordered as betting) would reject its null at `delta` (per stage, or pooled:
      `bound`; the false-pass null at ``false_pass_ratio * alpha`` where `test_false_pass`) on a
      pseudo-calibration: the ordering tasks' task means read as `n_tasks` tasks (a fixed permutation, tiled or
      thinned, `_pseudo_tasks`). A test that needs evidence from many tasks (a task-mean betting test where few
      tasks' trials are decided) gets the level it really needs, not a rate's bound at a trial count;
    - for a stage without ordering data (a row all NaN: an LLM stage not run on them), and for every stage when
      none is given, label-free guesses (`_stage_prior_risk`: a calibrated confidence, uniform on its levels,
      stages independent): their one-sided ``1 - delta`` Clopper-Pearson upper bounds at the sizes they would
      decide out of `n_expected` items.

    Args:
        grid: the threshold vectors (`threshold_grid`).
        levels: per stage, its confidence levels (None: continuous).
        order_confidences: shape ``(stages, n_order)``, NaN where a stage cannot say; None: label-free order.
        order_labels: 0/1 per ordering item.
        n_expected: the calibration's size in items (label-free sizes; default 100).
        delta: the level of the tests (the sequence's).
        order_groups: each ordering item's task (None: each item its own task).
        n_tasks: the calibration's number of tasks (a size, not a label; default the ordering tasks' number).
        p_values: the calibration's p-value kind (``"auto"``: binomial when every ordering task has one trial).
        bound: ``"per_stage"`` or ``"pooled"``, as the calibration tests.
        test_false_pass: whether the calibration tests the false-pass null.
        false_pass: which false-pass rate it tests (`learn_then_test`'s `false_pass`: ``"among_passes"`` or
            ``"among_failed"``).
        false_pass_ratio: the calibration's beta as a share of alpha (None: the default of the rate,
            ``FALSE_PASS_RATIOS[false_pass]``; a vector's false-pass test needs level ``beta``, so the alpha it needs
            is that level over this ratio). A constant, never ``max_false_pass / alpha``: the order is free of alpha.

    Returns:
        ``(order, source)``: vector indices in testing order, and ``"ordering data"`` or ``"label-free"``.
    """
    key = _cache_key(grid, levels, order_confidences, order_labels, order_groups,
                     (n_expected, delta, n_tasks, p_values, bound, test_false_pass, false_pass, false_pass_ratio))
    if key in _ORDERS:
        order, source = _ORDERS[key]
        return order.copy(), source
    if false_pass not in FALSE_PASS_RATES:
        raise ValueError(f"false_pass must be one of {FALSE_PASS_RATES}, got {false_pass!r}")
    if false_pass_ratio is None:
        false_pass_ratio = FALSE_PASS_RATIOS[false_pass]
    if not 0.0 < false_pass_ratio:
        raise ValueError(f"false_pass_ratio must be positive, got {false_pass_ratio!r}")
    result = _sequence_order(grid, levels, order_confidences, order_labels, n_expected, delta, order_groups, n_tasks,
                             p_values, bound, false_pass if test_false_pass else None, false_pass_ratio)
    if len(_ORDERS) >= _CACHED:
        _ORDERS.pop(next(iter(_ORDERS)))
    _ORDERS[key] = (result[0].copy(), result[1])
    return result


def _cache_key(grid: _Floats, levels: object, conf: ArrayLike | None, labels: ArrayLike | None,
               groups: ArrayLike | None, settings: tuple[object, ...]) -> str:
    """A digest of everything the order depends on (the same inputs give the same order: a pure function)."""
    digest = hashlib.sha256(np.ascontiguousarray(grid).tobytes())
    for part in (conf, labels):
        data = None if part is None else np.ascontiguousarray(np.asarray(part, dtype=np.float64))
        digest.update(b"|" + (b"-" if data is None else repr(data.shape).encode() + data.tobytes()))
    digest.update(b"|" + (b"-" if groups is None else "\x1f".join(map(str, np.asarray(groups).tolist())).encode()))
    digest.update(repr((levels, settings)).encode())
    return digest.hexdigest()


def _sequence_order(grid: _Floats, levels: Sequence[Sequence[float] | None] | None,
                    order_confidences: ArrayLike | None, order_labels: ArrayLike | None, n_expected: float | None,
                    delta: float, order_groups: ArrayLike | None, n_tasks: int | None, p_values: str, bound: str,
                    false_pass: str | None, ratio: float) -> tuple[NDArray[np.int64], str]:
    k_stages = grid.shape[1]
    stages: Sequence[Sequence[float] | None] = levels if levels is not None else [None] * k_stages
    can_decide = np.isfinite(grid[:, :, 0]) | np.isfinite(grid[:, :, 1])
    can_pass = np.isfinite(grid[:, :, 0])
    need = np.zeros(grid.shape[0])
    reach = np.ones(grid.shape[0])  # label-free: the share reaching stage k (stages taken as independent)
    has_data = np.zeros(k_stages, dtype=bool)
    if order_confidences is not None:
        conf, y, tasks, n_order_tasks = _ordering_data(order_confidences, order_labels, order_groups, k_stages)
        has_data = ~np.all(np.isnan(conf), axis=1)
        decided, passed, stage = cascade_outcomes(conf, grid)
        reach = 1.0 - decided.mean(axis=1)
        levels_of = _DataLevels(grid, decided, passed, y, tasks, n_order_tasks, p_values, n_tasks, delta)
        if bound == "pooled":
            need = levels_of.need(decided, np.asarray(can_decide.any(axis=1)), np.asarray(can_pass.any(axis=1)),
                                  false_pass, ratio)
    for k in range(k_stages):
        if has_data[k]:
            if bound == "pooled":
                continue
            risk = levels_of.need(stage == k, can_decide[:, k], can_pass[:, k], false_pass, ratio)
        else:
            d, f, share, fail_share = _stage_prior_risk(grid, k, stages[k], false_pass or "among_failed")
            size = float(n_expected) if n_expected else 100.0
            # label-free, `reach` is the share the stages before leave; with ordering data, the share undecided there
            n_k, failed_k = size * reach * share, size * reach * fail_share
            reach = reach * (1.0 - share)
            up_d, up_f = _upper(d * n_k, n_k, 1.0, delta), _upper(f * failed_k, failed_k, 1.0, delta)
            risk = np.maximum(up_d, np.where(can_pass[:, k], up_f, 0.0) / ratio)
        need = np.maximum(need, np.where(can_decide[:, k], risk, 0.0))
    source = "label-free" if order_confidences is None else "ordering data"
    if order_confidences is None:
        return _sorted(grid, stages, need, 1.0 - reach, can_decide, None), source
    return _sorted(grid, stages, need, 1.0 - reach, can_decide, (decided, passed, stage, has_data)), source


def _sorted(grid: _Floats, stages: Sequence[Sequence[float] | None], need: _Floats, coverage: _Floats,
            can_decide: _Bools, outcomes: tuple[_Bools, _Bools, NDArray[np.int8], _Bools] | None) -> NDArray[np.int64]:
    """The vectors that can decide, by `need` ascending, coverage and label-free share descending; with ordering
    data (`outcomes`) only the first of the vectors that act alike on it."""
    candidates = np.flatnonzero(can_decide.any(axis=1))
    # ties (vectors that act alike on the ordering data): the wider decision region first, by its label-free share
    wide = prior_share(grid, stages)[candidates]
    order = candidates[np.lexsort((candidates, -wide, -coverage[candidates], need[candidates]))]
    if outcomes is not None:
        decided, passed, stage, has_data = outcomes
        # a vector that does on every ordering item what one before it does adds no expected evidence, and, narrower
        # where no ordering item falls, may decide nothing in the calibration and stop the sequence: keep the first
        signature = np.where(decided, stage.astype(np.float64) * 2 + passed, -1.0)[order]
        missing = np.flatnonzero(~has_data)
        if missing.size:
            signature = np.concatenate([signature, np.nan_to_num(grid[order][:, missing, :].reshape(order.size, -1),
                                                                 posinf=9.0, neginf=-9.0)], axis=1)
        _, first = np.unique(signature, axis=0, return_index=True)
        order = order[np.sort(first)]
    return order.astype(np.int64)
