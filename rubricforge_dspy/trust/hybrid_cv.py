"""The hybrid stage on labeled data: the floor's model with a judge's verdict and score as inputs
(`judge.hybrid.fit_stack` ``with_passed``), cross-validated like the floor (`rubricforge floor --judge-verdicts`).

The folds are the floor report's (`trust.floor_cv.grouped_folds`: task-grouped, same seed), so the hybrid's row
compares with the floor's on the same held-out tasks. Each item is scored by the stack fit on the other folds
(out-of-fold P(pass)); an item the judge gave no verdict (no line for its id, or an abstention) cannot be graded
by the hybrid: it is scored 0 (a fail, the package's rule for an abstention) and counted, and left out of every
fit. Two rows join the report: the judge alone (its own ``passed`` and score, same items) and the hybrid.

No LM is called here: the judge's verdicts are given (recorded, or judged once by the caller).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import numpy as np

from rubricforge_dspy.core.verdict import PASS_THRESHOLD, Verdict
from rubricforge_dspy.evidence.features import FEATURES, FeatureTable
from rubricforge_dspy.judge.floor import FloorError
from rubricforge_dspy.judge.hybrid import Stack, fit_stack, stack_matrix
from rubricforge_dspy.trust.floor_cv import CrossValidated, grouped_folds, summary_row, task_groups

__all__ = ["JUDGE", "HYBRID", "graded", "cross_validate_hybrid", "hybrid_rows", "fit_hybrid_stack"]

JUDGE = "judge"
HYBRID = "hybrid"


def graded(verdicts: Sequence[Verdict | None]) -> np.ndarray:
    """Which items the judge graded (a produced verdict: not missing, not an abstention)."""
    return np.array([v is not None and not v.abstained for v in verdicts], dtype=bool)


def _scores(stack: Stack, verdicts: Sequence[Verdict | None], table: FeatureTable) -> np.ndarray:
    ok = graded(verdicts)
    scores = np.zeros(len(table))
    if ok.any():
        produced = [v for v, g in zip(verdicts, ok, strict=True) if g and v is not None]  # graded: not None
        rows = stack_matrix(produced, table.matrix(FEATURES)[ok], stack.with_passed)
        scores[ok] = stack.model.predict(rows)
    return scores


def fit_hybrid_stack(verdicts: Sequence[Verdict | None], table: FeatureTable, source: str) -> Stack:
    """The hybrid stage's stack on all the labeled items: the judge's score and verdict with every feature."""
    return fit_stack(verdicts, table, with_passed=True, on=f"verdicts of {source} on the labeled data")


def cross_validate_hybrid(table: FeatureTable, verdicts: Sequence[Verdict | None], *,
                          folds: list[tuple[np.ndarray, np.ndarray]]) -> CrossValidated:
    """Out-of-fold P(pass) of the hybrid stack (see the module docstring); a fold whose graded training items
    hold one class scores its graded items with their pass rate (counted in ``notes``)."""
    scores = np.zeros(len(table))
    fold_of = np.full(len(table), -1, dtype=np.int64)
    notes: list[str] = []
    for number, (train, test) in enumerate(folds):
        part = [verdicts[i] for i in train]
        try:
            stack = fit_stack(part, table.take(train), with_passed=True)
            scores[test] = _scores(stack, [verdicts[i] for i in test], table.take(test))
        except FloorError:
            labels = table.labels[train][graded(part)]
            rate = float(labels.mean()) if len(labels) else 0.0
            scores[test] = np.where(graded([verdicts[i] for i in test]), rate, 0.0)
            notes.append(f"{HYBRID}: fold {number}'s graded training items hold one class (or none); its "
                         f"{len(test)} item(s) scored with the training pass rate {rate:.2f}")
        fold_of[test] = number
    return CrossValidated(HYBRID, scores, fold_of, notes)


def hybrid_rows(table: FeatureTable, verdicts: Sequence[Verdict | None], source: str, *, n_splits: int,
                seed: int, n_resamples: int, confidence: float = 0.95) -> dict[str, Any]:
    """The judge's and the hybrid's report rows on the floor report's folds, and what the judge did not grade.

    Returns:
        ``{"rows": [judge row, hybrid row], "judge": {"source", "graded", "missing", "abstained"}, "notes"}``.
    """
    table = table.require_labels("the hybrid's cross-validation")
    folds = grouped_folds(table, n_splits, seed)
    groups, y = task_groups(table), table.labels
    hybrid = cross_validate_hybrid(table, verdicts, folds=folds)
    ok = graded(verdicts)
    judge_passed = np.array([bool(v is not None and v.passed) for v in verdicts], dtype=np.int64)
    judge_score = np.array([v.score if v is not None else 0.0 for v in verdicts], dtype=np.float64)
    notes = list(hybrid.notes)
    row = partial(summary_row, n_resamples=n_resamples, seed=seed, confidence=confidence, notes=notes)
    missing = sum(v is None for v in verdicts)
    ungraded = f"; {int((~ok).sum())} item(s) without a verdict count as fails" if (~ok).any() else ""
    rows = [row(JUDGE, f"the judge alone: {source}{ungraded}", y, judge_passed, judge_score, groups),
            row(HYBRID, f"hybrid: the floor's model with the judge's verdict and score as inputs, same "
                                f"folds{ungraded}", y, (hybrid.scores >= PASS_THRESHOLD).astype(np.int64),
                hybrid.scores, groups)]
    return {"rows": rows, "notes": notes,
            "judge": {"source": source, "graded": int(ok.sum()), "missing": missing,
                      "abstained": int(len(verdicts) - ok.sum() - missing)}}
