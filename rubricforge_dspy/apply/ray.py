"""Judging on Ray (``pip install rubricforge-dspy[ray]``): `RayCalls`, the Ray back end of the one job runner, and
`judge_dataset`, a user's own Ray Dataset judged into a verdict file through that runner.

This module imports without the extra; its functions raise `MissingExtraError` (exit 2 on the command line)
when Ray Data is not installed.

    import ray
    from rubricforge_dspy.apply.ray import RayCalls
    from rubricforge_dspy.apply.stream import run_judge_file
    from rubricforge_dspy.lm.config import LMConfig

    ray.init()                                   # or ray.init("auto") on a cluster
    config = LMConfig(model="qwen2.5-7b@rev", api_base="http://gpu-0:30000/v1")
    calls = RayCalls(config, ["http://gpu-0:30000/v1", "http://gpu-1:30000/v1"], workers=4)
    summary = run_judge_file("programs/airline.json", "episodes.jsonl", "verdicts.jsonl", lm=calls.job_lm(),
                             calls=calls)

Every run on Ray, a plain program or a cascade, is a run of the one job runner (`apply.runner.JobRun`, through
`apply.stream.run_judge_file` or `run_job`): the driver holds the output's lock, claims the job, resumes, keeps
the verdict cache, the circuit breaker and the tally, and writes every line (`apply.writer.VerdictWriter`, the
local path's writer: evidence and tokens on every line). Only an LLM stage's calls go to Ray: `RayCalls` sends
each item's judge inputs (what the runner rendered, or the checking pass spilled) to an actor pool of
``map_batches`` (`_JudgeWorker`). Each worker holds a copy of the stage's judge on a one-attempt LM per
endpoint and, like `rubricforge judge`, takes the fast path when the judge offers one
(`TrajectoryJudge.direct_call`: one event loop per actor, kept across batches, ``concurrency`` calls in flight
through `judge.execution.ajudge_verdict`); any other judge is called through `judge_verdict` from
``concurrency`` threads. Either way the render, the strict parse, the truncation rule, the retries of transient
errors and the abstentions are those of `rubricforge judge` (``summary.fast_path`` says whether every verdict
came from the fast path). A stage without an LM runs on the driver.

Exactly once (one verdict line per id, across worker failures and re-runs): workers write nothing, they return
verdicts; the driver collects each id once (`RayCalls.redelivered` counts the ids of a block Ray executed twice
after a worker died, never written twice) and the runner writes it. A kill of the driver leaves complete lines
plus at most one torn line, which the next run repairs (`apply.job.read_done`); what was not written is asked
again, nothing else.

A dead server stops the run as locally: each worker keeps a circuit (`lm.circuit.LMCircuit`), the driver keeps
the stage's, and once one opens the run raises `JudgeUnavailableError` (exit 3); every line written so far is
kept.

The items go to Ray ``window`` at a time (default 10,000): the driver holds one window's judge inputs, each
window is one Ray Dataset judged by the actor pool.

Two engines:

- ``engine="http"`` (default): OpenAI-compatible endpoints, e.g. SGLang servers. Several ``api_bases``
  are used round-robin, request by request, each worker starting at its own offset; or give one base,
  the SGLang Model Gateway in front of the workers (cache-aware routing, docs/SERVING.md).
- `sglang_processor`: on GPU nodes, SGLang engines inside Ray (`ray.data.llm`'s SGLang engine
  processor). Its preprocess step (`JudgePrompt`) builds the chat messages with the judge's own adapter
  (`StrictJSONAdapter.format`), exactly the messages the HTTP path sends; its postprocess step
  (`JudgeAnswer`) parses with the strict adapter, and an answer cut at ``max_tokens`` is an abstention
  (``truncated``). Pass the processor as ``RayCalls(processor=...)`` or ``judge_dataset(..., processor=...)``;
  its rows carry the `Trajectory` records (a run from `judge_stream`, `run_job` or `judge_dataset`, whose items
  are not spilled). The run on GPUs is documented in docs/SERVING.md.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import dspy
import orjson

from rubricforge_dspy._dspy_compat import engine_specs
from rubricforge_dspy.apply.executors import EventLoopExecutor
from rubricforge_dspy.apply.job import output_lock
from rubricforge_dspy.apply.options import DEFAULT_MAX_CONSECUTIVE_LM_ERRORS, JobOptions, job_options
from rubricforge_dspy.apply.ray_data import column, ray_module, row_trajectory, trajectory_dataset
from rubricforge_dspy.apply.ray_sglang import JudgeAnswer, JudgePrompt, sglang_processor
from rubricforge_dspy.apply.stage_calls import LocalCalls
from rubricforge_dspy.apply.summary import BatchSummary, UsageTotals
from rubricforge_dspy.apply.writer import plain_value
from rubricforge_dspy.core.errors import InputError, RubricForgeError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import EvidenceRecord, Verdict
from rubricforge_dspy.judge.execution import count_verdict, judge_verdict
from rubricforge_dspy.judge.loading import judge_from
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.copies import one_attempt_lm
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.lm.secrets import redact_url

if TYPE_CHECKING:
    import ray

    from rubricforge_dspy.apply.stage_calls import Jobs, RunItem, Stage
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.lm.engine import AsyncChatCompletionsEngine

__all__ = ["judge_dataset", "RayCalls", "trajectory_dataset", "sglang_processor", "JudgePrompt", "JudgeAnswer",
           "pool_config", "encode_inputs", "WINDOW", "DEFAULT_MAX_CONSECUTIVE_LM_ERRORS"]


# -- the LM pool --------------------------------------------------------------------------------------

def pool_config(lm_config: LMConfig, api_bases: list[str] | None) -> tuple[LMConfig, list[LMConfig]]:
    """(the configuration the job is fingerprinted with, one configuration per endpoint).

    With one endpoint both are `lm_config` on it: the fingerprint is that of ``rubricforge judge`` on the
    same endpoint, so a job started locally resumes on Ray and back. With several, the fingerprint's
    endpoint is the sorted pool (``"a | b"``): the same servers in another order are the same job.

    Args:
        lm_config: the judge LM's configuration (its ``api_base`` is used when `api_bases` is empty).
        api_bases: the endpoints, in the order requests are dealt to them.

    Returns:
        (the configuration to fingerprint the job with, the configuration of each endpoint).

    Raises:
        InputError: no endpoint, or one given twice.
    """
    bases = [b.rstrip("/") for b in (api_bases or ([lm_config.api_base] if lm_config.api_base else []))]
    if not bases:
        raise InputError("judging on Ray needs an OpenAI-compatible endpoint reachable from every Ray node: "
                         "give --api-base (several for round-robin), or RUBRICFORGE_API_BASE")
    if len(set(bases)) != len(bases):
        raise InputError(f"the same --api-base is given twice: {[redact_url(b) for b in bases]}")
    configs = [replace(lm_config, api_base=base) for base in bases]
    if len(bases) == 1:
        return configs[0], configs
    return replace(lm_config, api_base=" | ".join(sorted(bases))), configs


# -- the HTTP engine: a worker of the actor pool ----------------------------------------------------

class _JudgeWorker:
    """One Ray actor: a judge copy per endpoint, a verdict returned for each row of each batch Ray hands it (rows
    ``{"id", "inputs"}``: the item's judge inputs as JSON, `encode_inputs`).

    The fast path, when every copy offers one (`TrajectoryJudge.direct_call`: a plain judge on an LM built by
    `lm.make_lm`): the local path's event loop (`apply.executors.EventLoopExecutor`), made once per actor and kept
    across batches, keeps `threads` calls in flight through `ajudge_verdict`, the endpoints dealt
    round-robin item by item. Otherwise `threads` threads call `judge_verdict`. Either way the same retry
    policy, the same per-worker circuit breaker, the same verdicts.

    Every call ends by closing the copies' connection pools (`close_connections`), whether the batch
    succeeded or raised: Ray Data never tells an actor that the job has ended (its last batch is not
    marked, and an actor may be killed or dropped without a graceful exit), so no pool outlives the batch
    that opened it, and nothing is left for ``__del__`` (which may run on any thread, or never). The next
    batch opens new connections: one connect per call in flight, small next to the judge calls."""

    def __init__(self, judge: Any, configs: list[LMConfig], options: JobOptions, where: str = "the output") -> None:
        threads, policy = options.concurrency, options.policy
        self.judges: list[Any] = []
        self.lms: list[dspy.BaseLM] = []
        for config in configs:
            lm = one_attempt_lm(make_lm(config), options.timeout, connections=threads) if judge.predictors() else None
            copy = judge.deepcopy()
            if lm is not None:
                copy.set_lm(lm)
                self.lms.append(lm)
            self.judges.append(copy)
        ray = ray_module()
        actor = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
        first = int(actor[-6:], 16) if actor else 0  # workers start apart
        self.policy = policy
        self.tracker = UsageTotals()
        names = ", ".join(redact_url(c.api_base or "") for c in configs)  # `pool_config` sets every one
        self.circuit = LMCircuit(options.max_consecutive_lm_errors, names, counted=" after retries",
                                 advice=f"Stopped; {where} keeps every verdict written so far: fix the "
                                        "server and re-run the same command to resume.")
        self.loop: EventLoopExecutor | None = None
        self.pool: ThreadPoolExecutor | None = None
        offers = hasattr(judge, "direct_call") and judge.predictors()
        direct = [copy.direct_call() for copy in self.judges] if offers else []
        if direct and all(d is not None for d in direct):
            self.loop = EventLoopExecutor(direct, policy, self.tracker, threads, first)
        else:
            self.turn = itertools.count(first)
            self.turn_lock = threading.Lock()
            self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rubricforge-ray-judge")
            self.stop = threading.Event()

    def _judge(self, inputs: dict[str, Any]) -> tuple[Verdict, dict[str, int] | None]:
        with self.turn_lock:
            judge = self.judges[next(self.turn) % len(self.judges)]
        inputs = dict(inputs)
        usage = UsageTotals(self.tracker)  # this call's tokens (its line's)
        with dspy.context(usage_tracker=usage, disable_history=True, trace=None):
            verdict = judge_verdict(judge, inputs.pop("trajectory"), self.policy, self.stop, self.circuit, **inputs)
        return verdict, usage.totals()

    def _drive(self, loop: EventLoopExecutor, rows: list[tuple[str, dict[str, Any]]]
               ) -> dict[str, tuple[Verdict, dict[str, int] | None]]:
        """The batch on the actor's event loop; the circuit counts each verdict as `judge_verdict` would."""
        records: dict[str, tuple[Verdict, dict[str, int] | None]] = {}
        usage = {ident: UsageTotals(self.tracker) for ident, _ in rows}

        def collect(ident: str, verdict: Verdict) -> None:
            records[ident] = (verdict, usage[ident].totals())
            count_verdict(self.circuit, verdict)

        self.circuit.raise_if_open()
        loop.drive(iter(rows), collect, self.circuit.raise_if_open, lambda ident: usage[ident])
        return records

    def __call__(self, batch: Any) -> dict[str, list[Any]]:  # a Ray batch: columns of numpy arrays
        try:
            rows = [(str(ident), orjson.loads(raw)) for ident, raw in
                    zip(column(batch, "id"), column(batch, "inputs"), strict=True)]
            if self.loop is not None:
                records = self._drive(self.loop, rows)
            else:
                if self.pool is None:
                    raise RubricForgeError("off the fast path, a worker has its threads (`__init__`)")
                futures = {ident: self.pool.submit(self._judge, inputs) for ident, inputs in rows}
                try:
                    records = {ident: future.result() for ident, future in futures.items()}
                except JudgeUnavailableError:
                    self.stop.set()  # no more retries; the calls not started raise at once (the circuit is open)
                    wait(futures.values())  # the calls in flight end before their connections are closed
                    raise
        finally:
            self.close_connections()
        return {"id": list(records), "verdict": [orjson.dumps(_verdict_record(v)) for v, _ in records.values()],
                "fast": [self.loop is not None] * len(records),
                "usage": [orjson.dumps(u) for _, u in records.values()]}

    def close_connections(self) -> None:
        """Close every connection pool the judge copies hold: on the fast path the async engines' pools
        of the actor's event loop (after the calls a failed batch abandoned have ended), else the LMs'
        HTTP clients. A later call opens new ones."""
        if self.loop is not None:
            engines = list({id(d.engine): d.engine for d in self.loop.directs}.values())
            asyncio.run_coroutine_threadsafe(_close_pools(engines), self.loop.loop).result(timeout=60)
        for lm in self.lms:
            for engine in {id(e): e for e in engine_specs(lm)}.values():
                if hasattr(engine, "close"):
                    engine.close()


async def _close_pools(engines: list[AsyncChatCompletionsEngine]) -> None:
    """On the actor's event loop: let the calls a failed batch abandoned end, then close each engine's pool
    of this loop."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    for engine in engines:
        await engine.aclose()


def _verdict_record(verdict: Verdict) -> dict[str, Any]:
    """What a worker returns of a verdict: what was said, its attempts and what the judge read."""
    return {**verdict.to_dict(), "attempts": verdict.attempts or 0,
            "evidence": None if verdict.evidence is None else verdict.evidence.to_dict()}


def _verdict_of(record: dict[str, Any]) -> Verdict:
    """The `Verdict` a worker returned (`_verdict_record`), or a verdict line's (the SGLang processor's)."""
    evidence = record.get("evidence")
    return replace(Verdict.from_dict(record), attempts=int(record.get("attempts") or 0),
                   evidence=EvidenceRecord.from_dict(evidence) if isinstance(evidence, dict) else None)


def encode_inputs(inputs: dict[str, Any]) -> bytes:
    """An item's judge inputs as the JSON a Ray worker reads (a rendered text, features of builtin scalars).

    Raises:
        InputError: the judge reads more than plain data (e.g. a `Trajectory` object): judge it locally.
    """
    if not all(map(plain_value, inputs.values())):
        raise InputError("this judge reads more than text and features (its inputs are not plain data): judge it "
                         "locally (without --ray)")
    return orjson.dumps(inputs)


# -- the driver: Ray's calls of a stage of the job runner ----------------------------------------------

_RAY_OPTIONS = JobOptions(concurrency=16, progress=False)  # a worker keeps more calls in flight than a process
WINDOW = 10_000  # items sent to Ray at once (one Ray Dataset); the driver holds their inputs


class RayCalls:
    """Ray's calls of one stage of the job runner (`apply.runner.StageCalls`; a plain judge's one stage or a
    cascade's LLM stage): the items' judge inputs as a Ray Dataset, `window` at a time, judged by an actor pool
    (`_JudgeWorker`: the stage's judge on a one-attempt LM per endpoint, round-robin, the fast path where there is
    one), or by an in-Ray SGLang `processor`; the verdicts returned to the driver, which settles, writes and caches
    each item once (an id that comes back from a re-executed block is dropped and counted in `redelivered`). A stage
    without an LM runs on the driver.

    Args:
        lm_config: the judge LM (its ``api_base`` is used when `api_bases` is not given); None with a `processor`.
        api_bases: the endpoints, round-robin (`pool_config`).
        options: `JobOptions` of the workers: ``concurrency`` per worker, ``timeout``, retries,
            ``max_consecutive_lm_errors`` per worker (default ``JobOptions(concurrency=16)``).
        workers: Ray actors judging at once.
        batch_size: rows per call of a worker (the unit re-done after a worker dies); None: twice the
            concurrency, at least 32, so a worker keeps its calls in flight through most of a batch.
        processor: instead of HTTP endpoints, a `sglang_processor` (its rows carry `Trajectory` records).
        window: items sent to Ray at once (default 10,000).

    Raises:
        MissingExtraError: Ray Data is not installed. InputError: no endpoint, one given twice, or bad sizes.
    """

    def __init__(self, lm_config: LMConfig | None = None, api_bases: list[str] | None = None,
                 options: JobOptions | None = None, workers: int = 2, batch_size: int | None = None, *,
                 processor: Any = None, window: int = WINDOW):
        self.ray = ray_module()
        self.options = job_options(options, {}, _RAY_OPTIONS)
        self.processor = processor
        if processor is None:
            if lm_config is None:
                raise InputError("judging on Ray needs lm_config (the judge LM), or a processor")
            self.pool, self.configs = pool_config(lm_config, api_bases)
        self.workers, self.batch_size, self.window = workers, batch_size, window
        if window < 1:
            raise InputError(f"window must be >= 1, got {window}")
        self.size = _checked_sizes(self.options.concurrency, workers, batch_size)
        self.redelivered = 0  # verdicts of an id already collected (a block Ray executed twice): dropped

    def job_lm(self) -> dspy.BaseLM:
        """The LM the job is fingerprinted with: the pool's configuration (with one endpoint, the same job as
        ``rubricforge judge`` on it, so a job started locally resumes on Ray and back), or the processor's."""
        if self.processor is not None:
            lm: dspy.BaseLM = self.processor.rubricforge_job["lm"]
            return lm
        return make_lm(self.pool)

    def run(self, stage: Stage, jobs: Jobs, collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
            tracker_of: Callable[[RunItem], UsageTotals | None] | None = None) -> bool:
        """Judge the ``(item, inputs)`` of `jobs` on Ray and `collect(item, verdict)` each, with its tokens on
        `tracker_of(item)`, then `check()` (the stage's circuit) after each batch that comes back
        (`apply.runner.LocalCalls.run`'s contract). True when every verdict came from the workers' fast path.

        Raises:
            InputError: Ray is not initialized; the judge's inputs are not plain data; with a processor, an item
                that is spilled (a plain judge's under `run_judge_file`) rather than a `Trajectory`.
            JudgeUnavailableError: a worker's circuit or the stage's opened (the verdicts already back are
                collected first).
        """
        if stage.lm is None and self.processor is None:  # no LM call: judged on the driver
            return LocalCalls(self.options, UsageTotals()).run(stage, jobs, collect, check, tracker_of)
        if not self.ray.is_initialized():
            raise InputError("Ray is not initialized: call ray.init() (or ray.init('auto') on a cluster) first")
        fast, seen = True, 0
        while window := list(itertools.islice(jobs, self.window)):
            got, on_fast_path = self._window(stage, window, collect, check, tracker_of)
            seen += got
            fast = fast and on_fast_path
        return bool(seen) and fast

    def _window(self, stage: Stage, window: list[tuple[RunItem, dict[str, Any]]],
                collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
                tracker_of: Callable[[RunItem], UsageTotals | None] | None) -> tuple[int, bool]:
        """One window of items as one Ray Dataset; ``(verdicts collected, all on the fast path)``."""
        ray = self.ray
        items: dict[str, RunItem] = {}
        rows: list[dict[str, Any]] = []
        for item, inputs in window:
            ident = item.trajectory.id
            items[ident] = item
            if self.processor is None:
                rows.append({"id": ident, "inputs": encode_inputs(inputs)})
            elif isinstance(item.trajectory, Trajectory):
                rows.append({"id": ident, "trajectory": item.trajectory})
            else:  # a `Spilled` item: its rendered inputs only
                raise InputError("the in-Ray SGLang processor reads Trajectory records, but these items come spilled "
                                 "(rendered inputs, run_judge_file): run it with judge_dataset or run_job")
        dataset = ray.data.from_items(rows, override_num_blocks=max(1, -(-len(rows) // self.size)))
        if self.processor is not None:
            judged = self.processor(dataset)
        else:
            judge = stage.judge.deepcopy()
            judge.set_lm(None)  # each worker puts its own one-attempt LM per endpoint on its copy
            judged = dataset.map_batches(
                _JudgeWorker, batch_size=self.size, compute=ray.data.ActorPoolStrategy(size=self.workers),
                num_cpus=0.5, fn_constructor_kwargs={"judge": judge, "configs": self.configs,
                                                     "options": replace(self.options, cache=None),
                                                     "where": "the output" if stage.name is None
                                                     else f"the output of stage {stage.name!r}"})
        model = str(getattr(stage.lm, "model", "") or "")
        return self.collect_batches(judged.iter_batches(batch_size=None, batch_format="numpy"), items, collect,
                                    check, tracker_of, model)

    def collect_batches(self, batches: Iterable[Any], items: dict[str, RunItem],
                        collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
                        tracker_of: Callable[[RunItem], UsageTotals | None] | None, model: str = ""
                        ) -> tuple[int, bool]:
        """Collect the verdicts of the batches Ray returns (columns ``id`` and ``verdict``, or a processor's
        ``line``; ``usage`` and ``fast`` when the workers say), each id of `items` once, `check()` after each
        batch; ``(verdicts collected, all on the fast path)``."""
        seen: set[str] = set()
        fast = 0
        try:
            for batch in batches:
                ids = column(batch, "id")
                records = column(batch, "verdict") if "verdict" in batch else column(batch, "line")
                flags = column(batch, "fast") if "fast" in batch else [False] * len(ids)
                used = column(batch, "usage") if "usage" in batch else [b"null"] * len(ids)
                for ident, raw, usage, on_fast_path in zip(ids, records, used, flags, strict=True):
                    if ident in seen or ident not in items:
                        self.redelivered += 1  # a block Ray executed twice: its verdicts are in already
                        continue
                    seen.add(ident)
                    fast += bool(on_fast_path)
                    item = items[ident]
                    tracker = tracker_of(item) if tracker_of is not None else None
                    reported = orjson.loads(usage)
                    if reported and tracker is not None:
                        tracker.add_usage(model, reported)
                    collect(item, _verdict_of(orjson.loads(raw)))
                check()
        except Exception as error:
            cause = _circuit_cause(error)
            if cause is not None and not isinstance(error, JudgeUnavailableError):
                raise JudgeUnavailableError(cause) from error
            raise
        return len(seen), bool(seen) and fast == len(seen)


def _checked_sizes(concurrency: int, workers: int, batch_size: int | None) -> int:
    """The batch size (default: twice the concurrency, at least 32), once the sizes are checked."""
    if batch_size is None and concurrency >= 1:
        batch_size = max(32, 2 * concurrency)
    for name, value in (("workers", workers), ("concurrency", concurrency), ("batch_size", batch_size)):
        if value is not None and value < 1:  # None: no batch size, for a concurrency below 1 (raised)
            raise InputError(f"{name} must be >= 1, got {value}")
    if batch_size is None:
        raise RubricForgeError("a concurrency of at least 1 sets the batch size")
    return batch_size


def _circuit_cause(error: BaseException) -> str | None:
    """The message of a `JudgeUnavailableError` raised in a Ray worker, found in `error` (Ray wraps it)."""
    text, seen = str(error), set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for candidate in (current, getattr(current, "cause", None)):
            if isinstance(candidate, JudgeUnavailableError):
                return str(candidate)
        current = current.__cause__ or current.__context__
    if "JudgeUnavailableError" in text:  # Ray re-raised it by name only
        return text[text.index("JudgeUnavailableError"):][:2000]
    return None


# -- a user's own Ray Dataset ---------------------------------------------------------------------------

class _Rows:
    """The trajectories of a Ray Dataset's rows, read lazily on the driver, with their count when known (it sizes
    the progress bar)."""

    def __init__(self, ds: ray.data.Dataset, total: int | None) -> None:
        self.ds, self.total = ds, total

    def __iter__(self) -> Iterator[Trajectory]:
        return (row_trajectory(row) for row in self.ds.iter_rows())

    def __len__(self) -> int:
        if self.total is None:
            raise TypeError("the dataset's rows are not counted")  # pragma: no cover - `rows` checks first
        return self.total


def judge_dataset(ds: ray.data.Dataset, program: PathArg | BaseJudge | None = None, options: JobOptions | None = None,
                  *, out: PathArg, lm_config: LMConfig | None = None, api_bases: list[str] | None = None,
                  processor: Any = None, workers: int = 2, batch_size: int | None = None,
                  render_config: RenderConfig | None = None, data: str | None = None, total: int | None = None,
                  **overrides: Any) -> BatchSummary:
    """Judge the Ray Dataset `ds` into the verdict file `out` through the one job runner (`apply.stream.run_job`
    with ``calls=RayCalls(...)``): one line per id, exactly once, resumable by running the same call again, the
    lines and the job file of a local run (a job started locally resumes on Ray and back with one endpoint).

    The rows are read on the driver (`Dataset.iter_rows`), and each LLM call's inputs go back to the actor pool
    (`RayCalls`); to judge files, call `apply.stream.run_judge_file` with ``calls=RayCalls(...)`` instead (what
    ``rubricforge judge --ray`` does: the input checked and spilled once).

    Args:
        ds: rows ``{"id", "trajectory"}`` (`trajectory_dataset`); a repeated id raises `DuplicateIdError`.
        program: a frozen program path, a judge (`BaseJudge`), or None for the seed judge; with a
            `processor`, the processor's own judge is used instead (give the program to `sglang_processor`).
        options: how the job runs (`JobOptions`; default ``JobOptions(concurrency=16, progress=False)``).
            Its ``concurrency`` is the judge calls in flight per worker (on its event loop, or threads off
            the fast path); ``max_consecutive_lm_errors`` counts per worker and for the run; ``cache`` is the
            verdict cache (default none); ``limit`` the first ids of `ds`.
        out: the verdict JSONL (the local path's format and job file, ``OUT.job.json``).
        lm_config: the judge LM (model, structured output, max_tokens, ...); its ``api_base`` is used when
            `api_bases` is not given. Not needed with a `processor`.
        api_bases: OpenAI-compatible endpoints used round-robin (e.g. one SGLang server per GPU node), or
            one: a single server or the SGLang Model Gateway.
        processor: instead of HTTP endpoints, a `sglang_processor` (SGLang engines inside Ray).
        workers: Ray actors judging at once (HTTP engine).
        batch_size: rows per call of a worker (the unit re-done after a worker dies); None: twice
            the concurrency, at least 32.
        render_config: overrides the judge's render (a program keeps the one it was induced with).
        data: the input's fingerprint, recorded in ``OUT.job.json`` (a later run on other data is refused).
        total: the rows of `ds`, when the caller knows them: it sizes the progress bar (`ds` is never counted).
        **overrides: `JobOptions` fields, replacing those of `options` (``concurrency=8``).

    Returns:
        The `BatchSummary` (judged, passed, abstained by kind, resumed, LM calls, retries, tokens).

    Raises:
        MissingExtraError: Ray Data is not installed (``pip install 'rubricforge-dspy[ray]'``).
        InputError: no endpoint, bad sizes, Ray not initialized, or a judge the chosen engine cannot run.
        BatchOutputError: `out` belongs to another judge configuration or other data.
        OutputLockedError: another process writes `out`.
        JudgeUnavailableError: a worker's circuit opened (every line written so far is kept).
    """
    from rubricforge_dspy.apply.stream import run_job

    ray = ray_module()
    options = job_options(options, overrides, _RAY_OPTIONS)
    options.refuse_budget("a Ray run (judge_dataset)")
    options.check()
    calls = RayCalls(lm_config, api_bases, options, workers, batch_size, processor=processor)
    if not ray.is_initialized():
        raise InputError("Ray is not initialized: call ray.init() (or ray.init('auto') on a cluster) first")
    if processor is not None:
        judge = processor.rubricforge_job["judge"]
    else:
        judge = judge_from(program)
        if render_config is not None:
            judge.render_config = render_config
    rows: Iterable[Trajectory] = _Rows(ds, total) if total is not None else iter(_Rows(ds, None))
    with output_lock(out):
        return run_job(judge, rows, Path(out), options, lm=calls.job_lm(), data=data, calls=calls)
