"""An LM under a budget: `BudgetedLM` wraps a `dspy.BaseLM` and reserves each call's worst case on a
`lm.budget.TokenBudget` or a `lm.pricing.CostBudget` before sending it (``rubricforge induce`` and ``cascade fit``
with ``--token-budget`` / ``--cost-budget``: GEPA's judge and reflection calls, the validation and test passes, the
fit's LLM stages); `BudgetStop` unwinds whoever runs the LM at the cap and `stops_at_budget` turns it into
`core.errors.BudgetExhausted`, saying what each LM spent (`budget_report`, `spending`). Split from `lm.budget`
(the one reservation rule), which knows nothing of prices."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Union

import dspy

from rubricforge_dspy._dspy_compat import relay_adapter_call
from rubricforge_dspy.core.errors import BudgetExhausted, InputError
from rubricforge_dspy.lm.budget import PICO_PER_USD, PROMPT_OVERHEAD, CallUsage, Reservation, TokenBudget
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.pricing import CostBudget, Price

__all__ = ["BudgetedLM", "BudgetStop", "stops_at_budget", "budget_report", "spending", "unbudgeted", "AnyBudget"]

# the budget a `BudgetedLM` reserves on: tokens, or US dollars (`lm.pricing.CostBudget`: picodollars at a price)
AnyBudget = Union[TokenBudget, CostBudget]


class BudgetStop(BaseException):
    """Raised by a `BudgetedLM` instead of a call that could cross its budget's cap. A `BaseException`, not an
    `Exception`, on purpose, as `lm.circuit.CircuitOpen`: DSPy's evaluation loops, GEPA's and the judging layer
    (`judge.execution`) catch `Exception` and would score the refused call as a failed prediction and go on; this
    must unwind them at once. Whoever runs the LM turns it into `BudgetExhausted` (`stops_at_budget`)."""


class _Tally:
    """What one wrapped LM (and its copies) spent of the budget."""

    def __init__(self) -> None:
        self.spent = 0  # tokens (a call that reported none: its whole worst case)
        self.usd = 0.0  # under a cost budget: what those tokens cost
        self.calls = 0
        self.unreported = 0
        self.lock = threading.Lock()


def _answer_cap(kwargs: dict[str, Any]) -> int:
    return int(kwargs.get("max_tokens") or kwargs.get("max_completion_tokens") or 0)


def _schema_bytes(value: Any) -> int:
    """Bytes of a request's structured-output schema or tools (sent besides the messages)."""
    if value is None:
        return 0
    if isinstance(value, type) and hasattr(value, "model_json_schema"):  # a pydantic model class
        value = value.model_json_schema()
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


class BudgetedLM(dspy.BaseLM):  # type: ignore[misc]  # dspy ships no type information (no py.typed)
    """`lm` under a `TokenBudget` or a `lm.pricing.CostBudget`: each call reserves its worst case before it is sent,
    and settles with the usage the LM reported (the whole reservation when it reported none; nothing for an answer
    from DSPy's cache). Under a cost budget the tokens are costed at the LM's price (`CostBudget.price_for` its
    model, found when the wrapper is made: an LM without a price is refused before any call).

    A call's worst case is the UTF-8 bytes of the messages (or prompt) it sends, of its ``response_format`` and
    ``tools``, plus `PROMPT_OVERHEAD`, plus the answer's cap (``max_tokens``), times ``n`` and the attempts of the
    LM's retry policy (``num_retries + 1``). A call that does not fit raises `BudgetStop` (nothing is sent). The
    wrapper reads as `lm` (its model, settings, engine and fingerprint are `lm`'s); its copies (`sized_lm`) share
    the budget and the tally (`spent`, `calls`).

    Args:
        lm: the LM to call.
        budget: the cap (tokens, or US dollars), shared with other LMs and runs.
        role: the name its spending is reported under (``judge``, ``reflection``).

    Raises:
        InputError: `lm` has no ``max_tokens`` (its answers, hence its calls, could not be bounded); under a cost
            budget, no price is known for its model.
    """

    def __init__(self, lm: dspy.BaseLM, budget: AnyBudget, role: str = "judge", *, tally: _Tally | None = None):
        inner = lm.lm if isinstance(lm, BudgetedLM) else lm
        flag = "--token-budget" if isinstance(budget, TokenBudget) else "--cost-budget"
        if not _answer_cap(dict(getattr(inner, "kwargs", {}) or {})):
            raise InputError(f"a {flag[2:].replace('-', ' ')} ({flag}) needs a cap on each answer: the {role} LM "
                             f"{lm_name(inner)!r} has no max_tokens (pass --max-tokens N"
                             f"{'; the reflection LM: --reflection-max-tokens N' if role == 'reflection' else ''})")
        self.__dict__["lm"] = inner
        self.budget = budget
        # the price its tokens are costed at under a cost budget (None: a token budget)
        self.price: Price | None = (None if isinstance(budget, TokenBudget)
                                    else budget.price_for(getattr(inner, "model", None)))
        self.role = role
        self.tally = tally if tally is not None else _Tally()
        self.model = inner.model
        self.model_type = getattr(inner, "model_type", "chat")
        self.cache = getattr(inner, "cache", False)
        self.callbacks: list[Any] = []
        self.num_retries = int(getattr(inner, "num_retries", 0) or 0)
        self.kwargs = inner.kwargs  # the inner LM's settings, read by adapters and fingerprints
        self.history: list[Any] = []
        self._warned_zero_temp_rollout = False

    def __getattr__(self, name: str) -> Any:  # the engine, its settings, anything else: the inner LM's
        if name.startswith("__") or "lm" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["lm"], name)

    def __deepcopy__(self, memo: dict[int, Any]) -> BudgetedLM:
        return self  # GEPA copies programs: one budget, never a copy of it

    # -- what DSPy asks of an LM: the inner LM's answers
    @property
    def supports_function_calling(self) -> bool:
        return bool(self.lm.supports_function_calling)

    @property
    def supports_reasoning(self) -> bool:
        return bool(self.lm.supports_reasoning)

    @property
    def supports_response_schema(self) -> bool:
        return bool(self.lm.supports_response_schema)

    @property
    def supported_params(self) -> set[str]:
        return set(self.lm.supported_params)

    def dump_state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.lm.dump_state()
        return state

    def copy(self, **kwargs: Any) -> BudgetedLM:
        """A copy of the inner LM (``lm.copy(**kwargs)``) under the same budget, its spending in the same tally."""
        return BudgetedLM(self.lm.copy(**kwargs), self.budget, self.role, tally=self.tally)

    # -- the calls
    def bound(self, prompt: Any, messages: Any, kwargs: dict[str, Any]) -> int:
        """The most tokens one call with these arguments may spend (the class docstring's worst case)."""
        return sum(self.bounds(prompt, messages, kwargs))

    def bounds(self, prompt: Any, messages: Any, kwargs: dict[str, Any]) -> tuple[int, int]:
        """`bound` split into its prompt tokens and its completion tokens (a price tells them apart)."""
        merged = {**(self.lm.kwargs or {}), **kwargs}
        cap = _answer_cap(merged)
        if cap <= 0:
            raise BudgetStop(f"a token budget needs a cap on each answer: a call of the {self.role} LM "
                             f"{lm_name(self.lm)!r} was made without max_tokens")
        sent = messages if messages is not None else prompt
        size = len(json.dumps(sent, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
        size += _schema_bytes(merged.get("response_format")) + _schema_bytes(merged.get("tools"))
        times = int(merged.get("n") or 1) * (self.num_retries + 1)
        return (size + PROMPT_OVERHEAD) * times, cap * times

    def _reserve(self, prompt: Any, messages: Any, kwargs: dict[str, Any]) -> tuple[Reservation, int]:
        """The call's reservation on the budget and its worst case in tokens."""
        bound = self.bounds(prompt, messages, kwargs)
        try:
            if isinstance(self.budget, TokenBudget):
                return self.budget.reserve(sum(bound)), sum(bound)
            return self.budget.reserve(*bound, price=self.price), sum(bound)
        except BudgetExhausted as error:
            raise BudgetStop(f"{error} (a {self.role} LM call)") from error

    def _settle(self, reserved: tuple[Reservation, int], usage: CallUsage, answered: bool) -> None:
        reservation, worst = reserved
        if usage.reported:
            spent: dict[str, int] | None = {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion}
        elif answered and usage.answered == 0:  # an answer from DSPy's cache: nothing was sent
            spent = {"prompt_tokens": 0, "completion_tokens": 0}
        else:  # no usage reported (or the call failed without one): the whole worst case
            spent = None
        if isinstance(self.budget, TokenBudget):
            self.budget.settle(reservation, spent)
        else:
            self.budget.settle(reservation, spent, price=self.price)
        with self.tally.lock:
            self.tally.calls += 1
            self.tally.unreported += spent is None
            self.tally.spent += worst if spent is None else usage.tokens
            if self.price is not None:  # what the budget was charged: the reservation when nothing was reported
                self.tally.usd += (reservation.tokens / PICO_PER_USD if spent is None
                                   else self.price.usd(spent["prompt_tokens"], spent["completion_tokens"]))

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        reserved = self._reserve(prompt, messages, kwargs)
        usage = CallUsage(dspy.settings.usage_tracker)
        try:
            with dspy.context(usage_tracker=usage), relay_adapter_call(self, self.lm, messages):
                outputs = self.lm(prompt, messages=messages, **kwargs)
        except BaseException:
            self._settle(reserved, usage, answered=False)
            raise
        self._settle(reserved, usage, answered=True)
        return outputs

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        reserved = self._reserve(prompt, messages, kwargs)
        usage = CallUsage(dspy.settings.usage_tracker)
        try:
            with dspy.context(usage_tracker=usage), relay_adapter_call(self, self.lm, messages):
                outputs = await self.lm.acall(prompt, messages=messages, **kwargs)
        except BaseException:
            self._settle(reserved, usage, answered=False)
            raise
        self._settle(reserved, usage, answered=True)
        return outputs

    def forward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        raise TypeError("a BudgetedLM is called (lm(...) or lm.acall(...)), never through forward")

    async def aforward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        raise TypeError("a BudgetedLM is called (lm(...) or lm.acall(...)), never through aforward")


def unbudgeted(lm: Any) -> Any:
    """The LM a `BudgetedLM` wraps (`lm` itself when it is not one): what a certificate or a manifest names."""
    return lm.lm if isinstance(lm, BudgetedLM) else lm


def budget_report(budget: AnyBudget, lms: list[Any], by_lm: dict[str, dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """`budget`'s summary (`TokenBudget.to_dict`, or `CostBudget.to_dict` in USD) with what each `BudgetedLM` of
    `lms` spent (``by_lm``: role -> spent tokens, calls, calls that reported no usage, and under a cost budget
    ``usd``; `by_lm` adds entries of an earlier report), what calls in flight reserved (``reserved``, in the
    budget's unit) and what other users of the budget spent (``other``: a job runner's calls, in its unit)."""
    by_lm = dict(by_lm or {})
    for lm in lms:
        if isinstance(lm, BudgetedLM):
            tally = lm.tally
            with tally.lock:
                by_lm[lm.role] = {"spent": tally.spent, "calls": tally.calls, "unreported_calls": tally.unreported,
                                  **({} if lm.price is None else {"usd": round(tally.usd, 9)})}
    if isinstance(budget, TokenBudget):
        other: float = budget.spent - sum(entry["spent"] for entry in by_lm.values())
        return {**budget.to_dict(), "reserved": budget.reserved, "by_lm": by_lm, "other": other}
    other = round(budget.spent - sum(entry.get("usd", 0.0) for entry in by_lm.values()), 9)
    return {**budget.to_dict(), "reserved": round(budget.reserved, 9), "by_lm": by_lm, "other": max(0.0, other)}


def spending(report: dict[str, Any], other: str = "other calls") -> str:
    """One line of a `budget_report`: spent of the cap, and by LM (in US dollars for a cost budget)."""
    if "cap_usd" in report:
        parts = [f"{role} LM ${entry.get('usd', 0.0):,.6g} ({entry['spent']:,} tokens) in {entry['calls']} call(s)"
                 for role, entry in report["by_lm"].items()]
        if report.get("other"):
            parts.append(f"{other} ${report['other']:,.6g}")
        line = f"spent ${report['spent_usd']:,.6g} of ${report['cap_usd']:,.6g}"
        if parts:
            line += f" ({', '.join(parts)})"
        if report.get("reserved"):
            line += f"; ${report['reserved']:,.6g} more reserved by calls still in flight"
        return line
    parts = [f"{role} LM {entry['spent']:,} in {entry['calls']} call(s)" for role, entry in report["by_lm"].items()]
    if report.get("other"):
        parts.append(f"{other} {report['other']:,}")
    line = f"spent {report['spent']:,} of {report['cap']:,} tokens"
    if parts:
        line += f" ({', '.join(parts)})"
    if report.get("reserved"):
        line += f"; {report['reserved']:,} more reserved by calls still in flight"
    return line


IN_FLIGHT_WAIT = 600.0  # seconds `stops_at_budget` waits for the calls in flight before it says what was spent


@contextmanager
def stops_at_budget(budget: AnyBudget | None, lms: list[Any], advice: str) -> Iterator[None]:
    """Turn a `BudgetStop` raised inside into `BudgetExhausted`: its reason, what was spent by each LM of `lms`
    (`budget_report`, once the calls in flight finished: at most `IN_FLIGHT_WAIT` seconds), and `advice` (what was
    kept, how to go on)."""
    try:
        yield
    except BudgetStop as stop:
        if budget is None:
            raise
        budget.wait_settled(IN_FLIGHT_WAIT)  # DSPy's and GEPA's worker threads finish the calls they started
        raise BudgetExhausted(f"{stop}. {spending(budget_report(budget, lms))}. {advice}") from None
