"""RubricForge-DSPy: induce an LLM judge's rubric for agent trajectories from labeled examples.

Public names are imported lazily, so `rubricforge stats` or `rubricforge report` do not pay for
importing DSPy.
"""

import importlib
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

_EXPORTS = {
    "JudgeTrajectory": "rubricforge_dspy.judge",
    "TrajectoryJudge": "rubricforge_dspy.judge",
    "SEED_RUBRIC": "rubricforge_dspy.rubric",
    "Trajectory": "rubricforge_dspy.trajectory",
    "Step": "rubricforge_dspy.trajectory",
    "Source": "rubricforge_dspy.trajectory",
    "load": "rubricforge_dspy.judge",
    "Verdict": "rubricforge_dspy.verdict",
    "judge_verdict": "rubricforge_dspy.execution",
    "freeze": "rubricforge_dspy.program",
    "induce": "rubricforge_dspy.induction",
    "load_trajectories": "rubricforge_dspy.loaders",
    "join_labels": "rubricforge_dspy.labels",
    "render_trajectory": "rubricforge_dspy.render",
    "UncertifiedJudgeWarning": "rubricforge_dspy.certificate",
    "SymptomFloor": "rubricforge_dspy.floor",
    "HybridJudge": "rubricforge_dspy.floor.hybrid",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rubricforge_dspy' has no attribute {name!r}")
