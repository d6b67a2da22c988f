"""The execution layer: one function that turns a strict judge's call into a recorded `Verdict`.

`TrajectoryJudge` raises on anything that is not a verdict. Batch judging, the reward proxy and the
audit must instead record a fail and go on; `judge_verdict` (and its async twin `ajudge_verdict`, same
rules) does that, in one place, and returns the `Verdict` with the ``attempts`` it took:

- transient errors (timeout, connection, HTTP 5xx, HTTP 429) are retried with exponential backoff and
  full jitter (`tenacity`), decided by the exception's *type*, never by its message: the package's one
  rule, `rubricforge_dspy.lm.errors` (`error_kind`, `is_transient`);
- everything else, and the last failed attempt, becomes `Verdict.abstention(error, kind)`: a fail,
  marked abstained, with its error kind.

The LM the judge calls should make one attempt per call (``num_retries=0``, see
`rubricforge_dspy.lm.copies.one_attempt_lm`): retries live here.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import tenacity

from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.verdict import EvidenceRecord, Verdict
from rubricforge_dspy.lm.circuit import LMCircuit
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS, error_kind, is_transient, retry_after

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.core.trajectory import Trajectory


@dataclass(frozen=True)
class RetryPolicy:
    """max_retries: extra attempts after the first, for transient errors only; the k-th retry waits a
    random time in [0, min(max_backoff, backoff * 2**k)] ("full jitter"), or longer when the server
    asked for it with ``Retry-After`` (honoured up to `lm.errors.MAX_RETRY_AFTER` seconds)."""

    max_retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("max_retries, backoff and max_backoff must be >= 0")


def judge_verdict(judge: Callable[..., Any], trajectory: Trajectory | str, policy: RetryPolicy = RetryPolicy(),
                  stop: threading.Event | None = None, circuit: LMCircuit | None = None, **inputs: Any) -> Verdict:
    """Call `judge(trajectory=...)` and always return a recorded `Verdict` with the attempts made.

    Args:
        judge: a strict judge (a `TrajectoryJudge`, a `HybridJudge`, a `FloorJudge`, or any callable taking
            ``trajectory=`` and returning ``passed``, ``score`` and ``reason``; see `as_verdict`).
        trajectory: what the judge takes: a `Trajectory` or its rendered text.
        policy: how often and how long transient LM errors (`lm.errors.is_transient`) are retried;
            any other error is not retried.
        stop: when set, ends the waiting between retries at once (Ctrl-C, a cancelled batch): the
            last error is then recorded.
        circuit: the dead-server breaker (`lm.circuit.LMCircuit`) shared by a run's calls: each verdict
            is counted on it (an abstention for an LM error, after retries, is a failure), and once it
            is open this raises `JudgeUnavailableError` instead of recording fails.
        **inputs: further declared inputs of the judge (a `HybridJudge`'s ``features``), passed as is.

    Returns:
        The `Verdict` (an abstention carrying the error and its kind when the judge failed), with
        ``attempts``: the number of calls made.

    Raises:
        JudgeUnavailableError: only with a `circuit`, once it is open. Nothing else that is an
            `Exception`: every failure becomes an abstained verdict. Exceptions that are not
            `Exception`s (KeyboardInterrupt) propagate.
    """
    if circuit is not None:
        circuit.raise_if_open()
    event = stop or threading.Event()

    def sleep(seconds: float) -> None:
        event.wait(seconds)

    retrying = tenacity.Retrying(sleep=sleep, **_retry_options(policy, event))
    try:
        verdict = as_verdict(retrying(judge, trajectory=trajectory, **inputs))
    except Exception as error:  # noqa: BLE001 - the contract of this layer: every failure is recorded
        verdict = Verdict.abstention(error, error_kind(error))
    return _counted(replace(verdict, attempts=int(retrying.statistics.get("attempt_number", 1))), circuit)


async def ajudge_verdict(judge: dspy.Module, trajectory: Trajectory | str, policy: RetryPolicy = RetryPolicy(),
                         stop: asyncio.Event | None = None, circuit: LMCircuit | None = None,
                         **inputs: Any) -> Verdict:
    """The async twin of `judge_verdict`: awaits ``judge.acall(trajectory=...)`` with the same retry
    policy (tenacity's `AsyncRetrying`, the waits are ``asyncio`` sleeps) and the same recording rule.

    Args:
        judge: a judge with ``acall`` (a `TrajectoryJudge`, `HybridJudge` or `FloorJudge`).
        trajectory: a `Trajectory` or its rendered text.
        policy: see `judge_verdict`.
        stop: an `asyncio.Event`; when set, no further retry is made (the last error is recorded).
        circuit: see `judge_verdict`.
        **inputs: further declared inputs of the judge, passed as is.

    Returns:
        The `Verdict`, with ``attempts``; an abstention when the judge failed.

    Raises:
        JudgeUnavailableError: only with a `circuit`, once it is open. Nothing else that is an
            `Exception` (`asyncio.CancelledError` propagates).
    """
    if circuit is not None:
        circuit.raise_if_open()
    stop = stop or asyncio.Event()

    async def sleep(seconds: float) -> None:
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    retrying = tenacity.AsyncRetrying(sleep=sleep, **_retry_options(policy, stop))
    try:
        verdict = as_verdict(await retrying(judge.acall, trajectory=trajectory, **inputs))
    except Exception as error:  # noqa: BLE001 - as in judge_verdict
        verdict = Verdict.abstention(error, error_kind(error))
    return _counted(replace(verdict, attempts=int(retrying.statistics.get("attempt_number", 1))), circuit)


def requests_made(verdict: Verdict, answered: int) -> int:
    """The HTTP requests one `judge_verdict` call sent (the verdict line's ``tokens.calls``,
    `core.verdict.token_usage`): the `answered` ones (each answer whose usage the LM reported: a usage tracker's
    count), plus one for each attempt that ended without an answer (a retry follows only an LM error, and the
    verdict's own last attempt when it is an abstention for one). An LM that reports no usage (`answered` 0)
    counts one request per attempt.

    Args:
        verdict: the call's verdict, with its ``attempts``.
        answered: the answers reported for this call (a segment judge's windows and verdict, each attempt's).
    """
    attempts = verdict.attempts or 0
    if not answered:
        return attempts
    unanswered = max(0, attempts - 1) + (verdict.abstained and verdict.error_kind in LM_ERROR_KINDS)
    return answered + unanswered


def count_verdict(circuit: LMCircuit, verdict: Verdict) -> None:
    """Count `verdict` on `circuit`, the one rule of every batch path: an abstention for an LM error
    (`LM_ERROR_KINDS`, after retries) is a failure; any other verdict, abstentions for the answer included,
    shows the server answered.

    Args:
        circuit: the run's `LMCircuit`.
        verdict: a verdict the judge just produced (not one read from a cache).
    """
    if verdict.abstained and verdict.error_kind in LM_ERROR_KINDS:
        circuit.failure(verdict.error or verdict.error_kind)
    else:
        circuit.success()


def _counted(verdict: Verdict, circuit: LMCircuit | None) -> Verdict:
    """`verdict`, counted on `circuit` (`count_verdict`); raises `JudgeUnavailableError` when that opened it."""
    if circuit is not None:
        count_verdict(circuit, verdict)
        circuit.raise_if_open()
    return verdict


def _retry_options(policy: RetryPolicy, stop: threading.Event | asyncio.Event) -> dict[str, Any]:
    """The one retry rule of both twins: transient errors only, at most ``max_retries`` retries, none after
    `stop` is set, full-jitter waits (`_wait`), the last error re-raised."""
    return {"retry": tenacity.retry_if_exception(is_transient),
            "stop": tenacity.stop_after_attempt(policy.max_retries + 1) | _Stopped(stop),
            "wait": _wait(policy), "reraise": True}


class _Stopped(tenacity.stop.stop_base):
    """Stop retrying once `event` is set (a `threading.Event` or an `asyncio.Event`)."""

    def __init__(self, event: threading.Event | asyncio.Event) -> None:
        self.event = event

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self.event.is_set()


def _wait(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], float]:
    """Full-jitter exponential backoff, but never shorter than the server's ``Retry-After`` (seconds or
    HTTP-date, at most `lm.errors.MAX_RETRY_AFTER`)."""
    jitter = tenacity.wait_random_exponential(multiplier=policy.backoff, max=policy.max_backoff)

    def wait(retry_state: tenacity.RetryCallState) -> float:
        asked = retry_after(retry_state.outcome.exception()) if retry_state.outcome is not None else None
        return max(jitter(retry_state), asked or 0.0)

    return wait


def as_verdict(prediction: Any) -> Verdict:
    """The `Verdict` in a judge's prediction (a `TrajectoryJudge`'s, or any module returning
    ``passed``, ``score`` and ``reason``); the contradiction rule applies either way. A prediction's
    ``evidence`` (a `core.verdict.EvidenceRecord` or its ``to_dict()``: what the judge read) goes with the
    verdict to its line (a segment or explorer judge fills it from what its calls really sent)."""
    if isinstance(prediction, Verdict):
        return prediction
    if getattr(prediction, "abstained", False):
        return Verdict.abstention(str(getattr(prediction, "error", "") or "abstained"),
                                  getattr(prediction, "error_kind", None) or "other")
    said = [name for name in Verdict.__dataclass_fields__ if name not in ("attempts", "evidence")]
    if all(hasattr(prediction, name) for name in said):  # a BaseJudge's own Prediction
        verdict = Verdict.from_dict({name: getattr(prediction, name) for name in said})
    else:
        verdict = Verdict.from_answer(bool(prediction.passed), float(prediction.score),
                                      getattr(prediction, "reason", ""))
    evidence = getattr(prediction, "evidence", None)
    if evidence is None:
        return verdict
    if isinstance(evidence, dict):
        try:
            evidence = EvidenceRecord.from_dict(evidence)
        except (KeyError, TypeError, ValueError) as error:
            raise RubricForgeError(f"a prediction's evidence is not an evidence record: {error}") from error
    if not isinstance(evidence, EvidenceRecord):
        raise RubricForgeError(f"a prediction's evidence is an EvidenceRecord (core.verdict) or its to_dict(), "
                               f"got {type(evidence).__name__}")
    return replace(verdict, evidence=evidence)
