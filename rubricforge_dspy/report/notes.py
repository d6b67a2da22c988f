"""Report warnings and JSON-safe numbers."""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from typing import Any, Iterator, overload

import numpy as np

__all__ = ["collect", "clean", "split_excluded"]

# `metrics.intervals.percentile_interval`'s note when some bootstrap resamples leave a statistic undefined
_EXCLUDED = re.compile(r"^(?P<where>[^:]+): (?P<what>.+?): the statistic was undefined \(nan\) on (?P<bad>\d+) of "
                       r"(?P<n>\d+) bootstrap resamples")


@contextlib.contextmanager
def collect(notes: list[str], label: str) -> Iterator[None]:
    """Record warnings raised inside as report notes ``label: message`` (deduplicated, in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        msg = f"{label}: {w.message}"
        if msg not in notes:
            notes.append(msg)


@overload
def clean(x: dict[Any, Any]) -> dict[str, Any]: ...
@overload
def clean(x: list[Any] | tuple[Any, ...]) -> list[Any]: ...
@overload
def clean(x: Any) -> Any: ...
def clean(x: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, nan/inf to None."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


def split_excluded(notes: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """``(warnings, excluded)``: the notes that are warnings, and the bootstrap resamples left out of an interval
    because the statistic was undefined on them (kappa or AUC on a resample holding one outcome: expected on few
    items, and said once in the report's facts rather than as a warning per judge and statistic). A statistic
    undefined on *every* resample stays a warning."""
    warnings_: list[str] = []
    excluded: list[dict[str, Any]] = []
    for note in notes:
        match = _EXCLUDED.match(note)
        if match is None:
            warnings_.append(note)
        else:
            excluded.append({"where": match["where"], "statistic": match["what"], "undefined": int(match["bad"]),
                             "resamples": int(match["n"])})
    return warnings_, excluded
