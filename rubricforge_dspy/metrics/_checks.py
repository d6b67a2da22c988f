"""Input validation shared by the `rubricforge_dspy.metrics` modules (private to the package).

Every public metric validates its inputs with these before computing: a :class:`ValueError` names
the offending argument (empty input, mismatched lengths, non-binary labels, NaN / non-finite
values, scores outside ``[0, 1]``); an undefined statistic returns ``nan`` with an
:class:`sklearn.exceptions.UndefinedMetricWarning` saying why.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from sklearn.exceptions import UndefinedMetricWarning


def as_1d(name: str, x: ArrayLike) -> np.ndarray:
    if x is None:
        raise ValueError(f"{name} is required, got None")
    arr = np.asarray(x)
    if arr.ndim != 1:
        shape = "a scalar" if arr.ndim == 0 else f"shape {arr.shape}"
        raise ValueError(f"{name} must be a 1-D array-like, got {shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; at least one item is required")
    return arr


def require_real(name: str, arr: np.ndarray, what: str) -> None:
    if arr.dtype == bool:
        return
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must contain {what}, got an array of dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        n_nan = int(np.isnan(arr).sum())
        if n_nan:
            raise ValueError(f"{name} contains {n_nan} NaN value(s); metrics need a value for every item")


def check_binary(name: str, y: ArrayLike) -> np.ndarray:
    """1-D array of 0/1 labels (bools and 0.0/1.0 floats accepted) -> int64 array."""
    arr = as_1d(name, y)
    require_real(name, arr, "binary 0/1 labels")
    if arr.dtype != bool:
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            found = np.unique(arr[bad])[:5].tolist()
            raise ValueError(
                f"{name} must contain only binary labels 0 (fail) / 1 (pass); found {found}"
            )
    return arr.astype(np.int64)


def check_mask(name: str, m: ArrayLike) -> np.ndarray:
    return check_binary(name, m).astype(bool)


def check_finite(name: str, x: ArrayLike) -> np.ndarray:
    arr = as_1d(name, x)
    require_real(name, arr, "real numbers")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains non-finite values (inf)")
    return arr


def check_scores(name: str, s: ArrayLike) -> np.ndarray:
    arr = check_finite(name, s)
    if arr.min() < 0.0 or arr.max() > 1.0:
        raise ValueError(
            f"{name} must lie in [0, 1]; got values in [{arr.min():.6g}, {arr.max():.6g}]"
        )
    return arr


def check_same_length(**arrays: np.ndarray) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise ValueError(f"Inconsistent numbers of items: {desc}")
    return next(iter(lengths.values()))


def binary_pair(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    t = check_binary("y_true", y_true)
    p = check_binary("y_pred", y_pred)
    check_same_length(y_true=t, y_pred=p)
    return t, p


def check_bootstrap_params(n_resamples: Any, confidence: Any) -> None:
    if not isinstance(n_resamples, numbers.Integral) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not isinstance(confidence, numbers.Real) or not (0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be in the open interval (0, 1), got {confidence!r}")


def undefined_metric(reason: str) -> float:
    warnings.warn(reason, UndefinedMetricWarning, stacklevel=3)
    return math.nan



def graded_pair(scores: ArrayLike, rewards: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = check_scores("scores", scores)
    r = check_finite("rewards", rewards)
    check_same_length(scores=s, rewards=r)
    return s, r

