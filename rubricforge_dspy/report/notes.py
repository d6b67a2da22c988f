"""Report warnings and JSON-safe numbers."""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import numpy as np

__all__ = ["collect", "clean"]


@contextlib.contextmanager
def collect(notes: list[str], label: str):
    """Record warnings raised inside as report notes ``label: message`` (deduplicated, in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        msg = f"{label}: {w.message}"
        if msg not in notes:
            notes.append(msg)


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
