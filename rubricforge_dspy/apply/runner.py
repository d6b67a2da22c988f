"""The job runner's engine: one run of a judge over a stream of trajectories (`JobRun`), a plain judge as one
stage and a cascade stage by stage (`Stage`, `LocalCalls`; a later stage sees only what the earlier ones left:
streamed through the LLM stage's bounded window when run locally with one LLM stage, else over chunks), with
the cache, the writer, the circuit and the tally that `apply.stream.run_job` hands it. Split from
`apply.stream`, which keeps the entry points (`judge_stream`, `run_job`, `run_judge_file`); the stage, its item
and the local back end's calls are `apply.stage_calls` (re-exported here)."""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sized, TypeGuard

from rubricforge_dspy.apply.budget import TokenBudget, prompt_bound
from rubricforge_dspy.apply.job import ResumeState, claim_job, read_done
from rubricforge_dspy.apply.options import JobOptions
from rubricforge_dspy.apply.pricing import CostBudget, Price, price_of
from rubricforge_dspy.apply.stage_calls import Jobs, LocalCalls, RunItem, Stage, StageCalls
from rubricforge_dspy.apply.summary import BatchSummary, UsageTotals
from rubricforge_dspy.apply.writer import Spilled, VerdictWriter, judge_reading
from rubricforge_dspy.core.errors import BudgetExhausted, InputError, RubricForgeError
from rubricforge_dspy.core.progress import is_requested, progress
from rubricforge_dspy.core.trajectory import Trajectory, TrajectoryFormatError
from rubricforge_dspy.core.verdict import Verdict, token_usage, verdict_line
from rubricforge_dspy.judge.cache import VerdictCache, input_sha256, open_cache
from rubricforge_dspy.judge.execution import count_verdict, requests_made
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.copies import one_attempt_lm, resolve_lm

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.apply.cascade_job import CascadeJob, CascadeRun
    from rubricforge_dspy.judge.cascade import Cascade

__all__ = ["JobRun", "Stage", "RunItem", "StageCalls", "LocalCalls", "DuplicateIdError", "CASCADE_CHUNK", "is_cascade",
           "distinct", "progress_bar"]


class DuplicateIdError(TrajectoryFormatError):
    """Two input trajectories share an id; the message names the file and record of the second."""


def is_cascade(judge: object) -> TypeGuard[Cascade]:
    """A `judge.cascade.Cascade` (whose module is then loaded: a plain run never imports the cascade's)."""
    module = sys.modules.get("rubricforge_dspy.judge.cascade")
    return module is not None and isinstance(judge, module.Cascade)


CASCADE_CHUNK = 2048  # a chunked cascade's items per chunk (`JobRun.streams`: Ray, Batch API, several LLM stages)


class JobRun:
    """One run of the job runner: the judge on its one-attempt LM, the job claimed, the writer, the verdict
    cache, the circuit breakers, the progress bar and the tally; a plain judge is one stage, a cascade its stages
    run chunk by chunk (a later stage over what the earlier left). The stages' calls are made by `calls`
    (`LocalCalls`, or a Ray or Batch API back end's)."""

    def __init__(self, judge: Any, lm: dspy.BaseLM | None, out_path: Path, options: JobOptions, data: str | None,
                 done: ResumeState | None, *, calls: StageCalls | None = None, cascade: CascadeJob | None = None,
                 chunk: int | None = None) -> None:
        self.options, self.out_path, self.cascade = options, out_path, cascade
        self.chunk = chunk or CASCADE_CHUNK
        self.predictors = judge.predictors() if hasattr(judge, "predictors") else []
        # A cascade whose stages make no LM call (floors) has no LM: none is resolved, and a configured one is
        # not part of its job (a resume under another configured LM is the same job).
        base_lm = resolve_lm(judge, lm) if self.predictors or cascade is None else None
        if base_lm is None and self.predictors:
            raise InputError("no LM to judge with: pass lm=..., call judge.set_lm(...), or dspy.configure(lm=...)")
        self.judge, the_lm = judge, base_lm
        if self.predictors and base_lm is not None:
            the_lm = one_attempt_lm(base_lm, options.timeout, connections=options.concurrency)
            self.judge = judge.deepcopy()
            self.judge.set_lm(the_lm)
        model = getattr(the_lm, "model", None)
        if cascade is None:
            fingerprint = judge_fingerprint(self.judge, the_lm)
            circuit = LMCircuit(options.max_consecutive_lm_errors, lm_name(the_lm), counted=" after retries",
                                advice=f"Stopped; {out_path} keeps every verdict so far: fix the server and "
                                       "re-run the same command to resume.")
            self.stages = [Stage(0, None, self.judge, the_lm if self.predictors else None, fingerprint.sha256,
                                 circuit)]
        else:
            from rubricforge_dspy.apply.cascade_job import cascade_fingerprint

            fingerprint = cascade_fingerprint(self.judge, base_lm, cascade.cascade_file)
            self.stages = [self._stage(k, name, stage, the_lm) for k, (name, stage)
                           in enumerate(zip(cascade.names, self.judge.stages, strict=True))]
        self.fingerprint = fingerprint.sha256
        self.line = {"judge_fingerprint": fingerprint.sha256, "program_sha256": getattr(judge, "rubric_sha256", None),
                     "model": model}
        self.done = done = read_done(out_path) if done is None else done
        claim_job(out_path, fingerprint, data, done)
        self.cache: VerdictCache | None = open_cache(options.cache, out_path)
        self.owns_cache = self.cache is not None and not isinstance(options.cache, VerdictCache)
        fields: dict[str, Any] = {"out_path": str(out_path), "repaired_bytes": done.repaired_bytes,
                                  "retried": done.retried, "program_sha256": self.line["program_sha256"],
                                  "judge_fingerprint": self.fingerprint, "model": model}
        self.summary: BatchSummary
        self.cascade_run: CascadeRun | None = None  # the summary of a cascade's run (the same record)
        if cascade is None:
            self.summary = BatchSummary(**fields)
        else:
            self.summary = self.cascade_run = cascade.summary(**fields)
        self.summary.certified_evidence = certified_evidence(judge, None if cascade is None else cascade.names)
        self.tracker = UsageTotals()
        self.calls: StageCalls = calls if calls is not None else LocalCalls(options, self.tracker)
        # the price each line's ``tokens.usd`` is computed at (None: unknown, said in the summary); a run without an
        # LM stage (floors only) spends nothing
        calls_lm = any(stage.lm is not None for stage in self.stages)
        self.price: Price | None = price_of(model, options.price) if calls_lm else None
        self.summary.price = None if self.price is None else {"model": model, **self.price.to_dict()}
        self.summary.priced_model = model if calls_lm else None
        self.budget = self._budget()
        self.cost_budget = self._cost_budget()
        self.items = 0  # this run's items (not resumed)
        self._shown: tuple[int, int, int] | None = None  # the counts the progress bar shows

    def _budget(self) -> TokenBudget | None:
        """The run's token budget (`JobOptions.token_budget`), checked before any call: the local back end only,
        and every LLM stage's LM caps its answers (``max_tokens``: a call's worst case needs it)."""
        cap = self.options.token_budget
        if cap is None:
            return None
        if not isinstance(self.calls, LocalCalls):
            raise InputError("a token budget (--token-budget) is enforced by the local back end only: a Ray or Batch "
                             "API run cannot stop its calls in flight before the cap; run without --ray/--batch-api "
                             "or without --token-budget")
        for stage in self.stages:
            if stage.lm is not None and not _max_tokens(stage.lm):
                raise InputError(f"a token budget (--token-budget) needs a cap on each answer: the LM "
                                 f"{lm_name(stage.lm)!r} has no max_tokens (pass --max-tokens N)")
        return cap if isinstance(cap, TokenBudget) else TokenBudget(cap)

    def _cost_budget(self) -> CostBudget | None:
        """The run's cost budget (`JobOptions.cost_budget`), checked before any call as the token budget is, and it
        needs the judge LM's price (``--price IN,OUT`` when litellm's cost map does not know the model)."""
        cap = self.options.cost_budget
        if cap is None:
            return None
        if not isinstance(self.calls, LocalCalls):
            raise InputError("a cost budget (--cost-budget) is enforced by the local back end only: a Ray or Batch "
                             "API run cannot stop its calls in flight before the cap; run without --ray/--batch-api "
                             "or without --cost-budget")
        lms = [stage.lm for stage in self.stages if stage.lm is not None]
        for lm in lms:
            if not _max_tokens(lm):
                raise InputError(f"a cost budget (--cost-budget) needs a cap on each answer: the LM {lm_name(lm)!r} "
                                 "has no max_tokens (pass --max-tokens N)")
        if lms and self.price is None:
            raise InputError(f"a cost budget (--cost-budget) needs the judge LM's price: no price for "
                             f"{self.summary.priced_model or lm_name(lms[0])!r} in litellm's model cost map (give "
                             "--price IN,OUT: USD per million prompt and completion tokens)")
        if isinstance(cap, CostBudget):
            return cap
        return CostBudget(cap, self.price if self.price is not None else Price(0.0, 0.0))

    def _stage(self, k: int, name: str, judge: Any, lm: dspy.BaseLM | None) -> Stage:
        """Stage `k` of a cascade: an LLM stage on the run's LM (its calls cached under its own fingerprint), or a
        stage without an LM (run locally, in one batch)."""
        options = self.options
        if not judge.predictors():
            return Stage(k, name, judge, None, "", LMCircuit(None, name, advice=""), local=True)
        circuit = LMCircuit(options.max_consecutive_lm_errors, lm_name(lm), counted=" after retries",
                            advice=f"Stopped at stage {name!r}.")
        return Stage(k, name, judge, lm, judge_fingerprint(judge, lm).sha256, circuit)

    def run(self, trajectories: Iterable[Trajectory | Spilled], started: float) -> BatchSummary:
        """Judge `trajectories` into the output; the summary of the run."""
        options, cascade, run = self.options, self.cascade, self.cascade_run
        self.writer = VerdictWriter(self.out_path, options.fsync_every, self.done, self.fingerprint)
        known = len(trajectories) if isinstance(trajectories, Sized) else None
        total = known if options.limit is None else options.limit if known is None else min(known, options.limit)
        self.bar = progress_bar(options.progress, total)
        items = self._todo(trajectories)
        try:
            if cascade is None:
                self._run_stage(self.stages[0], items)
            elif self.streams():
                self._stream(items)
            else:
                while chunk := list(itertools.islice(items, self.chunk)):  # the input is read chunk by chunk
                    self._through(self.stages, chunk)
        except JudgeUnavailableError as error:
            if cascade is None or run is None:
                raise
            run.outcome = "LM failure"
            raise JudgeUnavailableError(f"{error} {cascade.kept(run)}") from error
        except BudgetExhausted as error:
            summary, budget, cost = self.summary, self.budget, self.cost_budget
            by_cost = cost is not None and cost.stopped
            if run is not None:
                run.outcome = "cost budget" if by_cost else "token budget"
            if by_cost and cost is not None:
                spent = f"Spent ${cost.spent:,.6g} of ${cost.cap:,.6g} (${cost.left:,.6g} left)"
                flag = "--cost-budget"
            elif budget is not None:
                spent = f"Spent {budget.spent:,} of {budget.cap:,} tokens ({budget.left:,} left)"
                flag = "--token-budget"
            else:
                raise
            stopped = BudgetExhausted(
                f"{error}. {spent} once the calls "
                f"in flight finished; {summary.judged} verdict line(s) of this run are in {self.out_path} "
                f"({summary.resumed} "
                f"resumed from an earlier run); re-run the same command with a larger {flag} to judge the "
                "rest (nothing is judged twice)")
            stopped.summary = summary  # type: ignore[attr-defined]
            raise stopped from error
        except BaseException:
            if run is not None:
                run.outcome = "interrupted"
            raise
        finally:
            self._close(started)
        return self.summary

    def _close(self, started: float) -> None:
        try:
            self.writer.close()
        finally:
            if self.bar is not None:
                self.bar.close()
            if self.owns_cache and self.cache is not None:
                self.cache.close()
            self.summary.tokens = self.tracker.totals()
            if self.budget is not None:
                self.summary.token_budget = self.budget.to_dict()
            if self.cost_budget is not None:
                self.summary.cost_budget = self.cost_budget.to_dict()
            self.summary.wall_time = time.perf_counter() - started
            if self.cascade is not None and self.cascade_run is not None:
                self.cascade.close(self.cascade_run, self.items)

    def _todo(self, trajectories: Iterable[Trajectory | Spilled]) -> Iterator[RunItem]:
        """The items to judge, lazily: the first `limit` distinct ids, those already in the output counted as
        resumed and skipped."""
        options = self.options
        for trajectory in distinct(trajectories, options.limit, options.duplicates, self.summary):
            if trajectory.id in self.done.ids:
                self.summary.resumed += 1
                continue
            self.items += 1
            yield RunItem(self.items - 1, trajectory)

    def streams(self) -> bool:
        """Whether this cascade streams (`_stream`): run locally (`LocalCalls`; a Ray or Batch API back end's calls
        take a chunk at a time) with at most one LLM stage. Else it runs chunk by chunk (`CASCADE_CHUNK`), each
        stage over what the earlier ones left of the chunk."""
        return isinstance(self.calls, LocalCalls) and sum(not stage.local for stage in self.stages) <= 1

    def _stream(self, items: Iterator[RunItem]) -> None:
        """A cascade with at most one LLM stage, without a chunk barrier: the stages before the LLM stage (floors)
        run on small batches of the input as the LLM stage's window asks for items, each item they settle written
        at once; the LLM stage keeps its bounded window of calls in flight (`LocalCalls`: a finished call's slot
        is refilled at once, so a slow answer holds only its own slot); what it hands on goes through the stages
        after it in small batches. Memory: the window and two small batches, never the input."""
        size = max(8, self.options.concurrency)
        lm_at = next((k for k, stage in enumerate(self.stages) if not stage.local), len(self.stages))
        before, after = self.stages[:lm_at], self.stages[lm_at + 1:]

        def reaching() -> Iterator[RunItem]:  # the items the stages before the LLM stage hand on, lazily
            while batch := list(itertools.islice(items, size)):
                yield from self._through(before, batch)

        if lm_at == len(self.stages):  # floors only (the last one escalates what it does not decide)
            for _ in reaching():
                pass
            return
        waiting: list[RunItem] = []

        def handed_on(item: RunItem) -> None:  # on the calls' thread, as each answer arrives
            waiting.append(item)
            if len(waiting) >= size:
                batch = sorted(waiting, key=lambda one: one.index)
                waiting.clear()
                self._through(after, batch)

        self._run_stage(self.stages[lm_at], reaching(), handed_on)
        if waiting:
            self._through(after, sorted(waiting, key=lambda one: one.index))

    def _through(self, stages: list[Stage], items: list[RunItem]) -> list[RunItem]:
        """Run `stages` in turn over `items` (each over what the earlier left); what the last one hands on."""
        for stage in stages:
            if not items:
                break
            items = self._run_stage(stage, items)
        return items

    def _run_stage(self, stage: Stage, items: Iterable[RunItem],
                   handed_on: Callable[[RunItem], None] | None = None) -> list[RunItem]:
        """Run `stage` over `items`; the items it handed on, in input order (none for a plain judge or the last
        stage of a cascade: what it hands on is escalated). `handed_on`: called with each item the stage hands on
        as its answer arrives (then none is returned)."""
        left: list[RunItem] = []
        if stage.local:  # a floor: one batch, settled in input order
            items = list(items)
            run = self.cascade_run
            if run is None:
                raise RubricForgeError("a stage without an LM is a cascade's")
            run.stage_calls[_named(stage)] = run.stage_calls.get(_named(stage), 0) + len(items)
            verdicts = stage.judge.batch([item.trajectory for item in items], self.options.concurrency,
                                         policy=self.options.policy, max_consecutive_lm_errors=None)
            return [item for item, verdict in zip(items, verdicts, strict=True)
                    if not self._settle(stage, item, verdict)]

        def collect(item: RunItem, verdict: Verdict) -> None:
            self._called(stage, item, verdict, left)
            while handed_on is not None and left:  # this item, and any the verdict cache handed on before it
                handed_on(left.pop(0))

        fast = self.calls.run(stage, self._jobs(stage, items, left), collect, stage.circuit.raise_if_open,
                              lambda item: item.usage)
        if self.cascade is None:
            self.summary.fast_path = bool(fast)
        if handed_on is not None:
            for item in sorted(left, key=lambda one: one.index):
                handed_on(item)
            return []
        return sorted(left, key=lambda item: item.index)

    def _jobs(self, stage: Stage, items: Iterable[RunItem], left: list[RunItem]) -> Jobs:
        """``(item, inputs)`` of each item to ask `stage`; the verdict cache's answers are settled here."""
        cache, run = self.cache, self.cascade_run
        for item in items:
            if run is not None:
                run.stage_calls[_named(stage)] = run.stage_calls.get(_named(stage), 0) + 1
            inputs, item.evidence = judge_reading(stage.judge, item.trajectory)
            text_hash = input_sha256(inputs) if cache is not None else None
            hit = cache.get(stage.fingerprint, text_hash) if cache is not None and text_hash is not None else None
            if hit is not None:
                item.cached = True
                if not self._settle(stage, item, hit, cached=True):
                    left.append(item)
                continue
            item.text_hash = text_hash
            if self.budget is not None or self.cost_budget is not None:
                self._reserve(stage, item, inputs)  # its worst case, before it is sent (raises: it would cross a cap)
            item.usage = UsageTotals(self.tracker)  # this call's tokens, for its line (and the run's)
            yield item, inputs

    def _reserve(self, stage: Stage, item: RunItem, inputs: dict[str, Any]) -> None:
        """Reserve the worst case of the item's call(s) of `stage` on the token budget and the cost budget (in tokens
        times the price); when the second refuses, the first is given back."""
        prompt, completion, either = self._bound(stage, inputs)
        if self.budget is not None:
            item.reserved = self.budget.reserve(prompt + completion + either)
        if self.cost_budget is not None:
            try:
                item.cost_reserved = self.cost_budget.reserve(prompt, completion, either)
            except BudgetExhausted:
                if item.reserved is not None and self.budget is not None:
                    self.budget.release(item.reserved)
                    item.reserved = None
                raise

    def _bound(self, stage: Stage, inputs: dict[str, Any]) -> tuple[int, int, int]:
        """The most tokens one item's call(s) of `stage` may spend, every attempt of the retry policy included, as
        (prompt, completion, either): its prompt's bound and the answer's cap (`apply.budget.prompt_bound`), or the
        judge's own `token_bound` (a judge of several calls per item: `either`, not split)."""
        cap = _max_tokens(stage.lm)
        attempts = self.options.max_retries + 1
        own = stage.judge.token_bound(inputs, cap) if hasattr(stage.judge, "token_bound") else None
        if own is not None:
            return 0, 0, int(own) * attempts
        return prompt_bound(stage.judge, inputs) * attempts, cap * attempts, 0

    def _called(self, stage: Stage, item: RunItem, verdict: Verdict, left: list[RunItem]) -> None:
        """Account one finished call of `stage` and settle its item (or keep it for the next stage)."""
        summary, run = self.summary, self.cascade_run
        if verdict.attempts is None:
            raise RubricForgeError("a call's verdict has its attempts (`judge.execution`)")
        summary.lm_calls += verdict.attempts
        summary.retries += max(0, verdict.attempts - 1)
        requests = requests_made(verdict, item.usage.answers if item.usage is not None else 0)
        summary.requests_sent += requests
        item.calls += requests
        usage = item.usage.totals() if item.usage is not None else None
        item.usage = None
        if item.reserved is not None and self.budget is not None:
            self.budget.settle(item.reserved, usage)
            item.reserved = None
        if item.cost_reserved is not None and self.cost_budget is not None:
            self.cost_budget.settle(item.cost_reserved, usage)
            item.cost_reserved = None
        if usage:  # the LM reported its usage: the item's line records it (`_tokens`)
            item.tokens[stage.name or ""] = {key: int(usage.get(key) or 0)
                                             for key in ("prompt_tokens", "completion_tokens")}
        summary.count_stage(stage.name or "judge", usage, requests)
        if run is not None:
            item.lm_stages += 1
            run.lm_asked += 1
        settled = self._settle(stage, item, verdict)
        # (a calibrated verdict is not cached: the cache keeps the LM's answer, and a stage decides on its calibration)
        if (self.cache is not None and item.text_hash is not None and not verdict.abstained
                and (self.cascade is None or verdict.score_calibrated is None)):
            # with what the judge read: a replay's line says it too (`judge.cache`)
            evidence = verdict.evidence or item.evidence
            self.cache.put(stage.fingerprint, item.text_hash,
                           verdict if verdict.evidence is not None or evidence is None
                           else replace(verdict, evidence=evidence))
        count_verdict(stage.circuit, verdict)
        if not settled:
            left.append(item)

    def _settle(self, stage: Stage, item: RunItem, verdict: Verdict, cached: bool = False) -> bool:
        """Write the item's line when `stage` settles it (True); False when it hands it on."""
        cascade, run = self.cascade, self.cascade_run
        if cascade is None or run is None:
            self._write(item, verdict, cached, 0 if cached else verdict.attempts or 0)
            return True
        found = cascade.settle(stage.index, item, verdict)
        if found is None:
            return False
        final, name, index = found
        self._write(item, final, item.cached, final.attempts or 0, cascade.line_fields(item, name, index))
        cascade.count(run, item, final, name)
        return True

    def _tokens(self, item: RunItem, cached: bool) -> dict[str, Any] | None:
        """The line's ``tokens`` (`core.verdict.token_usage`): the usage the LM reported for the item's calls,
        summed over its stages, the HTTP requests sent for it, and their cost at the run's price (``usd``, when a
        price is known); zero and ``cached`` for a verdict replayed from the verdict cache; None when no usage was
        tracked (the floor alone, or a run that does not track it)."""
        price = self.price
        if not item.tokens:
            return token_usage(0, 0, 0, cached=True, usd=None if price is None else 0.0) if cached else None
        prompt = sum(t.get("prompt_tokens", 0) for t in item.tokens.values())
        completion = sum(t.get("completion_tokens", 0) for t in item.tokens.values())
        return token_usage(prompt, completion, item.calls, cached=cached,
                           usd=None if price is None else price.usd(prompt, completion))

    def _write(self, item: RunItem, verdict: Verdict, cached: bool, attempts: int,
               extra: dict[str, Any] | None = None) -> None:
        # A `Spilled` item stands in for its trajectory: it has every field the line reads (`VerdictSubject`).
        tokens = self._tokens(item, cached)
        line = verdict_line(item.trajectory, verdict, cached=cached, attempts=attempts,
                            evidence=verdict.evidence or item.evidence, tokens=tokens, **self.line)
        if extra:
            line.update(extra)
        self.writer.write(line)
        self.summary.count(verdict, cached)
        self.summary.count_evidence(line.get("evidence"))
        if item.tokens:
            self.summary.count_item_tokens(item.tokens, None if tokens is None else tokens.get("usd"))
        if self.bar is not None:
            self.bar.update(1)
            summary = self.summary
            counts = (summary.n_abstained, summary.cached, summary.resumed)
            if counts != self._shown:  # the postfix is rebuilt only when a count changed
                self._shown = counts
                self.bar.set_postfix(abstained=counts[0], cached=counts[1], resumed=counts[2], refresh=False)


def distinct(trajectories: Iterable[Trajectory | Spilled], limit: int | None, on_duplicate: str,
             summary: BatchSummary) -> Iterator[Trajectory | Spilled]:
    """The first `limit` distinct ids of `trajectories`, lazily; duplicates raise or are counted."""
    seen: set[str] = set()
    for trajectory in trajectories:
        if trajectory.id in seen:
            if on_duplicate == "raise":
                if not isinstance(trajectory, Trajectory):
                    raise RubricForgeError("the checking pass lets no repeated id into a spill")
                raise DuplicateIdError(trajectory.source.file, trajectory.source.index,
                                       f"duplicate trajectory id {trajectory.id!r}")
            summary.duplicates += 1
            continue
        seen.add(trajectory.id)
        yield trajectory
        if limit is not None and len(seen) >= limit:
            return  # never pull one more: the input stream (and a label join on it) stops at the limit


def certified_evidence(judge: Any, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The evidence shares (`core.verdict.evidence_shares`) each certificate of `judge` was earned on: a program's
    (``"the program"``), or each stage's of a cascade (`names`: its stages' names), when the certificate records
    them; a run's summary compares them with what its own lines read (`BatchSummary.evidence_warnings`)."""
    from rubricforge_dspy.program.store import CERTIFICATE_KEY

    parts = [("the program", judge)] if names is None else [(f"stage {name!r}", stage)
                                                            for name, stage in zip(names, judge.stages, strict=True)]
    found: dict[str, dict[str, Any]] = {}
    for name, one in parts:
        manifest = getattr(one, "manifest", None)
        certificate = manifest.get(CERTIFICATE_KEY) if isinstance(manifest, dict) else None
        evidence = certificate.get("evidence") if isinstance(certificate, dict) else None
        if isinstance(evidence, dict):
            found[name] = dict(evidence)
    return found


def _max_tokens(lm: Any) -> int:
    """The cap on one answer of `lm` (its ``max_tokens``; 0 when it has none)."""
    kwargs = getattr(lm, "kwargs", None) or {}
    value = kwargs.get("max_tokens") or kwargs.get("max_completion_tokens") or 0
    return int(value)


def _named(stage: Stage) -> str:
    """The name of a cascade's stage (a plain judge's one stage has none)."""
    if stage.name is None:
        raise RubricForgeError("a cascade's stages are named")
    return stage.name


def progress_bar(enabled: bool, total: int | None) -> Any:  # a tqdm bar (tqdm is untyped), a line reporter, or None
    """The judging progress on stderr (`core.progress`): when `enabled`, or when the command line asked for
    progress (`core.progress.requested`: `certify` and `label-next` judge with ``progress=False`` from Python)."""
    if not enabled and not is_requested():
        return None
    return progress(total, "judging", "verdict", enabled=True)



# -- the Python API behind `rubricforge judge` ----------------------------------------------------

