"""The bootstrap statistics at scale: the weighted AUC by sorted scores equals the definition it
replaced (one-hot score levels), the pairwise definition and scikit-learn's weighted AUC, and its
memory does not grow with the number of distinct scores."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
from sklearn import metrics as skm

from rubricforge_dspy import metrics as M


def onehot_weighted_auc(y_true: np.ndarray, scores: np.ndarray):
    """The former implementation (n x distinct-scores one-hot matrix), kept here as the reference."""
    levels, group = np.unique(scores, return_inverse=True)
    onehot = np.zeros((len(scores), len(levels)))
    onehot[np.arange(len(scores)), group.reshape(-1)] = 1.0
    pos, neg = onehot * (y_true == 1)[:, None], onehot * (y_true == 0)[:, None]

    def auc(w):
        wp, wn = w @ pos, w @ neg
        below = np.cumsum(wn, axis=1) - wn
        pairs = wp.sum(axis=1) * wn.sum(axis=1)
        wins = (wp * (below + 0.5 * wn)).sum(axis=1)
        return np.where(pairs > 0, wins / np.where(pairs > 0, pairs, 1.0), np.nan)
    return auc


def pairwise_auc(y_true: np.ndarray, scores: np.ndarray, w: np.ndarray) -> float:
    """Weighted Mann-Whitney by its definition: every (passed, failed) pair, ties counting 1/2."""
    wins = pairs = 0.0
    for i, j in itertools.product(np.flatnonzero(y_true == 1), np.flatnonzero(y_true == 0)):
        pair = w[i] * w[j]
        pairs += pair
        wins += pair * (1.0 if scores[i] > scores[j] else 0.5 if scores[i] == scores[j] else 0.0)
    return wins / pairs if pairs else np.nan


def tied_case(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    y = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(int)
    # few distinct values (many ties), or continuous scores with a few exact repeats
    scores = rng.integers(0, int(rng.integers(1, 6)) + 1, n) / 5.0 if seed % 2 else rng.random(n).round(3)
    w = rng.integers(0, 4, size=(int(rng.integers(1, 30)), n)).astype(np.float64)
    w[0] = 1.0  # the sample itself
    return y, scores, w


@pytest.mark.parametrize("seed", range(40))
def test_weighted_auc_equals_the_one_hot_definition_exactly(seed):
    y, scores, w = tied_case(seed)
    new, old = M.weighted_auc(y, scores)(w), onehot_weighted_auc(y, scores)(w)
    np.testing.assert_array_equal(new, old)  # bit for bit, nan where a resample lacks a class


@pytest.mark.parametrize("seed", range(12))
def test_weighted_auc_equals_pairs_and_sklearn_sample_weight(seed):
    y, scores, w = tied_case(seed)
    got = M.weighted_auc(y, scores)(w)
    for row, value in zip(w, got, strict=True):
        assert value == pytest.approx(pairwise_auc(y, scores, row), rel=1e-12, abs=0.0, nan_ok=True)
        keep = row > 0
        if len(np.unique(y[keep])) == 2:
            assert value == pytest.approx(skm.roc_auc_score(y[keep], scores[keep], sample_weight=row[keep]),
                                          rel=1e-12)
        else:
            assert np.isnan(value)
    # the unweighted row is the point estimate of roc_auc
    if len(np.unique(y)) == 2:
        assert got[0] == pytest.approx(M.roc_auc(y, scores), rel=1e-12)


@pytest.mark.slow
def test_weighted_auc_on_many_distinct_scores_needs_memory_linear_in_items():
    """The one-hot form needed n x distinct-scores floats (80 GB here); this needs a few copies of W."""
    n = 100_000
    rng = np.random.default_rng(0)
    y = (rng.random(n) < 0.4).astype(int)
    scores = np.clip(0.3 * y + 0.7 * rng.random(n), 0, 1)
    statistic = M.weighted_auc(y, scores)
    w = next(M.resample_weights(n, 2, seed=0))
    tracemalloc.start()
    try:
        got = statistic(w)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * w.nbytes
    assert got.shape == (2,) and np.all((0.6 < got) & (got < 0.9))
    # and it is the AUC of each resample drawn explicitly, through scikit-learn
    for row, value in zip(w, got, strict=True):
        assert value == pytest.approx(skm.roc_auc_score(y, scores, sample_weight=row), rel=1e-9)


@pytest.mark.parametrize("clustered", [False, True])
def test_resample_weights_are_the_counts_of_the_drawn_items_or_tasks(clustered):
    """Each row of W counts how often each item (or its task) was drawn, whatever the block layout."""
    n = 23
    clusters = [f"t{i % 7}" for i in range(n)] if clustered else None
    codes = M.cluster_codes(clusters, n) if clustered else np.arange(n)
    groups = int(codes.max()) + 1
    w = np.vstack(list(M.resample_weights(n, 50, seed=4, clusters=clusters)))
    draws = np.random.default_rng(4).integers(0, groups, size=(50, groups))
    expected = np.stack([np.bincount(d, minlength=groups)[codes] for d in draws]).astype(np.float64)
    np.testing.assert_array_equal(w, expected)
    if not clustered:
        assert (w.sum(axis=1) == n).all()  # an item resample keeps the sample size
