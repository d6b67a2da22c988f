"""What a judging run reports: `BatchSummary` (the one tally of every back end) and `UsageTotals`."""

from __future__ import annotations

import threading
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.verdict import Verdict, evidence_differs, shares_of

__all__ = ["BatchSummary", "UsageTotals"]


@dataclass
class BatchSummary:
    """What one `judge_stream` run did.

    judged: verdict lines written by this run (LM verdicts and cache hits); passed: of those, passes;
    abstained: abstentions by error kind; cached: lines served by the verdict cache; resumed: input
    ids skipped because the output already had them; duplicates: input ids seen twice (skipped);
    skipped: records the loader skipped (run_judge_file only); lm_calls/retries: judge calls made (attempts of the
    retry policy) and how many were retries; requests_sent: the HTTP requests they sent (a segment judge's windows each
    count; `core.verdict.token_usage`'s ``calls``); tokens: prompt/completion tokens reported by the LM, or None.
    price: the judge LM's price (`apply.pricing.Price.to_dict` and its model), None when unknown (`priced_model`:
    the model a price was looked for, None for a run without an LM); cost: `cost`. evidence: what this run's lines
    say their judge read (`evidence`); certified_evidence: the evidence shares each certificate of the judge was
    earned on (its program's, or each certified stage's), compared with this run's at the end (`evidence_warnings`).
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
    requests_sent: int = 0
    price: dict[str, Any] | None = None
    priced_model: str | None = None
    cost_budget: dict[str, Any] | None = None  # `apply.pricing.CostBudget.to_dict` of a run with a cost budget
    usd_total: float = 0.0  # the LM-judged lines' ``tokens.usd``, summed
    usd_items: int = 0
    evidence_counts: list[int] = field(default_factory=lambda: [0, 0, 0])  # lines on complete, cut, unknown evidence
    certified_evidence: dict[str, dict[str, Any]] = field(default_factory=dict)  # certificate's name -> its shares

    def count_stage(self, stage: str, usage: dict[str, int] | None, attempts: int | None) -> None:
        """Count one finished LM call of `stage` (a plain judge's one stage is "judge"), the HTTP requests it sent
        (`attempts`) and its reported usage."""
        row = self.stage_tokens.setdefault(stage, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0,
                                                   "unreported": 0})
        row["calls"] += attempts or 0  # the requests sent (`core.verdict.token_usage`'s calls)
        if usage is None:
            row["unreported"] += 1
            return
        row["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        row["completion_tokens"] += int(usage.get("completion_tokens") or 0)

    def count_item_tokens(self, tokens: dict[str, dict[str, int]], usd: float | None = None) -> None:
        """Count one written line's tokens (stage -> prompt/completion of its LM calls), for `tokens_per_item`, and
        its cost (`usd`: the line's ``tokens.usd``; None when no price is known), for `cost`."""
        self.item_totals.append(sum(int(t.get("prompt_tokens", 0)) + int(t.get("completion_tokens", 0))
                                    for t in tokens.values()))
        if usd is not None:
            self.usd_total += usd
            self.usd_items += 1

    def count_evidence(self, evidence: Any) -> None:
        """Count one written line's ``evidence`` (complete, cut, or unknown when the line has none), for
        `evidence`."""
        k = 2 if not isinstance(evidence, dict) else 0 if evidence.get("complete") else 1
        self.evidence_counts[k] += 1

    @property
    def evidence(self) -> dict[str, Any]:
        """This run's lines by what their judge read (`core.verdict.evidence_shares`' record)."""
        return shares_of(*self.evidence_counts)

    @property
    def cost(self) -> dict[str, Any] | None:
        """What this run's LM calls cost (``usd``: the LM-judged lines' ``tokens.usd`` summed; ``per_item``: their
        mean; ``items``: how many), or ``{"unknown": MODEL}`` when no price is known for the model; None when no
        line's LM reported usage (nothing to cost)."""
        if not self.item_totals:
            return None
        if self.price is None:
            return {"unknown": self.priced_model or self.model}
        return {"usd": round(self.usd_total, 9), "items": self.usd_items,
                "per_item": round(self.usd_total / self.usd_items, 9) if self.usd_items else None}

    def evidence_warnings(self) -> list[str]:
        """A sentence for each certificate of the judge earned on other evidence than this run's lines read (complete
        against cut: `core.verdict.evidence_differs`): its rates need not hold on this run's verdicts."""
        now = self.evidence
        words = []
        for name, earned in self.certified_evidence.items():
            differs = evidence_differs(earned, now)
            if differs is None:
                continue
            was, share = differs
            if share > was:
                words.append(f"warning: {name} was certified on {1 - was:.0%} complete evidence; {share:.0%} of this "
                             f"run's verdicts ({now['cut']} of {now['cut'] + now['complete']}) were judged on cut "
                             "evidence (steps clipped or elided): the certificate does not cover them")
            else:
                words.append(f"warning: {name} was certified on {was:.0%} cut evidence; {1 - share:.0%} of this run's "
                             f"verdicts ({now['complete']} of {now['cut'] + now['complete']}) were judged on complete "
                             "evidence: the certificate's rates were measured on cut reading and need not hold on them")
        return words

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
        cost = self.cost
        if cost is not None and "unknown" in cost:
            lines.append(f"cost unknown: no price for {cost['unknown']} (give --price IN,OUT: USD per million prompt "
                         "and completion tokens)")
        elif cost is not None and self.price is not None:
            mean = "" if cost["per_item"] is None else f", ${cost['per_item']:,.6g} per item"
            lines.append(f"cost: ${cost['usd']:,.6g} ({cost['items']} LM-judged item(s){mean}) at "
                         f"${self.price['prompt_per_million']:g} / ${self.price['completion_per_million']:g} per "
                         f"million prompt / completion tokens ({self.price['source']})")
        if self.token_budget is not None:
            budget = self.token_budget
            lines.append(f"token budget: spent {budget['spent']:,} of {budget['cap']:,} (left {budget['left']:,})"
                         + ("; stopped before the cap" if budget["stopped"] else ""))
            if budget.get("overruns"):
                lines.append(f"warning: {budget['overruns']} call(s) spent more tokens than they reserved: the "
                             "judge's bound (token_bound) is wrong and the cap may have been crossed")
        if self.cost_budget is not None:
            budget = self.cost_budget
            lines.append(f"cost budget: spent ${budget['spent_usd']:,.6g} of ${budget['cap_usd']:,.6g} (left "
                         f"${budget['left_usd']:,.6g})" + ("; stopped before the cap" if budget["stopped"] else ""))
            if budget.get("overruns"):
                lines.append(f"warning: {budget['overruns']} call(s) cost more than they reserved: the judge's bound "
                             "(token_bound) is wrong and the cap may have been crossed")
        lines.extend(self.evidence_warnings())
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
            "token_budget": self.token_budget, "requests_sent": self.requests_sent, "price": self.price,
            "cost": self.cost, "cost_budget": self.cost_budget, "evidence": self.evidence,
            "certified_evidence": self.certified_evidence, "evidence_warnings": self.evidence_warnings(),
        }

    def format(self) -> str:
        kinds = " ".join(f"{k}={v}" for k, v in sorted(self.abstained.items()))
        abstained = f"{self.n_abstained}" + (f" ({kinds})" if kinds else "")
        lines = [
            f"judged {self.judged}: passed {self.passed}, failed {self.judged - self.passed}, "
            f"abstained {abstained}, passed/score contradictions {self.contradictions} (counted as fails)",
            f"cached {self.cached} | resumed {self.resumed} (re-asked {self.retried} failed calls) | "
            f"duplicates {self.duplicates} | "
            f"loader skipped {self.skipped} | LM calls {self.lm_calls} (retries {self.retries}; HTTP requests "
            f"{self.requests_sent})",
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
    so memory does not grow with the number of calls. Thread-safe. ``answers``: the usages added (DSPy adds one
    per answered request; a back end that adds an item's summed usage at once, as Ray's driver does, adds one).

    Args:
        parent: another `UsageTotals` every usage is also added to (a call's own tracker, under the run's).
    """

    def __init__(self, parent: "UsageTotals | None" = None):
        self.parent = parent
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.answers = 0  # the answers whose usage was reported (one per answered request)
        self.seen = False

    def add_usage(self, lm: str, usage: Any) -> None:  # OpenAI's usage: a mapping, a pydantic model or None
        if not usage:
            return
        if not isinstance(usage, dict):
            usage = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
        with self._lock:
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
            self.answers += 1
            self.seen = True
        if self.parent is not None:
            self.parent.add_usage(lm, usage)

    def totals(self) -> dict[str, int] | None:
        if not self.seen:
            return None
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
