"""The hybrid judge: the LLM judge's score stacked with the floor's observable features.

One `floor.model.LogisticModel` over ``llm_score`` (the LLM judge's raw score) and every feature of
``floor.features.FEATURES`` (a stack stored before a feature was added reads the features its model
names), fit on *validation* verdicts (the LLM judge's verdicts on the validation
split, abstentions left out, with their labels). The LLM and the features see different things: a
judge that misses failures the symptoms show, or symptoms blind to failures the LLM reads, are both
covered by one model that weighs the two.

Operating point: the hybrid passes a trajectory when its probability is at least ``threshold``:
0.5 without a cap; with a false-pass cap ``alpha`` (``--max-false-pass``), the Neyman-Pearson
threshold of `calibration.neyman_pearson_threshold` on the validation probabilities (the rule the LLM
judge's own operating point follows). An LLM abstention stays an abstention (a fail): the hybrid never
passes a trajectory its LLM part could not grade.

Storage: the stack is frozen into the program JSON, in the manifest under ``"hybrid"``::

    {"kind": "rubricforge.hybrid", "version": 1, "model": {LogisticModel}, "threshold": t,
     "max_false_pass": alpha | null, "fit": {"n", "positives", "abstained_excluded", "on"}}

`judge.load_judge()` returns a `HybridJudge` for such a program; it implements the judge contract
(`judge.contract.BaseJudge`) like a `TrajectoryJudge` (batch judging, `as_metric()`, certificates,
`dspy.Evaluate`). Its inputs are the LLM part's text and the trajectory's observable ``features``
(`evidence.features.feature_values`), a declared input computed from a `Trajectory`:
``hybrid(trajectory=t)`` computes both; ``hybrid(trajectory=text, features={...})`` takes them as given.
Bare text without features is refused (`InputError`), never scored as if it had none. The LLM never
sees the features.

The hybrid stage (``rubricforge floor --judge-verdicts V.jsonl --save-floor hybrid.json``, docs/FLOOR.md): the
same stack fit on any judge's recorded verdicts, with the judge's verdict as an input beside its score
(``llm_passed``, `fit_stack` ``with_passed``), over a `judge.recorded.RecordedJudge` that looks each
trajectory up by id. It is saved as its own JSON, the recorded stage's document (its verdict file named relative
to the JSON, pinned by sha256) beside the stack::

    {"kind": "rubricforge.recorded_hybrid", "version": 1, "judge": {recorded stage}, "hybrid": {stack}}

With a live program instead (``--judge PROGRAM``), the hybrid is the program with the stack in its manifest, as
above. As a cascade stage either one asks its judge only about the items that reach it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import dspy
import numpy as np

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.core.verdict import PASS_THRESHOLD, PassRule, Verdict
from rubricforge_dspy.evidence.features import FEATURES, FeatureTable, check_names, feature_values
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.contract import BaseJudge, JudgeT, trajectory_input, verdict_prediction
from rubricforge_dspy.judge.fingerprint import digest
from rubricforge_dspy.judge.floor import FloorError, LogisticModel, checked_features, fit_logistic
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.operating_point import NOTHING_PASSES, neyman_pearson_threshold
from rubricforge_dspy.program.store import build_manifest, save_judge, update_manifest

__all__ = ["HYBRID_KEY", "LLM_INPUT", "LLM_PASSED", "HYBRID_INPUTS", "RECORDED_HYBRID_KIND", "Stack", "fit_stack",
           "stack_inputs", "stack_matrix", "freeze_hybrid", "HybridJudge",
           "checked_features"]

HYBRID_KEY = "hybrid"
HYBRID_KIND = "rubricforge.hybrid"
HYBRID_VERSION = 1
RECORDED_HYBRID_KIND = "rubricforge.recorded_hybrid"  # a hybrid whose judge is a recorded stage (own JSON file)
LLM_INPUT = "llm_score"
LLM_PASSED = "llm_passed"  # the judge's verdict (1 passed, 0 failed), an input of a stack fit `with_passed`
HYBRID_INPUTS: tuple[str, ...] = (LLM_INPUT, *FEATURES)


@dataclass(frozen=True)
class Stack:
    """The fitted stack: P(pass) from the LLM score and the features, and the pass threshold on it."""

    model: LogisticModel
    threshold: float = PASS_THRESHOLD
    max_false_pass: float | None = None
    fit: dict[str, Any] = field(default_factory=dict)

    @property
    def with_passed(self) -> bool:
        """True when the judge's verdict (``llm_passed``) is an input beside its score."""
        return self.model.inputs[1:2] == (LLM_PASSED,)

    @property
    def features(self) -> tuple[str, ...]:
        """The trajectory features the stack reads (after the judge's inputs)."""
        return self.model.inputs[2 if self.with_passed else 1:]

    def probability(self, llm_score: float, features: Mapping[str, float], llm_passed: bool | None = None) -> float:
        judge = [float(llm_score)] + ([float(bool(llm_passed))] if self.with_passed else [])
        row = [*judge, *(float(features[name]) for name in self.features)]
        return float(self.model.predict(np.array([row]))[0])

    def verdict(self, llm: Verdict, features: Mapping[str, float]) -> Verdict:
        """The hybrid verdict from the LLM part's verdict and the trajectory's features (one definition,
        used by `HybridJudge` and by the protocol on persisted verdicts)."""
        if llm.abstained:
            return llm
        p = self.probability(llm.score, features, llm.passed)
        reason = f"hybrid p(pass) = {p:.3f} from the LLM score {llm.score:.2f} and the symptoms. LLM: {llm.reason}"
        return Verdict(passed=p >= self.threshold, score=p, reason=" ".join(reason.split())[:300],
                       score_calibrated=p)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": HYBRID_KIND, "version": HYBRID_VERSION, "model": self.model.to_dict(),
                "threshold": self.threshold, "max_false_pass": self.max_false_pass, "fit": dict(self.fit)}

    @classmethod
    def from_dict(cls, data: object, where: str = "hybrid") -> "Stack":
        if not isinstance(data, Mapping) or data.get("kind") != HYBRID_KIND:
            raise FloorError(f"{where}: not a hybrid stack (expected \"kind\": \"{HYBRID_KIND}\")")
        if data.get("version") != HYBRID_VERSION:
            raise FloorError(f"{where}: hybrid version {data.get('version')!r}; this release reads {HYBRID_VERSION}")
        model = LogisticModel.from_dict(data.get("model"), f"{where}: model")
        # a stack fit before a feature was added names the features it reads: it still scores on those
        try:
            if model.inputs[:1] != (LLM_INPUT,):
                raise ValueError(f"{where}: model inputs must start with {LLM_INPUT!r}")
            check_names(model.inputs[2 if model.inputs[1:2] == (LLM_PASSED,) else 1:], f"{where}: model inputs")
        except ValueError as error:
            raise FloorError(f"{error}; expected {LLM_INPUT!r} then feature names, got {list(model.inputs)}") from None
        threshold = data.get("threshold")
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0.0 <= threshold <= 1.01:
            raise FloorError(f"{where}: 'threshold' must be a number in [0, 1.01]")
        return cls(model, float(threshold), data.get("max_false_pass"), dict(data.get("fit") or {}))


def stack_inputs(with_passed: bool = False) -> tuple[str, ...]:
    """The stack's inputs: the judge's score, its verdict when `with_passed`, then every feature."""
    return (LLM_INPUT, *((LLM_PASSED,) if with_passed else ()), *FEATURES)


def stack_matrix(verdicts: Sequence[Verdict], features: np.ndarray, with_passed: bool = False) -> np.ndarray:
    """The stack's input rows: each verdict's score (and verdict) beside its item's feature row (`FEATURES`)."""
    judge = [[v.score, *((float(v.passed),) if with_passed else ())] for v in verdicts]
    return np.hstack([np.asarray(judge, dtype=np.float64).reshape(len(verdicts), -1),
                      np.asarray(features, dtype=np.float64).reshape(len(verdicts), len(FEATURES))])


def fit_stack(llm_verdicts: Sequence[Verdict | None], trajectories: Sequence[Trajectory] | FeatureTable,
              max_false_pass: float | None = None, *, with_passed: bool = False,
              on: str = "validation verdicts of the LLM judge") -> Stack:
    """Fit the stack on the judge's verdicts and the labeled trajectories (same order; or their `FeatureTable`);
    abstentions and items without a verdict (None) are left out, counted. With `max_false_pass`, the
    Neyman-Pearson pass threshold; `with_passed`: the judge's verdict is an input beside its score."""
    if isinstance(trajectories, FeatureTable):
        table = trajectories.require_labels("the hybrid's stack fit")
        labels, matrix = table.labels.tolist(), table.matrix(FEATURES)
    else:
        items = require_labels(trajectories, "the hybrid's stack fit")
        labels = [t.label for t in items]
        matrix = np.array([[feature_values(t)[n] for n in FEATURES] for t in items]).reshape(-1, len(FEATURES))
    if len(llm_verdicts) != len(labels):
        raise FloorError(f"one verdict per trajectory: got {len(llm_verdicts)} verdicts, {len(labels)} items")
    kept = [(i, v) for i, v in enumerate(llm_verdicts) if v is not None and not v.abstained]
    keep = [i for i, _ in kept]
    x = stack_matrix([v for _, v in kept], matrix[keep], with_passed)
    y = [labels[i] for i in keep]
    model = fit_logistic(x, y, stack_inputs(with_passed))
    threshold = PASS_THRESHOLD
    if max_false_pass is not None:
        chosen = neyman_pearson_threshold(model.predict(x), y, max_false_pass)
        threshold = min(chosen.threshold, NOTHING_PASSES)
    missing = sum(v is None for v in llm_verdicts)
    return Stack(model, float(threshold), max_false_pass,
                 {"n": len(keep), "positives": int(sum(y)),
                  "abstained_excluded": len(labels) - len(keep) - missing,
                  **({"missing_excluded": missing} if missing else {}), "on": on})


class HybridJudge(BaseJudge):
    """A judge and a frozen `Stack` over its score and the trajectory's features; see the module docstring.

    Args:
        llm: the judge part: an LLM judge (`TrajectoryJudge`), or a recorded stage (`judge.recorded.RecordedJudge`:
            ``rubricforge floor --judge-verdicts``), looked up by id.
        stack: the fitted stack over its score and the features.
    """

    def __init__(self, llm: BaseJudge, stack: Stack):
        super().__init__()
        self.llm = llm
        self.stack = stack
        self.stage_name = "hybrid"

    @property
    def needs_trajectory(self) -> bool:  # type: ignore[override]  # (a class attribute on the contract)
        """True when the judge part looks trajectories up by id (a recorded stage)."""
        return self.llm.needs_trajectory

    @property
    def cost_per_item(self) -> float:  # type: ignore[override]
        """The judge part's cost per item (a recorded stage: 1, the judge verdict it stands for)."""
        return self.llm.cost_per_item

    @classmethod
    def from_judge(cls, judge: TrajectoryJudge, where: str = "program") -> "HybridJudge":
        """The hybrid a loaded program describes (its manifest's ``"hybrid"``)."""
        return cls(judge, Stack.from_dict((judge.manifest or {}).get(HYBRID_KEY), f"{where}: {HYBRID_KEY}"))

    @classmethod
    def from_recorded_document(cls, data: Mapping[str, Any], path: Path,
                               allow_unverified: bool = False) -> "HybridJudge":
        """The hybrid over a recorded stage that a ``rubricforge.recorded_hybrid`` JSON at `path` describes (its
        verdict file checked by sha256, `RecordedJudge.from_document`).

        Raises:
            ProgramError: malformed, the verdict file missing or changed. FloorError: a malformed stack.
        """
        from rubricforge_dspy.judge.recorded import RecordedJudge
        from rubricforge_dspy.program.store import ProgramError

        if data.get("version") != HYBRID_VERSION or not isinstance(data.get("judge"), Mapping):
            raise ProgramError(f"{path}: malformed hybrid stage: expected version {HYBRID_VERSION} and a \"judge\"")
        judge = RecordedJudge.from_document(data["judge"], path, allow_unverified)
        return cls(judge, Stack.from_dict(data.get(HYBRID_KEY), f"{path}: {HYBRID_KEY}"))

    # -- what makes it a judge like the others
    @property
    def rubric(self) -> str:
        rubric: str = self.llm.rubric
        return rubric

    @property
    def render_config(self) -> RenderConfig | None:
        return getattr(self.llm, "render_config", None)

    @render_config.setter
    def render_config(self, value: RenderConfig) -> None:
        self.llm.render_config = value

    @property
    def adapter(self) -> dspy.Adapter | None:
        return getattr(self.llm, "adapter", None)

    @property
    def manifest(self) -> dict[str, Any] | None:
        return getattr(self.llm, "manifest", None)

    @property
    def rubric_sha256(self) -> str:
        """The LLM part's `rubric_sha256` with the stack."""
        return digest({"llm": self.llm.rubric_sha256, HYBRID_KEY: self.stack.to_dict()})

    def operating_point(self) -> dict[str, Any]:
        return {"llm": self.llm.operating_point(), HYBRID_KEY: self.stack.to_dict()}

    def pass_rule(self) -> PassRule:
        """The stack's P(pass) against its threshold."""
        return PassRule("score", float(self.stack.threshold))

    def check_certificate_on_first_run(self, where: str) -> None:
        self.llm.check_certificate_on_first_run(where)  # the LLM part runs the check when it is called

    def render(self, trajectory: Trajectory | str, config: RenderConfig | None = None) -> str:
        """The LLM part's text (the features are a separate input, `inputs_of`)."""
        text: str = self.llm.render(trajectory, config)
        return text

    def inputs_of(self, trajectory: Trajectory) -> dict[str, Any]:
        """``{"trajectory": what the judge part reads (an LLM's text; a recorded stage: the Trajectory),
        "features": the trajectory's observable features}``."""
        return {"trajectory": self.llm.inputs_of(trajectory)["trajectory"], "features": feature_values(trajectory)}

    def _inputs(self, trajectory: Any,
                features: Mapping[str, float] | None) -> tuple[Trajectory | str, dict[str, float]]:
        trajectory = trajectory_input(trajectory)
        if isinstance(trajectory, Trajectory):
            return self.llm.inputs_of(trajectory)["trajectory"], feature_values(trajectory)
        return trajectory, checked_features(features, self.stack.features, "hybrid")

    def forward(self, trajectory: Trajectory | str, features: Mapping[str, float] | None = None) -> dspy.Prediction:
        """Judge one trajectory: the LLM part's verdict, then the stack over its score and the features.

        Args:
            trajectory: a `Trajectory`, or the LLM part's text (then `features` is required).
            features: the trajectory's observable features (`evidence.features.feature_values`), when
                `trajectory` is text.

        Returns:
            The contract's Prediction: ``raw`` is the LLM part's own answer; ``decision_changed`` says
            the stack's decision differs from the LLM part's.

        Raises:
            InputError: text without features. The LLM part's errors (see `TrajectoryJudge`).
        """
        text, values = self._inputs(trajectory, features)
        return self._prediction(self.llm(trajectory=text), values)

    async def aforward(self, trajectory: Trajectory | str,
                       features: Mapping[str, float] | None = None) -> dspy.Prediction:
        """The async `forward`."""
        text, values = self._inputs(trajectory, features)
        return self._prediction(await self.llm.acall(trajectory=text), values)

    def _prediction(self, llm_prediction: dspy.Prediction, features: Mapping[str, float]) -> dspy.Prediction:
        llm = Verdict.from_dict(dict(llm_prediction))
        return verdict_prediction(self.stack.verdict(llm, features), llm_prediction.raw, before=llm)

    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Save as a frozen JSON program: the LLM part's, with the stack in its manifest; a hybrid over a
        recorded stage as its own JSON (``"kind": "rubricforge.recorded_hybrid"``: the recorded stage's
        document, its verdict file named relative to `path` and pinned by sha256, and the stack)."""
        if save_program:
            raise InputError("HybridJudge saves as JSON only; pickled programs are not supported")
        if hasattr(self.llm, "to_document"):
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if getattr(self.llm, "path", None) is None:
                self.llm.write_lines(path.with_name(f"{path.stem}.verdicts.jsonl"))
            document = {"kind": RECORDED_HYBRID_KIND, "version": HYBRID_VERSION,
                        "judge": self.llm.to_document(path.parent), HYBRID_KEY: self.stack.to_dict()}
            path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            return
        if not isinstance(self.llm, TrajectoryJudge):
            raise InputError(f"a hybrid over a {type(self.llm).__name__} cannot be saved: its judge part must be a "
                             "program (TrajectoryJudge) or a recorded stage")
        manifest = self.llm.manifest or build_manifest(self.llm)
        self.llm.manifest = {**manifest, HYBRID_KEY: self.stack.to_dict()}
        save_judge(self.llm, path)

    def load(self: JudgeT, path: PathArg, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False,
             allow_unverified: bool = False) -> JudgeT:
        """Load a hybrid program into this judge (`load_judge` is the usual way); returns it."""
        self.llm.load(path, allow_pickle=allow_pickle, allow_unverified=allow_unverified)
        self.stack = HybridJudge.from_judge(self.llm, str(path)).stack
        return self


def freeze_hybrid(program_path: PathArg, val: Sequence[Trajectory], llm_verdicts: Sequence[Verdict],
                  max_false_pass: float | None = None) -> Stack:
    """Fit the stack on the frozen LLM judge's validation verdicts and write it into the program at
    `program_path` (its manifest's ``"hybrid"``): `judge.load` then returns the hybrid. Returns the stack."""
    stack = fit_stack(llm_verdicts, val, max_false_pass)
    update_manifest(program_path, {HYBRID_KEY: stack.to_dict()})
    return stack
