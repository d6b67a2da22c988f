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
"""

from __future__ import annotations

import threading
from typing import Any, Literal, Protocol

import dspy

from rubricforge_dspy.core.criteria import attribute_reason
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

__all__ = ["JudgeMetric", "as_metric", "UNATTRIBUTED"]

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
