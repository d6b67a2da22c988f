"""The grid of a cascade's threshold vectors and what each vector does with the stages' confidences (the part of
Learn-then-Test that sees no label; `metrics.risk_control` tests the vectors). Pure numpy."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["PASS_LEVELS", "FAIL_LEVELS", "VERDICT_SPLIT", "stage_pairs", "threshold_grid", "prior_share",
           "cascade_outcomes"]

PASS_LEVELS: tuple[float, ...] = (math.inf, 0.99, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)
FAIL_LEVELS: tuple[float, ...] = (-math.inf, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4)
# a stage's verdict is pass at confidence >= 0.5 (core.verdict.PASS_THRESHOLD; metrics imports nothing above it):
# every threshold pair straddles it (`stage_pairs`), so no rule reverses a stage's verdict
VERDICT_SPLIT = 0.5

_Floats = NDArray[np.float64]


def stage_pairs(levels: Sequence[float] | None = None, pass_levels: Sequence[float] = PASS_LEVELS,
                fail_levels: Sequence[float] = FAIL_LEVELS) -> list[tuple[float, float]]:
    """One stage's distinct ``(t_pass, t_fail)`` pairs (``t_fail < t_pass``), fixed before any label is seen.

    Args:
        levels: the values the stage's confidence can take, when it takes few (a pass/fail verdict: ``(0, 1)``;
            a score in steps of 0.1: eleven values); None for a continuous confidence (the floor's probability).
            With levels, a threshold between two of them changes nothing, so only ``t_pass`` in ``{inf} + levels``
            and ``t_fail`` in ``{-inf} + levels`` are distinct rules: 4 pairs for a pass/fail verdict.
        pass_levels, fail_levels: the thresholds of a continuous confidence.

    Every pair straddles the stage's own verdict, ``t_fail < VERDICT_SPLIT <= t_pass`` (0.5,
    ``core.verdict.PASS_THRESHOLD``): a stage's rule may hand its verdict on but never reverses it (never passes
    an item at a confidence below 0.5 nor fails one at or above it; a recorded stage keeps a pass line's
    confidence in [0.5, 1] and a fail line's below 0.5, `judge.recorded.recorded_confidence`, so no pair turns
    another tool's pass into a fail or back). The default continuous thresholds already do.

    Returns:
        The pairs, "never decides" ``(inf, -inf)`` first.
    """
    if levels is not None:
        values = sorted({float(v) for v in levels})
        if not values or any(not 0.0 <= v <= 1.0 for v in values):
            raise ValueError(f"a stage's confidence levels must be values in [0, 1], got {levels!r}")
        pass_levels, fail_levels = (math.inf, *reversed(values)), (-math.inf, *values)
    pairs = [(tp, tf) for tp in pass_levels for tf in fail_levels if tf < VERDICT_SPLIT <= tp]
    if not pairs:
        raise ValueError(f"no (t_pass, t_fail) pair with t_fail < {VERDICT_SPLIT} <= t_pass in the levels given")
    return pairs


def threshold_grid(stages: int | Sequence[Sequence[float] | None], pass_levels: Sequence[float] = PASS_LEVELS,
                   fail_levels: Sequence[float] = FAIL_LEVELS) -> np.ndarray:
    """The product grid of per-stage ``(t_pass, t_fail)`` pairs (`stage_pairs`), shape ``(vectors, stages, 2)``;
    the first stage varies slowest.

    Args:
        stages: the number of stages (each with a continuous confidence), or per stage its confidence levels
            (None: continuous).
        pass_levels, fail_levels: the thresholds of a continuous confidence.
    """
    per_stage = [None] * stages if isinstance(stages, int) else list(stages)
    if len(per_stage) < 1:
        raise ValueError("a cascade has at least one stage")
    pairs = [np.asarray(stage_pairs(levels, pass_levels, fail_levels), dtype=np.float64) for levels in per_stage]
    index = np.stack(np.meshgrid(*[np.arange(len(p)) for p in pairs], indexing="ij"), -1).reshape(-1, len(pairs))
    return np.stack([pairs[k][index[:, k]] for k in range(len(pairs))], axis=1)


def prior_share(grid: np.ndarray, stages: int | Sequence[Sequence[float] | None]) -> _Floats:
    """A label-free guess of each vector's decided share, to order a fixed sequence before any data: a
    continuous confidence taken as uniform on [0, 1], a discrete one as uniform on its levels."""
    per_stage = [None] * grid.shape[1] if isinstance(stages, int) else list(stages)
    undecided = np.ones(grid.shape[0])
    for k, levels in enumerate(per_stage):
        tp, tf = grid[:, k, 0], grid[:, k, 1]
        if levels is None:
            share = np.clip(1.0 - np.where(np.isfinite(tp), tp, 1.0), 0, 1) + np.clip(np.where(np.isfinite(tf), tf,
                                                                                                  0.0), 0, 1)
        else:
            values = np.asarray(sorted({float(v) for v in levels}))
            share = ((values[None, :] >= tp[:, None]) | (values[None, :] <= tf[:, None])).mean(axis=1)
        undecided *= 1.0 - np.clip(share, 0, 1)
    return 1.0 - undecided


def cascade_outcomes(confidences: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What each vector of `grid` does with each item.

    Args:
        confidences: shape ``(n_stages, n)``; NaN where a stage has no confidence (hands on).
        grid: shape ``(vectors, n_stages, 2)`` (`threshold_grid`).

    Returns:
        ``(decided, passed, stage)``, each of shape ``(vectors, n)``: decided by some stage, the verdict,
        and the index of the deciding stage (-1: escalated).
    """
    conf = np.asarray(confidences, dtype=np.float64)
    if conf.ndim != 2 or conf.shape[0] != grid.shape[1]:
        raise ValueError(f"confidences must have shape (stages={grid.shape[1]}, n), got {conf.shape}")
    v, n = grid.shape[0], conf.shape[1]
    decided = np.zeros((v, n), dtype=bool)
    passed = np.zeros((v, n), dtype=bool)
    stage = np.full((v, n), -1, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        for k in range(grid.shape[1]):
            c = conf[k][None, :]
            says_pass = c >= grid[:, k, 0][:, None]
            says_fail = c <= grid[:, k, 1][:, None]
            new = ~decided & (says_pass | says_fail)
            passed |= new & says_pass
            stage[new] = k
            decided |= new
    return decided, passed, stage
