"""What a judging run reports: `BatchSummary` (the one tally of every back end) and `UsageTotals`."""

from __future__ import annotations

import threading
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.verdict import Verdict

__all__ = ["BatchSummary", "UsageTotals"]


@dataclass
class BatchSummary:
    """What one `judge_stream` run did.

    judged: verdict lines written by this run (LM verdicts and cache hits); passed: of those, passes;
    abstained: abstentions by error kind; cached: lines served by the verdict cache; resumed: input
    ids skipped because the output already had them; duplicates: input ids seen twice (skipped);
    skipped: records the loader skipped (run_judge_file only); lm_calls/retries: judge calls made
    and how many were retries; tokens: prompt/completion tokens reported by the LM, or None.
    """

    out_path: str
    judged: int = 0
    passed: int = 0
    abstained: Counter[str] = field(default_factory=Counter)
    cached: int = 0
    resumed: int = 0
    duplicates: int = 0
    skipped: int = 0
    lm_calls: int = 0
    retries: int = 0
    repaired_bytes: int = 0
    tokens: dict[str, int] | None = None
    wall_time: float = 0.0
    program_sha256: str | None = None
    judge_fingerprint: str | None = None
    model: str | None = None
    contradictions: int = 0
    retried: int = 0  # abstentions for LM errors left by an earlier run, asked again
    fast_path: bool = False  # judged through `TrajectoryJudge.direct_call` on one event loop
    errors: dict[str, str | None] = field(default_factory=dict)  # one example error message per abstention kind
    token_budget: dict[str, Any] | None = None  # `apply.budget.TokenBudget.to_dict` of a run with a budget
    stage_tokens: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> prompt/completion/calls
    item_totals: array[int] = field(default_factory=lambda: array("q"))  # each LM-judged line's tokens

    def count_stage(self, stage: str, usage: dict[str, int] | None, attempts: int | None) -> None:
        """Count one finished LM call of `stage` (a plain judge's one stage is "judge") and its reported usage."""
        row = self.stage_tokens.setdefault(stage, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0,
                                                   "unreported": 0})
        row["calls"] += attempts or 0
        if usage is None:
            row["unreported"] += 1
            return
        row["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        row["completion_tokens"] += int(usage.get("completion_tokens") or 0)

    def count_item_tokens(self, tokens: dict[str, dict[str, int]]) -> None:
        """Count one written line's tokens (stage -> prompt/completion of its LM calls), for `tokens_per_item`."""
        self.item_totals.append(sum(int(t.get("prompt_tokens", 0)) + int(t.get("completion_tokens", 0))
                                    for t in tokens.values()))

    @property
    def tokens_per_item(self) -> dict[str, float | int] | None:
        """Tokens (prompt plus completion) per LM-judged line of this run: ``items``, ``mean``, ``p50``, ``p95``,
        ``max``; None when no line's LM reported usage."""
        if not self.item_totals:
            return None
        values = np.frombuffer(self.item_totals, dtype=np.int64)
        return {"items": int(values.size), "mean": round(float(values.mean()), 1),
                "p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95)),
                "max": int(values.max())}

    def count(self, verdict: Verdict, cached: bool) -> None:
        """Count one written verdict line (the one tally of online and Batch API judging)."""
        self.judged += 1
        self.passed += verdict.passed
        self.cached += cached
        self.contradictions += verdict.contradiction
        if verdict.abstained:
            kind = verdict.error_kind
            if kind is None:
                raise RubricForgeError("an abstention has its kind (`Verdict.__post_init__`)")
            self.abstained[kind] += 1
            self.errors.setdefault(kind, verdict.error)

    def cost_lines(self) -> list[str]:
        """The run's tokens per item, per stage (when a cascade has several) and its token budget, a line each."""
        lines = []
        per_item = self.tokens_per_item
        if per_item is not None:
            lines.append(f"tokens per item ({per_item['items']} LM-judged): mean {per_item['mean']:,} "
                         f"p50 {per_item['p50']:,} p95 {per_item['p95']:,} max {per_item['max']:,}")
        if len(self.stage_tokens) > 1:
            lines.append("tokens by stage: " + ", ".join(
                f"{name} {row['prompt_tokens'] + row['completion_tokens']:,} ({row['calls']} call(s))"
                for name, row in self.stage_tokens.items()))
        if self.token_budget is not None:
            budget = self.token_budget
            lines.append(f"token budget: spent {budget['spent']:,} of {budget['cap']:,} (left {budget['left']:,})"
                         + ("; stopped before the cap" if budget["stopped"] else ""))
            if budget.get("overruns"):
                lines.append(f"warning: {budget['overruns']} call(s) spent more tokens than they reserved: the "
                             "judge's bound (token_bound) is wrong and the cap may have been crossed")
        return lines

    @property
    def n_abstained(self) -> int:
        return sum(self.abstained.values())

    @property
    def throughput(self) -> float:
        """Verdict lines written per second of wall time."""
        return self.judged / self.wall_time if self.wall_time > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "out_path": self.out_path, "judged": self.judged, "passed": self.passed,
            "abstained": dict(self.abstained), "n_abstained": self.n_abstained, "cached": self.cached,
            "resumed": self.resumed, "duplicates": self.duplicates, "skipped": self.skipped,
            "lm_calls": self.lm_calls, "retries": self.retries, "repaired_bytes": self.repaired_bytes,
            "tokens": self.tokens, "wall_time": round(self.wall_time, 3),
            "throughput": round(self.throughput, 3), "program_sha256": self.program_sha256,
            "judge_fingerprint": self.judge_fingerprint, "model": self.model,
            "contradictions": self.contradictions, "retried": self.retried, "errors": dict(self.errors),
            "tokens_per_item": self.tokens_per_item, "stage_tokens": self.stage_tokens,
            "token_budget": self.token_budget,
        }

    def format(self) -> str:
        kinds = " ".join(f"{k}={v}" for k, v in sorted(self.abstained.items()))
        abstained = f"{self.n_abstained}" + (f" ({kinds})" if kinds else "")
        lines = [
            f"judged {self.judged}: passed {self.passed}, failed {self.judged - self.passed}, "
            f"abstained {abstained}, passed/score contradictions {self.contradictions} (counted as fails)",
            f"cached {self.cached} | resumed {self.resumed} (re-asked {self.retried} failed calls) | "
            f"duplicates {self.duplicates} | "
            f"loader skipped {self.skipped} | LM calls {self.lm_calls} (retries {self.retries})",
        ]
        if self.tokens:
            lines.append(f"tokens: prompt {self.tokens.get('prompt_tokens', 0):,} "
                         f"completion {self.tokens.get('completion_tokens', 0):,}")
        lines.extend(self.cost_lines())
        for kind, error in sorted(self.errors.items()):
            lines.append(f"  e.g. {kind}: {str(error)[:200]}")
        lines.append(f"{self.wall_time:.1f}s, {self.throughput:.2f} verdicts/s -> {self.out_path}")
        return "\n".join(lines)


class UsageTotals:
    """A DSPy usage tracker (`dspy.context(usage_tracker=...)`) that keeps running sums only,
    so memory does not grow with the number of calls. Thread-safe.

    Args:
        parent: another `UsageTotals` every usage is also added to (a call's own tracker, under the run's).
    """

    def __init__(self, parent: "UsageTotals | None" = None):
        self.parent = parent
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.seen = False

    def add_usage(self, lm: str, usage: Any) -> None:  # OpenAI's usage: a mapping, a pydantic model or None
        if not usage:
            return
        if not isinstance(usage, dict):
            usage = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
        with self._lock:
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
            self.seen = True
        if self.parent is not None:
            self.parent.add_usage(lm, usage)

    def totals(self) -> dict[str, int] | None:
        if not self.seen:
            return None
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
