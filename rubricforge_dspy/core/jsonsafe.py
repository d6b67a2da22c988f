"""`clean`: a JSON-safe copy of a result (numpy scalars to Python, NaN and infinities to None), for every layer
that writes one (`trust`, `report`)."""

from __future__ import annotations

import math
from typing import Any, overload

import numpy as np

__all__ = ["clean"]


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
