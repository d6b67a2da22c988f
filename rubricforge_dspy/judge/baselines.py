"""Baseline judges for the evaluation protocol.

- Oracle: the environment reward itself (the ceiling; it is what the judges try to predict).
- G-Eval: the generic seed rubric, through the same judge machinery as the induced one.
- FewShot: the seed rubric plus k labeled training demonstrations (class-balanced), no evolution.
- Heuristic: a non-LLM surface rule over observable symptoms (`symptoms.heuristic_verdict`).
- Majority: the training split's majority class for every item.
- Floor: the symptom floor, a logistic regression on observable features fit on the training split
  (`floor.model.SymptomFloor`, docs/FLOOR.md); Length-only: the same on steps and user turns alone.

Non-LLM baselines return the same verdict shape as `TrajectoryJudge` so every judge is persisted
and scored identically.
"""

from __future__ import annotations

import dspy
import numpy as np

from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.core.trajectory import Trajectory, UnlabeledError
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.evidence.symptoms import heuristic_verdict
from rubricforge_dspy.judge.floor import SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge


def verdict(passed: bool, score: float, reason: str) -> dspy.Prediction:
    return dspy.Prediction(passed=bool(passed), score=float(score), reason=reason, abstained=False, error=None)


def oracle(trajectory: Trajectory) -> dspy.Prediction:
    """The environment's outcome as a verdict: ``passed`` is the label, ``score`` the reward clipped to [0, 1]
    (the label itself when the source gave no reward). Raises `UnlabeledError` for an unlabeled trajectory."""
    if trajectory.label is None:
        raise UnlabeledError([trajectory], 1, "the oracle baseline")
    score = float(trajectory.label) if trajectory.reward is None else min(1.0, max(0.0, trajectory.reward))
    return verdict(trajectory.label == 1, score, "environment reward")


def heuristic(trajectory: Trajectory) -> dspy.Prediction:
    return verdict(*heuristic_verdict(trajectory))


class Majority:
    """Predicts the training split's majority class; score = training positive rate."""

    def __init__(self, train: list[Trajectory]):
        if not train:
            raise ValueError("Majority baseline needs a non-empty training split")
        self.positive_rate = float(np.mean([t.label for t in train]))

    def __call__(self, trajectory: Trajectory) -> dspy.Prediction:
        return verdict(self.positive_rate >= 0.5, self.positive_rate, "training majority class")


def symptom_floor(train: list[Trajectory]) -> SymptomFloor:
    """The floor fit on the training split (raises `floor.FloorError` when it holds one class)."""
    return SymptomFloor.fit(train)


def length_only(train: list[Trajectory]) -> SymptomFloor:
    """The length-only model (steps and user turns) fit on the training split."""
    return SymptomFloor.length_only(train)


def geval_judge(render_config: RenderConfig | None = None) -> TrajectoryJudge:
    """The G-Eval-style seed judge (`core.rubric.SEED_RUBRIC`), the baseline induction must beat."""
    return TrajectoryJudge(SEED_RUBRIC, render_config=render_config)


def select_demonstrations(train: list[Trajectory], k: int = 4, seed: int = 0) -> list[Trajectory]:
    """k training trajectories, alternating positive and negative where both exist, seeded."""
    rng = np.random.default_rng(seed)
    pools = {label: [t for t in train if t.label == label] for label in (1, 0)}
    for pool in pools.values():
        rng.shuffle(pool)
    chosen: list[Trajectory] = []
    while len(chosen) < k and any(pools.values()):
        for label in (1, 0):
            if pools[label] and len(chosen) < k:
                chosen.append(pools[label].pop())
    return chosen


def fewshot_judge(train: list[Trajectory], k: int = 4, seed: int = 0,
                  render_config: RenderConfig | None = None, demo_max_tokens: int | None = None) -> TrajectoryJudge:
    """The seed rubric with k labeled demonstrations from the training split (never from the test split).

    `demo_max_tokens` renders demonstrations with a smaller budget than the judged trajectory,
    to keep k demos inside a small model's context.
    """
    judge = geval_judge(render_config)
    demo_config = RenderConfig(max_tokens=demo_max_tokens, max_step_chars=judge.render_config.max_step_chars) \
        if demo_max_tokens else judge.render_config
    judge.judge.demos = [
        dspy.Example(
            trajectory=render_trajectory(t, demo_config),
            reason="Labeled example: the agent " + ("accomplished" if t.label else "did not accomplish") + " the task.",
            passed=bool(t.label),
            score=1.0 if t.label else 0.0,
        )
        for t in select_demonstrations(train, k, seed)
    ]
    return judge
