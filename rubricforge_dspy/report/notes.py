"""Report warnings and JSON-safe numbers."""

from __future__ import annotations

import contextlib
import re
import warnings
from typing import Any, Iterator

from rubricforge_dspy.core.jsonsafe import clean

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
