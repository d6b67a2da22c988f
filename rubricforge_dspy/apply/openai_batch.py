"""Judge a trajectory file through the OpenAI Batch API (``/v1/files`` + ``/v1/batches``): `BatchCalls`, the Batch API
back end of the one job runner, and `run_batch_api`, a plain judge's run with it.

Every run through the Batch API, a plain program or a cascade, is a run of the one job runner
(`apply.stream.run_judge_file` with ``calls=BatchCalls(...)``): the input checked (and a plain judge's items
spilled) before anything is submitted, the labels joined, the verdict cache, resume, the circuit-free tally and
the writer (`apply.writer.VerdictWriter`: evidence and tokens on every line) of a local run, the same
``OUT.job.json``. Only an LLM stage's calls go to the Batch API: one batch input line per item asked::

    {"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

The body is the exact request online judging sends, byte for byte: the judge is called on the online
LM inside `lm.engine.capture_request`, where its `ChatCompletionsEngine` raises the body it would post
(`RequestCaptured`) instead of posting it, the one capture the fast path uses too; each line is written
with `lm.engine.encode_body`'s encoder. Results come back through an engine that replays each answer (or
its HTTP status) into the judge, so parsing, truncation (finish reason ``length``), contradictions, error kinds
and the answer's ``usage`` (the line's ``tokens``) follow the one online code path (`execution.judge_verdict`).

Resume: for a plain judge's run (`run_batch_api`, ``BatchCalls(out_path=OUT)``), ``OUT.batch.json`` holds the
batch id, its input file id and the request -> trajectory id map; it is written (atomically) right after the
batch is created and before any poll, so re-running the same command after a kill resumes polling that batch
instead of submitting another. A batch that fails, expires or is cancelled as a whole raises `BatchJobFailed`
(after keeping whatever results it has); the state file is removed so the next run submits the rest again. A
cascade's stages record no pending batch: a run killed while a stage's batch is pending submits that stage's
requests again (the lines and the cache keep everything answered before).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import httpx
import orjson
import tenacity

from rubricforge_dspy.apply.job import replace_file
from rubricforge_dspy.apply.options import JobOptions, job_options
from rubricforge_dspy.apply.summary import BatchSummary
from rubricforge_dspy.core.errors import InputError, ServerError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import ChatCompletionsEngine, RequestCaptured, capture_request, http_error
from rubricforge_dspy.lm.errors import is_transient
from rubricforge_dspy.lm.truncation import check_finish

if TYPE_CHECKING:
    import dspy
    from dspy import lm15

    from rubricforge_dspy.apply.stage_calls import Jobs, RunItem, Stage
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

    A run of the one job runner (`apply.stream.run_judge_file` with ``calls=BatchCalls(..., out_path=out_path)``):
    the input checked and spilled once before anything is submitted, the labels joined, the verdict cache, resume,
    the writer and the tally of a local run; the pending batch recorded in ``OUT.batch.json``.

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
    from rubricforge_dspy.apply.stream import run_judge_file

    options = job_options(options, overrides, _BATCH_OPTIONS)
    options.refuse_budget("a Batch API run (run_batch_api)")
    if on_status is None and options.progress:
        def on_status(line: str) -> None:
            logger.info("%s", line)
    calls = BatchCalls(poll_interval, max_poll_interval, on_status, out_path=out_path)
    summary = run_judge_file(judge, data_path, out_path, options, lm=lm, format=format,
                             label_threshold=label_threshold, on_error=on_error, load_report=load_report,
                             labels=labels, on_trajectory=on_trajectory, calls=calls)
    return calls.summary_of(summary)


class BatchCalls:
    """The Batch API's calls of one stage of the job runner (`apply.runner.StageCalls`; a plain judge's one stage
    or a cascade's LLM stage): the items as one batch of the requests online judging sends (`batch_request`),
    polled until it ends, each answer replayed into the stage's judge (`_ReplayEngine`, `execution.judge_verdict`;
    the answer's ``usage`` on the item's tracker: the line's ``tokens``) in the order the items came. A batch that
    fails, expires or is cancelled raises `BatchJobFailed` once the answers it has are kept.

    With `out_path` (a plain judge's run, `run_batch_api`), the batch input is written beside it
    (``OUT.batch_input.jsonl``) and the pending batch recorded in ``OUT.batch.json`` (atomically, before any
    poll): a run killed while it is pending resumes polling it (its ids that are still to judge), and asks the
    rest in a new batch; the file is removed once the batch's answers are collected. Without it (a cascade's
    stages), a run killed while a batch is pending asks those requests again.

    Args:
        poll_interval: the first wait between polls, in seconds; it doubles up to `max_poll_interval`.
        max_poll_interval: see `poll_interval`.
        on_status: called with each poll's status line.
        out_path: the run's verdict file (see above), or None.

    Attributes:
        batch_id, batch_status: the last batch's id and final status; submitted: the requests of this run's
            batches; request_errors: answers that were an error (abstained); resumed_batch: a pending batch was
            resumed.
    """

    def __init__(self, poll_interval: float = 2.0, max_poll_interval: float = 60.0,
                 on_status: Callable[[str], None] | None = None, *, out_path: PathArg | None = None) -> None:
        self.poll_interval, self.max_poll_interval, self.on_status = poll_interval, max_poll_interval, on_status
        self.out_path = None if out_path is None else Path(out_path)
        self.batch_id: str | None = None
        self.batch_status: str | None = None
        self.submitted = self.request_errors = 0
        self.resumed_batch = False

    def summary_of(self, summary: BatchSummary) -> BatchApiSummary:
        """The run's `BatchSummary` with this back end's batches (`BatchApiSummary`)."""
        fields = {f.name: getattr(summary, f.name) for f in dataclasses.fields(BatchSummary)}
        return BatchApiSummary(**fields, batch_id=self.batch_id, batch_status=self.batch_status,
                               submitted=self.submitted, request_errors=self.request_errors,
                               resumed_batch=self.resumed_batch)

    def run(self, stage: Stage, jobs: Jobs, collect: Callable[[RunItem, Verdict], None], check: Callable[[], None],
            tracker_of: Callable[[RunItem], UsageTotals | None] | None = None) -> bool:
        """Submit the ``(item, inputs)`` of `jobs` as one batch (a pending batch of `out_path` first) and
        `collect(item, verdict)` each answer (`apply.runner.LocalCalls.run`'s contract; the circuit is not
        consulted: the provider schedules).

        Raises:
            InputError: the stage's LM has no OpenAI-compatible endpoint.
            BatchJobFailed: a batch did not complete (its answers are collected first), or a pending batch belongs
                to another judge configuration.
            ServerError: the Batch API cannot be reached.
        """
        config, api_base = _endpoint_config(stage.lm)
        todo = {item.trajectory.id: (item, inputs) for item, inputs in jobs}
        state_file = None if self.out_path is None else state_path(self.out_path)
        mine: dict[str, tuple[RunItem, dict[str, Any]]] = {}  # the pending batch's requests still to judge
        pending: str | None = None
        if state_file is not None and state_file.exists():
            state = json.loads(state_file.read_text())
            if state.get("judge_fingerprint") != stage.fingerprint:
                raise BatchJobFailed(f"{state_file}: a pending batch of another judge configuration; delete it "
                                     "(and cancel batch " + str(state.get("batch_id")) + ") or use another --out")
            pending = str(state["batch_id"])
            mine = {cid: todo.pop(tid) for cid, tid in state["requests"].items() if tid in todo}
            if not mine:
                state_file.unlink()  # every one of its ids is judged already: nothing to wait for
        if not mine and not todo:
            return False
        client = BatchClient(api_base, config.api_key)
        try:
            if mine and pending is not None:  # resume polling it
                self.resumed_batch = True
                self._finish(client, stage, config, pending, mine, collect, tracker_of)
            if todo:
                requests = {f"r{k}": job for k, job in enumerate(todo.values())}
                batch_id = self._submit(client, stage, requests)
                self._finish(client, stage, config, batch_id, requests, collect, tracker_of)
        finally:
            client.close()
        return False

    def _submit(self, client: BatchClient, stage: Stage, requests: dict[str, tuple[RunItem, dict[str, Any]]]) -> str:
        """Upload the requests, create the batch and (with `out_path`) record it before any poll; its id."""
        lines = [orjson.dumps({"custom_id": cid, "method": "POST", "url": ENDPOINT,
                               "body": batch_request(stage.judge, inputs)}) for cid, (_, inputs) in requests.items()]
        data = b"\n".join(lines) + b"\n"
        name = f"rubricforge-stage-{stage.index}.jsonl"
        if self.out_path is not None:
            input_path = self.out_path.with_name(self.out_path.name + ".batch_input.jsonl")
            input_path.write_bytes(data)
            name = input_path.name
        uploaded = client.upload(data, name)
        metadata = ({"rubricforge_out": self.out_path.name} if self.out_path is not None
                    else {"rubricforge_stage": str(stage.name)})
        batch = client.create(uploaded["id"], metadata)
        if self.out_path is not None:
            _write_json_atomic(state_path(self.out_path), {
                "batch_id": batch["id"], "input_file_id": uploaded["id"], "judge_fingerprint": stage.fingerprint,
                "requests": {cid: item.trajectory.id for cid, (item, _) in requests.items()}})
        batch_id: str = batch["id"]
        return batch_id

    def _finish(self, client: BatchClient, stage: Stage, config: LMConfig, batch_id: str,
                requests: dict[str, tuple[RunItem, dict[str, Any]]], collect: Callable[[RunItem, Verdict], None],
                tracker_of: Callable[[RunItem], UsageTotals | None] | None) -> None:
        """Poll the batch until it ends, replay and `collect` the answer of each of `requests` in their order, and
        forget the batch (`OUT.batch.json`); `BatchJobFailed` when it did not complete."""
        batch = poll(client, batch_id, self.poll_interval, self.max_poll_interval, self.on_status)
        results = _results(client, batch)
        self.batch_id, self.batch_status = batch_id, batch.get("status")
        self.submitted += len(requests)
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
                self.request_errors += 1
            else:
                tracker = tracker_of(item) if tracker_of is not None else None
                verdict = _replayed(replay, engine, result, inputs, tracker)
                self.request_errors += result[0] != 200
            collect(item, verdict)
        if self.out_path is not None:
            state_path(self.out_path).unlink(missing_ok=True)
        if failed_whole:
            errors = (batch.get("errors") or {}).get("data") or []
            where = "" if stage.name is None else f" (stage {stage.name!r})"
            raise BatchJobFailed(f"batch {batch_id}{where} ended {batch.get('status')!r}"
                                 f"{': ' + json.dumps(errors)[:300] if errors else ''}; the answers it has are kept. "
                                 "Re-run the same command to ask the rest in a new batch.")


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
