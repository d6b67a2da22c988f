"""`TokenBudget`: a hard cap on the tokens a run may spend (`rubricforge judge --token-budget N`).

The reservation rule (`TokenBudget`, `Reservation`, `prompt_bound`, `PROMPT_OVERHEAD`) has one definition, in
`rubricforge_dspy.lm.budget`, shared with the induction's budgeted LMs (`lm.budgeted.BudgetedLM`); this module
re-exports it for the job runner (`apply.runner`) and the names judging code has always imported from here.
"""

from __future__ import annotations

from rubricforge_dspy.lm.budget import PROMPT_OVERHEAD, Reservation, TokenBudget, prompt_bound

__all__ = ["TokenBudget", "Reservation", "prompt_bound", "PROMPT_OVERHEAD"]
