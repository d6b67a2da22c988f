"""Judge a Ray Dataset of trajectories: for the user who outgrew one machine (``pip install rubricforge-dspy[ray]``).

This module imports without the extra; its functions raise `MissingExtraError` (exit 2 on the command line)
when Ray Data is not installed.

    import ray
    from rubricforge_dspy.apply.ray import judge_dataset, trajectory_dataset
    from rubricforge_dspy.lm.config import LMConfig

    ray.init()                                   # or ray.init("auto") on a cluster
    ds = trajectory_dataset(load_trajectories("episodes.jsonl"))
    summary = judge_dataset(ds, "programs/airline.json", out="verdicts.jsonl",
                            lm_config=LMConfig(model="qwen2.5-7b@rev", api_base="http://gpu-0:30000/v1"),
                            api_bases=["http://gpu-0:30000/v1", "http://gpu-1:30000/v1"], workers=4)

The same judge as the local path, called the same way: each Ray worker (an actor of a
``map_batches`` pool) holds a copy of the judge on a one-attempt LM per endpoint and, like
`rubricforge judge`, takes the fast path when the judge offers one (`TrajectoryJudge.direct_call`: a plain
judge on an LM built by `lm.make_lm`): one event loop per actor, kept across batches (the local path's
`apply.executors.EventLoopExecutor`), ``concurrency`` calls in flight through
`rubricforge_dspy.judge.execution.ajudge_verdict`; any other judge is called through `judge_verdict` from
``concurrency`` threads. Either way the render, the strict parse, the truncation rule, the retries of
transient errors and the abstentions are those of `rubricforge judge`, and each verdict line is
`core.verdict.verdict_line`'s (``summary.fast_path`` says whether every line came from the fast path).

Exactly once (one verdict line per id, across worker failures and re-runs). The design, the simplest
that is exactly-once:

1. The DRIVER is the only writer. It holds the output's lock (`apply.job.output_lock`) for the whole
   run, reads the ids already written (`apply.job.read_done`: a torn last line repaired, abstentions for
   LM errors asked again) and checks the job (`claim_output`: same judge fingerprint, same data).
2. Anti-join: the dataset is filtered on the driver's done ids before any LM call, so a re-run judges
   only what is missing.
3. Workers write nothing: they return verdict lines (an ``id`` and a ``line`` column). The driver
   appends each line through the batch writer of the local path (`apply.writer.VerdictWriter`: one unbuffered
   write per line), skipping an id it has already written in this run: when Ray re-executes a block
   after a worker died (actor restart, task retry), the block's ids come back a second time and are
   counted in ``summary.duplicates``, never written twice.
4. A kill of the driver leaves complete lines plus at most one torn line, which the next run repairs;
   anything not yet written is judged again. A line is never written for an id that is already there.

A dead server stops the run as locally: each worker keeps a circuit (`lm.circuit.LMCircuit`), and once
it opens, the run raises `JudgeUnavailableError` (exit 3); every line written so far is kept.

A cascade on Ray goes through the one job runner (`apply.stream.run_judge_file` with ``calls=RayCalls(...)``):
each LLM stage's calls of a chunk are judged by the same actor pool (`_JudgeWorker`), the driver settles, writes,
caches (the runner's verdict cache) and resumes as for a local run; a stage without an LM runs on the driver.

There is no verdict cache on the plain path (the cache is a local directory; a re-run resumes from the
output instead), and the input is held in Ray's object store (spilled to disk by Ray when large).

Two engines:

- ``engine="http"`` (default): OpenAI-compatible endpoints, e.g. SGLang servers. Several ``api_bases``
  are used round-robin, request by request, each worker starting at its own offset; or give one base,
  the SGLang Model Gateway in front of the workers (cache-aware routing, docs/SERVING.md).
- `sglang_processor`: on GPU nodes, SGLang engines inside Ray (`ray.data.llm`'s SGLang engine
  processor). Its preprocess step (`JudgePrompt`) builds the chat messages with the judge's own adapter
  (`StrictJSONAdapter.format`), exactly the messages the HTTP path sends; its postprocess step
  (`JudgeAnswer`) parses with the strict adapter, and an answer cut at ``max_tokens`` is an abstention
  (``truncated``). Pass the processor as ``judge_dataset(..., processor=...)``. The run on GPUs is
  documented in docs/SERVING.md.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

import dspy
import orjson

from rubricforge_dspy._dspy_compat import engine_specs
from rubricforge_dspy.apply.executors import EventLoopExecutor
from rubricforge_dspy.apply.job import ResumeState, claim_job, output_lock, read_done
from rubricforge_dspy.apply.options import DEFAULT_MAX_CONSECUTIVE_LM_ERRORS, JobOptions, job_options
from rubricforge_dspy.apply.ray_data import column, job_line, ray_module, row_trajectory, trajectory_dataset
from rubricforge_dspy.apply.ray_sglang import JudgeAnswer, JudgePrompt, sglang_processor
from rubricforge_dspy.apply.summary import BatchSummary, UsageTotals
from rubricforge_dspy.apply.writer import VerdictWriter, judge_reading
from rubricforge_dspy.core.errors import InputError, RubricForgeError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict, token_usage, verdict_line
from rubricforge_dspy.judge.execution import count_verdict, judge_verdict
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.judge.loading import judge_from
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.copies import one_attempt_lm
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.lm.secrets import redact_url

if TYPE_CHECKING:
    import ray

    from rubricforge_dspy.apply.runner import Jobs, RunItem, Stage
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.lm.engine import AsyncChatCompletionsEngine

__all__ = ["judge_dataset", "RayCalls", "trajectory_dataset", "sglang_processor", "JudgePrompt", "JudgeAnswer",
           "pool_config", "DEFAULT_MAX_CONSECUTIVE_LM_ERRORS"]


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
    """One Ray actor: a judge copy per endpoint, lines returned for each batch Ray hands it.

    The fast path, when every copy offers one (`TrajectoryJudge.direct_call`: a plain judge on an LM built by
    `lm.make_lm`): the local path's event loop (`apply.executors.EventLoopExecutor`), made once per actor and kept
    across batches, keeps `threads` calls in flight through `ajudge_verdict`, the endpoints dealt
    round-robin item by item. Otherwise `threads` threads call `judge_verdict`. Either way the same retry
    policy, the same per-worker circuit breaker, the same verdict lines.

    Every call ends by closing the copies' connection pools (`close_connections`), whether the batch
    succeeded or raised: Ray Data never tells an actor that the job has ended (its last batch is not
    marked, and an actor may be killed or dropped without a graceful exit), so no pool outlives the batch
    that opened it, and nothing is left for ``__del__`` (which may run on any thread, or never). The next
    batch opens new connections: one connect per call in flight, small next to the judge calls."""

    def __init__(self, judge: Any, configs: list[LMConfig], options: JobOptions, job: dict[str, Any]) -> None:
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
        self.policy, self.job = policy, job
        self.tracker = UsageTotals()
        names = ", ".join(redact_url(c.api_base or "") for c in configs)  # `pool_config` sets every one
        self.circuit = LMCircuit(options.max_consecutive_lm_errors, names, counted=" after retries",
                                 advice=f"Stopped; {job['out']} keeps every verdict written so far: fix the "
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

    def _line(self, trajectory: Trajectory, verdict: Verdict, totals: dict[str, int] | None) -> dict[str, Any]:
        evidence = judge_reading(self.judges[0], trajectory)[1]  # every copy renders alike (one render, as sent)
        tokens = None if totals is None else token_usage(totals["prompt_tokens"], totals["completion_tokens"],
                                                         max(verdict.attempts or 0, 1))
        return verdict_line(trajectory, verdict, attempts=verdict.attempts or 0, evidence=evidence, tokens=tokens,
                            **self.job["line"])

    def _judge(self, trajectory: Trajectory) -> tuple[dict[str, Any], dict[str, int] | None]:
        with self.turn_lock:
            judge = self.judges[next(self.turn) % len(self.judges)]
        inputs = dict(judge.inputs_of(trajectory))
        usage = UsageTotals(self.tracker)  # this call's tokens (its line's, on a cascade's stage)
        with dspy.context(usage_tracker=usage, disable_history=True, trace=None):
            verdict = judge_verdict(judge, inputs.pop("trajectory"), self.policy, self.stop, self.circuit, **inputs)
        totals = usage.totals()
        return self._line(trajectory, verdict, totals), totals

    def _drive(self, loop: EventLoopExecutor, trajectories: list[Trajectory]
               ) -> list[tuple[dict[str, Any], dict[str, int] | None]]:
        """The batch on the actor's event loop; the circuit counts each verdict as `judge_verdict` would."""
        records: list[tuple[dict[str, Any], dict[str, int] | None]] = []
        inputs_of = self.judges[0].inputs_of  # every copy renders alike: they differ by endpoint only
        usage = {t.id: UsageTotals(self.tracker) for t in trajectories}

        def collect(trajectory: Trajectory, verdict: Verdict) -> None:
            totals = usage[trajectory.id].totals()
            records.append((self._line(trajectory, verdict, totals), totals))
            count_verdict(self.circuit, verdict)

        self.circuit.raise_if_open()
        loop.drive(((t, inputs_of(t)) for t in trajectories), collect, self.circuit.raise_if_open,
                        lambda t: usage[t.id])
        return records

    def __call__(self, batch: Any) -> dict[str, list[Any]]:  # a Ray batch: columns of numpy arrays
        try:
            trajectories = [row_trajectory({"id": i, "trajectory": t})
                            for i, t in zip(column(batch, "id"), column(batch, "trajectory"), strict=True)]
            if self.loop is not None:
                records = self._drive(self.loop, trajectories)
            else:
                if self.pool is None:
                    raise RubricForgeError("off the fast path, a worker has its threads (`__init__`)")
                futures = [self.pool.submit(self._judge, t) for t in trajectories]
                try:
                    records = [future.result() for future in futures]
                except JudgeUnavailableError:
                    self.stop.set()  # no more retries; the calls not started raise at once (the circuit is open)
                    wait(futures)  # the calls in flight end before their connections are closed
                    raise
        finally:
            self.close_connections()
        return {"id": [r["id"] for r, _ in records], "line": [orjson.dumps(r) for r, _ in records],
                "fast": [self.loop is not None] * len(records), "usage": [orjson.dumps(u) for _, u in records]}

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


# -- the driver ---------------------------------------------------------------------------------------

_RAY_OPTIONS = JobOptions(concurrency=16, progress=False)  # a worker keeps more calls in flight than a process


def judge_dataset(ds: "ray.data.Dataset", program: PathArg | BaseJudge | None = None, options: JobOptions | None = None,
                  *, out: PathArg, lm_config: LMConfig | None = None, api_bases: list[str] | None = None,
                  processor: Any = None, workers: int = 2, batch_size: int | None = None,
                  render_config: RenderConfig | None = None, data: str | None = None, total: int | None = None,
                  **overrides: Any) -> BatchSummary:
    """Judge the Ray Dataset `ds` into the verdict file `out`: one line per id, exactly once (see the
    module docstring for how), resumable by running the same call again.

    Args:
        ds: rows ``{"id", "trajectory"}`` (`trajectory_dataset`); ids must be unique.
        program: a frozen program path, a judge (`BaseJudge`), or None for the seed judge; with a
            `processor`, the processor's own judge is used instead (give the program to `sglang_processor`).
        options: how the job runs (`JobOptions`; default ``JobOptions(concurrency=16, progress=False)``).
            Its ``concurrency`` is the judge calls in flight per worker (on its event loop, or threads off
            the fast path); ``max_consecutive_lm_errors`` counts per worker; ``cache`` and ``limit`` are
            not used (a re-run resumes from `out`; limit the dataset instead).
        out: the verdict JSONL (the local path's format and job file, ``OUT.job.json``).
        lm_config: the judge LM (model, structured output, max_tokens, ...); its ``api_base`` is used when
            `api_bases` is not given. Not needed with a `processor`.
        api_bases: OpenAI-compatible endpoints used round-robin (e.g. one SGLang server per GPU node), or
            one: a single server or the SGLang Model Gateway.
        processor: instead of HTTP endpoints, a `sglang_processor` (SGLang engines inside Ray).
        workers: Ray actors judging at once (HTTP engine).
        batch_size: rows per call of a worker (the unit re-done after a worker dies); None: twice
            the concurrency, at least 32, so a worker keeps its calls in flight through most of a
            batch (a batch smaller than the concurrency would cap the calls in flight at its size).
        render_config: overrides the judge's render (a program keeps the one it was induced with).
        data: the input's fingerprint, recorded in ``OUT.job.json`` (a later run on other data is refused).
        total: the rows of `ds`, when the caller knows them (the command line has counted its input); it
            sizes the progress bar and gives ``resumed`` as the rows not judged by this run. None: `ds` is
            never counted (`Dataset.count` runs the whole read for e.g. a JSON dataset), and ``resumed`` is
            the ids `out` held before this run (with `data` given, `out` belongs to this input, so they are
            the same).
        **overrides: `JobOptions` fields, replacing those of `options` (``concurrency=8``).

    Returns:
        The `BatchSummary` (judged, passed, abstained by kind, resumed, LM calls, retries;
        ``duplicates``: lines that came back twice from re-executed blocks or repeated input ids, written
        once).

    Raises:
        MissingExtraError: Ray Data is not installed (``pip install 'rubricforge-dspy[ray]'``).
        InputError: no endpoint, bad sizes, or a judge the chosen engine cannot run.
        BatchOutputError: `out` belongs to another judge configuration or other data.
        OutputLockedError: another process writes `out`.
        JudgeUnavailableError: a worker's circuit opened (every line written so far is kept).
    """
    ray = ray_module()
    options = job_options(options, overrides, _RAY_OPTIONS)
    options.refuse_budget("a Ray run (judge_dataset)")
    batch_size = _checked_sizes(ray, options.concurrency, workers, batch_size)
    judge, configs, job_judge, job_lm = _job_judge(program, processor, render_config, lm_config, api_bases,
                                                   options.timeout)
    line = job_line(job_judge, job_lm)
    out_path = Path(out)
    started = time.perf_counter()
    with output_lock(out_path):
        fingerprint = judge_fingerprint(job_judge, job_lm)
        done = read_done(out_path)
        claim_job(out_path, fingerprint, data, done)
        summary = BatchSummary(out_path=str(out_path), repaired_bytes=done.repaired_bytes, retried=done.retried,
                               program_sha256=line["program_sha256"], judge_fingerprint=fingerprint.sha256,
                               model=line["model"])
        done_ids = frozenset(done.ids)
        todo = ds.filter(lambda row: row["id"] not in done_ids, num_cpus=0.25)  # the anti-join: what is missing
        if processor is not None:
            judged = processor(todo)
        else:
            worker_options = replace(options, cache=None)  # what a worker reads (shipped to it by Ray)
            judged = todo.map_batches(
                _JudgeWorker, batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=0.5,
                fn_constructor_kwargs={"judge": judge, "configs": configs, "options": worker_options,
                                       "job": {"out": str(out_path), "line": line}})
        _drain(judged, out_path, done, fingerprint.sha256, summary, options.fsync_every, options.progress, total)
        # the rows whose id was written already (ids are unique)
        summary.resumed = len(done_ids) if total is None else total - summary.judged
        summary.wall_time = time.perf_counter() - started
    return summary


def _checked_sizes(ray: ModuleType, concurrency: int, workers: int, batch_size: int | None) -> int:
    """The batch size (default: twice the concurrency, at least 32), once the sizes and Ray are checked."""
    if batch_size is None and concurrency >= 1:
        batch_size = max(32, 2 * concurrency)
    for name, value in (("workers", workers), ("concurrency", concurrency), ("batch_size", batch_size)):
        if value is not None and value < 1:  # None: no batch size, for a concurrency below 1 (raised)
            raise InputError(f"{name} must be >= 1, got {value}")
    if not ray.is_initialized():
        raise InputError("Ray is not initialized: call ray.init() (or ray.init('auto') on a cluster) first")
    if batch_size is None:
        raise RubricForgeError("a concurrency of at least 1 sets the batch size")
    return batch_size


def _job_judge(program: PathArg | BaseJudge | None, processor: Any, render_config: RenderConfig | None,
               lm_config: LMConfig | None, api_bases: list[str] | None, timeout: float | None
               ) -> tuple[Any, list[LMConfig], Any, dspy.BaseLM | None]:
    """``(judge, configs, job_judge, job_lm)``: the judge the HTTP workers copy (None with a processor), one
    LM configuration per endpoint, and the judge and LM the job is fingerprinted with."""
    if processor is not None:
        return None, [], processor.rubricforge_job["judge"], processor.rubricforge_job["lm"]
    judge = judge_from(program)
    if render_config is not None:
        judge.render_config = render_config
    if lm_config is None:
        raise InputError("judge_dataset needs lm_config (the judge LM), or a processor")
    pool, configs = pool_config(lm_config, api_bases)
    return judge, configs, judge, (one_attempt_lm(make_lm(pool), timeout) if judge.predictors() else None)


def _drain(judged: ray.data.Dataset, out: Path, done: ResumeState, fingerprint: str, summary: BatchSummary,
           fsync_every: int, progress: bool, total: int | None) -> None:
    """Write the lines the workers return, each id once, as they come (the driver is the one writer, through
    the local path's writer, which also keeps the done index current)."""
    written: set[str] = set()
    fast = 0  # lines judged on the workers' fast path
    done_ids = frozenset(done.ids)
    writer = VerdictWriter(out, fsync_every, done, fingerprint)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=None if total is None else total - len(done_ids), unit="verdict", desc="judging on Ray",
                   dynamic_ncols=True)
    try:
        for batch in judged.iter_batches(batch_size=None, batch_format="numpy"):
            ids = column(batch, "id")
            flags = column(batch, "fast") if "fast" in batch else [False] * len(ids)
            for ident, raw, on_fast_path in zip(ids, column(batch, "line"), flags, strict=True):
                if ident in written or ident in done_ids:
                    summary.duplicates += 1
                    continue
                fast += bool(on_fast_path)
                record = orjson.loads(raw)
                writer.write(record)
                written.add(ident)
                attempts = int(record.get("attempts") or 0)
                summary.lm_calls += attempts
                summary.retries += max(0, attempts - 1)
                summary.count(Verdict.from_dict(record), cached=False)
                if bar is not None:
                    bar.update(1)
    except Exception as error:
        cause = _circuit_cause(error)
        if cause is not None:
            raise JudgeUnavailableError(cause) from error
        raise
    finally:
        summary.fast_path = bool(written) and fast == len(written)
        writer.close()
        if bar is not None:
            bar.close()


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


class RayCalls:
    """Ray's calls of one stage of the job runner (`apply.stream`; a cascade's LLM stage): the chunk's items
    as a Ray Dataset, judged by the actor pool `judge_dataset` uses (`_JudgeWorker`: the stage's judge on a
    one-attempt LM per endpoint, round-robin, the fast path where there is one), the lines returned to the
    driver, which settles, writes and caches each item once (an id that comes back from a re-executed block is
    dropped). A stage without an LM runs locally (the runner's). The workers judge `Trajectory` records: a plain
    judge's items, which `run_judge_file` spills as rendered inputs, are refused (`InputError`); a plain judge
    runs on Ray through `judge_dataset`.

    Args:
        lm_config: the judge LM (its ``api_base`` is used when `api_bases` is not given).
        api_bases: the endpoints, round-robin (`pool_config`).
        options: `JobOptions` of the workers: ``concurrency`` per worker, ``timeout``, retries,
            ``max_consecutive_lm_errors`` per worker.
        workers: Ray actors judging at once.
        batch_size: rows per call of a worker (default: twice the concurrency, at least 32).

    Raises:
        MissingExtraError: Ray Data is not installed. InputError: no endpoint, or one given twice.
    """

    def __init__(self, lm_config: LMConfig, api_bases: list[str] | None = None, options: JobOptions | None = None,
                 workers: int = 2, batch_size: int | None = None):
        self.ray = ray_module()
        self.options = job_options(options, {}, _RAY_OPTIONS)
        self.pool, self.configs = pool_config(lm_config, api_bases)
        self.workers, self.batch_size = workers, batch_size

    def job_lm(self) -> dspy.BaseLM:
        """The LM the job is fingerprinted with (the pool's configuration, as `judge_dataset`'s)."""
        return make_lm(self.pool)

    def run(self, stage: Stage, jobs: Jobs, collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
            tracker_of: Callable[[RunItem], UsageTotals | None] | None = None) -> bool:
        """Judge the ``(item, inputs)`` of `jobs` on Ray and `collect(item, verdict)` each, with its tokens on
        `tracker_of(item)` (`apply.runner.LocalCalls.run`'s contract). True when every line came from the
        workers' fast path.

        Raises:
            InputError: an item is spilled (`apply.writer.Spilled`: a plain judge's under `run_judge_file`), not
                a `Trajectory` the workers can judge; refused before anything reaches Ray.
            JudgeUnavailableError: a worker's circuit opened (the lines already back are collected first).
        """
        ray, options = self.ray, self.options
        items: dict[str, RunItem] = {}
        trajectories: dict[str, Trajectory] = {}  # what the workers judge: the records themselves
        for item, _inputs in jobs:
            trajectory = item.trajectory
            if not isinstance(trajectory, Trajectory):  # a `Spilled` item: its rendered inputs only
                raise InputError("calls=RayCalls(...) judges Trajectory records on the workers, but a plain judge's "
                                 "items come spilled (rendered inputs): run a plain judge on Ray with judge_dataset "
                                 "(rubricforge judge --ray), and pass calls=RayCalls(...) with a cascade")
            if trajectory.id not in items:
                items[trajectory.id], trajectories[trajectory.id] = item, trajectory
        if not items:
            return False
        batch_size = _checked_sizes(ray, options.concurrency, self.workers, self.batch_size)
        judge = stage.judge.deepcopy()
        judge.set_lm(None)  # each worker puts its own one-attempt LM per endpoint on its copy
        dataset = trajectory_dataset(trajectories.values())
        judged = dataset.map_batches(
            _JudgeWorker, batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=self.workers), num_cpus=0.5,
            fn_constructor_kwargs={"judge": judge, "configs": self.configs, "options": replace(options, cache=None),
                                   "job": {"out": f"stage {stage.name!r}",
                                           "line": {"judge_fingerprint": None, "program_sha256": None,
                                                    "model": None}}})
        seen: set[str] = set()
        fast = 0
        try:
            for batch in judged.iter_batches(batch_size=None, batch_format="numpy"):
                flags = column(batch, "fast")
                for ident, raw, used, on_fast_path in zip(column(batch, "id"), column(batch, "line"),
                                                          column(batch, "usage"), flags, strict=True):
                    if ident in seen or ident not in items:
                        continue  # a block Ray executed twice
                    seen.add(ident)
                    fast += bool(on_fast_path)
                    line, item = orjson.loads(raw), items[ident]
                    usage = orjson.loads(used)
                    tracker = tracker_of(item) if tracker_of is not None else None
                    if usage and tracker is not None:
                        tracker.add_usage(str(self.pool.model), usage)
                    collect(item, replace(Verdict.from_dict(line), attempts=int(line.get("attempts") or 0)))
        except Exception as error:
            cause = _circuit_cause(error)
            if cause is not None:
                raise JudgeUnavailableError(cause) from error
            raise
        return bool(seen) and fast == len(seen)
