"""A hard cap on the tokens LM calls may spend: the one reservation rule, for a judging run and for an induction.

`TokenBudget` is the cap. Every LM call reserves its worst case before it is sent: its prompt's bound plus the
answer's cap (the LM's ``max_tokens``), times the attempts the retry policy allows. A call is sent only when the
tokens spent, plus the reservations in flight, plus its own reservation stay within the cap; when it finishes,
its reservation is released and the tokens its LM reported are spent (an LM that reports no usage spends the
whole reservation). So the tokens spent never exceed the cap, whatever the concurrency.

Its two users:

- the job runner (`apply.runner`: ``rubricforge judge --token-budget N``, ``certify``, ``label-next``) reserves
  each item's calls itself, from `prompt_bound` or the judge's own ``token_bound(inputs, max_tokens)`` (a judge
  that makes several calls per item: segments, explorer);
- `lm.budgeted.BudgetedLM` wraps a `dspy.BaseLM` and reserves each of its calls from the messages it is about to send
  (``rubricforge induce --token-budget N``: GEPA's judge and reflection calls, the validation and test passes).

A cap in US dollars (`lm.pricing.CostBudget`, ``--cost-budget USD``) is this token budget counted in picodollars:
the same reservation in tokens, times the LM's price; `lm.budgeted.BudgetedLM` takes either.

A prompt's bound is the UTF-8 byte count of what is sent plus `PROMPT_OVERHEAD` bytes of chat template: a
byte-level BPE tokenizer (GPT-2, tiktoken, Llama 3, Qwen) never makes more tokens than bytes, and the template's
special tokens are covered by the overhead. It is conservative (about four bytes a token in English).
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import dspy

from rubricforge_dspy.core.errors import BudgetExhausted, InputError

__all__ = ["TokenBudget", "Reservation", "prompt_bound", "PROMPT_OVERHEAD", "PICO_PER_USD", "CallUsage",
           "counted_call"]

PICO_PER_USD = 10**12  # a cost budget counts picodollars (`lm.pricing`)
PROMPT_OVERHEAD = 2048  # bytes of chat template (field headers, roles, special tokens) added to a prompt's bound



@dataclass(frozen=True)
class Reservation:
    """One call's reserved worst case (`TokenBudget.reserve`)."""

    tokens: int


class TokenBudget:
    """A run's token cap, shared by every stage and worker thread of the run. Thread-safe.

    Args:
        cap: the most tokens (prompt plus completion, as the LM reports them) the run may spend.

    Raises:
        InputError: a cap below 1.
    """

    def __init__(self, cap: int) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise InputError(f"a token budget is a whole number of tokens >= 1, got {cap!r}")
        self.cap = cap
        self.spent = 0
        self.reserved = 0
        self.calls = 0
        self.unreported = 0  # calls whose LM reported no usage (their whole reservation was spent)
        self.overruns = 0  # calls that spent more than they reserved (a judge's bound that is wrong)
        self.refused: int | None = None  # the reservation that did not fit, once one did not
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # notified when a reservation is settled or released

    def reserve(self, tokens: int) -> Reservation:
        """Reserve `tokens` for one call before it is sent.

        Raises:
            BudgetExhausted: the reservation would let the run cross the cap; nothing is reserved.
        """
        with self._lock:
            if self.spent + self.reserved + tokens > self.cap:
                self.refused = tokens
                raise BudgetExhausted(self._stopped(tokens))
            self.reserved += tokens
            return Reservation(tokens)

    def settle(self, reservation: Reservation, usage: dict[str, int] | None) -> None:
        """Release `reservation` and spend what the call's LM reported (`usage`: ``prompt_tokens``,
        ``completion_tokens``), or the whole reservation when it reported nothing."""
        with self._lock:
            self.reserved -= reservation.tokens
            self.calls += 1
            if usage is None:
                self.unreported += 1
                self.spent += reservation.tokens
            else:
                used = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
                self.spent += used
                self.overruns += used > reservation.tokens
            self._settled.notify_all()

    def release(self, reservation: Reservation) -> None:
        """Give back `reservation` of a call that was never sent (abandoned before it started)."""
        with self._lock:
            self.reserved -= reservation.tokens
            self._settled.notify_all()

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait until no call is in flight (every reservation settled or released); False when `timeout` (seconds)
        passed first."""
        with self._settled:
            return self._settled.wait_for(lambda: self.reserved == 0, timeout)

    @property
    def left(self) -> int:
        """Tokens not spent (reservations in flight included as unspent)."""
        return self.cap - self.spent

    @property
    def stopped(self) -> bool:
        """Whether a call was refused (the run stopped at the budget)."""
        return self.refused is not None

    def _stopped(self, tokens: int) -> str:
        if self.calls == 0 and self.spent == 0 and self.reserved == 0:
            return (f"the token budget of {self.cap:,} cannot pay for one call: a call may take up to {tokens:,} "
                    "tokens (its prompt's bound plus --max-tokens, for every attempt); give a budget of at least "
                    "that, or a smaller --max-tokens or --max-retries")
        return (f"stopped before the token budget of {self.cap:,} would be crossed: {self.spent:,} spent and "
                f"{self.reserved:,} reserved by the calls in flight, and the next call may take up to {tokens:,} "
                "(its prompt's bound plus --max-tokens, for every attempt)")

    def to_dict(self) -> dict[str, Any]:
        """The budget in a run's summary."""
        return {"cap": self.cap, "spent": self.spent, "left": self.left, "calls": self.calls,
                "unreported_calls": self.unreported, "overruns": self.overruns, "stopped": self.stopped,
                "refused_reservation": self.refused}


def prompt_bound(judge: Any, inputs: dict[str, Any]) -> int:
    """An upper bound on the prompt tokens of each call of `judge` on `inputs` (see the module's docstring):
    the UTF-8 bytes of its predictors' instructions, field descriptions and demos, the inputs, and
    `PROMPT_OVERHEAD`; a judge with several predictors is bounded by their sum (each is called once)."""
    size = len(json.dumps(inputs, ensure_ascii=False, default=str).encode("utf-8")) + PROMPT_OVERHEAD
    predictors = judge.predictors() if hasattr(judge, "predictors") else []
    total = 0
    for predictor in predictors or [None]:
        fixed = 0
        if predictor is not None:
            signature = predictor.signature
            fixed += len(str(signature.instructions).encode("utf-8"))
            for name, field in signature.fields.items():
                fixed += len(name) + len(json.dumps(field.json_schema_extra or {}, default=str).encode("utf-8"))
            for demo in getattr(predictor, "demos", []) or []:
                fixed += len(json.dumps(dict(demo), ensure_ascii=False, default=str).encode("utf-8"))
        total += size + fixed
    return total


class CallUsage:
    """A DSPy usage tracker (``dspy.context(usage_tracker=...)``) around one call: it sums the tokens the LM
    reported and hands every usage on to the tracker it stands in for (the run's), so nothing is lost.
    ``answered`` counts the usages DSPy handed it: DSPy hands one for every call that reached the LM (empty
    when the LM reported none) and none for an answer from its response cache."""

    def __init__(self, parent: Any = None):
        self.parent = parent
        self.tokens = 0
        self.prompt = 0  # of `tokens`, the prompt's (a price tells them apart)
        self.completion = 0
        self.reported = False
        self.answered = 0

    def add_usage(self, lm: str, usage: Any) -> None:
        self.answered += 1
        if usage:
            entry = usage if isinstance(usage, dict) else (usage.model_dump() if hasattr(usage, "model_dump")
                                                           else dict(usage))
            if "prompt_tokens" in entry or "completion_tokens" in entry:
                prompt, completion = int(entry.get("prompt_tokens") or 0), int(entry.get("completion_tokens") or 0)
                self.prompt += prompt
                self.completion += completion
                self.tokens += prompt + completion
                self.reported = True
        if self.parent is not None:
            self.parent.add_usage(lm, usage)


@contextmanager
def counted_call() -> Iterator[CallUsage]:
    """Count the usage the LM reports for the calls inside (`CallUsage`), passing it on to the current tracker."""
    usage = CallUsage(dspy.settings.usage_tracker)
    with dspy.context(usage_tracker=usage):
        yield usage
