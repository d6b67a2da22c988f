"""The judge as a reward proxy: a DSPy metric that scores an agent program's runs with a `TrajectoryJudge`.

    metric = as_metric(judge, lm=judge_lm)                    # BootstrapFewShot, MIPROv2, Evaluate
    optimized = dspy.BootstrapFewShot(metric=metric, max_labeled_demos=0).compile(agent, trainset=...)
    gepa = dspy.GEPA(metric=as_metric(judge, feedback=True, lm=judge_lm), ...)   # GEPA

The metric turns what the agent did (a `dspy.ReAct` prediction's ``trajectory`` dict, or any
`dspy.Prediction`) into a `Trajectory` (`trajectory_from_prediction`), renders it, and asks the judge.
Its return value follows DSPy's conventions:

- ``metric(example, pred)`` -> float: ``verdict.score`` (``mode="graded"``) or 1.0/0.0 (``mode="binary"``).
- ``metric(example, pred, trace)`` with a trace (bootstrapping) -> bool: the judge's ``passed``.
- ``metric(gold, pred, trace, pred_name, pred_trace)`` (GEPA asking for feedback) ->
  ``dspy.Prediction(score, feedback)``; the feedback is what decided the verdict (the raw score, the
  calibrated score when the program has a calibration, and the pass threshold: `core.verdict.PassRule`),
  the judge's reason and the rubric criterion it failed (``"unattributed"`` when the reason names
  none). ``feedback=True`` returns that Prediction on every call, with a float score (use it for GEPA
  in graded mode: GEPA also scores with a trace); ``feedback=False`` never does.

An abstained verdict (the judge could not grade) scores 0 / False, with feedback saying so.

Verdicts are cached (`rubricforge_dspy.judge.cache.VerdictCache`; in memory by default, or pass a
cache on disk), keyed by (the judge's fingerprint, sha256 of the rendered text), as batch judging keys
them: the same trajectory is judged once per metric, whatever the optimizer re-evaluates, and
concurrent evaluations of one text make one LM call. Abstentions are never cached. The judge runs
with DSPy tracing off, so its own predictor never enters the agent's trace (BootstrapFewShot calls the
metric inside the agent's trace context).

The prediction is read into a `Trajectory` by `data.formats.dspy_prediction.trajectory_from_prediction`
(unlabeled: its label placeholders never reach the judge).

`TrajectoryJudge.as_metric(**kw)` is `as_metric(judge, **kw)`.

**The judge against labels** (`label_agreement`, `LabelAgreement`): the other way round, a metric that scores a
judge's (or a cascade's) verdicts against the examples' labels in ``dspy.Evaluate``, as ``rubricforge report``
does. A cascade's escalation (an abstention of kind ``"escalated"``: no stage was sure, a person decides) is
neither a pass nor a fail: it scores NaN, never 0, so ``Evaluate``'s own average over every example is NaN
instead of a number that counts each escalation as a disagreement; ``metric.result(evaluation)`` gives the
agreement on the decided items (the number ``report`` prints for the same verdicts) and how many were left
out. Any other abstention is a fail, as in ``report``::

    agreement = label_agreement()
    evaluation = dspy.Evaluate(devset=testset, metric=agreement)(cascade)
    print(agreement.result(evaluation))   # agreement 85.4% on 164 decided of 188 (24 escalated: left out)
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal, Protocol

import dspy

from rubricforge_dspy.core.cascade import ESCALATED
from rubricforge_dspy.core.criteria import attribute_reason
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import PassRule, Verdict
from rubricforge_dspy.data.formats.dspy_prediction import trajectory_from_prediction
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.cache import VerdictCache, input_sha256
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.copies import resolve_lm


class MetricJudge(Protocol):
    """What the metric reads of a judge: the `judge.contract.BaseJudge` contract's rendering, inputs, pass rule
    and rubric (a structural type, so this module does not import the contract that offers ``as_metric``)."""

    @property
    def rubric(self) -> str: ...

    def render(self, trajectory: Trajectory | str, config: RenderConfig | None = None) -> str: ...

    def inputs_of(self, trajectory: Trajectory) -> dict[str, Any]: ...

    def pass_rule(self) -> PassRule: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

__all__ = ["JudgeMetric", "as_metric", "UNATTRIBUTED", "LabelAgreement", "AgreementResult", "label_agreement"]

logger = logging.getLogger(__name__)

UNATTRIBUTED = "unattributed"

Mode = Literal["binary", "graded"]


# --------------------------------------------------------------------------------------------
# The metric


class JudgeMetric:
    """A DSPy metric backed by a `TrajectoryJudge`; build it with `as_metric`.

    Counters (for logs and tests): ``calls`` (metric invocations), ``verdicts`` (verdicts used, cached or
    not), ``abstentions``, ``passes``; ``cache.hits`` / ``cache.misses`` for the cache.
    """

    def __init__(self, judge: MetricJudge, *, mode: Mode = "binary", feedback: bool | None = None,
                 cache: bool | VerdictCache = True, lm: dspy.BaseLM | None = None,
                 render_config: RenderConfig | None = None, input_fields: list[str] | None = None,
                 use_trace: bool = False):
        if mode not in ("binary", "graded"):
            raise ValueError(f"mode must be 'binary' or 'graded', got {mode!r}")
        if feedback not in (None, True, False):
            raise ValueError(f"feedback must be None (auto), True or False, got {feedback!r}")
        self.judge = judge
        self.mode = mode
        self.feedback = feedback
        self.lm = lm
        self.render_config = render_config
        self.input_fields = input_fields
        self.use_trace = use_trace
        self.retry = RetryPolicy()
        if cache is not None and not isinstance(cache, (bool, VerdictCache)):
            raise TypeError(f"cache must be True, False or a VerdictCache, got {type(cache).__name__}")
        self.cache = cache if isinstance(cache, VerdictCache) else (VerdictCache.in_memory() if cache else None)
        self._lock = threading.Lock()
        self.calls = self.verdicts = self.abstentions = self.passes = 0

    # -- what the judge reads
    def to_trajectory(self, example: dspy.Example, pred: dspy.Prediction, trace: list[Any] | None = None) -> Trajectory:
        return trajectory_from_prediction(example, pred, trace if self.use_trace else None,
                                          input_fields=self.input_fields)

    def render(self, trajectory: Trajectory) -> str:
        return self.judge.render(trajectory, self.render_config)

    def inputs(self, trajectory: Trajectory) -> dict[str, Any]:
        """What the judge reads of `trajectory`: its text (rendered with ``render_config``) and, for a judge
        that reads more (the hybrid's and the floor's features), its declared inputs (``inputs_of``)."""
        inputs = dict(self.judge.inputs_of(trajectory)) if hasattr(self.judge, "inputs_of") else {}
        if self.render_config is not None or "trajectory" not in inputs:
            inputs["trajectory"] = self.render(trajectory)
        return inputs

    def judge_lm(self) -> dspy.BaseLM | None:
        """The LM the judge will use: ``lm=``, else the judge's own, else the configured one."""
        return resolve_lm(self.judge, self.lm)

    # -- verdicts
    def verdict(self, inputs: str | dict[str, Any]) -> dict[str, Any]:
        """The judge's verdict on rendered text, or on the judge's inputs (`inputs`), from the cache when
        possible, as a dict."""
        inputs = {"trajectory": inputs} if isinstance(inputs, str) else dict(inputs)
        text = inputs.pop("trajectory")

        def compute() -> Verdict:
            settings = {"trace": None, **({"lm": self.lm} if self.lm is not None else {})}
            with dspy.context(**settings):
                return judge_verdict(self.judge, text, self.retry, **inputs)

        if self.cache is None:
            verdict = compute().to_dict()
        else:
            fingerprint = judge_fingerprint(self.judge, self.judge_lm()).sha256
            key = input_sha256({"trajectory": text, **inputs})
            verdict = self.cache.get_or_compute(fingerprint, key, compute).to_dict()
        with self._lock:
            self.verdicts += 1
            self.abstentions += verdict["abstained"]
            self.passes += verdict["passed"] and not verdict["abstained"]
        return verdict

    def score_of(self, verdict: dict[str, Any]) -> float:
        if verdict["abstained"]:
            return 0.0
        if self.mode == "graded":
            return float(verdict["score"])
        return 1.0 if verdict["passed"] else 0.0

    def feedback_of(self, verdict: dict[str, Any]) -> str:
        if verdict["abstained"]:
            return (f"The judge could not grade this trajectory ({verdict['error']}); it scored 0. "
                    "This says nothing about the agent: the judge failed, not the task.")
        reason = verdict["reason"] or "(no reason given)"
        why = self.judge.pass_rule().explain(verdict)  # what decided it: the score alone can read as the opposite
        if verdict["passed"]:
            return f"The judge PASSED this trajectory: {why}. Judge's reason: {reason}"
        criterion = attribute_reason(verdict["reason"], self.judge.rubric)
        failed = f"{criterion.number}. {criterion.name}" if criterion else UNATTRIBUTED
        return f"The judge FAILED this trajectory: {why}. Failed criterion: {failed}. Judge's reason: {reason}"

    def __call__(self, gold: dspy.Example, pred: dspy.Prediction, trace: list[Any] | None = None,
                 pred_name: str | None = None, pred_trace: list[Any] | None = None) -> float | bool | dspy.Prediction:
        with self._lock:
            self.calls += 1
        trajectory = self.to_trajectory(gold, pred, trace)
        verdict = self.verdict(self.inputs(trajectory))
        score = self.score_of(verdict)
        gepa_call = pred_name is not None or pred_trace is not None
        if self.feedback or (self.feedback is None and gepa_call):
            return dspy.Prediction(score=score, feedback=self.feedback_of(verdict))
        if trace is not None:
            return bool(verdict["passed"] and not verdict["abstained"])
        return score

    def __repr__(self) -> str:
        lm = lm_name(self.lm) if self.lm is not None else None
        return f"JudgeMetric(mode={self.mode!r}, feedback={self.feedback!r}, lm={lm!r}, cache={self.cache!r})"


def as_metric(judge: MetricJudge, mode: Mode = "binary", feedback: bool | None = None,
              cache: bool | VerdictCache = True, lm: dspy.BaseLM | None = None,
              render_config: RenderConfig | None = None, *, input_fields: list[str] | None = None,
              use_trace: bool = False) -> JudgeMetric:
    """A DSPy metric that rewards an agent program with `judge`'s verdicts (see the module docstring).

    Args:
        judge: any `BaseJudge` (`TrajectoryJudge`, `HybridJudge`, `FloorJudge`; e.g. from `load_judge`).
        mode: ``"binary"`` scores 1.0/0.0 by ``passed``; ``"graded"`` scores ``verdict.score``.
        feedback: None (auto) returns ``dspy.Prediction(score, feedback)`` when called GEPA-style with
            ``pred_name``/``pred_trace``; True always (for GEPA); False never.
        cache: True for a fresh in-memory `VerdictCache`, False for none, or a `VerdictCache` to share (in
            memory, or ``VerdictCache(directory)`` on disk: the batch judge's file, so verdicts outlive the
            process).
        lm: the judge's LM, used under ``dspy.context(lm=lm)`` (the agent keeps its own).
        render_config: how trajectories are rendered (default: the judge's own).
        input_fields: the example fields shown as the user turn (default ``example.inputs()``).
        use_trace: render intermediate predictor outputs of non-ReAct programs from the trace. Off by
            default: optimizers call the metric with a trace while bootstrapping and without one while
            evaluating, and the judge should grade the same text both times.

    Returns:
        A `JudgeMetric`, called as ``metric(gold, pred, trace=None, pred_name=None, pred_trace=None)``
        like any DSPy metric.
    """
    return JudgeMetric(judge, mode=mode, feedback=feedback, cache=cache, lm=lm, render_config=render_config,
                       input_fields=input_fields, use_trace=use_trace)


# --------------------------------------------------------------------------------------------
# The judge against labels


def _escalated(prediction: Any) -> bool:
    return bool(getattr(prediction, "abstained", False)) and getattr(prediction, "error_kind", None) == ESCALATED


def _label(example: Any) -> bool:
    label = getattr(example, "label", None)
    if label is None or isinstance(label, float) and math.isnan(label):
        ident = str(getattr(example, "id", None) or "?")[:80]
        raise InputError(f"example {ident!r} has no label: label_agreement scores verdicts against labels; load "
                         "the examples with labels (`data.load_examples(..., require_label=True)`, or join them)")
    if label not in (0, 1, True, False):
        raise InputError(f"example {str(getattr(example, 'id', '?'))[:80]!r}: label {label!r} is not 0/1 (a pass or "
                         "a fail); give a label rule when loading (`label_threshold`)")
    return bool(label)


@dataclass(frozen=True)
class AgreementResult:
    """Agreement of verdicts with labels on the decided items (`LabelAgreement.result`).

    Attributes:
        agreement: percent of the decided items whose verdict matches the label (dspy.Evaluate's scale; None
            when none was decided); ``agreed`` / ``decided`` the counts; ``escalated``: items a cascade escalated
            to a person, left out; ``failed``: abstentions that are not escalations (counted as fails, as in
            ``report``); ``n``: every scored example.
    """

    agreement: float | None
    agreed: int
    decided: int
    escalated: int
    failed: int
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        share = "n/a (nothing decided)" if self.agreement is None else f"{self.agreement:.1f}%"
        failed = f", {self.failed} abstained counted as fails" if self.failed else ""
        return (f"agreement {share} on {self.decided} decided of {self.n} ({self.escalated} escalated to a person: "
                f"left out{failed})")


class LabelAgreement:
    """A `dspy.Evaluate` metric: does the verdict match the example's label? Escalations are skipped and
    counted (module docstring); build it with `label_agreement`.

    ``metric(example, prediction)`` -> 1.0 (match), 0.0 (mismatch; an abstention that is not an escalation is a
    fail), NaN (escalated: neither); with a trace (an optimizer bootstrapping) -> bool, False for an escalation.
    Counters over every call (for logs): ``decided``, ``agreed``, ``escalated``, ``failed``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decided = self.agreed = self.escalated = self.failed = 0

    def __call__(self, example: Any, prediction: Any, trace: Any = None) -> float | bool:
        label = _label(example)
        if _escalated(prediction):
            with self._lock:
                first = self.escalated == 0
                self.escalated += 1
            if first:
                logger.warning("label_agreement: an escalated item is neither a pass nor a fail; it scores NaN, so "
                               "dspy.Evaluate's average over all examples is NaN: read metric.result(evaluation) for "
                               "the agreement on the decided items and how many were left out")
            return False if trace is not None else math.nan
        abstained = bool(getattr(prediction, "abstained", False))
        match = (not abstained and bool(getattr(prediction, "passed", False))) == label
        with self._lock:
            self.decided += 1
            self.agreed += match
            self.failed += abstained
        return match if trace is not None else float(match)

    def result(self, evaluation: Any) -> AgreementResult:
        """The agreement on the decided items of one evaluation: `evaluation` is what ``dspy.Evaluate`` returned
        (its ``results``: ``(example, prediction, score)`` triples) or those triples; computed from the
        verdicts, not from the counters (so one metric serves several evaluations)."""
        triples: Iterable[Any] = getattr(evaluation, "results", evaluation)
        agreed = decided = escalated = failed = n = 0
        for example, prediction, _score in triples:
            n += 1
            if _escalated(prediction):
                escalated += 1
                continue
            abstained = bool(getattr(prediction, "abstained", False))
            decided += 1
            failed += abstained
            agreed += (not abstained and bool(getattr(prediction, "passed", False))) == _label(example)
        return AgreementResult(100.0 * agreed / decided if decided else None, agreed, decided, escalated, failed, n)


def label_agreement() -> LabelAgreement:
    """The judge-vs-label metric for ``dspy.Evaluate`` that skips a cascade's escalations and says how many
    (`LabelAgreement`): ``label_agreement().result(evaluation)`` is the agreement ``rubricforge report`` gives
    for the same verdicts."""
    return LabelAgreement()
