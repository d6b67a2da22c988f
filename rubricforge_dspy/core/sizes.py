"""Warnings that a run's data is too small to mean much, and how a caller that chose small sizes on purpose
says so once instead.

Induction and the evaluation protocol warn when a split is small or holds one class: validation selection
is mostly noise, no calibration or hybrid stack can be fit, a symptom floor cannot be trained, a test split
cannot certify. Those warnings go through `warn_small`. A caller that sized the run itself and has said,
once and plainly, what its sizes are for (the demo: `rubricforge_dspy.pipeline.demo`) runs inside
`sizes_explained`: the same messages are then logged at INFO (``--verbose`` shows them), not repeated
as warnings that tell a newcomer they did something wrong. Nothing else changes: every consequence is
still recorded where it always was (the manifest's notes, the report).

A call site uses `warn_small` only for the size or one-class condition itself (checked there), never for
another cause of the same failure, so an explanation of the sizes covers exactly what it demotes.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

__all__ = ["sizes_explained", "warn_small"]

_EXPLAINED: ContextVar[str | None] = ContextVar("rubricforge_sizes_explained", default=None)


@contextmanager
def sizes_explained(explanation: str) -> Iterator[None]:
    """Within this context, `warn_small` messages are logged at INFO: the caller has already told the user
    `explanation` (what the run's sizes are for, and what they leave out).

    Args:
        explanation: what the caller said (kept for debugging; the caller prints it).
    """
    if not explanation:
        raise ValueError("sizes_explained needs the explanation the caller gave")
    token = _EXPLAINED.set(explanation)
    try:
        yield
    finally:
        _EXPLAINED.reset(token)


def warn_small(logger: logging.Logger, message: str, *args: object) -> None:
    """Log a warning about data too small (or of one class) for a step to mean much; at INFO inside
    `sizes_explained`."""
    logger.log(logging.INFO if _EXPLAINED.get() else logging.WARNING, message, *args)
