"""The floor every judge must beat: what cheap, observable features of a trajectory already know.

- :mod:`.features`: the documented observable features (`FEATURES`, `LENGTH_FEATURES`), read from a
  trajectory's steps only;
- :mod:`.model`: `SymptomFloor` (and the length-only model), a logistic regression stored as plain JSON;
- :mod:`.cv`: task-grouped cross-validation and the floor table of `rubricforge floor`;
- :mod:`.criterion`: the judges' names and the rule for "episode length gives the outcome away";
- :mod:`.margin`: a judge's margin over the floor on the same items (certificate, gate);
- :mod:`.hybrid`: `HybridJudge`, the LLM judge's score stacked with the floor's features.

Docs: docs/FLOOR.md.
"""

from rubricforge_dspy.floor.criterion import FLOOR, GIVEAWAY_AUC, GIVEAWAY_RULE, HYBRID, LENGTH_ONLY, gives_away
from rubricforge_dspy.floor.features import FEATURES, LENGTH_FEATURES, feature_matrix, feature_values, observable_only
from rubricforge_dspy.floor.model import FloorError, LogisticModel, SymptomFloor, fit_logistic

__all__ = ["FLOOR", "LENGTH_ONLY", "HYBRID", "GIVEAWAY_AUC", "GIVEAWAY_RULE", "gives_away", "FEATURES",
           "LENGTH_FEATURES", "feature_matrix", "feature_values", "observable_only", "FloorError", "LogisticModel",
           "SymptomFloor", "fit_logistic"]
