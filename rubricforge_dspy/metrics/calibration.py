"""Calibration of judge scores against outcomes (reliability diagram, ECE) and the judge's
self-consistency (``passed`` contradicting ``score``).

Binning (stated once, used by both functions): ``n_bins`` equal-width bins over ``[0, 1]`` with
edges ``linspace(0, 1, n_bins + 1)``; a score on an inner edge goes to the lower bin (bin ``b``
holds ``(e_b, e_{b+1}]``, the first bin also holds 0), the convention of
:func:`sklearn.calibration.calibration_curve` with ``strategy="uniform"``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rubricforge_dspy.metrics._checks import check_binary, check_mask, check_same_length, check_scores
from rubricforge_dspy.metrics.intervals import proportion_ci

DEFAULT_BINS = 10
BINNING = "equal-width"


def _check_bins(n_bins: Any) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    return int(n_bins)


def reliability_curve(y_true: ArrayLike, scores: ArrayLike, n_bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """Reliability-diagram data: per equal-width score bin, the number of items, their mean score
    and the fraction that truly passed (DeGroot & Fienberg, "The comparison and evaluation of
    forecasters", *The Statistician* 32, 1983; Niculescu-Mizil & Caruana, ICML 2005).

    Returns ``{"edges": [n_bins + 1 floats], "count": [...], "mean_score": [...],
    "fraction_passed": [...]}``, each list with one entry per bin (``None`` for empty bins).
    """
    n_bins = _check_bins(n_bins)
    t = check_binary("y_true", y_true)
    s = check_scores("scores", scores)
    check_same_length(y_true=t, scores=s)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.searchsorted(edges[1:-1], s, side="left")
    count = np.bincount(which, minlength=n_bins)
    score_sum = np.bincount(which, weights=s, minlength=n_bins)
    pass_sum = np.bincount(which, weights=t.astype(np.float64), minlength=n_bins)
    mean = [float(score_sum[b] / count[b]) if count[b] else None for b in range(n_bins)]
    frac = [float(pass_sum[b] / count[b]) if count[b] else None for b in range(n_bins)]
    return {"edges": edges.tolist(), "count": count.astype(int).tolist(), "mean_score": mean,
            "fraction_passed": frac}


def expected_calibration_error(y_true: ArrayLike, scores: ArrayLike, n_bins: int = DEFAULT_BINS) -> float:
    """Expected calibration error ``ECE = sum_b (n_b / n) |fraction_passed_b - mean_score_b|`` over
    equal-width bins (Naeini, Cooper & Hauskrecht, "Obtaining well calibrated probabilities using
    Bayesian binning", AAAI 2015; Guo et al., "On calibration of modern neural networks", ICML 2017).
    0 is perfectly calibrated; the value depends on ``n_bins`` (report it with the number)."""
    curve = reliability_curve(y_true, scores, n_bins)
    n = sum(curve["count"])
    return float(sum(c / n * abs(f - m) for c, f, m in zip(curve["count"], curve["fraction_passed"],
                                                              curve["mean_score"], strict=True) if c))


def contradiction_summary(contradiction: ArrayLike, abstained: ArrayLike | None = None,
                          alpha: float = 0.05) -> dict[str, Any]:
    """How often a judge's ``passed`` contradicted its ``score`` (see ``rubricforge_dspy.core.verdict``).

    The rate is over produced (non-abstained) verdicts, with an exact interval
    (:func:`proportion_ci`); ``rate`` and the interval are None when every verdict abstained.
    Returns ``n_verdicts, contradictions, rate, ci_low, ci_high``.
    """
    c = check_mask("contradiction", contradiction)
    produced = np.ones_like(c) if abstained is None else ~check_mask("abstained", abstained)
    check_same_length(contradiction=c, abstained=produced)
    n, k = int(produced.sum()), int((c & produced).sum())
    low, high = proportion_ci(k, n, alpha) if n else (None, None)
    return {"n_verdicts": n, "contradictions": k, "rate": k / n if n else None, "ci_low": low, "ci_high": high}
