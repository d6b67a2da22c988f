"""`Price` and `CostBudget`: what a run's LM calls cost in US dollars and a hard cap on it (`rubricforge judge
--cost-budget USD`).

They have one definition, in `rubricforge_dspy.lm.pricing`, shared with the induction's budgeted LMs
(`lm.budgeted.BudgetedLM`: ``induce --cost-budget``); this module re-exports them for the job runner (`apply.runner`)
and the names judging code has always imported from here.
"""

from __future__ import annotations

from rubricforge_dspy.lm.pricing import COST_MAP_FILE, CostBudget, Price, map_price, price_of

__all__ = ["Price", "price_of", "map_price", "CostBudget", "COST_MAP_FILE"]
