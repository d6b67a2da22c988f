"""What a run's LM calls cost in US dollars: the price of a model (`Price`, `price_of`) and a hard cap on the
dollars a run may spend (`CostBudget`: ``--cost-budget USD`` of `judge`, `certify`, `label-next`, `induce` and
`cascade fit`).

A price is USD per million prompt tokens and per million completion tokens. It comes from the user
(``--price IN,OUT``: a self-served model, SGLang or llama.cpp, is in no price table) or, for a hosted model, from
litellm's model cost map as litellm ships it in its package (``model_prices_and_context_window_backup.json``: the
map ``LITELLM_LOCAL_MODEL_COST_MAP=True`` makes litellm use, read here without importing litellm, which takes
seconds): the model's ``input_cost_per_token`` and ``output_cost_per_token``, the base rates (no cached-prompt
discount, no long-context tier). A model the map does not know has no price: its cost is unknown and the run
says so (never a quiet 0).

`CostBudget` is the token budget (`lm.budget.TokenBudget`) counted in picodollars instead of tokens: each call
reserves its worst case in tokens (its prompt's bound and the answer's cap, every attempt) times the price before
it is sent, and settles what its LM reported times the price; so the dollars spent never exceed the cap, whatever
the concurrency, by the token budget's own argument.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import orjson

from rubricforge_dspy.core.errors import BudgetExhausted, InputError
from rubricforge_dspy.lm.budget import PICO_PER_USD, Reservation, TokenBudget

__all__ = ["Price", "price_of", "map_price", "CostBudget", "COST_MAP_FILE"]

COST_MAP_FILE = "model_prices_and_context_window_backup.json"  # litellm's offline model cost map, in its package


@dataclass(frozen=True)
class Price:
    """A model's price: USD per million prompt tokens (`prompt`) and per million completion tokens
    (`completion`); `source` says where it came from (``"--price"``, or litellm's cost map and the entry)."""

    prompt: float
    completion: float
    source: str = "--price"

    def __post_init__(self) -> None:
        for value in (self.prompt, self.completion):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InputError(f"a price is a finite number of USD per million tokens >= 0, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> "Price":
        """``"IN,OUT"`` (USD per million prompt and completion tokens, e.g. ``"0.15,0.60"``), as ``--price`` takes it.

        Raises:
            InputError: not two numbers >= 0 separated by a comma.
        """
        parts = [part.strip() for part in str(text).split(",")]
        try:
            if len(parts) != 2:
                raise ValueError
            prompt, completion = float(parts[0]), float(parts[1])
        except ValueError:
            raise InputError(f"--price is IN,OUT: USD per million prompt tokens and per million completion tokens, "
                             f"e.g. 0.15,0.60; got {text!r}") from None
        return cls(prompt, completion)

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The cost of `prompt_tokens` and `completion_tokens` at this price, in USD (to the nanodollar)."""
        return round((prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6, 9)

    def describe(self) -> str:
        """E.g. ``"$0.15 / $0.60 per million prompt / completion tokens (--price)"``."""
        return (f"${self.prompt:g} / ${self.completion:g} per million prompt / completion tokens ({self.source})")

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_per_million": self.prompt, "completion_per_million": self.completion, "source": self.source}


@lru_cache(maxsize=1)
def _cost_map() -> Mapping[str, Any]:
    """litellm's offline model cost map (empty when litellm or its file is not installed)."""
    spec = importlib.util.find_spec("litellm")  # finds the package without importing it
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / COST_MAP_FILE
        if path.is_file():
            data = orjson.loads(path.read_bytes())
            return data if isinstance(data, dict) else {}
    return {}


def map_price(model: str | None) -> Price | None:
    """The price of `model` in litellm's model cost map, or None when the map does not know it. `model` is the
    name the run's LM calls (``openai/gpt-4o-mini``); the entry is the name itself, else the name without its
    provider prefix (``gpt-4o-mini``), as litellm resolves it."""
    if not model:
        return None
    table = _cost_map()
    names = [model] + ([model.split("/", 1)[1]] if "/" in model else [])
    for name in names:
        entry = table.get(name)
        if name == "sample_spec" or not isinstance(entry, dict):
            continue
        prompt, completion = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
        if isinstance(prompt, (int, float)) and isinstance(completion, (int, float)):
            return Price(round(prompt * 1e6, 9), round(completion * 1e6, 9), f"litellm's cost map: {name}")
    return None


def price_of(model: str | None, given: Price | None = None) -> Price | None:
    """The price a run's lines are costed at: `given` (``--price``) when there is one, else `map_price`;
    None: unknown (the summary says so)."""
    return given if given is not None else map_price(model)


class CostBudget:
    """A run's cap in US dollars: a `TokenBudget` over picodollars, at one `Price` (see the module docstring).
    Thread-safe (the token budget's lock).

    Args:
        cap: the most USD the run's LM calls may spend (> 0).
        price: the price the calls are costed at.
        model: the model `price` is for (an induction's judge LM: its reflection LM, another model, is costed at
            litellm's cost map's price, `price_for`); None: every call is costed at `price` (a judging run).

    Raises:
        InputError: a cap that is not a positive finite number.
    """

    def __init__(self, cap: float, price: Price, model: str | None = None) -> None:
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap <= 0:
            raise InputError(f"a cost budget is a number of USD > 0, got {cap!r}")
        self.cap, self.price, self.model = float(cap), price, model
        self.units = TokenBudget(max(1, math.floor(cap * PICO_PER_USD)))

    def price_for(self, model: str | None) -> Price:
        """The price a call of `model` is costed at: the budget's own (`price`) for its `model`, or for any model when
        it names none; else litellm's cost map's (an induction's reflection LM, another model than the judge's).

        Raises:
            InputError: `model` is not the budget's and the cost map does not know it (nothing can be reserved).
        """
        if self.model is None or model == self.model:
            return self.price
        found = map_price(model)
        if found is None:
            raise InputError(f"a cost budget (--cost-budget) needs every LM's price: no price for {model!r} in "
                             f"litellm's model cost map (--price prices {self.model!r}); use the same model, a model "
                             "the map knows, or --token-budget")
        return found

    def _pico(self, prompt: int, completion: int, either: int = 0, price: Price | None = None) -> float:
        # USD per million tokens = picodollars per 1e-6 token: a token costs `price * 1e6` picodollars
        price = price or self.price
        worst = max(price.prompt, price.completion)
        return (prompt * price.prompt + completion * price.completion + either * worst) * 1e6

    def reserve(self, prompt: int, completion: int, either: int = 0, price: Price | None = None) -> Reservation:
        """Reserve the worst case of one call before it is sent: `prompt` tokens at the prompt price, `completion`
        at the completion price, `either` (a judge's own bound, not split) at the higher of the two; at `price`
        (default: the budget's own, `price_for` gives another model's).

        Raises:
            BudgetExhausted: the reservation would let the run cross the cap; nothing is reserved.
        """
        units = math.ceil(self._pico(prompt, completion, either, price))
        try:
            return self.units.reserve(units)
        except BudgetExhausted:
            raise BudgetExhausted(self._stopped(units, price or self.price)) from None

    def settle(self, reservation: Reservation, usage: Mapping[str, int] | None, price: Price | None = None) -> None:
        """Release `reservation` and spend what the call's LM reported (`usage`) at `price` (default: the budget's),
        or the whole reservation when it reported nothing."""
        if usage is None:
            self.units.settle(reservation, None)
            return
        spent = round(self._pico(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                                 price=price))
        self.units.settle(reservation, {"prompt_tokens": spent, "completion_tokens": 0})

    def release(self, reservation: Reservation) -> None:
        """Give back `reservation` of a call that was never sent."""
        self.units.release(reservation)

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait until no call is in flight (`TokenBudget.wait_settled`)."""
        return self.units.wait_settled(timeout)

    @property
    def reserved(self) -> float:
        """USD reserved by the calls in flight."""
        return self.units.reserved / PICO_PER_USD

    @property
    def spent(self) -> float:
        """USD spent."""
        return self.units.spent / PICO_PER_USD

    @property
    def left(self) -> float:
        """USD not spent (reservations in flight included as unspent)."""
        return self.cap - self.spent

    @property
    def stopped(self) -> bool:
        """Whether a call was refused (the run stopped at the budget)."""
        return self.units.stopped

    def _stopped(self, units: int, price: Price) -> str:
        call = units / PICO_PER_USD
        budget = self.units
        if budget.calls == 0 and budget.spent == 0 and budget.reserved == 0:
            return (f"the cost budget of ${self.cap:,.6g} cannot pay for one call: a call may cost up to ${call:,.6g} "
                    f"(its prompt's bound plus --max-tokens, for every attempt, at {price.describe()}); give a "
                    "budget of at least that, or a smaller --max-tokens or --max-retries")
        return (f"stopped before the cost budget of ${self.cap:,.6g} would be crossed: ${self.spent:,.6g} spent and "
                f"${budget.reserved / PICO_PER_USD:,.6g} reserved by the calls in flight, and the next call may cost "
                f"up to ${call:,.6g} (at {price.describe()})")

    def to_dict(self) -> dict[str, Any]:
        """The budget in a run's summary (USD)."""
        budget = self.units
        return {"cap_usd": self.cap, "spent_usd": round(self.spent, 9), "left_usd": round(self.left, 9),
                "calls": budget.calls, "unreported_calls": budget.unreported, "overruns": budget.overruns,
                "stopped": self.stopped,
                "refused_reservation_usd": None if budget.refused is None else budget.refused / PICO_PER_USD,
                "price": self.price.to_dict()}
