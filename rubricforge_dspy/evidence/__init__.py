"""Evidence: what the judge reads of a trajectory, and the observable signals beside it.

In: a `Trajectory` (`rubricforge_dspy.core`). Out: the rendered text a judge reads (observable events
only, fitted to a token budget), a conservative token estimate, the failure symptoms the induction
feedback names, and the numeric features of the symptom floor.

Modules:

- :mod:`.render`: `render_trajectory` and its `RenderConfig` (the sizes come from `core.presets`); agent-written
  text quoted between nonce tags, `forged_markers` (text imitating the render's structure);
- :mod:`.clip`: text hygiene and size cuts for one long step;
- :mod:`.tokens`: the tokenizer-free token estimate (`estimate_tokens`);
- :mod:`.symptoms`: observable symptoms of failure (`extract_symptoms`) and the fixed heuristic verdict;
- :mod:`.features`: the floor's features (`FEATURES`, `feature_matrix`; imports numpy).

Names are imported lazily, so rendering does not import numpy.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.evidence.render": ["RenderConfig", "render_trajectory", "render_with_evidence", "render_step",
                                         "render_with_overrides",
                                         "forged_markers",
                                         "RENDER_VERSION", "RENDER_WORDS"],
    "rubricforge_dspy.evidence.clip": ["fit", "fit_text", "sanitize"],
    "rubricforge_dspy.evidence.tokens": ["estimate_tokens"],
    "rubricforge_dspy.evidence.symptoms": ["Symptoms", "extract_symptoms", "heuristic_verdict"],
    "rubricforge_dspy.evidence.features": ["FEATURES", "LENGTH_FEATURES", "feature_values", "feature_matrix",
                                           "observable_only"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
