"""Tests for rubricforge_dspy.metrics: each metric against scipy / scikit-learn or a
direct formula on random data, the seed paper's published numbers, bootstrap behaviour,
and input validation."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm
from sklearn.exceptions import UndefinedMetricWarning

from rubricforge_dspy import metrics as M

SEEDS = [0, 1, 2, 3, 4]


def from_counts(tp: int, fp: int, fn: int, tn: int) -> tuple[np.ndarray, np.ndarray]:
    """y_true / y_pred arrays realising the given confusion counts (positive = passed)."""
    y_true = np.array([1] * tp + [0] * fp + [1] * fn + [0] * tn)
    y_pred = np.array([1] * tp + [1] * fp + [0] * fn + [0] * tn)
    return y_true, y_pred


def random_binary(seed: int, n: int | None = None):
    rng = np.random.default_rng(seed)
    n = n or int(rng.integers(40, 400))
    y_true = (rng.random(n) < rng.uniform(0.2, 0.6)).astype(int)
    # verdicts that agree with the label ~75% of the time
    flip = rng.random(n) < 0.25
    y_pred = np.where(flip, 1 - y_true, y_true)
    scores = np.clip(0.5 * y_true + 0.5 * rng.random(n) + rng.normal(0, 0.1, n), 0, 1)
    return y_true, y_pred, scores


def random_graded(seed: int, n: int | None = None):
    rng = np.random.default_rng(seed)
    n = n or int(rng.integers(30, 300))
    rewards = rng.random(n)
    rewards[rng.random(n) < 0.2] = 1.0  # ties
    scores = np.clip(rewards + rng.normal(0, 0.3, n), 0, 1)
    return scores, rewards


# --------------------------------------------------------------------------------------
# Seed paper numbers
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "counts, acc, kappa, fpr",
    [
        ((2, 6, 8, 46), 0.774, 0.092, 0.115),  # induced judge
        ((2, 9, 8, 43), 0.726, 0.026, 0.173),  # G-Eval
    ],
    ids=["induced", "g-eval"],
)
def test_seed_paper_numbers(counts, acc, kappa, fpr):
    y_true, y_pred = from_counts(*counts)
    assert M.confusion_counts(y_true, y_pred) == dict(zip(("tp", "fp", "fn", "tn"), counts, strict=True))
    assert round(M.accuracy(y_true, y_pred), 3) == acc
    assert round(M.cohens_kappa(y_true, y_pred), 3) == kappa
    assert round(M.false_pass_rate(y_true, y_pred), 3) == fpr
    assert M.false_fail_count(y_true, y_pred) == counts[2]
    summary = M.binary_summary(y_true, y_pred, n_resamples=2000)
    assert round(summary["accuracy"], 3) == acc
    assert round(summary["kappa"], 3) == kappa
    assert round(summary["false_pass_rate"], 3) == fpr
    assert summary["n"] == sum(counts)


def test_mcnemar_three_discordant_one_direction():
    a = [1, 1, 1, 1, 0]
    b = [0, 0, 0, 1, 0]
    assert M.mcnemar_exact(a, b) == (3, 0, 0.25)
    assert M.mcnemar_exact(b, a) == (0, 3, 0.25)
    # the same through compare_paired: A right on 3 items where B is wrong
    y_true = np.array([1, 0, 1, 1, 0])
    pred_a = y_true.copy()
    pred_b = y_true.copy()
    pred_b[:3] = 1 - pred_b[:3]
    out = M.compare_paired(y_true, pred_a, pred_b)
    assert (out["b"], out["c"], out["p_value"], out["mark"]) == (3, 0, 0.25, "ns")


# --------------------------------------------------------------------------------------
# Binary metrics vs scikit-learn / formulas on random data
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_binary_metrics_match_reference(seed):
    y_true, y_pred, scores = random_binary(seed)
    tp = int(np.sum((y_true == 1) & (y_pred == 1)))
    fp = int(np.sum((y_true == 0) & (y_pred == 1)))
    fn = int(np.sum((y_true == 1) & (y_pred == 0)))
    tn = int(np.sum((y_true == 0) & (y_pred == 0)))
    n = len(y_true)

    assert M.confusion_counts(y_true, y_pred) == {"tp": tp, "fp": fp, "fn": fn, "tn": tn}
    tn_, fp_, fn_, tp_ = skm.confusion_matrix(y_true, y_pred, labels=[0, 1]).ravel()
    assert (tp_, fp_, fn_, tn_) == (tp, fp, fn, tn)

    assert M.accuracy(y_true, y_pred) == pytest.approx((tp + tn) / n)
    assert M.f1_positive(y_true, y_pred) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert M.f1_positive(y_true, y_pred) == pytest.approx(skm.f1_score(y_true, y_pred))

    po = (tp + tn) / n
    pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / n**2
    assert M.cohens_kappa(y_true, y_pred) == pytest.approx((po - pe) / (1 - pe))
    assert M.cohens_kappa(y_true, y_pred) == pytest.approx(skm.cohen_kappa_score(y_true, y_pred))

    # AUC = Mann-Whitney U / (n_pos * n_neg)
    pos, neg = scores[y_true == 1], scores[y_true == 0]
    u = stats.mannwhitneyu(pos, neg).statistic
    assert M.roc_auc(y_true, scores) == pytest.approx(u / (len(pos) * len(neg)))
    assert M.roc_auc(y_true, scores) == pytest.approx(skm.roc_auc_score(y_true, scores))

    assert M.predicted_positive_rate(y_pred) == pytest.approx((tp + fp) / n)
    assert M.false_pass_rate(y_true, y_pred) == pytest.approx(fp / (fp + tn))
    assert M.false_pass_rate(y_true, y_pred) == pytest.approx(
        1 - skm.recall_score(y_true, y_pred, pos_label=0)
    )
    assert M.false_fail_count(y_true, y_pred) == fn


def test_bool_and_list_inputs_accepted():
    y_true = [True, False, True, False]
    y_pred = [1.0, 0.0, 0.0, 1.0]
    assert M.confusion_counts(y_true, y_pred) == {"tp": 1, "fp": 1, "fn": 1, "tn": 1}
    assert M.accuracy(y_true, y_pred) == 0.5
    assert isinstance(M.false_fail_count(y_true, y_pred), int)


def test_undefined_metrics_return_nan_with_reason():
    with pytest.warns(UndefinedMetricWarning, match="one class"):
        assert math.isnan(M.roc_auc([1, 1, 1], [0.2, 0.5, 0.9]))
    with pytest.warns(UndefinedMetricWarning, match="no failed"):
        assert math.isnan(M.false_pass_rate([1, 1], [1, 0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(M.f1_positive([0, 0, 0], [0, 0, 0]))
        assert M.f1_positive([1, 0, 0], [0, 0, 0]) == 0.0
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(M.cohens_kappa([1, 1, 1], [1, 1, 1]))


# --------------------------------------------------------------------------------------
# Graded metrics
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_graded_metrics_match_reference(seed):
    scores, rewards = random_graded(seed)
    rho = stats.pearsonr(stats.rankdata(scores), stats.rankdata(rewards)).statistic
    assert M.spearman(scores, rewards) == pytest.approx(rho)
    assert M.spearman(scores, rewards) == pytest.approx(stats.spearmanr(scores, rewards).statistic)
    assert M.kendall(scores, rewards) == pytest.approx(stats.kendalltau(scores, rewards).statistic)
    assert M.mean_abs_error(scores, rewards) == pytest.approx(np.mean(np.abs(scores - rewards)))
    summary = M.graded_summary(scores, rewards)
    assert summary == {
        "n": len(scores),
        "spearman": pytest.approx(rho),
        "kendall": pytest.approx(stats.kendalltau(scores, rewards).statistic),
        "mae": pytest.approx(np.mean(np.abs(scores - rewards))),
    }


def test_kendall_small_example_by_hand():
    # all 3 pairs concordant except (x1, x3): tau = (2 - 1) / 3
    assert M.kendall([0.1, 0.5, 0.3], [0.0, 1.0, 2.0]) == pytest.approx(1 / 3)


def test_graded_constant_input_is_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(M.spearman([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]))
        assert math.isnan(M.kendall([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]))


# --------------------------------------------------------------------------------------
# McNemar
# --------------------------------------------------------------------------------------


def exact_mcnemar_formula(b: int, c: int) -> float:
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


@pytest.mark.parametrize("seed", SEEDS)
def test_mcnemar_matches_binomial_formula(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 300))
    ca = rng.random(n) < 0.8
    cb = rng.random(n) < rng.uniform(0.5, 0.8)
    b = int(np.sum(ca & ~cb))
    c = int(np.sum(~ca & cb))
    res = M.mcnemar_exact(ca, cb)
    assert (res.b, res.c) == (b, c)
    assert res.p_value == pytest.approx(exact_mcnemar_formula(b, c), rel=1e-9, abs=1e-300)
    assert res.p_value == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue)


def test_mcnemar_no_discordant_pairs():
    assert M.mcnemar_exact([1, 0, 1], [1, 0, 1]) == (0, 0, 1.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_compare_paired_matches_components(seed):
    y_true, pred_a, _ = random_binary(seed)
    rng = np.random.default_rng(seed + 100)
    pred_b = np.where(rng.random(len(y_true)) < 0.35, 1 - y_true, y_true)
    out = M.compare_paired(y_true, pred_a, pred_b)
    res = M.mcnemar_exact(pred_a == y_true, pred_b == y_true)
    assert (out["b"], out["c"], out["p_value"]) == tuple(res)
    assert out["mark"] == M.significance_mark(res.p_value)
    assert out["accuracy_a"] == pytest.approx(M.accuracy(y_true, pred_a))
    assert out["accuracy_b"] == pytest.approx(M.accuracy(y_true, pred_b))
    # b - c is n * (accuracy_a - accuracy_b)
    assert out["b"] - out["c"] == round(out["n"] * (out["accuracy_a"] - out["accuracy_b"]))


@pytest.mark.parametrize(
    "p, mark",
    [(0.0, "***"), (0.0009, "***"), (0.001, "**"), (0.0099, "**"), (0.01, "*"),
     (0.0499, "*"), (0.05, "ns"), (0.25, "ns"), (1.0, "ns"), (float("nan"), "ns")],
)
def test_significance_mark(p, mark):
    assert M.significance_mark(p) == mark


# --------------------------------------------------------------------------------------
# Intervals for rates: exact (Clopper-Pearson) and Wilson
# --------------------------------------------------------------------------------------


def reference_clopper_pearson(k, n, alpha):
    """Independent reference from the beta quantiles (Clopper & Pearson 1934)."""
    low = 0.0 if k == 0 else stats.beta.ppf(alpha / 2, k, n - k + 1)
    high = 1.0 if k == n else stats.beta.ppf(1 - alpha / 2, k + 1, n - k)
    return low, high


def reference_wilson(k, n, alpha):
    """Wilson (1927) score interval, written out (the statsmodels `proportion_confint(method="wilson")` formula)."""
    z = stats.norm.ppf(1 - alpha / 2)
    p = k / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return center - half, center + half


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (2, 2), (0, 10), (3, 10), (10, 10), (6, 54), (27, 62), (500, 1000)])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.01])
def test_proportion_ci_matches_references(k, n, alpha):
    assert M.proportion_ci(k, n, alpha) == pytest.approx(reference_clopper_pearson(k, n, alpha), abs=1e-9)
    low, high = M.proportion_ci(k, n, alpha, method="wilson")
    ref = reference_wilson(k, n, alpha)
    assert (low, high) == pytest.approx(ref, abs=1e-9)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_two_failed_items_both_passed_is_not_a_point():
    """The issue's example: a false-pass rate of 2/2 is "1.000 [0.158, 1.000]", not "[1.000, 1.000]"."""
    low, high = M.proportion_ci(2, 2)
    assert round(low, 3) == 0.158 and high == 1.0


def test_proportion_ci_validation():
    for args, match in [((1, 0), "n must be >= 1"), ((3, 2), r"k must be in \[0, n\]"), ((-1, 2), "k must be"),
                        ((1.5, 2), "integer count"), ((True, 2), "integer count")]:
        with pytest.raises(ValueError, match=match):
            M.proportion_ci(*args)
    with pytest.raises(ValueError, match="alpha"):
        M.proportion_ci(1, 2, alpha=1.0)
    with pytest.raises(ValueError, match="method"):
        M.proportion_ci(1, 2, method="wald")


def test_accuracy_ci_is_the_exact_interval_of_correct_items():
    y_true, y_pred = from_counts(2, 6, 8, 46)  # the seed paper's induced judge
    assert tuple(M.accuracy_ci(y_true, y_pred)) == pytest.approx(reference_clopper_pearson(48, 62, 0.05))
    assert tuple(M.accuracy_ci(y_true, y_pred, method="wilson")) == pytest.approx(reference_wilson(48, 62, 0.05))


# --------------------------------------------------------------------------------------
# The bootstrap engine (items or whole tasks)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_bootstrap_is_deterministic_and_agrees_with_scipy(seed):
    scores, rewards = random_graded(seed, n=300)
    ci = M.bootstrap_ci(M.mean_abs_error, scores, rewards, seed=seed)
    assert M.bootstrap_ci(M.mean_abs_error, scores, rewards, seed=seed) == ci
    assert M.bootstrap_ci(M.mean_abs_error, scores, rewards, seed=seed + 1000) != ci
    ref = stats.bootstrap((np.abs(scores - rewards),), np.mean, n_resamples=10_000, confidence_level=0.95,
                          method="percentile", random_state=np.random.default_rng(seed)).confidence_interval
    assert ci.low == pytest.approx(ref.low, abs=0.005) and ci.high == pytest.approx(ref.high, abs=0.005)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS[:3])
@pytest.mark.parametrize("clustered", [False, True])
def test_weighted_forms_equal_the_generic_loop(seed, clustered):
    """Each statistic computed on all resamples at once equals calling it on each resample's items."""
    y_true, y_pred, scores = random_binary(seed, n=120)
    s_graded, rewards = random_graded(seed, n=120)
    kw = dict(n_resamples=300, seed=seed, clusters=[f"t{i // 3}" for i in range(120)] if clustered else None)
    cases = [(M.accuracy, (y_true, y_pred)), (M.predicted_positive_rate, (y_pred,)),
             (M.false_pass_rate, (y_true, y_pred)), (M.mean_abs_error, (s_graded, rewards)),
             (M.cohens_kappa, (y_true, y_pred)), (M.roc_auc, (y_true, scores))]
    for fn, arrays in cases:
        fast = M.bootstrap_ci(fn, *arrays, **kw)
        slow = M.bootstrap_ci(lambda *a, fn=fn: fn(*a), *arrays, **kw)
        assert tuple(fast) == pytest.approx(tuple(slow), abs=1e-12), fn.__name__


def test_cluster_bootstrap_resamples_whole_tasks():
    tasks = np.repeat([f"t{g}" for g in range(7)], [1, 2, 3, 4, 1, 2, 3])
    n = len(tasks)
    for w in M.resample_weights(n, 50, seed=1, clusters=tasks):
        for t in set(tasks):  # every trial of a task is in a resample equally often
            assert (w[:, tasks == t] == w[:, tasks == t][:, :1]).all()
        first = np.array([np.flatnonzero(tasks == f"t{g}")[0] for g in range(7)])
        assert (w[:, first].sum(axis=1) == 7).all()  # 7 tasks drawn per resample


def test_cluster_bootstrap_of_repeated_trials_is_the_bootstrap_of_tasks():
    """Four identical trials per task carry the information of one: resampling tasks gives exactly the
    item bootstrap of one trial per task, and resampling trials as if independent is too narrow."""
    y_true, y_pred, _ = random_binary(2, n=40)
    rep = lambda a: np.repeat(a, 4)  # noqa: E731
    tasks = np.repeat([f"t{i:02d}" for i in range(40)], 4)
    clustered = M.bootstrap_ci(M.accuracy, rep(y_true), rep(y_pred), seed=3, clusters=tasks)
    per_task = M.bootstrap_ci(M.accuracy, y_true, y_pred, seed=3)
    naive = M.bootstrap_ci(M.accuracy, rep(y_true), rep(y_pred), seed=3)
    assert tuple(clustered) == pytest.approx(tuple(per_task), abs=1e-12)
    assert naive.high - naive.low < 0.7 * (clustered.high - clustered.low)
    assert M.has_repeated_clusters(tasks) and not M.has_repeated_clusters(["a", "b"])


def test_bootstrap_excludes_undefined_resamples_with_warning():
    y_true = [1, 1, 1, 1, 0]
    y_pred = [1, 0, 1, 1, 1]
    with pytest.warns(UndefinedMetricWarning, match="excluded"):
        ci = M.bootstrap_ci(M.false_pass_rate, y_true, y_pred, n_resamples=1000)
    assert ci == (1.0, 1.0)  # the degenerate percentile interval a rate must not be reported with
    assert M.proportion_ci(1, 1) == pytest.approx((0.025, 1.0))


# --------------------------------------------------------------------------------------
# Paired bootstrap on graded rewards
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_paired_bootstrap_abs_error(seed):
    rng = np.random.default_rng(seed)
    scores_a, rewards = random_graded(seed, n=200)
    scores_b = np.clip(rewards + rng.normal(0, 0.3, len(rewards)), 0, 1)
    out = M.paired_bootstrap_abs_error(scores_a, scores_b, rewards, seed=seed)
    d = np.abs(scores_a - rewards) - np.abs(scores_b - rewards)
    assert out["mean_diff"] == pytest.approx(d.mean())
    assert out["ci_low"] <= out["mean_diff"] <= out["ci_high"]
    # CI is the percentile bootstrap of mean(d) with the same engine
    ci = M.bootstrap_ci(lambda x: float(np.mean(x)), d, seed=seed)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(tuple(ci))
    excludes_zero = out["ci_low"] > 0 or out["ci_high"] < 0
    assert (out["p_value"] < 0.05) == excludes_zero
    assert 0 < out["p_value"] <= 1
    assert M.paired_bootstrap_abs_error(scores_a, scores_b, rewards, seed=seed) == out


def test_paired_bootstrap_identical_and_clearly_different():
    scores, rewards = random_graded(5, n=150)
    same = M.paired_bootstrap_abs_error(scores, scores, rewards)
    assert same["mean_diff"] == 0 and same["p_value"] == 1.0
    worse = np.clip(1 - rewards, 0, 1)
    out = M.paired_bootstrap_abs_error(worse, scores, rewards)
    assert out["mean_diff"] > 0 and out["ci_low"] > 0
    assert out["p_value"] < 0.001 and M.significance_mark(out["p_value"]) == "***"


# --------------------------------------------------------------------------------------
# Calibration and contradictions
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_reliability_curve_and_ece_match_sklearn_binning(seed):
    from sklearn.calibration import calibration_curve

    y_true, _, scores = random_binary(seed)
    scores = np.round(scores, 1)  # put scores on the bin edges too
    curve = M.reliability_curve(y_true, scores, n_bins=10)
    frac, mean = calibration_curve(y_true, scores, n_bins=10, strategy="uniform")
    used = [b for b, c in enumerate(curve["count"]) if c]
    assert [curve["fraction_passed"][b] for b in used] == pytest.approx(frac)
    assert [curve["mean_score"][b] for b in used] == pytest.approx(mean)
    # ECE written out: bin b holds (b/10, (b+1)/10], the first bin also 0.
    ece = 0.0
    for b in range(10):
        lo, hi = b / 10, (b + 1) / 10
        inside = ((scores > lo) | (b == 0)) & (scores <= hi + 1e-12) & ~((scores <= lo + 1e-12) & (b > 0))
        if inside.any():
            ece += inside.mean() * abs(y_true[inside].mean() - scores[inside].mean())
    assert M.expected_calibration_error(y_true, scores, 10) == pytest.approx(ece)


def test_ece_of_a_known_miscalibration():
    y = [1] * 10 + [0] * 10
    assert M.expected_calibration_error(y, [0.95] * 10 + [0.05] * 10) == pytest.approx(0.05)
    assert M.expected_calibration_error(y, [0.5] * 20) == pytest.approx(0.0)  # calibrated, useless
    with pytest.raises(ValueError, match="n_bins"):
        M.expected_calibration_error(y, [0.5] * 20, n_bins=0)


def test_contradiction_summary():
    out = M.contradiction_summary([1, 0, 0, 1, 0], abstained=[0, 0, 1, 0, 0])
    assert out["n_verdicts"] == 4 and out["contradictions"] == 2 and out["rate"] == 0.5
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(reference_clopper_pearson(2, 4, 0.05))
    assert M.contradiction_summary([0, 0], abstained=[1, 1])["rate"] is None


# --------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_binary_summary_consistent_with_functions(seed):
    y_true, y_pred, scores = random_binary(seed)
    abstained = np.random.default_rng(seed).random(len(y_true)) < 0.1
    s = M.binary_summary(y_true, y_pred, scores=scores, abstained=abstained, n_resamples=2000, seed=seed)
    assert s["n"] == len(y_true) and s["bootstrap"] == "items"
    c = M.confusion_counts(y_true, y_pred)
    assert {k: s[k] for k in ("tp", "fp", "fn", "tn")} == c
    assert s["accuracy"] == M.accuracy(y_true, y_pred)
    assert (s["accuracy_ci_low"], s["accuracy_ci_high"]) == pytest.approx(
        reference_clopper_pearson(c["tp"] + c["tn"], len(y_true), 0.05))
    assert (s["false_pass_ci_low"], s["false_pass_ci_high"]) == pytest.approx(
        reference_clopper_pearson(c["fp"], c["fp"] + c["tn"], 0.05))
    assert (s["kappa_ci_low"], s["kappa_ci_high"]) == tuple(
        M.bootstrap_ci(M.cohens_kappa, y_true, y_pred, n_resamples=2000, seed=seed))
    assert (s["auc_ci_low"], s["auc_ci_high"]) == tuple(
        M.bootstrap_ci(M.roc_auc, y_true, scores, n_resamples=2000, seed=seed))
    assert s["f1"] == M.f1_positive(y_true, y_pred)
    assert s["kappa"] == M.cohens_kappa(y_true, y_pred)
    assert s["auc"] == M.roc_auc(y_true, scores)
    assert s["false_pass_rate"] == M.false_pass_rate(y_true, y_pred)
    assert s["abstained"] == int(abstained.sum())
    tasks = [f"t{i // 2}" for i in range(len(y_true))]
    clustered = M.binary_summary(y_true, y_pred, scores, n_resamples=500, seed=seed, clusters=tasks)
    assert clustered["bootstrap"] == "task-clustered"
    assert (clustered["kappa_ci_low"], clustered["kappa_ci_high"]) == tuple(
        M.bootstrap_ci(M.cohens_kappa, y_true, y_pred, n_resamples=500, seed=seed, clusters=tasks))


def test_binary_summary_without_scores_or_abstentions():
    y_true, y_pred = from_counts(3, 1, 2, 4)
    s = M.binary_summary(y_true, y_pred, n_resamples=500)
    assert math.isnan(s["auc"]) and s["abstained"] == 0


# --------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------

BINARY_FUNCS = [
    M.confusion_counts, M.accuracy, M.f1_positive, M.cohens_kappa, M.false_pass_rate,
    M.false_fail_count, M.accuracy_ci, M.binary_summary,
]


@pytest.mark.parametrize("fn", BINARY_FUNCS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "y_true, y_pred, match",
    [
        ([1, 0, 1], [1, 0], "Inconsistent"),
        ([1, 0, 2], [1, 0, 1], "binary"),
        ([1, 0, 1], [1, -1, 1], "binary"),
        ([1, 0, 1], [1, 0.5, 1], "binary"),
        ([], [], "empty"),
        ([1, 0, np.nan], [1, 0, 1], "NaN"),
        (["pass", "fail"], [1, 0], "dtype"),
        ([[1, 0], [0, 1]], [[1, 0], [0, 1]], "1-D"),
        (1, 1, "1-D"),
        (None, [1], "None"),
    ],
)
def test_binary_input_validation(fn, y_true, y_pred, match):
    with pytest.raises(ValueError, match=match):
        fn(y_true, y_pred)


@pytest.mark.parametrize("fn", [M.spearman, M.kendall, M.mean_abs_error, M.graded_summary],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "scores, rewards, match",
    [
        ([0.1, 0.2], [0.1], "Inconsistent"),
        ([], [], "empty"),
        ([0.1, np.nan], [0.1, 0.2], "NaN"),
        ([0.1, 0.2], [np.nan, 0.2], "NaN"),
        ([0.1, 0.2], [np.inf, 0.2], "non-finite"),
        ([0.1, 1.5], [0.1, 0.2], r"\[0, 1\]"),
        ([-0.1, 0.5], [0.1, 0.2], r"\[0, 1\]"),
    ],
)
def test_graded_input_validation(fn, scores, rewards, match):
    with pytest.raises(ValueError, match=match):
        fn(scores, rewards)


def test_other_input_validation():
    with pytest.raises(ValueError, match="Inconsistent"):
        M.roc_auc([1, 0, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.roc_auc([1, 0], [0.1, 2.0])
    with pytest.raises(ValueError, match="empty"):
        M.predicted_positive_rate([])
    with pytest.raises(ValueError, match="binary"):
        M.mcnemar_exact([1, 2], [1, 0])
    with pytest.raises(ValueError, match="Inconsistent"):
        M.mcnemar_exact([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="Inconsistent"):
        M.compare_paired([1, 0, 1], [1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="Inconsistent"):
        M.paired_bootstrap_abs_error([0.1, 0.2], [0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="Inconsistent"):
        M.binary_summary([1, 0], [1, 0], scores=[0.5])
    with pytest.raises(ValueError, match="Inconsistent"):
        M.binary_summary([1, 0], [1, 0], abstained=[True])
    with pytest.raises(ValueError, match="binary"):
        M.binary_summary([1, 0], [1, 0], abstained=[2, 0])
    with pytest.raises(ValueError, match="n_resamples"):
        M.bootstrap_ci(M.accuracy, [1, 0], [1, 0], n_resamples=0)
    with pytest.raises(ValueError, match="n_resamples"):
        M.bootstrap_ci(M.accuracy, [1, 0], [1, 0], n_resamples=10.5)
    with pytest.raises(ValueError, match="confidence"):
        M.bootstrap_ci(M.accuracy, [1, 0], [1, 0], confidence=1.0)
    with pytest.raises(ValueError, match="confidence"):
        M.paired_bootstrap_abs_error([0.1], [0.2], [0.3], confidence=0)
    with pytest.raises(ValueError, match="at least one array"):
        M.bootstrap_ci(M.accuracy)
    with pytest.raises(ValueError, match="Inconsistent"):
        M.bootstrap_ci(lambda x, y: 0.0, [1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="one value per resample"):
        M.bootstrap({"bad": lambda w: w.sum()}, 2, n_resamples=10)
    with pytest.raises(ValueError, match="clusters has 2"):
        M.bootstrap_ci(M.accuracy, [1, 0, 1], [1, 0, 0], clusters=["a", "b"])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.significance_mark(1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.significance_mark(-0.01)
    with pytest.raises(ValueError, match="real number"):
        M.significance_mark("0.01")
