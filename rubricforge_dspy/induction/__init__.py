"""Induction: a judge's rubric induced with DSPy's GEPA from labeled trajectories.

In: labeled training and validation trajectories, a judge LM and a reflection LM, an `InductionConfig`.
Out: a `TrajectoryJudge` whose ``detailed_results`` is an `InductionResult` (candidates, sweep table,
the choice and why, operating point, validation metrics) and, with `induce`'s ``out_path``, the frozen
program file.

Modules:

- :mod:`.teleprompter`: `RubricInducer`, the DSPy optimizer (``compile(student, trainset=, valset=, testset=)``);
- :mod:`.inducer`: `induce` and `freeze_induced`, the file-writing layer over it;
- :mod:`.search`: the GEPA search, its `InductionConfig`, the symptom-focused feedback metric, selection;
- :mod:`.checkpoint`: GEPA's checkpoint in a ``--log-dir``, HMAC-tagged, never unpickled unverified;
- :mod:`.guards`: the judge behind the circuit breaker and the proposer that drops unusable candidates;
- :mod:`.memorization`: the guard that rejects a rubric remembering training episodes.

Names are imported lazily.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.induction.teleprompter": ["RubricInducer", "examples_to_trajectories"],
    "rubricforge_dspy.induction.inducer": ["induce", "freeze_induced"],
    "rubricforge_dspy.induction.search": ["InductionConfig", "InductionResult", "make_feedback_metric",
                                          "rendered_examples", "REFLECTION_PROMPT", "run_search"],
    "rubricforge_dspy.induction.guards": ["CircuitJudge", "GuardedProposer"],
    "rubricforge_dspy.induction.memorization": ["Memorized", "specific_tokens"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
