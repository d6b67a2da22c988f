"""The one judge contract: what `TrajectoryJudge`, `HybridJudge` and `FloorJudge` all are.

Every judge is a `dspy.Module` subclassing `BaseJudge`, so a DSPy user can swap one for another:

- the same call: ``judge(trajectory=...)`` (sync) and ``await judge.acall(trajectory=...)`` (async) with a
  `Trajectory` or its rendered text (a judge that needs more than text, the hybrid and the floor, refuses
  bare text with an `InputError` saying what to pass, never a quiet 0), or a `dspy.Example` whose
  ``trajectory`` is one (`dspy.Evaluate` passes ``example.inputs()``); labels are never read;
- the same Prediction fields (`verdict_prediction`): ``passed``, ``score``, ``reason``, ``abstained``,
  ``error``, ``error_kind``, ``contradiction``, ``score_calibrated``, and ``raw`` (the model's own answer,
  ``{"passed", "score"}`` as it said them, before the contradiction rule and any operating point),
  ``calibrated`` (an operating point was applied) and ``decision_changed`` (it changed ``passed``);
- the same strictness: a call returns a produced verdict or raises (`VerdictFormatError` for an answer
  that is not a verdict, DSPy's `LMError`s for the LM); `judge.execution.judge_verdict` /
  `ajudge_verdict` record failures as abstentions instead, and ``batch``/``abatch`` use them, so an
  exception is a counted abstention, never a quiet default;
- the same ``fingerprint(lm)``, ``rubric_sha256`` (the program's rubric and demos), ``operating_point()``,
  ``as_metric()``, ``save(path)`` and loading by `judge.loading.load_judge`.

The certificate check (`program.drift.check_drift`) of a loaded judge runs once per LM, when the judge
first runs with it (`BaseJudge.check_certificate_on_first_run`), not when it is loaded: ``load_judge(path)``
then ``judge.set_lm(lm)`` warns only if `lm` is not the certified LM, and only when the judge runs.
"""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

import dspy

from rubricforge_dspy.core.errors import InputError, RubricForgeDeprecationWarning
from rubricforge_dspy.core.presets import JUDGING_MAX_CONSECUTIVE_LM_ERRORS
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import PassRule, Verdict
from rubricforge_dspy.judge.batching import ajudge_batch, judge_batch
from rubricforge_dspy.judge.cache import input_sha256
from rubricforge_dspy.judge.execution import RetryPolicy
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.judge.metric import as_metric
from rubricforge_dspy.lm.circuit import LMCircuit
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.copies import resolve_lm
from rubricforge_dspy.lm.fingerprint import lm_fingerprint
from rubricforge_dspy.program.drift import check_drift

if TYPE_CHECKING:
    from rubricforge_dspy.judge.metric import JudgeMetric
    from rubricforge_dspy.lm.fingerprint import Fingerprint

__all__ = ["BaseJudge", "Verdicts", "verdict_prediction", "trajectory_input", "input_sha256",
           "PREDICTION_FIELDS"]

PREDICTION_FIELDS = ("passed", "score", "reason", "abstained", "error", "error_kind", "contradiction",
                     "score_calibrated", "raw", "calibrated", "decision_changed")
DEFAULT_MAX_CONSECUTIVE_LM_ERRORS = JUDGING_MAX_CONSECUTIVE_LM_ERRORS  # defined once, in core.presets
JudgeT = TypeVar("JudgeT", bound="BaseJudge")  # a judge's copy, or a judge loaded in place, is of its own type
_CERTIFICATE_LOCK = threading.Lock()  # module-level: a lock on the module would not survive dspy's deepcopy


def verdict_prediction(verdict: Verdict, raw: dict[str, Any] | None, before: Verdict | None = None) -> dspy.Prediction:
    """The `dspy.Prediction` every judge returns for `verdict`.

    Args:
        verdict: the final verdict (after the contradiction rule and any operating point).
        raw: the model's own answer, ``{"passed": .., "score": ..}`` as it said them (None: none).
        before: the verdict before an operating point was applied (None: none was).

    Returns:
        A Prediction with the fields of `PREDICTION_FIELDS`.
    """
    data = verdict.to_dict()
    calibrated = before is not None and not verdict.abstained
    return dspy.Prediction(**data, raw=raw, calibrated=calibrated,
                           decision_changed=bool(calibrated and before is not None and before.passed != verdict.passed))


def trajectory_input(trajectory: Any) -> Trajectory | str:
    """What a judge was given, as a `Trajectory` or text: a `dspy.Example`/`dspy.Prediction` yields its
    ``trajectory`` field (its label, if any, is never read). Raises `InputError` for anything else."""
    if isinstance(trajectory, (dspy.Example, dspy.Prediction)):
        trajectory = trajectory.get("trajectory") if "trajectory" in trajectory else None
    if isinstance(trajectory, (Trajectory, str)):
        return trajectory
    raise InputError(f"a judge takes a Trajectory, its rendered text, or a dspy.Example with a 'trajectory' "
                     f"input; got {type(trajectory).__name__}")


class Verdicts(list[Verdict]):
    """The verdicts of `BaseJudge.batch`/``abatch``, in input order (a list of `Verdict`s, each with its
    ``attempts``), with what failed counted: ``n_abstained``, ``errors`` (error kind -> count)."""

    @property
    def n_abstained(self) -> int:
        return sum(v.abstained for v in self)

    @property
    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for verdict in self:
            if verdict.abstained and verdict.error_kind is not None:  # (Verdict refuses an abstention without one)
                counts[verdict.error_kind] = counts.get(verdict.error_kind, 0) + 1
        return counts


class BaseJudge(dspy.Module):  # type: ignore[misc]  # (dspy is untyped: its classes are Any to mypy)
    """The contract every judge implements (see the module docstring). Subclasses define ``forward``,
    ``aforward``, ``render``, ``rubric``, ``rubric_sha256``, ``operating_point``, ``save`` and ``load``.

    A judge is also a cascade stage; what the cascade reads of a stage is declared here, with defaults (a
    subclass overrides what differs; the cascade never probes for an attribute):

    Attributes:
        stage_name: the stage's default name in a cascade (`trust.cascade.stage_names`): ``"judge"``; a floor's
            own name, ``"recorded"``, ``"hybrid"``.
        cost_per_item: what one item costs, the fit's tie-break (`trust.cascade.stage_cost`): 1.0, one judge
            verdict (an LM call, or another tool's recorded verdict); 0.0 for a free stage (a floor). A stage
            whose cost is above 0 gives judge verdicts a user pays for (`gives_judge_verdicts`).
        confidence_levels: the values the stage's confidence can take, sorted (shape the cascade's grid,
            `trust.cascade.stage_levels`); None: continuous.
        needs_trajectory: True when the stage must be given the `Trajectory` itself (it looks items up by id,
            or reads the steps), never its rendered text.
        kind: the registered stage kind (`judge.stage_kinds.register_stage_kind`) whose loader reads the file
            ``save`` writes (its top-level ``"kind"``); None: the package's program, floor and cascade files,
            or a Python stage saved by its import path.
    """

    stage_name: str = "judge"
    cost_per_item: float = 1.0
    confidence_levels: tuple[float, ...] | None = None
    needs_trajectory: bool = False
    kind: str | None = None

    def token_bound(self, inputs: dict[str, Any], max_tokens: int) -> int | None:
        """The most tokens (prompt plus completion) one attempt at judging `inputs` may spend, for a run's token
        budget (`apply.budget`); None (the default): one LM call per predictor, bounded by the runner
        (`apply.budget.prompt_bound` plus `max_tokens`). A judge that makes several calls per item (a segment
        or explorer judge) returns its own bound: a call spending more than its reservation is counted as an
        overrun in the run's summary."""
        return None

    @property
    def calls_lm(self) -> bool:
        """Whether the stage calls an LM (it has a predictor); a floor, a recorded or Python stage does not."""
        return bool(self.predictors())

    @property
    def gives_judge_verdicts(self) -> bool:
        """Whether each item the stage runs on costs a judge verdict a user pays for (``cost_per_item > 0``: an
        LLM, recorded or Python stage, a hybrid over one; not a floor)."""
        return float(self.cost_per_item) > 0

    # -- identity
    @property
    def rubric_sha256(self) -> str:
        """sha256 of what the program says to the LM (rubric and demonstrations) and of any stack on top.
        Not the file's ``program_sha256`` (`program.store`), which also covers the manifest."""
        raise NotImplementedError

    @property
    def program_sha256(self) -> str:
        """Deprecated name of `rubric_sha256` (it was easily confused with the manifest's ``program_sha256``)."""
        warnings.warn("judge.program_sha256 is renamed judge.rubric_sha256 (the manifest's program_sha256 is "
                      "another digest)", RubricForgeDeprecationWarning, stacklevel=2)
        return self.rubric_sha256

    def deepcopy(self: JudgeT) -> JudgeT:
        """A deep copy of this judge, with the same DSPy callbacks.

        DSPy drops a module's own ``callbacks`` when it copies or pickles one (`BaseModule.__getstate__`),
        and batch judging works on a copy bound to its one-attempt LM: without this, callbacks set on a
        judge or its predictors would silently see none of a batch's calls. The copy shares the callback
        objects (observers, not state); a pickled judge (e.g. sent to Ray workers) still loses them.

        Returns:
            The copy.
        """
        copied: JudgeT = super().deepcopy()
        for (_, source), (_, target) in zip(self.named_sub_modules(), copied.named_sub_modules(), strict=True):
            callbacks = getattr(source, "callbacks", None)
            if callbacks and hasattr(target, "callbacks"):
                target.callbacks = list(callbacks)
        return copied

    def inputs_of(self, trajectory: Trajectory) -> dict[str, Any]:
        """The declared inputs this judge reads, computed from `trajectory` (never from its label):
        ``judge(**judge.inputs_of(t))`` is ``judge(trajectory=t)``. Batch judging computes them once, for
        the call and for the verdict cache's key (`input_sha256`).

        Args:
            trajectory: the `Trajectory` to judge.

        Returns:
            ``{"trajectory": rendered text}``, plus ``features`` for the judges that read them.
        """
        return {"trajectory": self.render(trajectory)}

    def operating_point(self) -> dict[str, Any] | None:
        """The judge's calibration and decision rule as JSON (part of the fingerprint); None when none."""
        return None

    def pass_rule(self) -> PassRule:
        """What decides this judge's ``passed`` (`core.verdict.PassRule`): by default the rubric's
        ``score >= 0.5``; ``pass_rule().explain(verdict)`` says why a verdict passed or failed."""
        return PassRule()

    def fingerprint(self, lm: dspy.BaseLM | None = None) -> Fingerprint:
        """`judge.fingerprint.judge_fingerprint` of this judge answering with `lm` (default: its
        predictor's LM, else the configured one).

        Args:
            lm: the LM to fingerprint with, or None.

        Returns:
            A `Fingerprint` (``sha256`` and the ``parts`` it covers).
        """
        return judge_fingerprint(self, resolve_lm(self, lm))

    def as_metric(self, **options: Any) -> JudgeMetric:
        """This judge as a DSPy metric (GEPA, MIPROv2, BootstrapFewShot, Evaluate).

        Args:
            **options: see `rubricforge_dspy.judge.metric.as_metric`.

        Returns:
            A `JudgeMetric`.
        """
        return as_metric(self, **options)

    # -- the certificate check, once per LM, when the judge runs
    def check_certificate_on_first_run(self, where: str) -> None:
        """Check this judge's certificate (`program.drift.check_drift`) when it first runs with an LM,
        once per LM, instead of now. `judge.loading.load_judge` calls it; warnings name `where`."""
        self._certificate_where = where
        self._certificate_checked: tuple[str, ...] = ()

    def _check_certificate(self) -> None:
        where = getattr(self, "_certificate_where", None)
        if where is None:
            return
        lm = resolve_lm(self)
        if lm is None or id(lm) == getattr(self, "_certificate_last_lm", None):
            return  # the LM checked last (every call of a batch): nothing to compute
        key = lm_fingerprint(lm).sha256 if isinstance(lm, dspy.BaseLM) else f"{type(lm).__name__}:{id(lm)}"
        with _CERTIFICATE_LOCK:
            self._certificate_last_lm = id(lm)
            if key in self._certificate_checked:
                return
            self._certificate_checked = (*self._certificate_checked, key)
        check_drift(self.manifest, lm, where=where)

    # -- many at once
    def batch(self, examples: Iterable[Any], num_threads: int | None = None, *,
              policy: RetryPolicy = RetryPolicy(),
              max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS,
              **ignored: Any) -> Verdicts:
        """Judge many trajectories on threads (`judge.batching.judge_batch`: a bounded window of calls, DSPy's
        context carried into every worker, no DSPy history kept); every failure is a counted abstention.

        Unlike `dspy.Module.batch`, which turns a failed call into ``None``, each item goes through
        `judge_verdict` (transient errors retried per `policy`, anything else recorded as an abstention
        with its error kind), and a dead server stops the batch (`JudgeUnavailableError`) after
        `max_consecutive_lm_errors` consecutive LM failures instead of recording a whole batch of fails.

        Args:
            examples: `Trajectory` objects, rendered texts, or `dspy.Example`s with a ``trajectory`` input.
            num_threads: worker threads (default: ``dspy.settings.num_threads``, else 8).
            policy: the retry policy of `judge_verdict`.
            max_consecutive_lm_errors: the dead-server circuit (None: never stop).
            **ignored: `dspy.Module.batch`'s options (progress bar, timeouts) are accepted and ignored;
                ``return_failed_examples`` is refused: failures are in the result.

        Returns:
            `Verdicts`, in input order.

        Raises:
            InputError: an item is not a trajectory (before any LM call).
            JudgeUnavailableError: the circuit opened.
        """
        if ignored.get("return_failed_examples"):
            raise InputError("judge.batch records failures as abstained verdicts in its result; "
                             "return_failed_examples is not supported")
        items = [trajectory_input(item) for item in examples]
        threads = num_threads or getattr(dspy.settings, "num_threads", None) or 8
        return Verdicts(judge_batch(self, items, window=max(1, threads), policy=policy,
                                    circuit=self._circuit(max_consecutive_lm_errors)))

    async def abatch(self, examples: Iterable[Any], concurrency: int = 32, *,
                     policy: RetryPolicy = RetryPolicy(),
                     max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS) -> Verdicts:
        """The async `batch` (`judge.batching.ajudge_batch`): at most `concurrency` ``acall``s at once, on the
        running event loop, through `ajudge_verdict`.

        Args:
            examples: as for `batch`.
            concurrency: calls in flight at once.
            policy: the retry policy of `ajudge_verdict`.
            max_consecutive_lm_errors: the dead-server circuit (None: never stop).

        Returns:
            `Verdicts`, in input order.

        Raises:
            InputError: an item is not a trajectory (before any LM call).
            JudgeUnavailableError: the circuit opened (the calls in flight are cancelled).
        """
        items = [trajectory_input(item) for item in examples]
        return Verdicts(await ajudge_batch(self, items, window=max(1, concurrency), policy=policy,
                                           circuit=self._circuit(max_consecutive_lm_errors)))

    def _circuit(self, limit: int | None) -> LMCircuit:
        return LMCircuit(limit, lm_name(resolve_lm(self)), counted=" after retries",
                         advice="Stopped: fix the server and judge the rest again.")
