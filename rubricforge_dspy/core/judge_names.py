"""Names of the floor's judges, and the one rule that says when episode length gives the outcome away.

Judge names (prediction files ``predictions/<name>.jsonl``, rows of the report):

- ``floor``: the symptom floor (`floor.model.SymptomFloor` over every feature);
- ``length_only``: the same model over the number of steps and user turns alone;
- ``hybrid``: the LLM judge's score stacked with the floor's features (`floor.hybrid`).

**Length gives the outcome away** when the length-only model's AUC on held-out items is at least
``GIVEAWAY_AUC`` (0.75) *and* the lower end of its confidence interval is above 0.5 (chance): length
alone then ranks passed above failed trajectories three times in four, and that is not noise. A judge
evaluated on such data can look good by tracking length; compare it with the length-only row.

**The floor gives the outcome away** when the symptom floor's kappa on held-out items is at least
``FLOOR_GIVEAWAY_KAPPA`` (0.95): observable counts (tool errors, commits, turns, length) then tell the
outcome almost without error, as in data whose episodes end at success. No judge can be compared
against such a floor: not beating it says nothing about the judge, and it leaves nothing to beat.
"""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = ["FLOOR", "LENGTH_ONLY", "HYBRID", "GIVEAWAY_AUC", "GIVEAWAY_RULE", "gives_away", "giveaway_sentence",
           "FLOOR_GIVEAWAY_KAPPA", "FLOOR_GIVEAWAY_RULE", "floor_gives_away", "floor_giveaway_sentence"]

FLOOR = "floor"
LENGTH_ONLY = "length_only"
HYBRID = "hybrid"
FLOOR_FOLDS = 5  # the floor's task-grouped cross-validation folds (`trust.floor_cv`, `rubricforge floor`)
FLOOR_RESAMPLES = 2_000  # its bootstrap resamples for kappa and AUC
GIVEAWAY_AUC = 0.75
GIVEAWAY_RULE = (f"length-only AUC >= {GIVEAWAY_AUC} on held-out items and the lower end of its interval "
                 "above 0.5")
FLOOR_GIVEAWAY_KAPPA = 0.95
FLOOR_GIVEAWAY_RULE = f"symptom-floor kappa >= {FLOOR_GIVEAWAY_KAPPA} on held-out items"


def _finite(x: object) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def gives_away(auc: float | None, auc_ci_low: float | None) -> bool | None:
    """True when length gives the outcome away (see the module docstring); None when the AUC is undefined."""
    if not _finite(auc):
        return None
    return bool(auc >= GIVEAWAY_AUC and _finite(auc_ci_low) and auc_ci_low > 0.5)


def giveaway_sentence(auc: float | None, auc_ci_low: float | None, auc_ci_high: float | None) -> str:
    """One sentence for a report, saying whether length alone gives the outcome away."""
    verdict = gives_away(auc, auc_ci_low)
    if verdict is None:
        return "Whether episode length gives the outcome away could not be measured (the AUC is undefined)."
    span = (f" [{auc_ci_low:.3f}, {auc_ci_high:.3f}]" if _finite(auc_ci_low) and _finite(auc_ci_high) else "")
    if verdict:
        return (f"**Episode length gives the outcome away here**: the length-only model (steps and user turns "
                f"alone) reaches AUC {auc:.3f}{span} on held-out items ({GIVEAWAY_RULE}). A judge that "
                "tracks episode length looks good on this data without reading it; judge every row against "
                "the length-only row.")
    return (f"Episode length does not give the outcome away here: the length-only model reaches AUC "
            f"{auc:.3f}{span} (the rule: {GIVEAWAY_RULE}).")


def floor_gives_away(kappa: float | None) -> bool | None:
    """True when the symptom floor's held-out kappa says the observable features give the outcome away
    (see the module docstring); None when the kappa is undefined."""
    if not _finite(kappa):
        return None
    return bool(kappa >= FLOOR_GIVEAWAY_KAPPA)


def floor_giveaway_sentence(kappa: float | None) -> str | None:
    """The warning of a floor that gives the outcome away (markdown bold on its first words), or None."""
    if not floor_gives_away(kappa):
        return None
    return (f"**The observable features give the outcome away here**: the symptom floor (a logistic regression "
            f"on tool errors, commits, turns and episode length; no LM) reaches kappa {kappa:.3f} on held-out "
            f"items ({FLOOR_GIVEAWAY_RULE}), so the outcome can be read off the episode's shape (e.g. episodes "
            "that end at success). A judge cannot be compared against this floor: not beating it says nothing "
            "about the judge. Measure judges on data whose outcome the episode's shape does not give away.")
