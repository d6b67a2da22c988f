"""RubricForge-DSPy: induce an LLM judge's rubric for agent trajectories from labeled examples.

The library's public surface for a DSPy user, stage by stage (each stage is a subpackage with its own
curated names; docs/ARCHITECTURE.md)::

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

Names are imported lazily: ``import rubricforge_dspy`` imports nothing heavy, and DSPy is imported
only when a DSPy-backed name (`TrajectoryJudge`, `load_judge`, `induce`, ...) is first touched, so
`rubricforge stats` or `rubricforge report` do not pay for it. Deprecated names (`load`, `JudgeTrajectory`)
still resolve, with a `DeprecationWarning`, but are not in ``__all__``.
"""

import importlib
import os

from rubricforge_dspy._lazy import lazy_exports

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

_MODULES = {
    # records and errors (core: no DSPy)
    "rubricforge_dspy.core.trajectory": ["Trajectory", "Step", "Source", "LabelRule", "TrajectoryFormatError",
                                         "UnlabeledError", "require_labels", "labeled_only"],
    "rubricforge_dspy.core.verdict": ["Verdict", "read_verdicts"],
    "rubricforge_dspy.core.rubric": ["SEED_RUBRIC"],
    "rubricforge_dspy.core.criteria": ["attribute_reason"],
    "rubricforge_dspy.core.presets": ["Preset", "EMBEDDED", "SERVER"],
    "rubricforge_dspy.core.errors": ["RubricForgeError", "InputError", "ServerError", "RubricForgeWarning"],
    # load
    "rubricforge_dspy.data.formats": ["load_trajectories", "iter_trajectories", "LoadReport", "Trajectories"],
    "rubricforge_dspy.data.labels": ["join_labels", "read_label_file", "Joined"],
    "rubricforge_dspy.data.examples": ["load_examples", "to_examples", "Examples", "ExamplesReport"],
    "rubricforge_dspy.data.split": ["split_by_task"],
    # render
    "rubricforge_dspy.evidence.render": ["RenderConfig", "render_trajectory"],
    # the LM
    "rubricforge_dspy.lm.config": ["LMConfig"],
    "rubricforge_dspy.lm.engine": ["make_lm"],
    "rubricforge_dspy.serve.embedded": ["open_lm"],
    # judge
    "rubricforge_dspy.judge.contract": ["BaseJudge", "Verdicts"],
    "rubricforge_dspy.judge.module": ["TrajectoryJudge", "TrajectoryVerdictSignature", "VerdictFormatError"],
    "rubricforge_dspy.judge.loading": ["load_judge"],
    "rubricforge_dspy.judge.execution": ["judge_verdict", "ajudge_verdict", "RetryPolicy"],
    "rubricforge_dspy.judge.metric": ["as_metric", "JudgeMetric"],
    "rubricforge_dspy.judge.floor": ["SymptomFloor", "FloorJudge"],
    "rubricforge_dspy.judge.hybrid": ["HybridJudge"],
    "rubricforge_dspy.lm.circuit": ["JudgeUnavailableError"],
    # induce, freeze
    "rubricforge_dspy.induction.teleprompter": ["RubricInducer"],
    "rubricforge_dspy.induction.inducer": ["induce", "freeze_induced", "InductionConfig", "InductionResult"],
    # rewards for RL trainers
    "rubricforge_dspy.rewards.trainers": ["as_reward_function", "as_verl_compute_score", "RewardCounters",
                                          "RewardAbstentionWarning", "RewardJudgeError"],
    "rubricforge_dspy.program.store": ["freeze", "ProgramError"],
    "rubricforge_dspy.program.drift": ["UncertifiedJudgeWarning"],
    # apply
    "rubricforge_dspy.apply.stream": ["judge_stream", "run_judge_file"],
    # trust
    "rubricforge_dspy.trust.certify": ["certify_program"],
    "rubricforge_dspy.trust.gate": ["gate_programs"],
    "rubricforge_dspy.trust.audit": ["audit", "GoodhartWarning"],
    # report
    "rubricforge_dspy.report.write": ["write_report"],
}
# Old names: resolved (they warn DeprecationWarning where they are defined), never listed in __all__.
_DEPRECATED = {"load": "rubricforge_dspy.judge.loading", "JudgeTrajectory": "rubricforge_dspy.judge.module"}
_lazy_getattr, __dir__, __all__ = lazy_exports(__name__, _MODULES)


def __getattr__(name: str):
    if name in _DEPRECATED:
        return getattr(importlib.import_module(_DEPRECATED[name]), name)
    return _lazy_getattr(name)
