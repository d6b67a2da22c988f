"""Power of the per-stage bound on small multi-agent calibration sets (issue 39, "Done when": a floor-only cascade at
alpha 0.1 with about 50 calibration tasks): the betting stake's cap, the false-pass rate over a stage's passes, and
their validity where the truth is known (simulation at and beyond the null, the worst case for a task-mean test)."""

from __future__ import annotations

import numpy as np
import pytest

from rubricforge_dspy.metrics.bounds import RATIO_STAKE_CAP, betting_ratio_p_value
from rubricforge_dspy.metrics.risk_control import (
    DEFAULT_FALSE_PASS,
    cascade_outcomes,
    learn_then_test,
    threshold_grid,
)


def _worst_case_null(rng: np.random.Generator, rows: int, n: int, level: float, share: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Task means at the null's hardest point for a bet: most tasks decide a share of their trials with no error,
    and a rare task decides all of them wrongly (W = B = 1), with E[W] = level * E[B] exactly."""
    q = level * share / (1.0 - level + level * share)  # solves q = level * (q + (1 - q) * share)
    bad = rng.random((rows, n)) < q
    b = np.where(bad, 1.0, rng.uniform(0.0, 2 * share, (rows, n)))  # E[B | good task] = share (share <= 1/2)
    w = np.where(bad, 1.0, 0.0)
    return w, b


@pytest.mark.parametrize("level", [0.05, 0.1, 0.3])
def test_the_uncapped_stake_keeps_the_betting_p_value_valid_at_the_worst_null(level):
    """With the stake's cap at 1 (every factor >= level > 0), the p-value is still valid at the null's hardest
    point: the share of draws with p <= u stays at most u (within sampling noise), for u in (0.05, 0.1, 0.2)."""
    rng = np.random.default_rng(7)
    w, b = _worst_case_null(rng, 6000, 60, level, 0.5)
    p = betting_ratio_p_value(w, b, level)
    for u in (0.05, 0.1, 0.2):
        assert np.mean(p <= u) <= u + 3 * np.sqrt(u * (1 - u) / p.size), (level, u, np.mean(p <= u))
    with pytest.raises(ValueError, match="cap"):
        betting_ratio_p_value(w[:2], b[:2], level, c=1.2)


def test_the_uncapped_stake_bets_harder_where_no_decision_is_wrong():
    """54 tasks that decide 60% of their trials without an error: the cap of 1 certifies at delta 0.1 what the
    former cap of 0.9 could not (1 / prod (1 + 0.9 * 0.06) ~ 0.06 against 1 / prod (1 + 0.06) ~ 0.04 here)."""
    b = np.full(54, 0.6)
    w = np.zeros(54)
    assert RATIO_STAKE_CAP == 1.0
    new, old = betting_ratio_p_value(w, b, 0.1), betting_ratio_p_value(w, b, 0.1, c=0.9)
    assert new < old and new <= 0.05 < old


def _multi_agent_set(rng: np.random.Generator, n_tasks: int, agents: int = 6) -> tuple[np.ndarray, ...]:
    """A household-like set: tasks of `agents` trials, about 60% passed; a floor whose confidence separates well
    (a pass above 0.8 is right in ~99% of trials, a fail below 0.2 in ~97%), a middle band it is unsure of."""
    hard = rng.random(n_tasks) < 0.4
    y = np.where(np.repeat(hard, agents), rng.random(n_tasks * agents) < 0.25, rng.random(n_tasks * agents) < 0.85)
    sure = rng.random(y.size) < 0.93
    conf = np.where(sure, np.where(y, rng.uniform(0.85, 1.0, y.size), rng.uniform(0.0, 0.15, y.size)),
                    rng.uniform(0.3, 0.7, y.size))
    flip = rng.random(y.size) < 0.005  # a rare confident mistake
    conf = np.where(flip, 1.0 - conf, conf)
    return np.round(conf, 3)[None, :], y.astype(int), np.repeat(np.arange(n_tasks), agents)


def test_the_rate_over_the_passes_certifies_a_floor_from_about_fifty_multi_agent_tasks():
    """The issue's floor-only setting on simulated data: with 54 tasks of 6 agents and a floor this good, the
    per-stage bound on the share of passes that are failures (beta = alpha, the stake cap 1) certifies a vector
    that passes in most calibration draws; the default rate over the failed items decided (beta = alpha / 2)
    certifies none that passes with so few tasks (no valid test of task means can: docs/CASCADE.md)."""
    rng = np.random.default_rng(39)
    certified = passing = old_passing = 0
    draws = 12
    for draw in range(draws):
        conf, y, groups = _multi_agent_set(rng, 54)
        order_conf, order_y, order_groups = _multi_agent_set(rng, 54)
        order = {"order_confidences": order_conf, "order_labels": order_y, "order_groups": order_groups}
        result = learn_then_test(conf, y, 0.1, 0.1, 0.1, groups=groups, seed=draw, false_pass="among_passes",
                                 **order)
        certified += result.certified
        passing += result.certified and np.isfinite(result.thresholds[0][0])
        old = learn_then_test(conf, y, 0.1, 0.1, groups=groups, seed=draw, **order)
        old_passing += old.certified and np.isfinite(old.thresholds[0][0])
    assert DEFAULT_FALSE_PASS == "among_failed"
    assert passing >= draws * 2 // 3, (certified, passing)
    assert old_passing == 0


def test_false_passes_over_the_passes_are_not_diluted_by_the_stages_easy_fails():
    """A stage that fails many easy failures and passes a few items of which a third are failures: over the failed
    items it decides its false-pass rate is small (the easy fails dilute it) and the bound over the failed items
    certifies it; over its passes the rate is a third and that bound refuses it."""
    rng = np.random.default_rng(4)
    n = 3000
    easy_fail = rng.random(n) < 0.7
    y = np.where(easy_fail, False, rng.random(n) < 0.67)
    conf = np.where(easy_fail, 0.02, np.where(rng.random(n) < 0.5, 0.97, 0.5))  # passes at 0.97 whatever the label
    conf = conf[None, :]
    grid = threshold_grid(1, (np.inf, 0.95), (-np.inf, 0.05))
    decided, passed, _ = cascade_outcomes(conf, grid)
    wide = int(np.flatnonzero(np.isfinite(grid[:, 0, 0]) & np.isfinite(grid[:, 0, 1]))[0])
    yb = y.astype(bool)
    among_failed = (passed[wide] & ~yb).sum() / (decided[wide] & ~yb).sum()
    among_passes = (passed[wide] & ~yb).sum() / passed[wide].sum()
    assert among_failed < 0.15 < 0.25 < among_passes
    kwargs = {"method": "holm", "pass_levels": (np.inf, 0.95), "fail_levels": (-np.inf, 0.05)}
    diluted = learn_then_test(conf, y.astype(int), 0.2, 0.1, 0.2, **kwargs)
    strict = learn_then_test(conf, y.astype(int), 0.2, 0.1, 0.2, false_pass="among_passes", **kwargs)
    assert diluted.false_pass_rate == "among_failed"
    assert diluted.certified and np.isfinite(diluted.thresholds[0][0])  # it lets the stage pass
    assert strict.false_pass_rate == "among_passes"
    assert not (strict.certified and np.isfinite(strict.thresholds[0][0]))  # it never lets the stage pass
    with pytest.raises(ValueError, match="false_pass must be one of"):
        learn_then_test(conf, y.astype(int), 0.2, 0.1, false_pass="among_decided")
