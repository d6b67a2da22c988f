"""Judge a trajectory file through the OpenAI Batch API (``/v1/files`` + ``/v1/batches``).

`run_batch_api` writes one batch input line per trajectory not yet in ``OUT``::

    {"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

The body is the exact request online judging sends: the judge is called with an engine that captures
the request its `ChatCompletionsEngine` would post instead of posting it. Results come back through
the same engine, replaying each answer (or its HTTP status) into the judge, so parsing, truncation
(finish reason ``length``), contradictions and error kinds follow the one online code path
(`execution.judge_verdict`). Verdict lines, ``OUT.job.json`` (ownership and fingerprint) and the
verdict cache are those of `rubricforge_dspy.apply.stream`.

Resume: ``OUT.batch.json`` holds the batch id, its input file id and the request -> trajectory id
map; it is written (atomically) right after the batch is created and before any poll, so re-running
the same command after a kill resumes polling that batch instead of submitting another. A batch that
fails, expires or is cancelled as a whole raises `BatchJobFailed` (after keeping whatever results it
has); the state file is removed so the next run submits the rest again.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import tenacity
from dspy.utils.exceptions import LMError

from rubricforge_dspy.apply.stream import BatchSummary
from rubricforge_dspy.apply.job import checked_input, claim_output, output_lock, read_done
from rubricforge_dspy.judge.cache import VerdictCache, input_sha256, open_cache
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.lm.copies import one_attempt_lm, resolve_lm
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.lm.engine import ChatCompletionsEngine, http_error
from rubricforge_dspy.lm.truncation import check_finish
from rubricforge_dspy.lm.errors import is_transient
from rubricforge_dspy.core.errors import InputError, RubricForgeError, ServerError
from rubricforge_dspy.core.verdict import Verdict, verdict_line

STATE_SUFFIX = ".batch.json"
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
ENDPOINT = "/v1/chat/completions"


class BatchJobFailed(ServerError):
    """The batch failed, expired or was cancelled as a whole (or a pending batch belongs to another judge
    configuration); the message says which and what to do. The command line exits 3."""


class CapturedRequest(LMError, RubricForgeError):
    """Raised by `BatchEngine` in capture mode: carries the chat request body instead of sending it
    (control flow inside `run_batch_api`; never escapes it)."""

    def __init__(self, body: dict):
        super().__init__("request captured for the Batch API")
        self.body = body


class BatchEngine(ChatCompletionsEngine):
    """A `ChatCompletionsEngine` that never posts: with no `reply` set it raises `CapturedRequest`
    holding the body it would send; with ``reply = (status_code, payload)`` it answers as if the server
    had returned that (an HTTP error for a status >= 400, a completion otherwise)."""

    def __init__(self, config):
        super().__init__(config)
        self.reply: tuple[int, dict] | None = None

    def complete(self, request):
        from dspy import lm15

        if self.reply is None:
            raise CapturedRequest(self.body(request))
        status, payload = self.reply
        if status >= 400:
            raise http_error(status, json.dumps(payload)[:500], None, "batch " + self.url)
        return check_finish(lm15.response_from_openai_chat(payload, model=request.model), "batch " + self.url,
                            request.model)


def state_path(out_path) -> Path:
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + STATE_SUFFIX)


def _write_json_atomic(path: Path, value: dict) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w") as handle:
        json.dump(value, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


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

    def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        def once():
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

    def upload(self, data: bytes, name: str) -> dict:
        return self._call("POST", "/files", data={"purpose": "batch"},
                          files={"file": (name, data, "application/jsonl")}).json()

    def create(self, input_file_id: str, metadata: dict | None = None) -> dict:
        return self._call("POST", "/batches", json={"input_file_id": input_file_id, "endpoint": ENDPOINT,
                                                    "completion_window": "24h", "metadata": metadata or {}}).json()

    def retrieve(self, batch_id: str) -> dict:
        return self._call("GET", f"/batches/{batch_id}").json()

    def content(self, file_id: str) -> bytes:
        return self._call("GET", f"/files/{file_id}/content").content

    def close(self) -> None:
        self.http.close()


@dataclass
class BatchApiSummary(BatchSummary):
    """A `BatchSummary` plus the batch: its id, final status, requests submitted, per-request errors."""

    batch_id: str | None = None
    batch_status: str | None = None
    submitted: int = 0
    request_errors: int = 0
    resumed_batch: bool = False

    def to_dict(self) -> dict:
        return {**super().to_dict(), "batch_id": self.batch_id, "batch_status": self.batch_status,
                "submitted": self.submitted, "request_errors": self.request_errors,
                "resumed_batch": self.resumed_batch}

    def format(self) -> str:
        head = (f"batch {self.batch_id or '-'} ({self.batch_status or 'nothing to submit'}"
                f"{', resumed' if self.resumed_batch else ''}): {self.submitted} requests, "
                f"{self.request_errors} per-request errors (abstained)")
        return head + "\n" + super().format()


def poll(client: BatchClient, batch_id: str, interval: float = 2.0, max_interval: float = 60.0,
         progress: bool = True) -> dict:
    """Poll until the batch leaves the active statuses; the wait doubles up to `max_interval`."""
    wait = interval
    while True:
        batch = client.retrieve(batch_id)
        status = batch.get("status")
        counts = batch.get("request_counts") or {}
        if progress:
            print(f"batch {batch_id}: {status} ({counts.get('completed', 0)}/{counts.get('total', '?')} done, "
                  f"{counts.get('failed', 0)} failed)", file=sys.stderr, flush=True)
        if status not in ACTIVE:
            return batch
        time.sleep(wait)
        wait = min(max_interval, wait * 2)


def _results(client: BatchClient, batch: dict) -> dict[str, tuple[int, dict] | str]:
    """custom_id -> (status_code, body) from the output file, or an error message from the error file."""
    found: dict = {}
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


def run_batch_api(judge, data_path, out_path, *, lm=None, format: str = "auto", label_threshold=None,
                  on_error: str = "raise", cache=True, poll_interval: float = 2.0, max_poll_interval: float = 60.0,
                  progress: bool = True, limit: int | None = None, load_report=None, labels=None,
                  on_trajectory=None) -> BatchApiSummary:
    """Judge `data_path` into `out_path` through the Batch API of `lm`'s endpoint; resumable (see module).
    labels: a `labels.LabelJoin` joined onto the stream (as `batch.run_judge_file` does); on_trajectory:
    called with every trajectory read (e.g. a `label_checks.LabelTally`). The output's lock
    (`rubricforge_dspy.apply.job.output_lock`) is held for the whole run: a second process on the same
    `out_path` raises `OutputLockedError`."""
    with output_lock(out_path):
        return _run_batch_api(judge, data_path, out_path, lm=lm, format=format, label_threshold=label_threshold,
                              on_error=on_error, cache=cache, poll_interval=poll_interval,
                              max_poll_interval=max_poll_interval, progress=progress, limit=limit,
                              load_report=load_report, labels=labels, on_trajectory=on_trajectory)


def _run_batch_api(judge, data_path, out_path, *, lm, format, label_threshold, on_error, cache, poll_interval,
                   max_poll_interval, progress, limit, load_report, labels, on_trajectory) -> BatchApiSummary:
    """`run_batch_api` with the output's lock held."""
    from rubricforge_dspy.data.formats import iter_trajectories
    from rubricforge_dspy.data.labels import LabelJoin

    started = time.perf_counter()
    out_path = Path(out_path)
    base_lm = resolve_lm(judge, lm)
    config = getattr(getattr(base_lm, "engine", None), "config", None)
    if config is None or not getattr(config, "api_base", None):
        raise InputError("--batch-api needs an OpenAI-compatible endpoint (--api-base and --model)")
    online = one_attempt_lm(base_lm)
    engine = BatchEngine(config)
    batch_judge = judge.deepcopy()
    batch_judge.set_lm(online.copy(engine=engine))
    online_judge = judge.deepcopy()
    online_judge.set_lm(online)
    fingerprint = judge_fingerprint(online_judge, online)  # the same job as online judging
    program, model = getattr(judge, "rubric_sha256", None), config.model
    paths = [data_path] if isinstance(data_path, (str, os.PathLike)) else list(data_path)
    # The whole input is checked (one streaming pass, ids only) before anything is submitted.
    scan, data = checked_input(paths, format=format, label_threshold=label_threshold, on_error=on_error, limit=limit,
                               labels=labels)
    done = read_done(out_path)
    claim_output(out_path, fingerprint, data, bool(done.ids))
    verdict_cache: VerdictCache | None = open_cache(cache, out_path)
    summary = BatchApiSummary(out_path=str(out_path), repaired_bytes=done.repaired_bytes, retried=done.retried,
                              program_sha256=program, judge_fingerprint=fingerprint.sha256, model=model)

    def trajectories(observe: bool):
        """The input again; `observe`: the one pass of this run that feeds the label join and the
        `on_trajectory` watcher (and the load report), so nothing is counted twice."""
        seen = set()
        report = load_report if observe else None
        joiner = labels if observe or labels is None else LabelJoin(labels.file, labels.rule)  # same labels, uncounted
        for t in iter_trajectories(data_path, format=format, label_threshold=label_threshold, on_error=on_error,
                                   report=report):
            if t.id in seen:
                summary.duplicates += 1
                continue
            if limit is not None and len(seen) >= limit:
                return
            seen.add(t.id)
            if joiner is not None:
                t = joiner.apply(t)
            if on_trajectory is not None and observe:
                on_trajectory(t)
            yield t

    def write(handle, trajectory, verdict: Verdict, cached: bool, inputs: dict) -> None:
        handle.write(json.dumps(verdict_line(trajectory, verdict, cached=cached, attempts=0 if cached else 1,
                                             judge_fingerprint=fingerprint.sha256, program_sha256=program,
                                             model=model)) + "\n")
        summary.count(verdict, cached)
        if not verdict.abstained and verdict_cache is not None and not cached:
            verdict_cache.put(fingerprint.sha256, input_sha256(inputs), verdict)

    client = BatchClient(config.api_base, config.api_key)
    state_file = state_path(out_path)
    try:
        state = json.loads(state_file.read_text()) if state_file.exists() else None
        if state is not None and state.get("judge_fingerprint") != fingerprint.sha256:
            raise BatchJobFailed(f"{state_file}: a pending batch of another judge configuration; delete it "
                                 "(and cancel batch " + str(state.get("batch_id")) + ") or use another --out")
        with out_path.open("a") as handle:
            if state is None:
                lines, requests = [], {}
                for trajectory in trajectories(observe=True):
                    if trajectory.id in done.ids:
                        summary.resumed += 1
                        continue
                    inputs = batch_judge.inputs_of(trajectory)
                    hit = verdict_cache.get(fingerprint.sha256, input_sha256(inputs)) if verdict_cache else None
                    if hit is not None:
                        write(handle, trajectory, hit, True, inputs)
                        continue
                    try:
                        batch_judge(**inputs)
                        raise RuntimeError("the judge answered without a request being captured")
                    except CapturedRequest as captured:
                        custom_id = f"r{len(requests)}"
                        requests[custom_id] = trajectory.id
                        lines.append(json.dumps({"custom_id": custom_id, "method": "POST", "url": ENDPOINT,
                                                 "body": captured.body}))
                if not requests:
                    summary.wall_time = time.perf_counter() - started
                    return summary
                input_path = out_path.with_name(out_path.name + ".batch_input.jsonl")
                input_path.write_text("\n".join(lines) + "\n")
                uploaded = client.upload(input_path.read_bytes(), input_path.name)
                batch = client.create(uploaded["id"], {"rubricforge_out": out_path.name})
                state = {"batch_id": batch["id"], "input_file_id": uploaded["id"], "requests": requests,
                         "judge_fingerprint": fingerprint.sha256, "data_fingerprint": data}
                _write_json_atomic(state_file, state)
            else:
                summary.resumed_batch = True
            summary.batch_id = state["batch_id"]
            summary.submitted = len(state["requests"])
            batch = poll(client, state["batch_id"], poll_interval, max_poll_interval, progress)
            summary.batch_status = batch.get("status")
            results = _results(client, batch)
            wanted = {tid: cid for cid, tid in state["requests"].items()}
            failed_whole = summary.batch_status != "completed"  # failed, expired, cancelled
            for trajectory in trajectories(observe=summary.resumed_batch):
                custom_id = wanted.get(trajectory.id)
                if custom_id is None or trajectory.id in done.ids:
                    continue
                result = results.get(custom_id)
                inputs = batch_judge.inputs_of(trajectory)
                if result is None:
                    if failed_whole:
                        continue  # never answered: submitted again by the next run
                    result = "batch request missing from the output and error files"
                if isinstance(result, str):
                    verdict = Verdict.abstention(result, "other")
                    summary.request_errors += 1
                else:
                    engine.reply = result
                    extra = dict(inputs)
                    verdict = judge_verdict(batch_judge, extra.pop("trajectory"), RetryPolicy(max_retries=0), **extra)
                    engine.reply = None
                    summary.request_errors += result[0] != 200
                summary.lm_calls += 1
                write(handle, trajectory, verdict, False, inputs)
                handle.flush()
        state_file.unlink(missing_ok=True)
        if failed_whole:
            errors = (batch.get("errors") or {}).get("data") or []
            raise BatchJobFailed(
                f"batch {summary.batch_id} ended {summary.batch_status!r}"
                f"{': ' + json.dumps(errors)[:300] if errors else ''}; kept {summary.judged} verdicts in {out_path}. "
                "Re-run the same command to submit the rest in a new batch.")
    finally:
        client.close()
        if verdict_cache is not None and not isinstance(cache, VerdictCache):
            verdict_cache.close()
        summary.wall_time = time.perf_counter() - started
    return summary
