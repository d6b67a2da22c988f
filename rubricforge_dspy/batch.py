"""Judge a stream of trajectories into an append-only JSONL of verdicts: bounded memory, retries,
a verdict cache, and resume after any kill.

`judge_stream` pulls trajectories lazily and keeps at most ``2 * concurrency`` of them in flight.
Worker threads call the judge; the calling thread alone writes the output (one JSON line per
trajectory id, in completion order, each line a single unbuffered ``write``), so a SIGKILL at
any moment leaves complete lines plus at most one partial final line. On start, the existing
output is read, a partial final line is truncated away, and ids already there are skipped:
re-running the same command after a kill ends with exactly one line per id.

Output line (one JSON object per trajectory):
    id, task_id, domain, agent, n_steps,            -- what was judged
    passed, score, reason, abstained, error,        -- the verdict (abstained => passed is False)
    error_kind,                                     -- timeout|connection|http_5xx|http_4xx|parse|other|null
    cached, attempts,                               -- served by the verdict cache; LM calls made
    label, reward,                                  -- for evaluation only: never shown to the judge
    program_sha256, model                           -- the judge's rubric sha256 and its LM's model name

Retries: the judge turns every failure into an abstention; an abstention whose error kind is
transient (timeout, connection, http_5xx, and HTTP 429) is retried up to `max_retries` times with
exponential backoff and jitter. Parse errors and other 4xx are not retried. After the last try the
abstention is kept, and counts as a fail.
"""

from __future__ import annotations

import contextvars
import logging
import os
import random
import re
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import dspy
import orjson

from rubricforge_dspy.cache import VerdictCache, open_cache, text_sha256
from rubricforge_dspy.render import render_trajectory
from rubricforge_dspy.rubric import rubric_sha256
from rubricforge_dspy.trajectory import Trajectory, TrajectoryFormatError

logger = logging.getLogger(__name__)

ERROR_KINDS = ("timeout", "connection", "http_5xx", "http_4xx", "parse", "other")
RETRYABLE_KINDS = frozenset({"timeout", "connection", "http_5xx"})
# Measured on ext4: a line write ~0.5 us, an fsync 0.2-4 ms. A SIGKILL loses nothing that was
# written (the page cache survives the process); fsync only guards against an OS crash, where at
# most `fsync_every` lines are re-judged on resume. Per-line fsync costs <1% at LM speed but cuts a
# cache replay from ~5,000 to ~250 lines/s; every 16 lines keeps ~2,700/s.
DEFAULT_FSYNC_EVERY = 16

_KIND_PATTERNS = (
    ("timeout", r"timeout|timed out"),
    ("connection", r"connection error|connectionerror|connecterror|connection refused|connection reset|"
                   r"connection aborted|server disconnected|remoteprotocolerror|lmtransporterror|"
                   r"name or service not known|network is unreachable"),
    ("http_5xx", r"lmservererror|internalservererror|serviceunavailable|badgateway|"
                 r"\b(http|status|status_code|error code)[ :=]*5\d\d\b"),
    ("http_4xx", r"lmratelimiterror|ratelimit|lminvalidrequesterror|badrequest|lmautherror|authentication|"
                 r"permissiondenied|notfounderror|lmbillingerror|contextwindowexceeded|unprocessableentity|"
                 r"lmunsupportedmodelerror|\b(http|status|status_code|error code)[ :=]*4\d\d\b"),
    ("parse", r"adapterparseerror|jsondecodeerror|validationerror|not a boolean|not finite|"
              r"could not convert|cannot be serialized|failed to parse|parse"),
)
_RATE_LIMIT = re.compile(r"ratelimit|\b429\b", re.IGNORECASE)


# DSPy's normalized LM errors, by the class name the judge records first ("LMServerError: ...").
_KIND_BY_TYPE = {
    "LMTimeoutError": "timeout", "TimeoutError": "timeout", "APITimeoutError": "timeout",
    "LMTransportError": "connection", "APIConnectionError": "connection", "ConnectionError": "connection",
    "ConnectionRefusedError": "connection", "ConnectionResetError": "connection",
    "LMRateLimitError": "http_4xx", "LMInvalidRequestError": "http_4xx", "LMAuthError": "http_4xx",
    "LMBillingError": "http_4xx", "ContextWindowExceededError": "http_4xx", "LMUnsupportedModelError": "http_4xx",
    "AdapterParseError": "parse", "JSONDecodeError": "parse", "ValidationError": "parse",
}


def classify_error(error: str | BaseException | None) -> str | None:
    """The kind of an abstention's error: one of `ERROR_KINDS`, or None for no error.

    The judge records errors as ``"<ExceptionClass>: <message>"``; known DSPy/httpx classes decide
    first, then the message is matched (an LMServerError saying "Connection error" is a connection
    error; "HTTP 503" is http_5xx; ...)."""
    if error is None or error == "":
        return None
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    kind = _KIND_BY_TYPE.get(text.split(":", 1)[0].strip().rsplit(".", 1)[-1])
    if kind is not None:
        return kind
    for kind, pattern in _KIND_PATTERNS:
        if re.search(pattern, text, re.IGNORECASE):
            return kind
    return "other"


def is_retryable(kind: str | None, error: str | None = None) -> bool:
    """Transient errors are retried: timeouts, connection errors, HTTP 5xx, and HTTP 429."""
    return kind in RETRYABLE_KINDS or (kind == "http_4xx" and bool(_RATE_LIMIT.search(error or "")))


class BatchOutputError(ValueError):
    """The output file cannot be resumed (not ours, corrupted, or written by another program/model)."""


class DuplicateIdError(TrajectoryFormatError):
    """Two input trajectories share an id; the message names the file and record of the second."""


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
    abstained: Counter = field(default_factory=Counter)
    cached: int = 0
    resumed: int = 0
    duplicates: int = 0
    skipped: int = 0
    lm_calls: int = 0
    retries: int = 0
    repaired_bytes: int = 0
    tokens: dict | None = None
    wall_time: float = 0.0
    program_sha256: str | None = None
    model: str | None = None

    @property
    def n_abstained(self) -> int:
        return sum(self.abstained.values())

    @property
    def throughput(self) -> float:
        """Verdict lines written per second of wall time."""
        return self.judged / self.wall_time if self.wall_time > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "out_path": self.out_path, "judged": self.judged, "passed": self.passed,
            "abstained": dict(self.abstained), "n_abstained": self.n_abstained, "cached": self.cached,
            "resumed": self.resumed, "duplicates": self.duplicates, "skipped": self.skipped,
            "lm_calls": self.lm_calls, "retries": self.retries, "repaired_bytes": self.repaired_bytes,
            "tokens": self.tokens, "wall_time": round(self.wall_time, 3),
            "throughput": round(self.throughput, 3), "program_sha256": self.program_sha256, "model": self.model,
        }

    def format(self) -> str:
        kinds = " ".join(f"{k}={v}" for k, v in sorted(self.abstained.items()))
        abstained = f"{self.n_abstained}" + (f" ({kinds})" if kinds else "")
        lines = [
            f"judged {self.judged}: passed {self.passed}, failed {self.judged - self.passed}, "
            f"abstained {abstained}",
            f"cached {self.cached} | resumed {self.resumed} | duplicates {self.duplicates} | "
            f"loader skipped {self.skipped} | LM calls {self.lm_calls} (retries {self.retries})",
        ]
        if self.tokens:
            lines.append(f"tokens: prompt {self.tokens.get('prompt_tokens', 0):,} "
                         f"completion {self.tokens.get('completion_tokens', 0):,}")
        lines.append(f"{self.wall_time:.1f}s, {self.throughput:.2f} verdicts/s -> {self.out_path}")
        return "\n".join(lines)


class UsageTotals:
    """A DSPy usage tracker (`dspy.context(usage_tracker=...)`) that keeps running sums only,
    so memory does not grow with the number of calls. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.seen = False

    def add_usage(self, lm: str, usage) -> None:
        if not usage:
            return
        if not isinstance(usage, dict):
            usage = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
        with self._lock:
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
            self.seen = True

    def totals(self) -> dict | None:
        if not self.seen:
            return None
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


# -- resume ----------------------------------------------------------------------------------------

@dataclass
class ResumeState:
    ids: set
    repaired_bytes: int = 0
    programs: set = field(default_factory=set)
    models: set = field(default_factory=set)


def read_done(out_path, repair: bool = True) -> ResumeState:
    """Ids already judged in `out_path`. A final line without its newline (a kill mid-write) is
    truncated away when `repair` is true; any other unreadable line raises `BatchOutputError`."""
    path = Path(out_path)
    state = ResumeState(ids=set())
    if not path.exists():
        return state
    good_end = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.endswith(b"\n"):
                state.repaired_bytes = len(raw)
                break
            if raw.strip():
                try:
                    record = orjson.loads(raw)
                    verdict_id = record["id"]
                except (orjson.JSONDecodeError, KeyError, TypeError) as error:
                    raise BatchOutputError(f"{path}, line {number}: not a verdict line ({error}); "
                                           "refusing to append to it") from error
                state.ids.add(str(verdict_id))
                state.programs.add(record.get("program_sha256"))
                state.models.add(record.get("model"))
            good_end += len(raw)
    if state.repaired_bytes and repair:
        os.truncate(path, good_end)
    return state


# -- the judge and its LM --------------------------------------------------------------------------

def _predictors(judge) -> list:
    return judge.predictors() if hasattr(judge, "predictors") else []


def resolve_lm(judge, lm=None):
    """The LM the judge will call: `lm`, else its predictors' LM, else `dspy.settings.lm`."""
    if lm is not None:
        return lm
    for predictor in _predictors(judge):
        if getattr(predictor, "lm", None) is not None:
            return predictor.lm
    return dspy.settings.lm


def program_hash(judge) -> str | None:
    """The judge's program hash (rubric sha256, with its demos if any), or None for a judge without a rubric."""
    if hasattr(judge, "program_sha256"):
        return judge.program_sha256
    rubric = getattr(judge, "rubric", None)
    if rubric is not None:
        return rubric_sha256(rubric)
    manifest = getattr(judge, "manifest", None) or {}
    return manifest.get("rubric_sha256")


def batch_lm(lm, timeout: float | None = None, **overrides):
    """A copy of `lm` with `overrides` (e.g. ``cache``, ``num_retries``) and a per-call `timeout`.

    Where the timeout goes: an LM with a custom engine that saves its settings (like
    `rubricforge_dspy.lm.ChatCompletionsEngine`, whose state has ``timeout``) gets a new engine;
    an LM on DSPy's own engines gets ``timeout=``; an engine that cannot take one keeps its own
    (logged). The caller's LM is never modified."""
    if not isinstance(lm, dspy.BaseLM):
        return lm
    if timeout is not None:
        engine = getattr(lm, "_engine_spec", "auto")
        if isinstance(engine, str):
            overrides["timeout"] = timeout
        elif hasattr(engine, "dump_state") and hasattr(type(engine), "load_state") \
                and "timeout" in (state := engine.dump_state()) and isinstance(lm, dspy.LM):
            overrides["engine"] = type(engine).load_state({**state, "timeout": timeout})
        else:
            logger.warning("%s: its engine takes no per-call timeout; keeping the engine's own",
                           getattr(lm, "model", lm))
    return lm.copy(**overrides) if overrides else lm


def _batch_judge(judge, lm, timeout: float | None, overrides: dict):
    """A copy of `judge` bound to `batch_lm(lm, timeout, **overrides)`; the caller's judge and LM
    are left untouched."""
    if lm is None or not _predictors(judge):
        return judge, lm
    lm = batch_lm(lm, timeout, **overrides)
    judge = judge.deepcopy() if hasattr(judge, "deepcopy") else judge
    judge.set_lm(lm)
    return judge, lm


def _render(judge, trajectory: Trajectory) -> str:
    render = getattr(judge, "render", None)
    return render(trajectory) if render is not None else render_trajectory(trajectory)


# -- one verdict -----------------------------------------------------------------------------------

@dataclass
class _Outcome:
    passed: bool
    score: float
    reason: str
    abstained: bool
    error: str | None
    error_kind: str | None
    attempts: int


def _backoff_delay(base: float, attempt: int, cap: float) -> float:
    """Exponential backoff with full jitter: uniform in [delay/2, delay], delay = base * 2**attempt."""
    delay = min(cap, base * (2 ** attempt))
    return delay * (0.5 + random.random() / 2)


def _judge_one(judge, text: str, max_retries: int, backoff: float, max_backoff: float,
               tracker: UsageTotals, stop: threading.Event) -> _Outcome:
    attempts = 0
    # No LM history and no DSPy trace: both would keep every prompt (up to 10,000 of them).
    with dspy.context(usage_tracker=tracker, disable_history=True, trace=None):
        while True:
            attempts += 1
            try:
                prediction = judge(trajectory=text)
                abstained = bool(getattr(prediction, "abstained", False))
                error = getattr(prediction, "error", None)
            except Exception as exc:  # noqa: BLE001 - a judge that breaks its contract still must not stop a batch
                prediction, abstained, error = None, True, f"{type(exc).__name__}: {exc}"
            kind = classify_error(error) if abstained else None
            if abstained and kind is None:
                kind = "other"
            if (not abstained or attempts > max_retries or not is_retryable(kind, error)
                    or stop.wait(_backoff_delay(backoff, attempts - 1, max_backoff))):
                break
    if abstained:
        return _Outcome(False, 0.0, "", True, str(error), kind, attempts)
    return _Outcome(bool(prediction.passed), float(prediction.score), str(prediction.reason or ""),
                    False, None, None, attempts)


def _line(trajectory: Trajectory, outcome: _Outcome, cached: bool, program: str | None,
          model: str | None) -> dict:
    return {
        "id": trajectory.id, "task_id": trajectory.task_id, "domain": trajectory.domain,
        "agent": trajectory.agent, "n_steps": len(trajectory.steps),
        "passed": outcome.passed and not outcome.abstained, "score": outcome.score,
        "reason": outcome.reason, "abstained": outcome.abstained, "error": outcome.error,
        "error_kind": outcome.error_kind, "cached": cached, "attempts": outcome.attempts,
        "label": trajectory.label, "reward": trajectory.reward,
        "program_sha256": program, "model": model,
    }


# -- the batch -------------------------------------------------------------------------------------

class _Writer:
    """Appends verdict lines: one unbuffered write per line, fsync every `fsync_every` lines."""

    def __init__(self, path: Path, fsync_every: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fsync_every = fsync_every
        self._unsynced = 0

    def write(self, record: dict) -> None:
        data = orjson.dumps(record) + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self._unsynced += 1
        if self._fsync_every and self._unsynced >= self._fsync_every:
            os.fsync(self._fd)
            self._unsynced = 0

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)


def judge_stream(judge, trajectories: Iterable[Trajectory], out_path, *, concurrency: int = 4,
                 max_retries: int = 2, backoff: float = 0.5, max_backoff: float = 8.0,
                 timeout: float | None = None, cache=None, lm=None, progress: bool = True,
                 limit: int | None = None, on_duplicate: str = "raise", fsync_every: int = DEFAULT_FSYNC_EVERY,
                 dspy_cache: bool | None = None) -> BatchSummary:
    """Judge `trajectories` (any iterable, consumed lazily) into the JSONL `out_path`; resumable.

    concurrency: worker threads; at most ``2 * concurrency`` trajectories are held at once.
    max_retries, backoff, max_backoff: retries of transient abstentions, ``backoff * 2**k`` seconds
        (with jitter, capped at `max_backoff`).
    timeout: per-call LM timeout in seconds (None keeps the LM's own). The batch owns retries: the
        batch copy of the LM gets ``num_retries=0`` so each attempt is one bounded request.
    cache: None/False, True (``.rubricforge_cache/`` next to `out_path`), a directory, or a
        `VerdictCache`. Cache hits cost no LM call; abstentions are never cached.
    lm: the LM to judge with (default: the judge's own, else `dspy.settings.lm`).
    limit: consider only the first `limit` distinct input ids (resumed ones included), so re-running
        with the same limit resumes the same slice.
    on_duplicate: "raise" (`DuplicateIdError` naming the file and record) or "skip" (counted).
    fsync_every: fsync the output every N lines (0: only at the end); each line is written with one
        unbuffered write, which is all a SIGKILL needs.
    dspy_cache: DSPy's own response cache for the batch LM; None = off when a verdict cache is used
        (so the verdict cache is the source of truth), else as the LM is configured.
    """
    if on_duplicate not in ("raise", "skip"):
        raise ValueError(f"on_duplicate must be 'raise' or 'skip', got {on_duplicate!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    started = time.perf_counter()
    out_path = Path(out_path)
    use_cache = cache is not None and cache is not False

    base_lm = resolve_lm(judge, lm)
    overrides = {"num_retries": 0}
    if dspy_cache is None and use_cache:
        dspy_cache = False
    if dspy_cache is not None:
        overrides["cache"] = dspy_cache
    batch_judge, the_lm = _batch_judge(judge, base_lm, timeout, overrides)
    program = program_hash(judge)
    model = getattr(the_lm, "model", None)
    if the_lm is None and _predictors(judge):
        raise ValueError("no LM to judge with: pass lm=..., call judge.set_lm(...), or dspy.configure(lm=...)")

    done = read_done(out_path)
    foreign = {p for p in done.programs if p != program} | {m for m in done.models if m != model}
    if done.ids and foreign:
        raise BatchOutputError(
            f"{out_path}: holds verdicts of another program or model ({sorted(map(str, foreign))}); "
            f"this run is program {program} with model {model}. Use a new output path.")

    verdict_cache: VerdictCache | None = open_cache(cache, out_path)
    owns_cache = verdict_cache is not None and not isinstance(cache, VerdictCache)
    summary = BatchSummary(out_path=str(out_path), repaired_bytes=done.repaired_bytes,
                           program_sha256=program, model=model)
    tracker = UsageTotals()
    stop = threading.Event()
    writer = _Writer(out_path, fsync_every)
    bar = _progress_bar(progress, limit)
    window = 2 * concurrency
    pending: dict = {}

    def record(trajectory: Trajectory, outcome: _Outcome, cached: bool, text_hash: str | None) -> None:
        writer.write(_line(trajectory, outcome, cached, program, model))
        summary.judged += 1
        summary.passed += outcome.passed and not outcome.abstained
        summary.cached += cached
        if outcome.abstained:
            summary.abstained[outcome.error_kind or "other"] += 1
        elif verdict_cache is not None and not cached and text_hash is not None:
            verdict_cache.put(program or "", model, text_hash, outcome.__dict__)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(abstained=summary.n_abstained, cached=summary.cached, resumed=summary.resumed,
                            refresh=False)

    def collect(futures) -> None:
        for future in futures:
            trajectory, text_hash = pending.pop(future)
            outcome = future.result()
            summary.lm_calls += outcome.attempts
            summary.retries += outcome.attempts - 1
            record(trajectory, outcome, False, text_hash)

    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rubricforge-judge")
    interrupted = False
    try:
        for trajectory in _distinct(trajectories, limit, on_duplicate, summary):
            if trajectory.id in done.ids:
                summary.resumed += 1
                continue
            text = _render(batch_judge, trajectory)
            text_hash = text_sha256(text) if verdict_cache is not None else None
            hit = verdict_cache.get(program or "", model, text_hash) if verdict_cache is not None else None
            if hit is not None:
                record(trajectory, _Outcome(hit["passed"], hit["score"], hit["reason"], False, None, None, 0),
                       True, text_hash)
                continue
            context = contextvars.copy_context()
            future = pool.submit(context.run, _judge_one, batch_judge, text, max_retries, backoff,
                                 max_backoff, tracker, stop)
            pending[future] = (trajectory, text_hash)
            if len(pending) >= window:
                finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                collect(finished)
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            collect(finished)
    except Exception:
        # A bad input record or a duplicate id: finish and keep the verdicts in flight, then raise.
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            collect(finished)
        raise
    except BaseException:
        # Ctrl-C and the like: keep what finished, never wait on in-flight calls (a re-run resumes them).
        interrupted = True
        stop.set()
        collect([f for f in list(pending) if f.done() and not f.cancelled() and f.exception() is None])
        raise
    finally:
        pool.shutdown(wait=not interrupted, cancel_futures=True)
        writer.close()
        if bar is not None:
            bar.close()
        if owns_cache:
            verdict_cache.close()
        summary.tokens = tracker.totals()
        summary.wall_time = time.perf_counter() - started
    return summary


def _distinct(trajectories: Iterable[Trajectory], limit: int | None, on_duplicate: str,
              summary: BatchSummary) -> Iterator[Trajectory]:
    """The first `limit` distinct ids of `trajectories`, lazily; duplicates raise or are counted."""
    seen: set[str] = set()
    for trajectory in trajectories:
        if limit is not None and len(seen) >= limit:
            return
        if trajectory.id in seen:
            if on_duplicate == "raise":
                raise DuplicateIdError(trajectory.source.file, trajectory.source.index,
                                       f"duplicate trajectory id {trajectory.id!r}")
            summary.duplicates += 1
            continue
        seen.add(trajectory.id)
        yield trajectory


def _progress_bar(enabled: bool, total: int | None):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="verdict", desc="judging", dynamic_ncols=True, smoothing=0.1)


# -- the Python API behind `rubricforge judge` ----------------------------------------------------

def _load_judge(program):
    from rubricforge_dspy.judge import TrajectoryJudge

    if program is None:
        return TrajectoryJudge()
    if isinstance(program, (str, os.PathLike)):
        from rubricforge_dspy.program import load

        return load(program)
    return program


def _as_lm(lm):
    from rubricforge_dspy.lm import LMConfig, make_lm

    return make_lm(lm) if isinstance(lm, LMConfig) else lm


def run_judge_file(program=None, data_path=None, out_path=None, *, limit: int | None = None, lm=None,
                   concurrency: int = 4, on_error: str = "raise", on_duplicate: str | None = None,
                   format: str = "auto", label_threshold: float = 0.0, cache=True,
                   max_retries: int = 2, backoff: float = 0.5, timeout: float | None = None,
                   progress: bool = True, fsync_every: int = DEFAULT_FSYNC_EVERY) -> BatchSummary:
    """Judge the trajectory file `data_path` into `out_path` (resumable); returns the summary.

    program: a frozen program path, a judge, or None for the seed judge. lm: a `dspy.LM` or an
    `LMConfig` (default: the program's LM, else `dspy.settings.lm`). on_error: the loader's policy
    for bad records ("raise" or "skip"; skipped records are counted in `summary.skipped`).
    on_duplicate: defaults to "skip" when on_error is "skip", else "raise". cache: see `judge_stream`
    (default: ``.rubricforge_cache/`` next to `out_path`).
    """
    if data_path is None or out_path is None:
        raise ValueError("run_judge_file needs data_path and out_path")
    from rubricforge_dspy.loaders import LoadReport, iter_trajectories

    judge = _load_judge(program)
    report = LoadReport()
    stream = iter_trajectories(data_path, format=format, label_threshold=label_threshold,
                               on_error=on_error, report=report)
    summary = judge_stream(judge, stream, out_path, concurrency=concurrency, max_retries=max_retries,
                           backoff=backoff, timeout=timeout, cache=cache, lm=_as_lm(lm), progress=progress,
                           limit=limit, on_duplicate=on_duplicate or ("skip" if on_error == "skip" else "raise"),
                           fsync_every=fsync_every)
    skipped = getattr(report, "skipped", 0)
    summary.skipped = len(skipped) if isinstance(skipped, (list, tuple, set)) else int(skipped or 0)
    return summary
