"""The ordered sequence's order reads the ordering data as the calibration's own test will read its tasks (issue 39
follow-up): a vector's key is the alpha at which that p-value (binomial on one-trial tasks, betting on task means
otherwise; per stage or pooled) would reject on a pseudo-calibration of the ordering data, never a rate's bound at a
trial count that overstates a task-mean test's power."""

from __future__ import annotations

import numpy as np
from scipy import stats

from rubricforge_dspy.metrics.bounds import betting_ratio_p_value
from rubricforge_dspy.metrics.risk_control import learn_then_test, sequence_order, threshold_grid
from rubricforge_dspy.metrics.risk_order import _betting_level, _binomial_level, _pseudo_tasks


def few_tasks_population(n_tasks: int, rng: np.random.Generator, trials: int = 10):
    """Multi-trial tasks: 10% of tasks are sure failures in every trial (confidence 0.005, no error); in the others
    60% of trials are failures at 0.15 (2% of them passed) and the rest a coin at 0.7. A narrow fail rule decides
    only the sure tasks (few tasks: little evidence for a task-mean test), a wide one most tasks with few errors."""
    conf, y, groups = [], [], []
    for task in range(n_tasks):
        sure = rng.random() < 0.1
        for _ in range(trials):
            if sure:
                c, label = 0.005, 0
            elif rng.random() < 0.6:
                c, label = 0.15, int(rng.random() < 0.02)
            else:
                c, label = 0.7, int(rng.random() < 0.5)
            conf.append(c)
            y.append(label)
            groups.append(task)
    return np.array(conf)[None, :], np.array(y), np.array(groups)


def test_the_order_starts_where_the_task_mean_test_has_power_and_certifies():
    certified = 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        order_conf, order_y, order_groups = few_tasks_population(80, rng)
        conf, y, groups = few_tasks_population(50, rng)
        grid = threshold_grid(1)
        order, source = sequence_order(grid, None, order_conf, order_y, order_groups=order_groups, n_tasks=50,
                                       p_values="betting")
        assert source == "ordering data"
        # first: the wide fail-only rule (decides most tasks), not the narrow zero-error one nor a pass rule whose
        # false-pass test (at alpha / 2, on the failed trials) is weaker
        assert grid[order[0], 0, 1] >= 0.15 and not np.isfinite(grid[order[0], 0, 0])
        result = learn_then_test(conf, y, 0.1, 0.1, groups=groups, order_confidences=order_conf, order_labels=order_y,
                                 order_groups=order_groups)
        certified += result.certified
    # the trial-count order put a pass rule or the narrow rule first and certified none of these 8
    assert certified >= 4


def test_the_betting_key_is_the_smallest_level_that_rejects():
    rng = np.random.default_rng(3)
    b = rng.uniform(0.2, 1.0, (30, 60))
    w = b * rng.uniform(0.0, 0.15, (30, 60))
    w[0] = 0.0  # no error at all: rejects at a small level
    w[1] = b[1]  # every decision wrong: never rejects below 1
    key = _betting_level(w, b, 0.1)
    assert key[1] == 2.0
    for row in np.flatnonzero(key < 1.0):
        assert betting_ratio_p_value(w[row], b[row], min(key[row] + 1e-6, 0.999999), tune_delta=0.1) <= 0.1
        assert betting_ratio_p_value(w[row], b[row], max(key[row] - 1e-4, 1e-6), tune_delta=0.1) > 0.1
    assert key[0] < np.min(key[2:])


def test_the_binomial_key_is_clopper_pearson_and_nothing_decided_goes_last():
    k, n = np.array([0.0, 3.0, 0.0, 5.0]), np.array([30.0, 80.0, 0.0, 5.0])
    key = _binomial_level(k, n, 0.1)
    assert np.allclose(stats.binom.cdf(k[:2], n[:2], key[:2]), 0.1)
    assert key[2] == 2.0 and key[3] == 2.0


def test_the_pseudo_calibration_reads_every_ordering_task_evenly():
    tiled = _pseudo_tasks(7, 50)
    assert tiled.size == 50 and np.all(np.bincount(tiled, minlength=7) >= 7)
    thinned = _pseudo_tasks(100, 40)
    assert thinned.size == 40 and np.unique(thinned).size == 40
