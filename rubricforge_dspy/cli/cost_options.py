"""``--price IN,OUT`` and ``--cost-budget USD``: what a run's LM calls cost and a hard cap in US dollars
(`lm.pricing`), for `judge` (and `judge --cascade`), `certify` and `label-next` (the job runner's), and for `induce`
and `cascade fit`, whose LM calls are reserved by a `lm.budgeted.BudgetedLM` (`lm_budget`)."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from rubricforge_dspy.core.errors import InputError

if TYPE_CHECKING:
    from rubricforge_dspy.lm.budget import TokenBudget
    from rubricforge_dspy.lm.pricing import CostBudget, Price

__all__ = ["add_cost_arguments", "cost_options", "one_budget", "lm_budget", "budget_cost_line"]


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--price IN,OUT`` and ``--cost-budget USD``."""
    parser.add_argument("--price", type=_price, default=None, metavar="IN,OUT",
                        help="the judge LM's price in USD per million prompt and completion tokens, e.g. 0.15,0.60 "
                             "(a self-served model: SGLang, llama.cpp). Default: litellm's model cost map, for the "
                             "hosted models it knows; each verdict line's tokens.usd and the summary's cost are "
                             "computed at it, and with no price the summary says the cost is unknown")
    parser.add_argument("--cost-budget", type=_usd, default=None, metavar="USD",
                        help="the most US dollars this run's LM calls may spend, enforced as --token-budget is: each "
                             "call reserves its worst case (its prompt's bound + --max-tokens, every attempt) times "
                             "the price first, and the run stops before the cap (exit 5), keeping what it judged; "
                             "re-run with a larger budget to judge the rest. Needs a price (--price or the cost map). "
                             "Local runs only (not --ray/--batch-api)")


def cost_options(args: argparse.Namespace) -> dict[str, Any]:
    """The job options ``price`` and ``cost_budget`` the flags give (only those given)."""
    options: dict[str, Any] = {}
    if getattr(args, "price", None) is not None:
        options["price"] = args.price
    if getattr(args, "cost_budget", None) is not None:
        options["cost_budget"] = args.cost_budget
    return options


def one_budget(args: argparse.Namespace, command: str) -> None:
    """Refuse ``--token-budget`` with ``--cost-budget`` where one `BudgetedLM` reserves every call (one cap)."""
    if getattr(args, "token_budget", None) is not None and getattr(args, "cost_budget", None) is not None:
        raise InputError(f"{command} takes --token-budget or --cost-budget, not both: give the one cap to stop at")


def lm_budget(args: argparse.Namespace, judge_lm: Any) -> TokenBudget | CostBudget | None:
    """The cap a `BudgetedLM` reserves on: ``--token-budget N`` (a `lm.budget.TokenBudget`), or ``--cost-budget USD`` (a
    `lm.pricing.CostBudget` at the judge LM's price: ``--price``, else litellm's cost map's; another LM, an
    induction's reflection LM of another model, at the map's); None without either.

    Raises:
        InputError: ``--cost-budget`` and no price is known for the judge LM's model (before any call).
    """
    if args.cost_budget is None:
        if args.token_budget is None:
            return None
        from rubricforge_dspy.lm.budget import TokenBudget

        return TokenBudget(args.token_budget)
    from rubricforge_dspy.lm.pricing import CostBudget, price_of

    model = getattr(judge_lm, "model", None)  # the name litellm's cost map knows (no endpoint)
    price = price_of(model, args.price)
    if price is None:
        raise InputError(f"--cost-budget needs the judge LM's price: no price for {model!r} in litellm's model cost "
                         "map (give --price IN,OUT: USD per million prompt and completion tokens)")
    return CostBudget(args.cost_budget, price, model=model)


def budget_cost_line(args: argparse.Namespace, judge_lm: Any, report: dict[str, Any] | None, what: str) -> str:
    """The cost line of a run whose LM calls a `BudgetedLM` reserved (`report`: its `lm.budgeted.budget_report`):
    under ``--cost-budget``, the US dollars spent (total, and the mean per judge call: an item judged once); else
    why it is not given (no price known, or no cost budget counting the dollars)."""
    from rubricforge_dspy.lm.pricing import price_of

    if report is not None and "cap_usd" in report:
        judge = report["by_lm"].get("judge") or {}
        calls = judge.get("calls") or 0
        mean = f", ${judge.get('usd', 0.0) / calls:,.6g} per judge call ({calls})" if calls else ""
        return f"cost: ${report['spent_usd']:,.6g} ({what}{mean})"
    model = getattr(judge_lm, "model", None)
    if price_of(model, args.price) is None:
        return f"cost unknown: no price for {model} (give --price IN,OUT: USD per million prompt and completion tokens)"
    return f"cost not counted: {what} are costed under --cost-budget USD only (give it to cap and count them)"


def _price(text: str) -> Price:
    from rubricforge_dspy.lm.pricing import Price

    try:
        return Price.parse(text)
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _usd(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of US dollars, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"a number of US dollars > 0, got {text!r}")
    return value
