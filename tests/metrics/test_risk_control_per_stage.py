"""The third pass of the certified cascade's statistics: every stage bounded (disagreement and false passes), an
order that never depends on alpha (from ordering data apart from the calibration, or label-free), and a
certificate that is never lost at a larger alpha. Guarantees are checked by simulation on a population whose
per-stage rates are computed exactly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from rubricforge_dspy.metrics.risk_control import (
    DEFAULT_FALSE_PASS,
    FALSE_PASS_RATIO,
    betting_ratio_p_value,
    cascade_outcomes,
    learn_then_test,
    sequence_order,
    threshold_grid,
)

ALPHAS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4)
COARSE_PASS = (np.inf, 0.95, 0.8, 0.65, 0.5)
COARSE_FAIL = (-np.inf, 0.05, 0.2, 0.35)


def two_stage_population(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A floor sure of easy failures and a second stage that over-credits: among the failures that reach it
    with a high score, many are passed. Confidences rounded to 0.01 (a grid of levels)."""
    y = rng.random(n) < 0.45
    easy_fail = ~y & (rng.random(n) < 0.6)
    floor = np.where(easy_fail, rng.uniform(0.0, 0.05, n), np.where(y, rng.uniform(0.3, 1.0, n),
                                                                      rng.uniform(0.1, 0.7, n)))
    judge = np.where(y, rng.beta(6, 2, n), np.where(rng.random(n) < 0.35, rng.beta(6, 2, n), rng.beta(2, 6, n)))
    return np.round(np.stack([floor, judge]), 2), y.astype(int)


def stage_rates(conf: np.ndarray, y: np.ndarray, grid: np.ndarray,
                false_pass: str = "among_failed") -> tuple[np.ndarray, np.ndarray]:
    """Exact per-stage disagreement and false-pass rate (over the failed items decided, or over the passes:
    `false_pass`) of every vector on the population (0 where undefined)."""
    decided, passed, stage = cascade_outcomes(conf, grid)
    yb = y.astype(bool)
    d = np.zeros((grid.shape[1], grid.shape[0]))
    f = np.zeros_like(d)
    for k in range(grid.shape[1]):
        mine = stage == k
        n = mine.sum(axis=1)
        failed = (mine & (~yb if false_pass == "among_failed" else passed)).sum(axis=1)
        d[k] = np.where(n > 0, (mine & (passed != yb)).sum(axis=1) / np.maximum(n, 1), 0.0)
        f[k] = np.where(failed > 0, (mine & ~yb & passed).sum(axis=1) / np.maximum(failed, 1), 0.0)
    return d, f


def test_betting_ratio_p_value_is_valid_at_the_null_and_non_increasing_in_the_level():
    rng = np.random.default_rng(3)
    # at the null: W / B has mean exactly `level` among decided (B in {0, 1}, W | B=1 ~ Bernoulli(0.2))
    b = (rng.random((4000, 60)) < 0.6).astype(float)
    w = b * (rng.random(b.shape) < 0.2)
    p = betting_ratio_p_value(w, b, 0.2)
    assert np.mean(p <= 0.1) <= 0.1 + 3 * np.sqrt(0.09 / 4000)
    # monotone in the level, row by row, for data far from and near the null
    levels = np.linspace(0.02, 0.9, 25)
    ps = np.stack([betting_ratio_p_value(w[:200], b[:200], lv) for lv in levels])
    assert np.all(np.diff(ps, axis=0) <= 1e-12)
    assert ps[-1].max() < 0.01 and ps[0].min() > 0.5
    with pytest.raises(ValueError, match="losses <= base"):
        betting_ratio_p_value(np.array([0.5]), np.array([0.2]), 0.1)


@pytest.mark.parametrize(("false_pass", "beta", "draws"), [(DEFAULT_FALSE_PASS, None, 300), ("among_passes", 0.2, 150)])
def test_every_stage_is_bounded_by_simulation_and_the_pooled_bound_is_not(false_pass, beta, draws):
    """Calibration draws of 300 items from a population whose per-stage rates are known: the per-stage bound
    certifies vectors whose every stage has D_k <= alpha and F_k <= beta (F over the failed items decided: the
    default, or over the passes) in all but ~delta of the draws (and the pooled rates follow); the pooled bound lets
    the second stage over-credit (F_k > beta, over the failed items it decides) often."""
    rng = np.random.default_rng(11)
    conf, y = two_stage_population(20_000, rng)
    levels = [None, None]
    grid = threshold_grid(levels, COARSE_PASS, COARSE_FAIL)
    d, f = stage_rates(conf, y, grid, false_pass)
    index = {tuple(map(tuple, g)): i for i, g in enumerate(grid)}
    alpha, delta = 0.2, 0.1
    beta = FALSE_PASS_RATIO * alpha if beta is None else beta
    counts = {"per_stage": [0, 0], "pooled": [0, 0]}
    for draw in range(draws):
        pick = rng.integers(0, y.size, size=300)
        for bound, tally in counts.items():
            result = learn_then_test(conf[:, pick], y[pick], alpha, delta, beta if bound == "per_stage" else None,
                                     method="holm", bound=bound, seed=draw, pass_levels=COARSE_PASS,
                                     fail_levels=COARSE_FAIL, false_pass=false_pass)
            if result.certified:
                i = index[result.thresholds]
                tally[0] += 1
                tally[1] += bool(np.any(d[:, i] > alpha) or np.any(f[:, i] > beta))
    assert counts["per_stage"][0] >= draws // 3, counts
    low = stats.binomtest(counts["per_stage"][1], draws).proportion_ci(0.95, "exact").low
    assert low <= delta, counts
    if false_pass == "among_failed":
        assert counts["pooled"][1] > 3 * delta * draws, counts  # the pooled bound hides an over-crediting stage


def test_beta_defaults_to_a_share_of_alpha_only_under_the_per_stage_bound():
    rng = np.random.default_rng(5)
    conf, y = two_stage_population(400, rng)
    assert learn_then_test(conf, y, 0.2, 0.1, method="holm").max_false_pass == pytest.approx(FALSE_PASS_RATIO * 0.2)
    assert learn_then_test(conf, y, 0.2, 0.1, method="holm", bound="pooled").max_false_pass is None
    assert learn_then_test(conf, y, 0.2, 0.1, 0.07, method="holm").max_false_pass == 0.07
    # over the passes the default beta is alpha itself (FALSE_PASS_RATIOS), and the result says which rate it bounds
    over_passes = learn_then_test(conf, y, 0.2, 0.1, method="holm", false_pass="among_passes")
    assert over_passes.max_false_pass == pytest.approx(0.2) and over_passes.false_pass_rate == "among_passes"
    with pytest.raises(ValueError, match="bound must be one of"):
        learn_then_test(conf, y, 0.2, 0.1, bound="stagewise")


def test_the_order_is_fixed_before_the_calibration_and_all_calibration_tasks_are_tested():
    rng = np.random.default_rng(8)
    conf, y = two_stage_population(600, rng)
    order_conf, order_y = two_stage_population(300, rng)
    groups = np.repeat(np.arange(200), 3)
    result = learn_then_test(conf, y, 0.2, 0.1, groups=groups, order_confidences=order_conf,
                             order_labels=order_y)
    assert result.method == "ordered_sequence" and result.order == "ordering data"
    assert result.n_tasks == 200 and result.n_order_tasks == 0 and result.n_trials == 600
    grid = threshold_grid(2)
    first, _ = sequence_order(grid, None, order_conf, order_y, n_expected=600)
    # the order is a function of the ordering data only: the calibration labels do not move it
    assert np.array_equal(first, sequence_order(grid, None, order_conf, order_y, n_expected=600)[0])
    never = np.flatnonzero(~(np.isfinite(grid[:, :, 0]) | np.isfinite(grid[:, :, 1])).any(axis=1))
    assert not np.isin(never, first).any() and np.unique(first).size == first.size
    # a vector acting on every ordering item as one before it is left out: no two kept act alike
    decided, passed, stage = cascade_outcomes(order_conf, grid[first])
    acts = np.where(decided, stage * 2 + passed, -1)
    assert np.unique(acts, axis=0).shape[0] == first.size < grid.shape[0] - never.size
    free, source = sequence_order(grid, None, n_expected=600)
    assert source == "label-free" and free.size == grid.shape[0] - never.size
    with pytest.raises(ValueError, match="order_confidences orders"):
        learn_then_test(conf, y, 0.2, 0.1, method="holm", order_confidences=order_conf, order_labels=order_y)


def _random_problem(rng: np.random.Generator) -> dict:
    """A random one- or two-stage calibration set (tasks of 1-4 trials), with ordering data."""
    stages = int(rng.integers(1, 3))
    n_tasks = int(rng.integers(15, 120))
    trials = int(rng.integers(1, 5))
    n = n_tasks * trials
    skill = rng.uniform(0.5, 4.0, size=stages)

    def draw(m: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.random(m) < rng.uniform(0.2, 0.8)
        z = np.where(y, 1.0, -1.0)[None, :] * skill[:, None] + rng.normal(0, 1.5, (stages, m))
        return np.round(1 / (1 + np.exp(-z)), 2), y.astype(int)

    conf, y = draw(n)
    order_conf, order_y = draw(int(rng.integers(30, 200)))
    return {"confidences": conf, "labels": y, "groups": np.repeat(np.arange(n_tasks), trials),
            "order_confidences": order_conf, "order_labels": order_y}


@pytest.mark.parametrize("variant", [
    {"method": "ordered_sequence"},
    {"method": "ordered_sequence", "ordering": True},
    {"method": "ordered_sequence", "ordering": True, "bound": "pooled"},
    {"method": "ordered_sequence", "max_false_pass": 0.1},
    {"method": "ordered_sequence", "ordering": True, "false_pass": "among_failed"},
    {"method": "holm"},
    {"method": "holm", "bound": "pooled"},
])
def test_a_certificate_at_alpha_is_never_lost_at_a_larger_alpha(variant):
    """Over many random data sets (one or two stages, one to four trials per task: binomial and betting
    p-values), the certified set grows with alpha: certified at alpha means certified at every larger alpha,
    with as many rejected vectors and at least the coverage."""
    rng = np.random.default_rng(2026)
    variant = dict(variant)
    ordering = variant.pop("ordering", False)
    checked = 0
    for _ in range(25):
        problem = _random_problem(rng)
        order = {k: v for k, v in problem.items() if ordering and k.startswith("order_")}
        previous = None
        for alpha in ALPHAS:
            result = learn_then_test(problem["confidences"], problem["labels"], alpha, 0.1, groups=problem["groups"],
                                     pass_levels=COARSE_PASS, fail_levels=COARSE_FAIL, **order, **variant)
            if previous is not None:
                assert result.n_rejected >= previous.n_rejected, (alpha, previous, result)
                if previous.certified:
                    checked += 1
                    assert result.certified, (alpha, previous, result)
                    assert result.coverage >= previous.coverage - 1e-12
            previous = result
    assert checked >= 10  # else the property was barely exercised
