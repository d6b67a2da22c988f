"""RubricForge-DSPy: induce an LLM judge's rubric for agent trajectories from labeled examples."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from rubricforge_dspy.judge import JudgeTrajectory, TrajectoryJudge  # noqa: E402
from rubricforge_dspy.program import freeze, load  # noqa: E402
from rubricforge_dspy.rubric import SEED_RUBRIC  # noqa: E402
from rubricforge_dspy.trajectory import Source, Step, Trajectory  # noqa: E402

__version__ = "0.1.0"

__all__ = ["JudgeTrajectory", "TrajectoryJudge", "SEED_RUBRIC", "Trajectory", "Step", "Source", "load", "freeze",
           "induce"]


def induce(*args, **kwargs):
    """See `rubricforge_dspy.induce.induce`."""
    from rubricforge_dspy.induce import induce as _induce

    return _induce(*args, **kwargs)
