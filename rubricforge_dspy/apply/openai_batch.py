"""Judge a trajectory file through the OpenAI Batch API (``/v1/files`` + ``/v1/batches``).

`run_batch_api` writes one batch input line per trajectory not yet in ``OUT``::

    {"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

The body is the exact request online judging sends, byte for byte: the judge is called on the online
LM inside `lm.engine.capture_request`, where its `ChatCompletionsEngine` raises the body it would post
(`RequestCaptured`) instead of posting it, the one capture the fast path uses too; each line is written
with `lm.engine.encode_body`'s encoder. Results come back through an engine that replays each answer (or
its HTTP status) into the judge, so parsing, truncation
(finish reason ``length``), contradictions and error kinds follow the one online code path
(`execution.judge_verdict`). Verdict lines, ``OUT.job.json`` (ownership and fingerprint) and the
verdict cache are those of `rubricforge_dspy.apply.stream` (the lines written by `writer.VerdictWriter`).

Resume: ``OUT.batch.json`` holds the batch id, its input file id and the request -> trajectory id
map; it is written (atomically) right after the batch is created and before any poll, so re-running
the same command after a kill resumes polling that batch instead of submitting another. A batch that
fails, expires or is cancelled as a whole raises `BatchJobFailed` (after keeping whatever results it
has); the state file is removed so the next run submits the rest again.

A cascade goes through the one job runner (`apply.stream.run_judge_file` with ``calls=BatchCalls(...)``): each
LLM stage's calls of a chunk are one batch (the same request lines, the same replay), a stage without an LM runs
locally, and the runner writes, caches and resumes as for any run. Its pending batch is not recorded: a run
killed while a stage's batch is pending submits that stage's requests again (the lines and the cache keep
everything answered before).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import httpx
import orjson
import tenacity

from rubricforge_dspy.apply.job import checked_input, claim_job, output_lock, read_done, replace_file
from rubricforge_dspy.apply.options import JobOptions, job_options
from rubricforge_dspy.apply.summary import BatchSummary
from rubricforge_dspy.apply.writer import VerdictWriter, judge_reading
from rubricforge_dspy.core.errors import InputError, RubricForgeError, ServerError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.judge.cache import VerdictCache, input_sha256, open_cache
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.copies import one_attempt_lm, resolve_lm
from rubricforge_dspy.lm.engine import ChatCompletionsEngine, RequestCaptured, capture_request, http_error
from rubricforge_dspy.lm.errors import is_transient
from rubricforge_dspy.lm.truncation import check_finish

if TYPE_CHECKING:
    import dspy
    from dspy import lm15

    from rubricforge_dspy.apply.runner import Jobs, RunItem, Stage
    from rubricforge_dspy.apply.summary import UsageTotals
    from rubricforge_dspy.core.trajectory import LabelRule
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.judge.contract import BaseJudge

__all__ = ["run_batch_api", "BatchClient", "BatchApiSummary", "BatchJobFailed", "BatchCalls", "batch_request",
           "poll", "state_path"]

logger = logging.getLogger(__name__)

STATE_SUFFIX = ".batch.json"
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
ENDPOINT = "/v1/chat/completions"
Reply = tuple[int, dict[str, Any]]  # a batch answer: its HTTP status and body


class BatchJobFailed(ServerError):
    """The batch failed, expired or was cancelled as a whole (or a pending batch belongs to another judge
    configuration); the message says which and what to do. The command line exits 3."""


class _ReplayEngine(ChatCompletionsEngine):
    """A `ChatCompletionsEngine` that never posts: it answers with ``reply = (status_code, payload)`` as if
    the server had returned that (an HTTP error for a status >= 400, a completion otherwise)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__(config)
        self.reply: Reply | None = None

    def complete(self, request: lm15.Request) -> lm15.Response:
        from dspy import lm15

        if self.reply is None:
            raise RuntimeError("no batch answer to replay")  # pragma: no cover - set around every call
        status, payload = self.reply
        if status >= 400:
            raise http_error(status, json.dumps(payload)[:500], None, "batch " + self.url)
        return check_finish(lm15.response_from_openai_chat(payload, model=request.model), "batch " + self.url,
                            request.model)


def batch_request(judge: Callable[..., Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """The body `judge` (on an LM built by `lm.make_lm`) would post for `inputs`, captured without a call
    (`lm.engine.capture_request`): what online judging sends, for a Batch API input line.

    Raises:
        RuntimeError: the judge answered without making a request.
    """
    try:
        with capture_request():
            judge(**inputs)
    except RequestCaptured as captured:
        body: dict[str, Any] = captured.body
        return body
    raise RuntimeError("the judge answered without a request being captured")


def state_path(out_path: PathArg) -> Path:
    """Where `run_batch_api` records the pending batch of `out_path` (``OUT.batch.json``; see the module)."""
    path = Path(out_path)
    return path.with_name(path.name + STATE_SUFFIX)


def _write_json_atomic(path: Path, value: dict[str, Any]) -> None:
    """Replace `path` with `value` as JSON: a new file renamed into place (`apply.job.replace_file`: a link
    planted at either name is replaced, never written through)."""
    replace_file(path, json.dumps(value, indent=1, sort_keys=True).encode("utf-8"))


class BatchClient:
    """The Batch API over httpx; transient errors (`lm.errors.is_transient`: connection, timeout, 5xx, 429)
    retried by tenacity."""

    def __init__(self, api_base: str, api_key: str | None = None, timeout: float = 60.0, retries: int = 5):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.api_base = api_base.rstrip("/")
        self.http = httpx.Client(base_url=self.api_base, headers=headers, timeout=timeout)
        self.retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient), stop=tenacity.stop_after_attempt(retries + 1),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=10), reraise=True)

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        def once() -> httpx.Response:
            response = self.http.request(method, path, **kwargs)
            response.raise_for_status()
            return response
        try:
            return self.retrying(once)
        except httpx.HTTPStatusError as error:
            raise ServerError(f"{method} {self.api_base}{path}: HTTP {error.response.status_code}: "
                              f"{error.response.text[:300]}") from None
        except httpx.TransportError as error:
            raise ServerError(f"{method} {self.api_base}{path}: {type(error).__name__}: {error}") from error

    def upload(self, data: bytes, name: str) -> dict[str, Any]:
        return _json(self._call("POST", "/files", data={"purpose": "batch"},
                                files={"file": (name, data, "application/jsonl")}))

    def create(self, input_file_id: str, metadata: dict[str, str] | None = None) -> dict[str, Any]:
        return _json(self._call("POST", "/batches", json={"input_file_id": input_file_id, "endpoint": ENDPOINT,
                                                          "completion_window": "24h", "metadata": metadata or {}}))

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        return _json(self._call("GET", f"/batches/{batch_id}"))

    def content(self, file_id: str) -> bytes:
        return self._call("GET", f"/files/{file_id}/content").content

    def close(self) -> None:
        self.http.close()


def _json(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a Batch API answer (a file or a batch)."""
    body: dict[str, Any] = response.json()  # httpx's json: Any
    return body


@dataclass
class BatchApiSummary(BatchSummary):
    """A `BatchSummary` plus the batch: its id, final status, requests submitted, per-request errors."""

    batch_id: str | None = None
    batch_status: str | None = None
    submitted: int = 0
    request_errors: int = 0
    resumed_batch: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "batch_id": self.batch_id, "batch_status": self.batch_status,
                "submitted": self.submitted, "request_errors": self.request_errors,
                "resumed_batch": self.resumed_batch}

    def format(self) -> str:
        head = (f"batch {self.batch_id or '-'} ({self.batch_status or 'nothing to submit'}"
                f"{', resumed' if self.resumed_batch else ''}): {self.submitted} requests, "
                f"{self.request_errors} per-request errors (abstained)")
        return head + "\n" + super().format()


def poll(client: BatchClient, batch_id: str, interval: float = 2.0, max_interval: float = 60.0,
         on_status: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Poll until the batch leaves the active statuses; the wait doubles up to `max_interval`. Each status
    line (``batch ID: STATUS (DONE/TOTAL done, FAILED failed)``) goes to `on_status`, when given."""
    wait = interval
    while True:
        batch = client.retrieve(batch_id)
        status = batch.get("status")
        counts = batch.get("request_counts") or {}
        if on_status is not None:
            on_status(f"batch {batch_id}: {status} ({counts.get('completed', 0)}/{counts.get('total', '?')} done, "
                      f"{counts.get('failed', 0)} failed)")
        if status not in ACTIVE:
            return batch
        time.sleep(wait)
        wait = min(max_interval, wait * 2)


def _results(client: BatchClient, batch: dict[str, Any]) -> dict[str, Reply | str]:
    """custom_id -> (status_code, body) from the output file, or an error message from the error file."""
    found: dict[str, Reply | str] = {}
    for key in ("output_file_id", "error_file_id"):
        if not batch.get(key):
            continue
        for raw in client.content(batch[key]).splitlines():
            if not raw.strip():
                continue
            line = json.loads(raw)
            response, error = line.get("response"), line.get("error")
            if response and response.get("status_code") is not None:
                found[line["custom_id"]] = (int(response["status_code"]), response.get("body") or {})
            else:
                found[line["custom_id"]] = f"batch request error: {json.dumps(error)[:300]}"
    return found



_BATCH_OPTIONS = JobOptions(cache=True)  # as `rubricforge judge`: the verdict cache next to the output


def run_batch_api(judge: BaseJudge, data_path: PathArg | Iterable[PathArg], out_path: PathArg,
                  options: JobOptions | None = None, *, lm: dspy.BaseLM | None = None, format: str = "auto",
                  label_threshold: float | str | LabelRule | None = None, on_error: str = "raise",
                  poll_interval: float = 2.0, max_poll_interval: float = 60.0, load_report: LoadReport | None = None,
                  labels: LabelJoin | None = None, on_trajectory: Callable[[Trajectory], Any] | None = None,
                  on_status: Callable[[str], None] | None = None, **overrides: Any) -> BatchApiSummary:
    """Judge `data_path` into `out_path` through the Batch API of `lm`'s endpoint; resumable (see module).

    Args:
        judge: the judge (`judge.loading.judge_from` resolves a program argument to one).
        data_path: a trajectory file or directory, or a list of them.
        out_path: the verdict file; its lock (`apply.job.output_lock`) is held for the whole run: a second
            process on the same `out_path` raises `OutputLockedError`.
        options: how the job runs (`JobOptions`; default ``JobOptions(cache=True)``); this back end reads
            ``cache``, ``limit``, ``progress`` and ``fsync_every`` (the provider schedules the calls).
        lm: the judge LM, built by `lm.make_lm` on an OpenAI-compatible endpoint (default: the judge's).
        format: the input format, or "auto".
        label_threshold: None = each format's own rule.
        on_error: the loader's policy for bad records ("raise" or "skip").
        poll_interval: the first wait between polls, in seconds; it doubles up to `max_poll_interval`.
        max_poll_interval: see `poll_interval`.
        load_report: a `LoadReport` to fill.
        labels: a `labels.LabelJoin` joined onto the stream (as `run_judge_file` does).
        on_trajectory: called with every trajectory read (e.g. a `label_checks.LabelTally`).
        on_status: called with each poll's status line; default: logged at INFO when ``options.progress``.
        **overrides: `JobOptions` fields, replacing those of `options` (``limit=100``).

    Returns:
        The `BatchApiSummary` of the run.

    Raises:
        InputError: the LM has no OpenAI-compatible endpoint; a bad input (before anything is submitted).
        BatchJobFailed: the batch failed, expired or was cancelled (its results kept), or a pending batch
            belongs to another judge configuration.
        ServerError: the Batch API cannot be reached.
    """
    options = job_options(options, overrides, _BATCH_OPTIONS)
    options.refuse_budget("a Batch API run (run_batch_api)")
    if on_status is None and options.progress:
        def on_status(line: str) -> None:
            logger.info("%s", line)
    reading = {"format": format, "label_threshold": label_threshold, "on_error": on_error}
    with output_lock(out_path):
        run = _BatchRun(judge, data_path, Path(out_path), options, lm, reading, labels, load_report, on_trajectory)
        return run.run(poll_interval, max_poll_interval, on_status)


class _BatchRun:
    """One run of `run_batch_api` with the output's lock held: the judge on the online LM (whose requests are
    captured) and on the replaying engine, the job claimed, the cache and the tally."""

    def __init__(self, judge: BaseJudge, data_path: PathArg | Iterable[PathArg], out_path: Path, options: JobOptions,
                 lm: dspy.BaseLM | None, reading: dict[str, Any], labels: LabelJoin | None,
                 load_report: LoadReport | None, on_trajectory: Callable[[Trajectory], Any] | None) -> None:
        self.started = time.perf_counter()
        self.data_path, self.out_path, self.options, self.reading = data_path, out_path, options, reading
        self.labels, self.load_report, self.on_trajectory = labels, load_report, on_trajectory
        base_lm = resolve_lm(judge, lm)
        config, self.api_base = _endpoint_config(base_lm)
        if base_lm is None:
            raise InputError("no LM to judge with: pass lm=..., call judge.set_lm(...), or dspy.configure(lm=...)")
        self.config = config
        online = one_attempt_lm(base_lm)
        self.engine = _ReplayEngine(config)
        self.replay_judge = judge.deepcopy()
        self.replay_judge.set_lm(online.copy(engine=self.engine))
        self.online_judge = judge.deepcopy()
        self.online_judge.set_lm(online)
        fingerprint = judge_fingerprint(self.online_judge, online)  # the same job as online judging
        self.fingerprint = fingerprint.sha256
        self.line: dict[str, Any] = {"judge_fingerprint": fingerprint.sha256,
                                     "program_sha256": getattr(judge, "rubric_sha256", None), "model": config.model}
        paths = [data_path] if isinstance(data_path, (str, os.PathLike)) else list(data_path)
        # The whole input is checked (one streaming pass, ids only) before anything is submitted.
        scan, self.data = checked_input(paths, limit=options.limit, labels=labels, **reading)
        self.done = read_done(out_path)
        claim_job(out_path, fingerprint, self.data, self.done)
        self.cache: VerdictCache | None = open_cache(options.cache, out_path)
        self.summary = BatchApiSummary(out_path=str(out_path), repaired_bytes=self.done.repaired_bytes,
                                       retried=self.done.retried, program_sha256=self.line["program_sha256"],
                                       judge_fingerprint=self.fingerprint, model=config.model)
        self.writer: VerdictWriter | None = None

    def run(self, poll_interval: float, max_poll_interval: float, on_status: Callable[[str], None] | None
            ) -> BatchApiSummary:
        """Submit (or resume) the batch, wait for it, write its verdicts; the summary."""
        summary, state_file = self.summary, state_path(self.out_path)
        client = BatchClient(self.api_base, self.config.api_key)
        try:
            state: dict[str, Any] | None = json.loads(state_file.read_text()) if state_file.exists() else None
            if state is not None and state.get("judge_fingerprint") != self.fingerprint:
                raise BatchJobFailed(f"{state_file}: a pending batch of another judge configuration; delete it "
                                     "(and cancel batch " + str(state.get("batch_id")) + ") or use another --out")
            self.writer = VerdictWriter(self.out_path, self.options.fsync_every, self.done, self.fingerprint)
            if state is None:
                state = self._submit(client, state_file)
                if state is None:  # nothing left to ask
                    return summary
            else:
                summary.resumed_batch = True
            summary.batch_id, summary.submitted = state["batch_id"], len(state["requests"])
            batch = poll(client, state["batch_id"], poll_interval, max_poll_interval, on_status)
            summary.batch_status = batch.get("status")
            failed_whole = summary.batch_status != "completed"  # failed, expired, cancelled
            self._collect(_results(client, batch), state["requests"], failed_whole)
            state_file.unlink(missing_ok=True)
            if failed_whole:
                errors = (batch.get("errors") or {}).get("data") or []
                raise BatchJobFailed(
                    f"batch {summary.batch_id} ended {summary.batch_status!r}"
                    f"{': ' + json.dumps(errors)[:300] if errors else ''}; kept {summary.judged} verdicts in "
                    f"{self.out_path}. Re-run the same command to submit the rest in a new batch.")
        finally:
            client.close()
            if self.writer is not None:
                self.writer.close()
            if self.cache is not None and not isinstance(self.options.cache, VerdictCache):
                self.cache.close()
            summary.wall_time = time.perf_counter() - self.started
        return summary

    def _trajectories(self, observe: bool) -> Iterator[Trajectory]:
        """The input again; `observe`: the one pass of this run that feeds the label join and the
        `on_trajectory` watcher (and the load report), so nothing is counted twice."""
        from rubricforge_dspy.data.formats import iter_trajectories
        from rubricforge_dspy.data.labels import LabelJoin

        seen: set[str] = set()
        labels, limit = self.labels, self.options.limit
        report = self.load_report if observe else None
        joiner = labels if observe or labels is None else LabelJoin(labels.file, labels.rule)  # same labels, uncounted
        for t in iter_trajectories(self.data_path, report=report, **self.reading):
            if t.id in seen:
                self.summary.duplicates += 1
                continue
            if limit is not None and len(seen) >= limit:
                return
            seen.add(t.id)
            if joiner is not None:
                t = joiner.apply(t)
            if observe and self.on_trajectory is not None:
                self.on_trajectory(t)
            yield t

    def _write(self, trajectory: Trajectory, verdict: Verdict, cached: bool, inputs: dict[str, Any]) -> None:
        if self.writer is None:
            raise RubricForgeError("`run` opens the writer before any line")
        evidence = judge_reading(self.online_judge, trajectory)[1]  # what the request showed (one render, as sent)
        self.writer.write(verdict_line(trajectory, verdict, cached=cached, attempts=0 if cached else 1,
                                       evidence=evidence, **self.line))
        self.summary.count(verdict, cached)
        if not verdict.abstained and self.cache is not None and not cached:
            self.cache.put(self.fingerprint, input_sha256(inputs), verdict)

    def _submit(self, client: BatchClient, state_file: Path) -> dict[str, Any] | None:
        """Write the batch input (cache hits written as verdicts instead), upload it, create the batch and
        record its state (atomically, before any poll); None when nothing is left to ask."""
        lines: list[bytes] = []
        requests: dict[str, str] = {}  # custom_id -> trajectory id
        for trajectory in self._trajectories(observe=True):
            if trajectory.id in self.done.ids:
                self.summary.resumed += 1
                continue
            inputs = self.online_judge.inputs_of(trajectory)
            hit = self.cache.get(self.fingerprint, input_sha256(inputs)) if self.cache else None
            if hit is not None:
                self._write(trajectory, hit, True, inputs)
                continue
            custom_id = f"r{len(requests)}"
            requests[custom_id] = trajectory.id
            lines.append(orjson.dumps({"custom_id": custom_id, "method": "POST", "url": ENDPOINT,
                                       "body": batch_request(self.online_judge, inputs)}))
        if not requests:
            return None
        input_path = self.out_path.with_name(self.out_path.name + ".batch_input.jsonl")
        input_path.write_bytes(b"\n".join(lines) + b"\n")
        uploaded = client.upload(input_path.read_bytes(), input_path.name)
        batch = client.create(uploaded["id"], {"rubricforge_out": self.out_path.name})
        state = {"batch_id": batch["id"], "input_file_id": uploaded["id"], "requests": requests,
                 "judge_fingerprint": self.fingerprint, "data_fingerprint": self.data}
        _write_json_atomic(state_file, state)
        return state

    def _collect(self, results: dict[str, Reply | str], requests: dict[str, str], failed_whole: bool) -> None:
        """Write the verdict of each request the batch answered (replayed into the judge), in input order."""
        wanted = {tid: cid for cid, tid in requests.items()}
        for trajectory in self._trajectories(observe=self.summary.resumed_batch):
            custom_id = wanted.get(trajectory.id)
            if custom_id is None or trajectory.id in self.done.ids:
                continue
            result = results.get(custom_id)
            inputs = self.replay_judge.inputs_of(trajectory)
            if result is None:
                if failed_whole:
                    continue  # never answered: submitted again by the next run
                result = "batch request missing from the output and error files"
            if isinstance(result, str):
                verdict = Verdict.abstention(result, "other")
                self.summary.request_errors += 1
            else:
                verdict = self._replay(result, inputs)
                self.summary.request_errors += result[0] != 200
            self.summary.lm_calls += 1
            self._write(trajectory, verdict, False, inputs)

    def _replay(self, result: Reply, inputs: dict[str, Any]) -> Verdict:
        """The verdict of the batch's answer `result`, through the judge's one online code path."""
        return _replayed(self.replay_judge, self.engine, result, inputs, None)


class BatchCalls:
    """The Batch API's calls of one stage of the job runner (`apply.stream`; a cascade's LLM stage): the items
    of a chunk as one batch of the requests online judging sends (`batch_request`), polled until it ends, each
    answer replayed into the stage's judge (`_ReplayEngine`, `execution.judge_verdict`) in the order the items
    came. A batch that fails, expires or is cancelled raises `BatchJobFailed` once the answers it has are kept.

    Args:
        poll_interval: the first wait between polls, in seconds; it doubles up to `max_poll_interval`.
        max_poll_interval: see `poll_interval`.
        on_status: called with each poll's status line.
    """

    def __init__(self, poll_interval: float = 2.0, max_poll_interval: float = 60.0,
                 on_status: Callable[[str], None] | None = None) -> None:
        self.poll_interval, self.max_poll_interval, self.on_status = poll_interval, max_poll_interval, on_status

    def run(self, stage: Stage, jobs: Jobs, collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
            tracker_of: Callable[[RunItem], UsageTotals | None] | None = None) -> bool:
        """Submit the ``(item, inputs)`` of `jobs` as one batch and `collect(item, verdict)` each answer
        (`apply.runner.LocalCalls.run`'s contract; the circuit is not consulted: the provider schedules).

        Raises:
            InputError: the stage's LM has no OpenAI-compatible endpoint.
            BatchJobFailed: the batch did not complete (its answers are collected first).
            ServerError: the Batch API cannot be reached.
        """
        config, api_base = _endpoint_config(stage.lm)
        requests: dict[str, tuple[RunItem, dict[str, Any]]] = {}
        lines: list[bytes] = []
        for item, inputs in jobs:
            custom_id = f"r{len(requests)}"
            requests[custom_id] = (item, inputs)
            lines.append(orjson.dumps({"custom_id": custom_id, "method": "POST", "url": ENDPOINT,
                                       "body": batch_request(stage.judge, inputs)}))
        if not requests:
            return False
        client = BatchClient(api_base, config.api_key)
        try:
            uploaded = client.upload(b"\n".join(lines) + b"\n", f"rubricforge-stage-{stage.index}.jsonl")
            created = client.create(uploaded["id"], {"rubricforge_stage": str(stage.name)})
            batch = poll(client, created["id"], self.poll_interval, self.max_poll_interval, self.on_status)
            results = _results(client, batch)
        finally:
            client.close()
        failed_whole = batch.get("status") != "completed"
        engine = _ReplayEngine(config)
        replay = stage.judge.deepcopy()
        replay.set_lm(stage.lm.copy(engine=engine))
        for custom_id, (item, inputs) in requests.items():
            result = results.get(custom_id)
            if result is None:
                if failed_whole:
                    continue  # never answered: asked again by the next run
                result = "batch request missing from the output and error files"
            if isinstance(result, str):
                verdict = replace(Verdict.abstention(result, "other"), attempts=1)
            else:
                tracker = tracker_of(item) if tracker_of is not None else None
                verdict = _replayed(replay, engine, result, inputs, tracker)
            collect(item, verdict)
        if failed_whole:
            errors = (batch.get("errors") or {}).get("data") or []
            raise BatchJobFailed(f"batch {batch.get('id')} (stage {stage.name!r}) ended {batch.get('status')!r}"
                                 f"{': ' + json.dumps(errors)[:300] if errors else ''}; the answers it has are kept. "
                                 "Re-run the same command to ask the rest again.")
        return False


def _endpoint_config(lm: dspy.BaseLM | None) -> tuple[LMConfig, str]:
    """The `LMConfig` of `lm`'s engine (an LM built by `lm.make_lm`) and its endpoint, where a batch goes.

    Raises:
        InputError: `lm` has no OpenAI-compatible endpoint.
    """
    config = getattr(getattr(lm, "engine", None), "config", None)
    if not isinstance(config, LMConfig) or not config.api_base:
        raise InputError("--batch-api needs an OpenAI-compatible endpoint (--api-base and --model)")
    return config, config.api_base


def _replayed(judge: Callable[..., Any], engine: _ReplayEngine, result: Reply, inputs: dict[str, Any],
              tracker: UsageTotals | None) -> Verdict:
    """The verdict of a batch answer `result`, replayed into `judge` (on `engine`) through the one online code
    path; its usage goes to `tracker` (when given)."""
    import dspy

    engine.reply = result
    extra = dict(inputs)
    try:
        with dspy.context(usage_tracker=tracker) if tracker is not None else contextlib.nullcontext():
            return judge_verdict(judge, extra.pop("trajectory"), RetryPolicy(max_retries=0), **extra)
    finally:
        engine.reply = None
