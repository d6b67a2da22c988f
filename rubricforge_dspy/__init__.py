"""RubricForge-DSPy: induce an LLM judge's rubric for agent trajectories from labeled examples.

The top level holds the names of a DSPy user's path, in two dozen names: load examples, judge, induce,
load and save, evaluate, reward. Everything else lives in its stage subpackage, each with its own
curated names (docs/ARCHITECTURE.md, docs/API.md)::

    load -> render -> judge -> induce -> freeze -> apply -> trust -> report
    data    evidence  judge    induction program    apply    trust    report

    import dspy, rubricforge_dspy as rf
    trajectories = rf.load_trajectories("results.json")  # a list; .report counts what was skipped
    examples = rf.load_examples("results.json", labels="labels.csv")  # dspy.Examples, input: trajectory
    judge = rf.load_judge("programs/airline.json")     # a TrajectoryJudge, HybridJudge or FloorJudge
    judge.set_lm(dspy.LM(...))                         # warns UncertifiedJudgeWarning once, when it first
    prediction = judge(trajectory=trajectories[0])     #   runs, if this LM is not the certified one
    verdict = rf.judge_verdict(judge, trajectories[0]) # never raises: an abstention, with .attempts
    verdicts = await judge.abatch(trajectories)        # or judge.batch(...) on threads; failures counted
    judge = rf.RubricInducer(reflection_lm=dspy.LM(...)).compile(rf.TrajectoryJudge(), trainset=examples)
    rf.freeze(judge, "programs/mine.json")             # JSON, never a pickle
    metric = rf.as_metric(judge)                       # for dspy.Evaluate or an optimizer
    reward = rf.as_reward_function(judge)              # for TRL (rf.as_verl_compute_score for verl)

Names are imported lazily: ``import rubricforge_dspy`` imports nothing heavy, and DSPy is imported
only when a DSPy-backed name (`TrajectoryJudge`, `load_judge`, `induce`, ...) is first touched, so
`rubricforge stats` or `rubricforge report` do not pay for it. Names the top level used to list
(`EMBEDDED`, `HybridJudge`, `join_labels`, ...) and the old names `load` and `JudgeTrajectory` still
resolve, with a `DeprecationWarning` naming the import to use, but are not in ``__all__``.
"""

import importlib
import os
import warnings
from typing import Any

from rubricforge_dspy._lazy import lazy_exports
from rubricforge_dspy.core.errors import RubricForgeDeprecationWarning

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

_MODULES = {
    # records and errors
    "rubricforge_dspy.core.trajectory": ["Trajectory", "Step"],
    "rubricforge_dspy.core.verdict": ["Verdict"],
    "rubricforge_dspy.core.errors": ["RubricForgeError", "InputError", "ServerError"],
    # load examples
    "rubricforge_dspy.data.formats": ["load_trajectories"],
    "rubricforge_dspy.data.examples": ["load_examples"],
    # judge
    "rubricforge_dspy.judge.module": ["TrajectoryJudge", "TrajectoryVerdictSignature", "VerdictFormatError"],
    "rubricforge_dspy.judge.contract": ["BaseJudge"],
    "rubricforge_dspy.evidence.render": ["RenderConfig"],
    "rubricforge_dspy.judge.execution": ["judge_verdict", "ajudge_verdict"],
    # induce
    "rubricforge_dspy.induction.teleprompter": ["RubricInducer"],
    "rubricforge_dspy.induction.inducer": ["induce", "InductionConfig"],
    # load and save
    "rubricforge_dspy.judge.loading": ["load_judge"],
    "rubricforge_dspy.program.store": ["freeze"],
    "rubricforge_dspy.program.drift": ["UncertifiedJudgeWarning"],
    # evaluate
    "rubricforge_dspy.judge.metric": ["as_metric", "label_agreement"],
    "rubricforge_dspy.trust.certify": ["certify_program"],
    # reward
    "rubricforge_dspy.rewards.trainers": ["as_reward_function", "as_verl_compute_score"],
}
# Names the top level used to list: they still resolve, for one release, warning DeprecationWarning with the
# import path that stays (the stage that owns each name). Never in __all__.
_MOVED = {
    "rubricforge_dspy.core": ["Source", "LabelRule", "TrajectoryFormatError", "UnlabeledError", "require_labels",
                              "labeled_only", "read_verdicts", "SEED_RUBRIC", "attribute_reason", "Preset",
                              "EMBEDDED", "SERVER", "RubricForgeWarning"],
    "rubricforge_dspy.data": ["iter_trajectories", "LoadReport", "Trajectories", "join_labels", "read_label_file",
                              "Joined", "to_examples", "Examples", "ExamplesReport", "split_by_task"],
    "rubricforge_dspy.evidence": ["render_trajectory"],
    "rubricforge_dspy.lm": ["LMConfig", "make_lm", "JudgeUnavailableError"],
    "rubricforge_dspy.serve": ["open_lm"],
    "rubricforge_dspy.judge": ["Verdicts", "RetryPolicy", "JudgeMetric", "SymptomFloor", "FloorJudge", "HybridJudge"],
    "rubricforge_dspy.induction": ["freeze_induced", "InductionResult"],
    "rubricforge_dspy.rewards": ["RewardCounters", "RewardAbstentionWarning", "RewardJudgeError"],
    "rubricforge_dspy.program": ["ProgramError"],
    "rubricforge_dspy.apply": ["judge_stream", "run_judge_file"],
    "rubricforge_dspy.trust": ["gate_programs", "GoodhartWarning"],
    "rubricforge_dspy.trust.audit": ["audit"],
    "rubricforge_dspy.report": ["write_report"],
}
_MOVED_TO = {name: package for package, names in _MOVED.items() for name in names}
# Old names for the same objects: resolved (they warn DeprecationWarning where they are defined).
_RENAMED = {"load": "rubricforge_dspy.judge.loading", "JudgeTrajectory": "rubricforge_dspy.judge.module"}
_lazy_getattr, _dir, __all__ = lazy_exports(__name__, _MODULES)


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        return getattr(importlib.import_module(_RENAMED[name]), name)
    if name in _MOVED_TO:
        package = _MOVED_TO[name]
        warnings.warn(f"rubricforge_dspy.{name} moved: import it as `from {package} import {name}` (the top level "
                      f"keeps the names of the DSPy user's path; this alias goes in the next release)",
                      RubricForgeDeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(package), name)
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    return [name for name in _dir() if name not in _MOVED_TO]
