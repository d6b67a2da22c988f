"""The one dead-server circuit breaker: stop after N consecutive failed LM calls instead of turning a
whole run into recorded fails.

`LMCircuit` counts consecutive calls that failed because the LM did not answer (`lm.errors.is_outage`:
format failures are answers, not outages) and opens after `limit` of them. Its users:

- batch judging (`rubricforge_dspy.apply.stream.judge_stream`, default 20 after retries) records each
  verdict's outcome and raises `JudgeUnavailableError` once the circuit is open;
- induction (`rubricforge_dspy.induction.guards.CircuitJudge`, default 3) wraps each judge call in
  `LMCircuit.call`, which raises `CircuitOpen` so GEPA's loops unwind, and `induce` turns it into
  `JudgeUnavailableError`.

Either way the command line exits 3 (`JudgeUnavailableError` is a `ServerError`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

from rubricforge_dspy.core.errors import ServerError
from rubricforge_dspy.lm.errors import is_outage

T = TypeVar("T")

__all__ = ["JudgeUnavailableError", "CircuitOpen", "LMCircuit"]


class JudgeUnavailableError(ServerError):
    """The judge (or reflection) LM failed too many times in a row: the run stopped (a batch's output
    stays resumable; induction wrote no program). The message names the endpoint and the last error.
    The command line exits 3."""


class CircuitOpen(BaseException):
    """Raised by `LMCircuit.call` when the circuit is open. A `BaseException`, not an `Exception`, on
    purpose, like KeyboardInterrupt: GEPA's evaluation loops catch `Exception` (and would score the call
    as a failure and go on), and this must unwind them at once. Hence one of the two exception classes of the
    package outside `RubricForgeError` (the other: `lm.budgeted.BudgetStop`); whoever runs GEPA turns it into
    `JudgeUnavailableError`."""


class LMCircuit:
    """Counts consecutive failed LM calls; opens after `limit` of them (None: never).

    The message reads ``judge LM <endpoint> failed <n> consecutive calls<counted>; last error: <error>.
    <advice>``. Thread-safe; deep copies return the same circuit (GEPA copies candidate programs)."""

    def __init__(self, limit: int | None, endpoint: str, advice: str, counted: str = ""):
        if limit is not None and limit < 1:
            raise ValueError(f"circuit limit must be >= 1 or None, got {limit}")
        self.limit = limit
        self.endpoint = endpoint
        self.advice = advice
        self.counted = counted
        self.consecutive = 0
        self.total = 0
        self.last: BaseException | str | None = None
        self.tripped = False
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> "LMCircuit":
        return self

    @property
    def message(self) -> str:
        if isinstance(self.last, BaseException):
            cause = f"{type(self.last).__name__}: {self.last}"
        else:
            cause = self.last if self.last is not None else "unknown"
        return (f"judge LM {self.endpoint} failed {self.consecutive} consecutive calls{self.counted}; "
                f"last error: {cause}. {self.advice}")

    def failure(self, error: BaseException | str) -> bool:
        """Count one failed call (`error`: the exception, or the recorded error message); True when the
        circuit is open."""
        with self._lock:
            self.consecutive += 1
            self.total += 1
            self.last = error
            if self.limit is not None and self.consecutive >= self.limit:
                self.tripped = True
            return self.tripped

    def success(self) -> None:
        """A call that got an answer (a verdict, or one that is not: format failures are answers)."""
        with self._lock:
            self.consecutive = 0

    def raise_if_open(self) -> None:
        """Raise `JudgeUnavailableError` (with the message) when the circuit is open."""
        if self.tripped:
            cause = self.last if isinstance(self.last, BaseException) else None
            raise JudgeUnavailableError(self.message) from cause

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`function(*args, **kwargs)` through the circuit: `CircuitOpen` instead of the call when the
        circuit is open, and when this call's failure opens it; any exception is re-raised after being
        counted (an outage) or not (an answer that is not a verdict, `lm.errors.is_outage`)."""
        if self.tripped:
            raise CircuitOpen(self.message)
        try:
            result = function(*args, **kwargs)
        except Exception as error:
            if not is_outage(error):
                self.success()
                raise
            if self.failure(error):
                raise CircuitOpen(self.message) from error
            raise
        self.success()
        return result
