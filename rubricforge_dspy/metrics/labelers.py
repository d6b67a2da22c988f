"""Agreement between several labelers: Cohen's kappa per pair, Krippendorff's nominal alpha (Krippendorff 2011,
"Computing Krippendorff's alpha-reliability"), and `labeler_agreement` with item-bootstrap intervals: the human
ceiling a judge's agreement is read against.

Conventions: see :mod:`rubricforge_dspy.metrics`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from rubricforge_dspy.metrics._checks import undefined_metric

# ``ratings``: one mapping per item, ``{labeler: value}``, over nominal values (any hashable: 0/1, words). An
# item rated by one labeler only carries no information on agreement and is left out of every statistic here
# (counted as ``single``).

LABELER_RESAMPLES = 2000  # bootstrap resamples of the labeler-agreement intervals (over items)


def _multiply_rated(ratings: Any) -> list[dict[Any, Any]]:
    out = []
    for item in ratings:
        if not hasattr(item, "items"):
            raise ValueError(f"ratings must be mappings {{labeler: value}}, got {type(item).__name__}")
        present = {who: value for who, value in item.items() if value is not None}
        if len(present) >= 2:
            out.append(present)
    return out


def krippendorff_alpha_nominal(units: Any) -> float:
    """Krippendorff's alpha for nominal values: ``1 - D_o / D_e`` from the coincidence matrix.

    ``units`` holds, per item, the values its labelers gave (a sequence of hashables; missing values are
    simply absent). A unit with ``m_u >= 2`` values adds ``1 / (m_u - 1)`` to ``o[c, k]`` for each ordered
    pair of its values; with ``n_c = sum_k o[c, k]`` and ``n = sum_c n_c``,
    ``alpha = 1 - (n - 1) * sum_{c != k} o[c, k] / sum_{c != k} n_c n_k`` (Krippendorff, *Content Analysis*,
    4th ed., 2019, ch. 12; "Computing Krippendorff's alpha-reliability", 2011, section C, whose nominal
    example with missing values gives 0.743). Units with fewer than two values are not pairable and are left
    out. ``nan`` (with an ``UndefinedMetricWarning``) when fewer than two pairable values exist or every
    value is the same (``D_e = 0``).
    """
    values: list[list[Any]] = []
    for unit in units:
        present = [v for v in unit if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if len(present) >= 2:
            values.append(present)
    categories = sorted({v for unit in values for v in unit}, key=repr)
    index = {c: i for i, c in enumerate(categories)}
    o = np.zeros((len(categories), len(categories)))
    for unit in values:
        counts = np.bincount([index[v] for v in unit], minlength=len(categories)).astype(float)
        o += (np.outer(counts, counts) - np.diag(counts)) / (len(unit) - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    expected = n_c.sum() ** 2 - float((n_c ** 2).sum())  # sum_{c != k} n_c n_k
    if n < 2 or expected == 0:
        return undefined_metric("Krippendorff's alpha is undefined: fewer than two pairable values, or every "
                                "value is the same; returning nan")
    observed = float(o.sum() - np.trace(o))
    return float(1.0 - (n - 1) * observed / expected)


def _kappa_from_confusion(confusion: np.ndarray) -> np.ndarray:
    """Cohen's kappa from confusion counts of shape ``(..., K, K)`` (rows: one labeler, columns: the other);
    nan where it is undefined (no items, or chance agreement 1)."""
    total = confusion.sum(axis=(-2, -1))
    safe = np.where(total > 0, total, 1.0)
    p_o = np.trace(confusion, axis1=-2, axis2=-1) / safe
    p_e = (confusion.sum(axis=-1) * confusion.sum(axis=-2)).sum(axis=-1) / safe ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((total > 0) & (p_e < 1), (p_o - p_e) / np.where(p_e < 1, 1 - p_e, 1.0), np.nan)


def _alpha_from_coincidences(o: np.ndarray) -> np.ndarray:
    """Krippendorff's nominal alpha from coincidence matrices of shape ``(..., K, K)``; nan where undefined."""
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    expected = n ** 2 - (n_c ** 2).sum(axis=-1)
    observed = o.sum(axis=(-2, -1)) - np.trace(o, axis1=-2, axis2=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n >= 2) & (expected > 0), 1.0 - (n - 1) * observed / np.where(expected > 0, expected, 1.0),
                        np.nan)


def labeler_agreement(ratings: Any, *, confidence: float = 0.95, resamples: int = LABELER_RESAMPLES,
                      seed: int = 0) -> dict[str, Any]:
    """Agreement between the labelers of the same items, each statistic with a bootstrap interval.

    Args:
        ratings: per item, a mapping ``{labeler: value}`` (nominal values; None is no value). Items with
            fewer than two values are counted (``single``) and left out.
        confidence: the level of the intervals.
        resamples: bootstrap resamples (over items: the items labeled at least twice are resampled with
            replacement, each keeping all its labels, the same resamples for every statistic; Efron & Tibshirani
            1993, percentile interval, `metrics.intervals.resample_weights`).
        seed: the bootstrap's seed (reported in the result).

    Returns:
        ``{"items", "single", "labelers", "raw_agreement", "alpha", "pairs", "interval"}``:
        ``raw_agreement`` is the share of the items rated at least twice on which all their labelers gave the
        same value; ``alpha`` Krippendorff's nominal alpha over all labelers (as `krippendorff_alpha_nominal`);
        ``pairs`` one record per pair of labelers sharing items (``n``, ``agreement``: share of the shared
        items with the same value; ``kappa``: Cohen's kappa, equal to `sklearn.metrics.cohen_kappa_score` on
        them). Every statistic is ``{"value", "low", "high"}`` (nan where undefined, e.g. kappa when both gave
        one value throughout); ``interval`` says how the intervals were made (method, confidence, resamples, seed).

    Raises:
        ValueError: an item is not a mapping, or a bad confidence / resample count.
    """
    from rubricforge_dspy.metrics.intervals import resample_weights

    all_items = list(ratings)
    rated = _multiply_rated(all_items)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if isinstance(resamples, bool) or not isinstance(resamples, numbers.Integral) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    labelers = sorted({who for r in rated for who in r}, key=str)
    interval_info = {"method": "percentile bootstrap over items", "confidence": confidence,
                     "resamples": resamples, "seed": seed}
    nan_stat = {"value": math.nan, "low": math.nan, "high": math.nan}
    if not rated:
        return {"items": 0, "single": len(all_items), "labelers": labelers, "raw_agreement": dict(nan_stat),
                "alpha": dict(nan_stat), "pairs": [], "interval": interval_info}
    categories = sorted({v for r in rated for v in r.values()}, key=repr)
    k = len(categories)
    code = {c: i for i, c in enumerate(categories)}
    n = len(rated)
    matrix = np.full((n, len(labelers)), -1, dtype=np.int64)  # item x labeler category codes, -1: no value
    for i, r in enumerate(rated):
        for j, who in enumerate(labelers):
            if who in r:
                matrix[i, j] = code[r[who]]
    counts = np.stack([(matrix == c).sum(axis=1) for c in range(k)], axis=1).astype(np.float64)  # n x K
    m_u = counts.sum(axis=1)
    coincidences = ((counts[:, :, None] * counts[:, None, :]) - np.einsum("ic,cd->icd", counts, np.eye(k))) \
        / (m_u - 1)[:, None, None]  # n x K x K: each item's contribution to the coincidence matrix
    agree = (counts.max(axis=1) == m_u).astype(np.float64)
    point = np.ones((1, n))
    weights = np.concatenate([point, *resample_weights(n, resamples, seed)])  # row 0: the data as they are
    alpha = _alpha_from_coincidences((weights @ coincidences.reshape(n, k * k)).reshape(-1, k, k))
    return {
        "items": n, "single": len(all_items) - n, "labelers": labelers,
        "raw_agreement": _bootstrap_stat(_ratio(weights @ agree, weights.sum(axis=1)), confidence, "raw agreement"),
        "alpha": _bootstrap_stat(alpha, confidence, "Krippendorff's alpha"),
        "pairs": _pair_agreements(matrix, labelers, k, weights, confidence),
        "interval": interval_info,
    }


def _bootstrap_stat(values: np.ndarray, confidence: float, what: str) -> dict[str, float]:
    """``{"value", "low", "high"}`` from a statistic's values, one per weights row: row 0 the data as they are,
    the rest the bootstrap replicates (percentile interval)."""
    import warnings

    from rubricforge_dspy.metrics.intervals import percentile_interval

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)  # nan replicates are reported as nan bounds
        low, high = percentile_interval(values[1:], confidence, what)
    return {"value": float(values[0]), "low": low, "high": high}


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator`` elementwise, nan where the denominator is not positive."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), np.nan)


def _pair_agreements(matrix: np.ndarray, labelers: list[Any], k: int, weights: np.ndarray,
                     confidence: float) -> list[dict[str, Any]]:
    """One record per pair of labelers sharing items (``a``, ``b``, ``n``, ``agreement``, ``kappa``), each
    statistic with its bootstrap interval over the rows of `weights` (item x labeler codes in `matrix`, -1: none)."""
    n = matrix.shape[0]
    pairs = []
    for a in range(len(labelers)):
        for b in range(a + 1, len(labelers)):
            shared = (matrix[:, a] >= 0) & (matrix[:, b] >= 0)
            if not shared.any():
                continue
            onehot = np.zeros((n, k * k))
            onehot[shared, matrix[shared, a] * k + matrix[shared, b]] = 1.0
            confusion = (weights @ onehot).reshape(-1, k, k)
            same = (matrix[:, a] == matrix[:, b]) & shared
            pairs.append({
                "a": labelers[a], "b": labelers[b], "n": int(shared.sum()),
                "agreement": _bootstrap_stat(_ratio(weights @ same.astype(float), weights @ shared.astype(float)),
                                             confidence, f"agreement {labelers[a]}/{labelers[b]}"),
                "kappa": _bootstrap_stat(_kappa_from_confusion(confusion), confidence,
                                         f"kappa {labelers[a]}/{labelers[b]}"),
            })
    return pairs


def format_labeler_agreement(agreement: dict[str, Any], rater_word: str = "labelers") -> list[str]:
    """`labeler_agreement`'s result as lines: ``"2 labelers agree on 87.0% of 106 items [80.2%, 92.5%];
    Krippendorff's alpha 0.74 [..]"`` then one line per pair (agreement, Cohen's kappa)."""
    def pct(stat: dict[str, float]) -> str:
        return f"{stat['value']:.1%} [{stat['low']:.1%}, {stat['high']:.1%}]"

    def num(stat: dict[str, float]) -> str:
        return f"{stat['value']:.2f} [{stat['low']:.2f}, {stat['high']:.2f}]"

    if not agreement["items"]:
        return [f"no item has labels from two {rater_word}: no agreement to measure"]
    iv = agreement["interval"]
    lines = [f"{len(agreement['labelers'])} {rater_word} agree on {pct(agreement['raw_agreement'])} of "
             f"{agreement['items']} items labeled at least twice; Krippendorff's alpha (nominal) "
             f"{num(agreement['alpha'])}"]
    for pair in agreement["pairs"]:
        lines.append(f"  {pair['a']} vs {pair['b']}: agree on {pct(pair['agreement'])} of {pair['n']}; "
                     f"Cohen's kappa {num(pair['kappa'])}")
    lines.append(f"  ({iv['confidence']:.0%} intervals: {iv['method']}, {iv['resamples']} resamples, "
                 f"seed {iv['seed']})")
    return lines
