"""``--price IN,OUT`` and ``--cost-budget USD``: what a run's LM calls cost and a hard cap in US dollars
(`apply.pricing`), for `judge` (and `judge --cascade`)."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rubricforge_dspy.apply.pricing import Price

__all__ = ["add_cost_arguments", "cost_options"]


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


def _price(text: str) -> Price:
    from rubricforge_dspy.apply.pricing import Price
    from rubricforge_dspy.core.errors import InputError

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
