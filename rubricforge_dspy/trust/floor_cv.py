"""The floor on any labeled data, by task-grouped cross-validation (`rubricforge floor`).

Folds: ``sklearn.model_selection.StratifiedGroupKFold`` with groups = tasks (``domain/task_id``), so
every trial of a task lands in one fold and no task is ever on both sides of a split; the folds keep
the pass rate of the data as far as whole tasks allow (shuffled with a seed). Each trajectory is
scored by the model trained on the other folds (out-of-fold scores), and the metrics are computed on
those scores: what the floor reaches on tasks it never saw.

Three rows: the symptom floor (every feature), the length-only model (steps and user turns), and the
fixed Heuristic surface rule (`symptoms.heuristic_verdict`, no training). For each: kappa, false-pass
rate with its exact Clopper-Pearson interval, accuracy, AUC, n (from `metrics.binary_summary`, the
report's own row: kappa and AUC intervals resample whole tasks when tasks repeat). No LM is called.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rubricforge_dspy import metrics
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.judge_names import (
    FLOOR,
    FLOOR_FOLDS,
    FLOOR_GIVEAWAY_RULE,
    FLOOR_RESAMPLES,
    GIVEAWAY_RULE,
    LENGTH_ONLY,
    floor_gives_away,
    gives_away,
)
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.core.verdict import PASS_THRESHOLD, Verdict, VerdictSubject, verdict_line
from rubricforge_dspy.evidence.features import FEATURES, LENGTH_FEATURES, FeatureTable
from rubricforge_dspy.judge.floor import FloorError, SymptomFloor

__all__ = ["HEURISTIC", "task_groups", "grouped_folds", "CrossValidated", "cross_validate", "floor_report",
           "summary_row", "format_floor_report", "verdict_lines", "write_cv_verdicts", "DEFAULT_FOLDS",
           "DEFAULT_RESAMPLES"]

HEURISTIC = "heuristic"
DEFAULT_FOLDS = FLOOR_FOLDS
DEFAULT_RESAMPLES = FLOOR_RESAMPLES


Items = Sequence[Trajectory] | FeatureTable


def _table(items: Items, needed_by: str) -> FeatureTable:
    """`items` as a `FeatureTable` (built once from a list, after checking every item is labeled)."""
    if isinstance(items, FeatureTable):
        return items.require_labels(needed_by)
    return FeatureTable.build(require_labels(items, needed_by))


def task_groups(trajectories: Items) -> list[str]:
    """The group of each trajectory (or `FeatureTable` item) for splitting: its task, ``domain/task_id``."""
    if isinstance(trajectories, FeatureTable):
        return trajectories.groups
    return [f"{t.domain}/{t.task_id}" for t in trajectories]


def grouped_folds(trajectories: Items, n_splits: int = DEFAULT_FOLDS,
                  seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, test indices) of each fold; no task is on both sides of any fold (see above).
    Fewer folds than asked when there are fewer tasks (or items of the larger class); at least two tasks
    are needed."""
    from sklearn.model_selection import StratifiedGroupKFold

    if n_splits < 2:
        raise FloorError(f"cross-validation needs at least 2 folds, got {n_splits}")
    if isinstance(trajectories, FeatureTable):
        _table(trajectories, "the floor's cross-validation")
        y = trajectories.labels
    else:
        trajectories = require_labels(trajectories, "the floor's cross-validation")
        y = np.array([t.label for t in trajectories])
    groups = task_groups(trajectories)
    n_groups = len(set(groups))
    if n_groups < 2:
        raise FloorError(f"task-grouped cross-validation needs at least 2 tasks, got {n_groups}")
    # StratifiedGroupKFold needs some class with at least k members; fewer tasks give fewer folds
    k = min(n_splits, n_groups, int(np.bincount(y, minlength=2).max()))
    if k < 2:
        raise FloorError(f"task-grouped cross-validation needs 2 folds, and so at least 2 labeled trajectories of one "
                         f"class (got {np.bincount(y, minlength=2).tolist()} failed/passed on {n_groups} tasks): "
                         "label more trajectories")
    splitter = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class in y has only", category=UserWarning)
        folds = [(train, test) for train, test in splitter.split(np.zeros(len(y)), y, groups)]
    return [(train, test) for train, test in folds if len(test) and len(train)]


@dataclass(frozen=True)
class CrossValidated:
    """Out-of-fold P(pass) of one model, with the fold each item was scored in."""

    name: str
    scores: np.ndarray
    folds: np.ndarray
    notes: list[str] = field(default_factory=list)

    @property
    def verdicts(self) -> np.ndarray:
        return (self.scores >= PASS_THRESHOLD).astype(np.int64)


def cross_validate(trajectories: Items, features: Sequence[str] = FEATURES, *,
                   name: str | None = None, n_splits: int = DEFAULT_FOLDS, seed: int = 0,
                   folds: list[tuple[np.ndarray, np.ndarray]] | None = None) -> CrossValidated:
    """Out-of-fold scores of a `SymptomFloor` over `features`, on labeled trajectories or their
    `FeatureTable` (each item's features are computed once, not once per fold). A fold whose training
    part holds one class scores its items with that training part's pass rate (counted in ``notes``)."""
    folds = folds if folds is not None else grouped_folds(trajectories, n_splits, seed)
    table = _table(trajectories, "the floor fit")
    scores = np.full(len(table), np.nan)
    fold_of = np.full(len(table), -1, dtype=np.int64)
    notes: list[str] = []
    name = name or (LENGTH_ONLY if tuple(features) == LENGTH_FEATURES else FLOOR)
    for number, (train, test) in enumerate(folds):
        part = table.take(train)
        try:
            model = SymptomFloor.fit(part, features, name)
            scores[test] = model.predict_proba(table.take(test))
        except FloorError:
            rate = float(np.mean(part.labels.tolist())) if len(part) else 0.0
            scores[test] = rate
            notes.append(f"{name}: fold {number}'s training part holds one class; its {len(test)} item(s) "
                         f"scored with the training pass rate {rate:.2f}")
        fold_of[test] = number
    if np.isnan(scores).any():
        raise AssertionError("every item is in exactly one test fold")
    return CrossValidated(name, scores, fold_of, notes)


def summary_row(name: str, description: str, y: np.ndarray, verdicts: np.ndarray, scores: np.ndarray,
                groups: list[str], *, n_resamples: int, seed: int, confidence: float,
                notes: list[str]) -> dict[str, Any]:
    """One row of the report: `metrics.binary_summary` of `verdicts`/`scores` against `y` (kappa and AUC intervals
    resampling whole `groups`), its warnings added to `notes`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = metrics.binary_summary(y, verdicts, scores, n_resamples=n_resamples, seed=seed,
                                         confidence=confidence, clusters=groups)
    for w in caught:
        note = f"{name}: {w.message}"
        if note not in notes:
            notes.append(note)
    keep = ("n", "tp", "fp", "fn", "tn", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "kappa",
            "kappa_ci_low", "kappa_ci_high", "auc", "auc_ci_low", "auc_ci_high", "false_pass_rate",
            "false_pass_ci_low", "false_pass_ci_high", "predicted_positive_rate", "bootstrap")
    return {"judge": name, "description": description, **{k: summary[k] for k in keep}}


def floor_report(trajectories: Items, *, n_splits: int = DEFAULT_FOLDS, seed: int = 0,
                 n_resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95) -> dict[str, Any]:
    """The floor, the length-only model and the Heuristic on `trajectories` (labeled), or on their
    `FeatureTable` (`rubricforge floor` streams its input into one), as one JSON-safe dict: rows, the
    length giveaway verdict, the folds' sizes, and the floor refit on all the data (its coefficients say
    which symptoms carry the signal). ``floor_gives_away`` flags a floor whose held-out kappa says the
    observable features give the outcome away (`core.judge_names.floor_gives_away`)."""
    from rubricforge_dspy.core.jsonsafe import clean

    items = _table(trajectories, "the floor report")
    if not len(items):
        raise FloorError("no trajectories to fit a floor on")
    y = items.labels
    if len(set(y.tolist())) < 2:
        raise FloorError(f"every trajectory is {'passed' if y[0] else 'failed'}: kappa, AUC and the floor are "
                         "undefined on one class (check --label-threshold)")
    groups = task_groups(items)
    folds = grouped_folds(items, n_splits, seed)
    floor = cross_validate(items, FEATURES, name=FLOOR, folds=folds)
    length = cross_validate(items, LENGTH_FEATURES, name=LENGTH_ONLY, folds=folds)
    notes = [*floor.notes, *length.notes]
    row = partial(summary_row, n_resamples=n_resamples, seed=seed, confidence=confidence, notes=notes)
    rows = [
        row(FLOOR, f"symptom floor: logistic regression on {len(FEATURES)} observable features, "
            f"task-grouped {len(folds)}-fold cross-validation", y, floor.verdicts, floor.scores, groups),
        row(LENGTH_ONLY, "length only: logistic regression on steps and user turns, same folds", y,
            length.verdicts, length.scores, groups),
        row(HEURISTIC, "fixed Heuristic surface rule (no training)", y,
            items.heuristic_passed.astype(np.int64), items.heuristic_score, groups),
    ]
    length_row = rows[1]
    full = SymptomFloor.fit(items, FEATURES, FLOOR)
    return clean({
        "n": len(items), "positives": int(y.sum()), "base_pass_rate": float(y.mean()),
        "tasks": len(set(groups)), "folds": {"n": len(folds), "seed": seed, "grouped_by": "domain/task_id",
                                             "splitter": "sklearn StratifiedGroupKFold (shuffled)",
                                             "test_sizes": [int(len(test)) for _, test in folds]},
        "confidence": confidence, "bootstrap_resamples": n_resamples, "rows": rows,
        "length_gives_away": gives_away(length_row["auc"], length_row["auc_ci_low"]),
        "giveaway_rule": GIVEAWAY_RULE,
        "floor_gives_away": floor_gives_away(rows[0]["kappa"]),  # no judge can be compared against it then
        "floor_giveaway_rule": FLOOR_GIVEAWAY_RULE,
        "floor_fit_on_all": {"coefficients": dict(zip(full.features, full.model.coef, strict=True)),
                             "intercept": full.model.intercept,
                             "note": "standardized inputs: a coefficient is the change of the log-odds of "
                                     "passing per standard deviation of the feature"},
        "notes": notes,
    })


def verdict_lines(trajectories: Items, scores: np.ndarray, name: str) -> list[dict[str, Any]]:
    """Verdict lines (`verdict.verdict_line`) of out-of-fold scores: pass when the score is >= 0.5."""
    items: Sequence[VerdictSubject] = trajectories.rows() if isinstance(trajectories, FeatureTable) else trajectories
    return [verdict_line(t, Verdict.from_answer(float(s) >= PASS_THRESHOLD, float(s),
                                                f"{name}: out-of-fold p(pass) = {float(s):.3f}"), model=name)
            for t, s in zip(items, scores, strict=True)]


def write_cv_verdicts(trajectories: Items, out_dir: PathArg, *, n_splits: int = DEFAULT_FOLDS, seed: int = 0,
                      names: Sequence[str] = (FLOOR, LENGTH_ONLY, HEURISTIC)) -> dict[str, Path]:
    """Out-of-fold verdict files ``OUT/<name>.jsonl`` of the floor, the length-only model (same folds) and
    the Heuristic on `trajectories`, for `rubricforge report` and `gate --floor-verdicts`; returns
    ``{name: path}``."""
    import json

    folds = grouped_folds(trajectories, n_splits, seed)
    items = _table(trajectories, "the floor's cross-validation")
    scorers = {FLOOR: lambda: cross_validate(items, FEATURES, name=FLOOR, folds=folds).scores,
               LENGTH_ONLY: lambda: cross_validate(items, LENGTH_FEATURES, name=LENGTH_ONLY, folds=folds).scores,
               HEURISTIC: lambda: items.heuristic_score}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name in names:
        written[name] = out / f"{name}.jsonl"
        with written[name].open("w", encoding="utf-8") as handle:
            for line in verdict_lines(items, scorers[name](), name):
                handle.write(json.dumps(line) + "\n")
    return written


def _rate(row: dict[str, Any], key: str, ci: str | None = None) -> str:
    ci = ci or key
    value, low, high = row.get(key), row.get(f"{ci}_ci_low"), row.get(f"{ci}_ci_high")
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else "")


def format_floor_report(report: dict[str, Any], where: str) -> str:
    """The floor report of `floor_report` as `rubricforge floor` prints it: the data (`where`), one row per
    model (kappa, false-pass rate, accuracy, AUC with intervals), the length giveaway sentence and notes."""
    from rubricforge_dspy.core.judge_names import FLOOR, LENGTH_ONLY, floor_giveaway_sentence, giveaway_sentence

    level = int(round(100 * report["confidence"]))
    lines = [f"data: {where}: {report['n']} trajectories on {report['tasks']} tasks, {report['positives']} passed "
             f"(base pass rate {report['base_pass_rate']:.3f})",
             f"task-grouped {report['folds']['n']}-fold cross-validation (seed {report['folds']['seed']}); "
             f"{level}% intervals: exact Clopper-Pearson for the false-pass rate, bootstrap for kappa and AUC", ""]
    header = f"{'judge':<12} {'kappa':<24} {'false-pass rate (exact)':<26} {'accuracy':<9} {'AUC':<24} {'n':>5}"
    lines += [header, "-" * len(header)]
    for row in report["rows"]:
        accuracy = f"{row['accuracy']:.3f}" if row.get("accuracy") is not None else "n/a"
        lines.append(f"{row['judge']:<12} {_rate(row, 'kappa'):<24} {_rate(row, 'false_pass_rate', 'false_pass'):<26} "
                     f"{accuracy:<9} {_rate(row, 'auc'):<24} {row['n']:>5}")
    length = next(r for r in report["rows"] if r["judge"] == LENGTH_ONLY)
    lines += ["", giveaway_sentence(length["auc"], length["auc_ci_low"], length["auc_ci_high"]).replace("**", "")]
    floor = next(r for r in report["rows"] if r["judge"] == FLOOR)
    warning = floor_giveaway_sentence(floor["kappa"])
    if warning:
        lines.append("WARNING: " + warning.replace("**", ""))
    for note in report.get("notes") or []:
        lines.append(f"note: {note}")
    return "\n".join(lines)
