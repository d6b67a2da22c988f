"""By-task, class-stratified train / validation / test splits.

Every trajectory of a task lands in the same split, so no test task is seen during induction.
Tasks are stratified by (domain, majority label over the task's trials), shuffled with a seeded RNG
and cut by the requested fractions inside each stratum: the same seed always gives the same split.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from rubricforge_dspy.core.trajectory import Trajectory, require_labels

DEFAULT_FRACTIONS = (0.50, 0.15, 0.35)
SPLIT_NAMES = ("train", "val", "test")


@dataclass(frozen=True)
class Split:
    """Train, validation and test trajectories whose tasks never overlap (`split_by_task`)."""

    train: list[Trajectory]
    val: list[Trajectory]
    test: list[Trajectory]

    def parts(self) -> dict[str, list[Trajectory]]:
        return {"train": self.train, "val": self.val, "test": self.test}

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per split: trajectories, tasks, positives and positive rate."""
        out = {}
        for name, items in self.parts().items():
            positives = sum(1 for t in items if t.label == 1)
            out[name] = {
                "trajectories": len(items),
                "tasks": len({(t.domain, t.task_id) for t in items}),
                "positives": positives,
                "positive_rate": round(positives / len(items), 4) if items else None,
            }
        return out


def _allocate(n: int, fractions: Sequence[float]) -> list[int]:
    """Largest-remainder allocation of n items to the three fractions."""
    exact = [f * n for f in fractions]
    counts = [int(x) for x in exact]
    for i in sorted(range(3), key=lambda i: exact[i] - counts[i], reverse=True)[: n - sum(counts)]:
        counts[i] += 1
    return counts


def split_by_task(trajectories: list[Trajectory], fractions: Sequence[float] = DEFAULT_FRACTIONS,
                  seed: int = 0) -> Split:
    """Split `trajectories` so that each task (domain, task_id) falls in exactly one part.

    Raises:
        UnlabeledError: a trajectory has no label (the split is stratified by label).
        ValueError: `fractions` are not three non-negative numbers summing to 1.
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions) or not np.isclose(sum(fractions), 1.0):
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    trajectories = require_labels(trajectories, "a class-stratified split (split_by_task)")
    by_task: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_task[(t.domain, t.task_id)].append(t)
    strata: dict[tuple[str, int], list[tuple[str, str]]] = defaultdict(list)
    for key, items in by_task.items():
        majority = int(np.mean([t.label for t in items]) >= 0.5)
        strata[(key[0], majority)].append(key)

    rng = np.random.default_rng(seed)
    assignment: dict[tuple[str, str], str] = {}
    for stratum in sorted(strata):
        tasks = sorted(strata[stratum])
        order = rng.permutation(len(tasks))
        counts = _allocate(len(tasks), fractions)
        bounds = np.cumsum([0, *counts])
        for part, (lo, hi) in zip(SPLIT_NAMES, zip(bounds[:-1], bounds[1:], strict=True), strict=True):
            for i in order[lo:hi]:
                assignment[tasks[i]] = part

    parts: dict[str, list[Trajectory]] = {name: [] for name in SPLIT_NAMES}
    for t in trajectories:
        parts[assignment[(t.domain, t.task_id)]].append(t)
    return Split(**parts)


def sample_by_task(trajectories: list[Trajectory], n_tasks: int, seed: int = 0) -> list[Trajectory]:
    """One trial (the lowest-numbered) of each of `n_tasks` tasks chosen with a seeded RNG: a small,
    task-diverse sample for quick runs on slow LMs."""
    first_trial: dict[tuple[str, str], Trajectory] = {}
    for t in sorted(trajectories, key=lambda t: (t.domain, t.task_id, t.trial or 0, t.id)):
        first_trial.setdefault((t.domain, t.task_id), t)
    tasks = sorted(first_trial)
    chosen = np.random.default_rng(seed).permutation(len(tasks))[:n_tasks]
    return [first_trial[tasks[i]] for i in sorted(chosen)]
