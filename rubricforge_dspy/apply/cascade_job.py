"""One run of a cascade job (`apply.cascade.run_cascade`): the output locked and claimed, then stage by stage,
each item's verdict line written the moment a stage settles it.

A stage without an LM (the floor) judges what it is given in one ``batch``. An LLM stage's calls go out on
`concurrency` worker threads, at most ``2 * concurrency`` items in flight, each call through
`judge.execution.judge_verdict` (the retry policy, every failure a recorded abstention) inside its own DSPy
usage tracker (`apply.summary.UsageTotals`), so the tokens of each item's call land in its line; the verdicts
are collected, counted on the stage's dead-server circuit and written by the calling thread alone, in
completion order. What a stage hands on goes to the next stage in input order; what the last one hands on is
escalated.

On an LM failure (the circuit opens) or an interrupt, the calls already finished are written, the others
are abandoned; the lines written stay (the next run resumes after them); the items a stage had handed on
but a later one had not settled are judged again from the first stage by the next run.
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Sequence

from rubricforge_dspy.apply.cascade import (
    CascadeRun,
    cascade_fingerprint,
    check_outputs,
    count_escalated,
    escalated_path,
    record_run,
    write_queue,
)
from rubricforge_dspy.apply.job import claim_job, output_lock, read_done
from rubricforge_dspy.apply.options import DEFAULT_FSYNC_EVERY
from rubricforge_dspy.apply.stream import DuplicateIdError
from rubricforge_dspy.apply.summary import UsageTotals
from rubricforge_dspy.apply.writer import VerdictWriter
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.judge.cascade import ESCALATED, Cascade, CascadeVerdicts
from rubricforge_dspy.judge.execution import RetryPolicy, count_verdict, judge_verdict
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.copies import resolve_lm

__all__ = ["CascadeJob"]


class _Item:
    """One trajectory on its way through the stages: the LLM stages run on it and their tokens."""

    __slots__ = ("index", "trajectory", "lm_stages", "tokens", "last")

    def __init__(self, index: int, trajectory: Trajectory):
        self.index, self.trajectory = index, trajectory
        self.lm_stages = 0
        self.tokens: dict[str, dict] = {}
        self.last: tuple[str, float] | None = None  # the last stage that handed it on with a confidence


def _call(stage, trajectory: Trajectory, policy: RetryPolicy, stop: threading.Event) -> tuple[Verdict, dict | None]:
    """One stage call in a worker thread: the verdict, and the tokens its LM reported (None: none)."""
    import dspy

    tracker = UsageTotals()
    with dspy.context(usage_tracker=tracker, disable_history=True, trace=None):
        verdict = judge_verdict(stage, trajectory, policy, stop)
    return verdict, tracker.totals()


def _distinct(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    seen: set[str] = set()
    for trajectory in trajectories:
        if trajectory.id in seen:
            raise DuplicateIdError(trajectory.source.file, trajectory.source.index,
                                   f"duplicate trajectory id {trajectory.id!r}: a verdict file holds one line per id")
        seen.add(trajectory.id)
    return list(trajectories)


class CascadeJob:
    """A cascade run on one output (see the module docstring); `run` judges and returns the `CascadeRun`."""

    def __init__(self, cascade: Cascade, out_path, *, escalated_out, lm, concurrency: int, policy: RetryPolicy,
                 max_consecutive_lm_errors: int | None, data: str | None, cascade_file=None,
                 data_files=None, fsync_every: int = DEFAULT_FSYNC_EVERY):
        if concurrency < 1:
            raise InputError(f"concurrency must be >= 1, got {concurrency}")
        if lm is not None:
            cascade.set_lm(lm)
        self.cascade, self.concurrency, self.policy = cascade, concurrency, policy
        self.limit, self.data, self.fsync_every = max_consecutive_lm_errors, data, fsync_every
        self.out_path = Path(out_path)
        self.queue = Path(escalated_out) if escalated_out is not None else escalated_path(self.out_path)
        self.escalated_out, self.cascade_file = escalated_out, cascade_file
        self.names = [rule.name for rule in cascade.rules]
        # A cascade whose stages make no LM call (floors) has no LM: none is resolved, and a configured one is
        # not part of its job (a resume under another configured LM is the same job).
        self.lm = resolve_lm(cascade, lm) if cascade.predictors() else None
        self.model = getattr(self.lm, "model", None) if cascade.predictors() else None
        self.run_ = CascadeRun(str(self.out_path), str(self.queue),
                               lm_stages=[r.name for s, r in zip(cascade.stages, cascade.rules, strict=True)
                                          if s.predictors()],
                               stages=[r.name for r in cascade.rules], guarantee=cascade.guarantee,
                               cascade_file=None if cascade_file is None else str(cascade_file),
                               data_files=None if data_files is None else [str(f) for f in data_files])
        self.settled: dict[int, tuple[Verdict, str]] = {}

    def run(self, trajectories: Sequence[Trajectory]) -> CascadeRun:
        """Judge `trajectories` into the output (resuming it); raises as `apply.cascade.run_cascade` does."""
        trajectories = _distinct(trajectories)
        with output_lock(self.out_path):
            self.out_path, self.queue = check_outputs(self.out_path, self.escalated_out)
            done = read_done(self.out_path)
            fingerprint = cascade_fingerprint(self.cascade, self.lm, self.cascade_file)
            claim_job(self.out_path, fingerprint, self.data, done)
            self.fingerprint = fingerprint.sha256
            todo = [t for t in trajectories if t.id not in done.ids]
            self.run_.resumed = len(trajectories) - len(todo)
            self.writer = VerdictWriter(self.out_path, self.fsync_every, done, self.fingerprint)
            try:
                self._stages([_Item(i, t) for i, t in enumerate(todo)])
            except JudgeUnavailableError as error:
                self.run_.outcome = "LM failure"
                raise JudgeUnavailableError(f"{error} {self._kept()}") from error
            except BaseException:
                self.run_.outcome = "interrupted"
                raise
            finally:
                self._close(trajectories)
        if len(self.settled) == len(todo):
            order = range(len(todo))
            self.run_.verdicts = CascadeVerdicts([self.settled[i][0] for i in order],
                                                 [self.settled[i][1] for i in order], self.run_.stage_calls)
        return self.run_

    def _kept(self) -> str:
        run = self.run_
        kept = ", ".join(f"{name} {n}" for name, n in run.decided_by.items()) or "none"
        return (f"{run.judged} verdict line(s) of this run are kept in {self.out_path} (decided: {kept}; "
                f"{run.n_abstained - run.escalated} LM-error abstention(s), asked again on resume), "
                f"{run.resumed} were there already. Run the same command again to resume: the items in the file "
                "are not judged again.")

    def _close(self, trajectories: Sequence[Trajectory]) -> None:
        try:
            self.writer.close()
        finally:  # the record first: a queue on disk is then always one the job's record names
            self.run_.escalated_in_file = count_escalated(self.out_path)
            record_run(self.out_path, self.run_)
            write_queue(self.out_path, self.queue, trajectories)

    def _stages(self, items: list[_Item]) -> None:
        for k, stage in enumerate(self.cascade.stages):
            if not items:
                break
            self.run_.stage_calls[self.names[k]] = len(items)
            items = self._llm_stage(k, stage, items) if stage.predictors() else self._free_stage(k, stage, items)
        # (the last stage escalates what it hands on as it goes: nothing is left here)

    def _free_stage(self, k: int, stage, items: list[_Item]) -> list[_Item]:
        """A stage without an LM (the floor): one batch, settled in input order."""
        verdicts = stage.batch([item.trajectory for item in items], self.concurrency, policy=self.policy,
                               max_consecutive_lm_errors=None)
        return [item for item, verdict in zip(items, verdicts, strict=True) if not self._settle(k, item, verdict)]

    def _settle(self, k: int, item: _Item, verdict: Verdict) -> bool:
        """Write the item's line when stage `k` settles it (True); False when it hands it on. What the last
        stage hands on is escalated at once (its line is written now, not after the stage)."""
        settled = self.cascade.settle(k, verdict)
        if settled is not None:
            self._write(item, settled, self.names[k], k)
            return True
        item.last = self.cascade.escalating(k, verdict) or item.last
        if k == len(self.names) - 1:
            self._write(item, self.cascade.escalation(item.last), ESCALATED, None)
            return True
        return False

    def _llm_stage(self, k: int, stage, items: list[_Item]) -> list[_Item]:
        """An LLM stage on worker threads (see the module docstring); the items it hands on, in input order."""
        circuit = LMCircuit(self.limit, lm_name(resolve_lm(stage)), counted=" after retries",
                            advice=f"Stopped at stage {self.names[k]!r}.")
        stop = threading.Event()
        pending: dict[Future, _Item] = {}
        left: list[_Item] = []
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="rubricforge-cascade")
        interrupted = False
        try:
            for item in items:
                context = contextvars.copy_context()
                pending[pool.submit(context.run, _call, stage, item.trajectory, self.policy, stop)] = item
                if len(pending) >= 2 * self.concurrency:
                    self._collect(k, pending, left, circuit)
            while pending:
                self._collect(k, pending, left, circuit)
        except BaseException:
            interrupted = True  # in-flight calls stop retrying; the ones that finished are written
            stop.set()
            for future in [f for f in pending if f.done() and not f.cancelled() and f.exception() is None]:
                self._take(k, pending.pop(future), future.result(), left, circuit)
            raise
        finally:
            pool.shutdown(wait=not interrupted, cancel_futures=True)
        return sorted(left, key=lambda item: item.index)

    def _collect(self, k: int, pending: dict, left: list, circuit: LMCircuit) -> None:
        finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for future in finished:
            self._take(k, pending.pop(future), future.result(), left, circuit)
        circuit.raise_if_open()

    def _take(self, k: int, item: _Item, result: tuple[Verdict, dict | None], left: list,
              circuit: LMCircuit) -> None:
        """Account one finished call of stage `k` (`_call`'s result) and settle its item (or keep it for the next
        stage)."""
        verdict, usage = result
        run = self.run_
        item.lm_stages += 1
        run.lm_requests += verdict.attempts or 0
        run.add_usage(usage)
        if usage:
            item.tokens[self.names[k]] = {key: int(usage.get(key) or 0)
                                          for key in ("prompt_tokens", "completion_tokens")}
        count_verdict(circuit, verdict)
        if not self._settle(k, item, verdict):
            left.append(item)

    def _write(self, item: _Item, verdict: Verdict, stage: str, index: int | None) -> None:
        line = verdict_line(item.trajectory, verdict, attempts=verdict.attempts or 0, model=self.model,
                            program_sha256=self.cascade.rubric_sha256, judge_fingerprint=self.fingerprint)
        line.update(stage=stage, stage_index=index, lm_stages_run=item.lm_stages, lm_tokens=item.tokens)
        if stage == ESCALATED:  # who escalated it, at what confidence (also its score_calibrated; None: none gave one)
            line.update(escalated_by=item.last[0] if item.last else None,
                        escalation_confidence=item.last[1] if item.last else None)
        self.writer.write(line)
        self.settled[item.index] = (verdict, stage)
        run = self.run_
        run.judged += 1
        if not verdict.abstained or verdict.error_kind == ESCALATED:
            run.decided_by[stage] = run.decided_by.get(stage, 0) + 1
        if verdict.abstained:
            run.abstained[verdict.error_kind] = run.abstained.get(verdict.error_kind, 0) + 1
            run.errors.setdefault(verdict.error_kind, verdict.error or "")
        if item.lm_stages:
            if item.tokens:
                run.lm_items += 1
                for used in item.tokens.values():
                    for key, value in used.items():
                        run.item_tokens[key] = run.item_tokens.get(key, 0) + value
            else:
                run.unreported += 1
