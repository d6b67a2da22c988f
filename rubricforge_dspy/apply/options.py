"""`JobOptions`: how a judging job runs, one frozen record for every back end (local, Ray, Batch API).

The public entry points (`judge_stream`, `run_judge_file`, `run_batch_api`, `apply.ray.judge_dataset`) take
an ``options`` record, or its fields as keyword arguments (``judge_stream(..., concurrency=8)``), and hand
the back end one `JobOptions`. Each back end reads the fields it uses: the Batch API has no concurrency
(the provider schedules); every back end is a run of the one job runner, with its verdict cache.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from rubricforge_dspy.apply.budget import TokenBudget
from rubricforge_dspy.apply.pricing import CostBudget, Price
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.judge.cache import VerdictCache
from rubricforge_dspy.judge.contract import DEFAULT_MAX_CONSECUTIVE_LM_ERRORS
from rubricforge_dspy.judge.execution import RetryPolicy

__all__ = ["JobOptions", "job_options", "DEFAULT_FSYNC_EVERY", "DEFAULT_MAX_CONSECUTIVE_LM_ERRORS"]

# Measured on ext4: a line write ~0.5 us, an fsync 0.2-4 ms. A SIGKILL loses nothing that was
# written (the page cache survives the process); fsync only guards against an OS crash, where at
# most `fsync_every` lines are re-judged on resume. Per-line fsync costs <1% at LM speed but cuts a
# cache replay from ~5,000 to ~250 lines/s; every 16 lines keeps ~2,700/s.
DEFAULT_FSYNC_EVERY = 16


@dataclass(frozen=True)
class JobOptions:
    """How a judging job runs.

    Attributes:
        concurrency: judge calls in flight at once (per Ray worker on Ray); at most ``2 * concurrency``
            trajectories are held at once locally.
        max_retries: retries of transient LM errors (`judge.execution.RetryPolicy`), with `backoff` and
            `max_backoff` seconds between them.
        backoff: see `max_retries`.
        max_backoff: see `max_retries`.
        timeout: per-call LM timeout in seconds (None keeps the LM's own). The job owns retries: its copy
            of the LM makes one attempt per call, with DSPy's response cache off.
        cache: None/False (no cache), True (``.rubricforge_cache/`` next to the output), a directory, or a
            `VerdictCache`; keyed by the judge's fingerprint, abstentions never cached.
        progress: show progress (a bar; the Batch API's status while polling).
        limit: consider only the first `limit` distinct input ids (resumed ones included), so re-running
            with the same limit resumes the same slice.
        on_duplicate: "raise" (`DuplicateIdError` naming the file and record) or "skip" (counted); None:
            the entry point's default ("skip" when a file's bad records are skipped, else "raise").
        fsync_every: fsync the output every N lines (0: only at the end).
        max_consecutive_lm_errors: stop with `JudgeUnavailableError` after this many verdicts in a row
            abstained for an LM or network error (after their retries; the circuit breaker,
            `rubricforge_dspy.lm.circuit`); None never stops. Format failures (parse, truncated, invalid)
            do not count; cache hits neither count nor reset.
        token_budget: the most tokens (prompt plus completion) the run's LM calls may spend, or a `TokenBudget`
            shared by several runs; each call reserves its worst case first (`apply.budget`), and the run stops
            with `BudgetExhausted` before the cap would be crossed, keeping what it wrote. The local back end
            only: a Ray or Batch API run refuses it. None: no cap.
        price: the judge LM's price (`apply.pricing.Price`: USD per million prompt and completion tokens, e.g.
            ``Price.parse("0.15,0.60")``); None: litellm's model cost map's, when it knows the model. Each line's
            ``tokens.usd`` and the summary's cost are computed at it; with no price they are unknown, and said so.
        cost_budget: the most USD the run's LM calls may spend (or a `CostBudget` shared by several runs, which costs
            calls at its own price), enforced as `token_budget` is (each call's worst case in tokens times the price,
            reserved first; `BudgetExhausted` before the cap); needs a price. The local back end only. None: no cap.
    """

    concurrency: int = 4
    max_retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 8.0
    timeout: float | None = None
    cache: bool | PathArg | VerdictCache | None = None
    progress: bool = True
    limit: int | None = None
    on_duplicate: str | None = None
    fsync_every: int = DEFAULT_FSYNC_EVERY
    max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS
    token_budget: int | TokenBudget | None = None
    price: Price | None = None
    cost_budget: float | CostBudget | None = None

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy of every judge call of the job."""
        return RetryPolicy(self.max_retries, self.backoff, self.max_backoff)

    @property
    def duplicates(self) -> str:
        """`on_duplicate`, "raise" when unset."""
        return self.on_duplicate or "raise"

    def refuse_budget(self, where: str) -> None:
        """Refuse a `token_budget` for a back end that cannot enforce it (`where`: which one).

        Raises:
            InputError: `token_budget` or `cost_budget` is set.
        """
        if self.cost_budget is not None:
            raise InputError(f"{where} cannot enforce a cost budget (its calls in flight cannot be stopped before the "
                             "cap): judge locally (judge_stream, run_judge_file) or drop cost_budget")
        if self.token_budget is not None:
            raise InputError(f"{where} cannot enforce a token budget (its calls in flight cannot be stopped "
                             "before the cap): judge locally (judge_stream, run_judge_file) or drop token_budget")

    def check(self, limit: bool = True) -> None:
        """Refuse a bad option before any work.

        Args:
            limit: check `limit` too (a file's entry point leaves it to the input check, which words it as
                the command line does).

        Raises:
            InputError: a bad `on_duplicate`, `limit`, `concurrency`, `token_budget`, `cost_budget` or `price`.
        """
        if self.duplicates not in ("raise", "skip"):
            raise InputError(f"on_duplicate must be 'raise' or 'skip', got {self.on_duplicate!r}")
        if limit and self.limit is not None and self.limit < 1:
            raise InputError(f"limit must be at least 1 (or None for every item), got {self.limit!r}")
        if self.concurrency < 1:
            raise InputError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.token_budget is not None and not isinstance(self.token_budget, TokenBudget):
            TokenBudget(self.token_budget)  # refuses a cap that is not a whole number >= 1
        if self.cost_budget is not None and not isinstance(self.cost_budget, CostBudget):
            CostBudget(self.cost_budget, Price(0.0, 0.0))  # refuses a cap that is not a number > 0
        if self.price is not None and not isinstance(self.price, Price):
            raise InputError(f"price is an apply.pricing.Price (e.g. Price.parse('0.15,0.60')), got {self.price!r}")


_FIELDS = frozenset(f.name for f in fields(JobOptions))


def job_options(options: JobOptions | None, overrides: dict[str, Any],
                default: JobOptions = JobOptions()) -> JobOptions:
    """The record an entry point runs with: `options` (else its `default`) with the keyword `overrides`.

    Raises:
        TypeError: an override that is not a `JobOptions` field (as for an unknown keyword argument).
    """
    unknown = sorted(set(overrides) - _FIELDS)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}: not options of a judging job "
                        f"(JobOptions: {', '.join(sorted(_FIELDS))})")
    base = default if options is None else options
    return replace(base, **overrides) if overrides else base
