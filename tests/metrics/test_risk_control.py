"""Learn-then-Test statistics: exact numbers checked against independent computations, the family-wise
guarantee checked by simulation where the true risk is known, and the label counts a refusal quotes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rubricforge_dspy.metrics.risk_control import (
    betting_p_value,
    binomial_p_value,
    cascade_outcomes,
    decided_needed,
    fwer_reject,
    group_index,
    hoeffding_bentkus_p_value,
    learn_then_test,
    risk_upper_bound,
    stage_pairs,
    task_means,
    threshold_grid,
)


def test_binomial_p_value_is_the_exact_lower_tail():
    assert binomial_p_value(0, 22, 0.1) == pytest.approx(0.9 ** 22)
    assert binomial_p_value(0, 21, 0.1) == pytest.approx(0.9 ** 21)
    # k = 2 of 40 at alpha 0.1, summed by hand from the binomial pmf
    by_hand = sum(math.comb(40, i) * 0.1 ** i * 0.9 ** (40 - i) for i in range(3))
    assert binomial_p_value(2, 40, 0.1) == pytest.approx(by_hand)
    assert binomial_p_value(0, 0, 0.1) == 1.0
    assert np.allclose(binomial_p_value(np.array([0, 0]), np.array([10, 0]), 0.2), [0.8 ** 10, 1.0])
    with pytest.raises(ValueError):
        binomial_p_value(5, 4, 0.1)


def test_hoeffding_bentkus_is_valid_and_never_below_the_exact_test():
    # with no errors the Hoeffding part is exp(-n * log(1/(1-alpha))) = (1 - alpha)^n
    assert hoeffding_bentkus_p_value(0, 30, 0.1) == pytest.approx(min(0.9 ** 30, math.e * 0.9 ** 30))
    k, n = np.arange(0, 30), np.full(30, 60)
    assert np.all(hoeffding_bentkus_p_value(k, n, 0.1) >= binomial_p_value(k, n, 0.1) - 1e-12)
    assert hoeffding_bentkus_p_value(0, 0, 0.1) == 1.0


def test_clopper_pearson_upper_bound_agrees_with_scipy_and_with_the_test():
    assert risk_upper_bound(0, 22, 0.1) == pytest.approx(1 - 0.1 ** (1 / 22))
    expected = stats.binomtest(3, 50).proportion_ci(confidence_level=0.8, method="exact").high
    assert risk_upper_bound(3, 50, 0.1) == pytest.approx(expected)  # two-sided 80% = one-sided 90% upper
    for k, n in ((0, 21), (0, 22), (2, 60), (5, 40)):
        assert (risk_upper_bound(k, n, 0.1) <= 0.1) == (binomial_p_value(k, n, 0.1) <= 0.1)
    assert risk_upper_bound(4, 4, 0.1) == 1.0 and risk_upper_bound(0, 0, 0.1) == 1.0


def test_decided_needed_quotes_the_counts_of_the_design_notes():
    assert decided_needed(0.1, 0.1) == 22
    assert decided_needed(0.05, 0.1) == 45
    needed = decided_needed(0.1, 0.1, error_rate=0.05)
    bound = lambda n: stats.beta.ppf(0.9, 0.05 * n + 1, 0.95 * n)  # noqa: E731 - Clopper-Pearson at k = n / 20
    assert bound(needed) <= 0.1 < bound(needed - 1)
    assert needed > 3 * decided_needed(0.1, 0.1)  # errors at half of alpha cost more than three times the labels
    assert risk_upper_bound(5, 100, 0.1) == pytest.approx(bound(100))  # the same bound at an integer count
    assert decided_needed(0.1, 0.1, error_rate=0.1) is None


def test_fwer_procedures():
    p = np.array([0.001, 0.04, 0.03, 0.5])
    assert fwer_reject(p, 0.1, "bonferroni").tolist() == [True, False, False, False]  # 0.1 / 4 = 0.025
    # Holm: 0.001 <= .025, 0.03 <= .0333, 0.04 <= .05, 0.5 > 0.1
    assert fwer_reject(p, 0.1, "holm").tolist() == [True, True, True, False]
    assert fwer_reject(np.array([0.05, 0.2, 0.01]), 0.1, "fixed_sequence").tolist() == [True, False, False]
    with pytest.raises(ValueError):
        fwer_reject(p, 0.1, "bh")


def test_cascade_outcomes_hand_on_in_order():
    conf = np.array([[0.95, 0.5, 0.02, np.nan], [0.1, 0.9, 0.6, 0.97]])
    grid = np.array([[[0.9, 0.05], [0.95, 0.2]]])
    decided, passed, stage = cascade_outcomes(conf, grid)
    assert decided[0].tolist() == [True, False, True, True]
    assert passed[0].tolist() == [True, False, False, True]
    assert stage[0].tolist() == [0, -1, 0, 1]
    assert threshold_grid(2).shape == (56 * 56, 2, 2)


def population(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Confidences with a known link to the label: P(pass | c) = c (a calibrated stage, mostly sure)."""
    c = rng.beta(0.3, 0.3, size=n)
    y = (rng.random(n) < c).astype(int)
    return c, y


def true_risk(c, y, thresholds):
    (tp, tf), = thresholds
    decided = (c >= tp) | (c <= tf)
    passed = c >= tp
    return float(np.mean(passed[decided] != y[decided].astype(bool))) if decided.any() else 0.0


def test_the_family_wise_guarantee_holds_by_simulation_and_a_naive_choice_breaks_it():
    """The population is a large fixed sample whose risk of every vector is computed exactly; 300
    calibration draws of 200 units each: the share of draws whose certified vector has D > alpha must
    not be significantly above delta. Choosing by the empirical rate alone (no test) breaks it."""
    rng = np.random.default_rng(12345)
    c, y = population(50_000, rng)
    alpha, delta, draws, n = 0.1, 0.1, 300, 200
    bad_ltt = bad_naive = certified = 0
    grid = threshold_grid(1)
    for _ in range(draws):
        pick = rng.integers(0, c.size, size=n)
        result = learn_then_test(c[pick], y[pick], alpha, delta, method="holm", bound="pooled")
        if result.certified:
            certified += 1
            bad_ltt += true_risk(c, y, result.thresholds) > alpha
        decided, passed, _ = cascade_outcomes(c[pick][None, :], grid)
        ok = [(d.sum(), i) for i, d in enumerate(decided)
              if d.sum() and np.mean(passed[i][d] != y[pick][d].astype(bool)) <= alpha]
        naive = grid[max(ok)[1]] if ok else None
        bad_naive += naive is not None and true_risk(c, y, [tuple(naive[0])]) > alpha
    assert certified > draws // 2, "the test should certify something in most draws"
    low = stats.binomtest(bad_ltt, draws).proportion_ci(0.95, "exact").low
    assert low <= delta, f"{bad_ltt}/{draws} draws broke the bound"
    assert bad_naive / draws > 2 * delta, "the naive choice should break the bound often (else the check is blind)"


def test_false_pass_bound_is_an_intersection_union_test():
    """p = max(p_D, p_F): certifying a false-pass bound too can only shrink the certified set."""
    rng = np.random.default_rng(7)
    c, y = population(400, rng)
    plain = learn_then_test(c, y, 0.1, 0.1, method="holm", bound="pooled")
    both = learn_then_test(c, y, 0.1, 0.1, max_false_pass=0.02, method="holm", bound="pooled")
    assert both.n_rejected <= plain.n_rejected
    if both.certified:
        assert risk_upper_bound(both.false_passes, both.n_failed_decided, 0.1) <= 0.02 + 1e-12


def test_too_few_units_certify_nothing_and_weights_count_as_units():
    c = np.array([0.99] * 10 + [0.01] * 10)
    y = np.array([1] * 10 + [0] * 10)
    small = learn_then_test(c, y, 0.1, 0.1, method="holm", bound="pooled")
    assert not small.certified and small.p_value == pytest.approx(0.9 ** 20)
    big = learn_then_test(c, y, 0.1, 0.1, weights=np.full(20, 10), method="holm", bound="pooled")  # 200 units
    assert big.certified and big.coverage == 1.0 and big.errors == 0
    assert big.thresholds[0][0] <= 0.99 and big.thresholds[0][1] >= 0.01


def test_a_learned_order_keeps_the_guarantee_and_certifies_more_on_small_sets():
    """split_fixed_sequence: the order comes from held-apart units, so each test runs at delta; on 80 units
    it certifies in more draws than Holm over the grid, and still breaks the bound in at most ~delta of them."""
    rng = np.random.default_rng(2024)
    c, y = population(50_000, rng)
    draws, n = 300, 80
    counts = {"holm": [0, 0], "split_fixed_sequence": [0, 0]}
    for draw in range(draws):
        pick = rng.integers(0, c.size, size=n)
        for method, tally in counts.items():
            result = learn_then_test(c[pick], y[pick], 0.1, 0.1, method=method, seed=draw, bound="pooled")
            tally[0] += result.certified
            tally[1] += result.certified and true_risk(c, y, result.thresholds) > 0.1
    assert counts["split_fixed_sequence"][0] > counts["holm"][0]
    low = stats.binomtest(counts["split_fixed_sequence"][1], draws).proportion_ci(0.95, "exact").low
    assert low <= 0.1, counts
    with pytest.raises(ValueError, match="multiplicity"):
        learn_then_test(c[:10], y[:10], 0.1, 0.1, weights=np.full(10, 0.5))


# -- every trial counts, the task is the unit -------------------------------------------------------------------


def test_betting_p_value_is_valid_at_the_null_and_tighter_than_hoeffding_bentkus_on_steady_task_means():
    """Under E[X] = m exactly (the boundary of the null), P(p <= delta) <= delta (here far below); with task
    means that vary little below m the betting p-value is far smaller than Hoeffding-Bentkus'."""
    rng = np.random.default_rng(3)
    m, draws = 0.1, 2000
    x = rng.binomial(5, m, size=(draws, 60)) / 5  # a task's mean over 5 trials, mean exactly m
    p = betting_p_value(x, m)
    assert p.shape == (draws,) and np.all((p > 0) & (p <= 1))
    assert np.mean(p <= 0.1) <= 0.1 and np.mean(p <= 0.05) <= 0.05
    steady = np.full(60, 0.03)
    assert betting_p_value(steady, m) < 0.02 and 5 * betting_p_value(steady, m) < hoeffding_bentkus_p_value(1.8, 60, m)
    with pytest.raises(ValueError):
        betting_p_value(np.array([0.5, 1.5]), m)


def test_task_means_average_trials_within_a_task():
    index, n_tasks = group_index(np.array(["b", "a", "b", "b"]), 4)
    assert n_tasks == 2 and index.tolist() == [1, 0, 1, 1]
    means = task_means(np.array([[1.0, 0.0, 0.0, 1.0]]), index, n_tasks)
    assert means.tolist() == [[0.0, pytest.approx(2 / 3)]]


def test_every_trial_is_used_and_reported():
    """Five trials of 60 tasks: all 300 trials are tested (no trial dropped); the betting p-value is the
    default; 'binomial' is refused with several trials per task (its units would not be i.i.d.)."""
    rng = np.random.default_rng(11)
    c, y = population(300, rng)
    groups = np.repeat(np.arange(60), 5)
    result = learn_then_test(c, y, 0.1, 0.1, groups=groups, method="holm")
    assert result.n_tasks == 60 and result.n_trials == 300 and result.max_trials_per_task == 5
    assert result.p_values == "betting"
    with pytest.raises(ValueError, match="one trial per task"):
        learn_then_test(c, y, 0.1, 0.1, groups=groups, p_values="binomial")
    one = learn_then_test(c[::5], y[::5], 0.1, 0.1, groups=groups[::5], method="holm")
    assert one.p_values == "binomial" and one.n_trials == 60


def test_a_pass_fail_stage_has_four_distinct_rules_not_fifty_six_and_none_reverses_its_verdict():
    # "fail everything" (inf, 1) and "pass everything" (0, -inf) would reverse the stage's own verdict: not rules
    assert stage_pairs((0, 1)) == [(math.inf, -math.inf), (math.inf, 0.0), (1.0, -math.inf), (1.0, 0.0)]
    assert len(stage_pairs(None)) == 56
    assert threshold_grid([None, (0.0, 1.0)]).shape == (56 * 4, 2, 2)
    for levels in ((0.0, 0.25, 0.5, 0.75, 1.0), (0.3, 0.6), None):
        assert all(tf < 0.5 <= tp for tp, tf in stage_pairs(levels))
    with pytest.raises(ValueError, match=r"t_fail < 0.5 <= t_pass"):
        stage_pairs(None, pass_levels=(0.4,), fail_levels=(0.1,))
    # every pair of a discrete stage is a different decision on its levels
    outcomes = {tuple(map(tuple, np.stack(cascade_outcomes(np.array([[0.0, 1.0]]), g[None])[:2]).reshape(2, -1)))
                for g in threshold_grid([(0.0, 1.0)])}
    assert len(outcomes) == 4


def test_a_fixed_sequence_in_raw_grid_order_is_not_offered():
    with pytest.raises(ValueError, match="method must be one of"):
        learn_then_test(np.array([0.9, 0.1]), np.array([1, 0]), 0.1, 0.1, method="fixed_sequence")


def test_task_level_guarantee_holds_where_the_population_risk_is_known():
    """A population of 4,000 tasks x 5 correlated trials (a task's difficulty moves all its trials); 300
    calibration draws of 100 tasks with every trial, each method: the share of draws whose certified vector
    breaks D <= alpha on the population (task-uniform) stays within delta's binomial interval."""
    rng = np.random.default_rng(99)
    tasks, trials = 4000, 5
    difficulty = rng.normal(0, 1.5, size=tasks)[:, None]
    y = (rng.random((tasks, trials)) < 1 / (1 + np.exp(difficulty + rng.normal(0, 1, (tasks, trials))))).astype(int)
    z = np.where(y == 1, rng.normal(2.0, 1, y.shape), rng.normal(-2.0, 1, y.shape)) - 0.5 * difficulty
    c = (1 / (1 + np.exp(-2 * z))).ravel()
    y, groups = y.ravel(), np.repeat(np.arange(tasks), trials)
    grid = threshold_grid(1)
    decided, passed, _ = cascade_outcomes(c[None], grid)
    wrong = (decided & (passed != y.astype(bool))).mean(axis=1)
    shares = decided.mean(axis=1)
    risk = {tuple(map(tuple, g)): w / d if d else 0.0 for g, w, d in zip(grid, wrong, shares, strict=True)}
    draws, alpha, delta = 300, 0.1, 0.1
    for method in ("split_fixed_sequence", "holm", "fail_first_sequence"):
        broken = certified = 0
        for draw in range(draws):
            pick = np.flatnonzero(np.isin(groups, rng.choice(tasks, size=100, replace=False)))
            result = learn_then_test(c[None, pick], y[pick], alpha, delta, groups=groups[pick], method=method,
                                     seed=draw, bound="pooled")
            certified += result.certified
            broken += result.certified and risk[result.thresholds] > alpha
        assert certified >= draws // 10, (method, certified)  # else the check is blind
        assert stats.binomtest(broken, draws).proportion_ci(0.95, "exact").low <= delta, (method, broken)
