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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import dspy
import numpy as np

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.core.verdict import PASS_THRESHOLD, PassRule, Verdict
from rubricforge_dspy.evidence.features import FEATURES, check_names, feature_values
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.contract import BaseJudge, JudgeT, trajectory_input, verdict_prediction
from rubricforge_dspy.judge.fingerprint import digest
from rubricforge_dspy.judge.floor import FloorError, LogisticModel, checked_features, fit_logistic
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.operating_point import NOTHING_PASSES, neyman_pearson_threshold
from rubricforge_dspy.program.store import build_manifest, save_judge, update_manifest

__all__ = ["HYBRID_KEY", "LLM_INPUT", "HYBRID_INPUTS", "Stack", "fit_stack", "freeze_hybrid", "HybridJudge",
           "checked_features"]

HYBRID_KEY = "hybrid"
HYBRID_KIND = "rubricforge.hybrid"
HYBRID_VERSION = 1
LLM_INPUT = "llm_score"
HYBRID_INPUTS: tuple[str, ...] = (LLM_INPUT, *FEATURES)


@dataclass(frozen=True)
class Stack:
    """The fitted stack: P(pass) from the LLM score and the features, and the pass threshold on it."""

    model: LogisticModel
    threshold: float = PASS_THRESHOLD
    max_false_pass: float | None = None
    fit: dict = field(default_factory=dict)

    def probability(self, llm_score: float, features: Mapping[str, float]) -> float:
        row = [float(llm_score), *(float(features[name]) for name in self.model.inputs[1:])]
        return float(self.model.predict(np.array([row]))[0])

    def verdict(self, llm: Verdict, features: Mapping[str, float]) -> Verdict:
        """The hybrid verdict from the LLM part's verdict and the trajectory's features (one definition,
        used by `HybridJudge` and by the protocol on persisted verdicts)."""
        if llm.abstained:
            return llm
        p = self.probability(llm.score, features)
        reason = f"hybrid p(pass) = {p:.3f} from the LLM score {llm.score:.2f} and the symptoms. LLM: {llm.reason}"
        return Verdict(passed=p >= self.threshold, score=p, reason=" ".join(reason.split())[:300],
                       score_calibrated=p)

    def to_dict(self) -> dict:
        return {"kind": HYBRID_KIND, "version": HYBRID_VERSION, "model": self.model.to_dict(),
                "threshold": self.threshold, "max_false_pass": self.max_false_pass, "fit": dict(self.fit)}

    @classmethod
    def from_dict(cls, data: Mapping, where: str = "hybrid") -> "Stack":
        if not isinstance(data, Mapping) or data.get("kind") != HYBRID_KIND:
            raise FloorError(f"{where}: not a hybrid stack (expected \"kind\": \"{HYBRID_KIND}\")")
        if data.get("version") != HYBRID_VERSION:
            raise FloorError(f"{where}: hybrid version {data.get('version')!r}; this release reads {HYBRID_VERSION}")
        model = LogisticModel.from_dict(data.get("model"), f"{where}: model")
        # a stack fit before a feature was added names the features it reads: it still scores on those
        try:
            if model.inputs[:1] != (LLM_INPUT,):
                raise ValueError(f"{where}: model inputs must start with {LLM_INPUT!r}")
            check_names(model.inputs[1:], f"{where}: model inputs")
        except ValueError as error:
            raise FloorError(f"{error}; expected {LLM_INPUT!r} then feature names, got {list(model.inputs)}") from None
        threshold = data.get("threshold")
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0.0 <= threshold <= 1.01:
            raise FloorError(f"{where}: 'threshold' must be a number in [0, 1.01]")
        return cls(model, float(threshold), data.get("max_false_pass"), dict(data.get("fit") or {}))


def fit_stack(llm_verdicts: Sequence[Verdict], trajectories: Sequence[Trajectory],
              max_false_pass: float | None = None) -> Stack:
    """Fit the stack on the LLM judge's validation verdicts and the validation trajectories (same order);
    abstentions are left out (counted). With `max_false_pass`, the Neyman-Pearson pass threshold."""

    trajectories = require_labels(trajectories, "the hybrid's stack fit")
    if len(llm_verdicts) != len(trajectories):
        raise FloorError(f"one verdict per trajectory: got {len(llm_verdicts)} verdicts, {len(trajectories)} items")
    rows = [(v, t) for v, t in zip(llm_verdicts, trajectories, strict=True) if not v.abstained]
    x = np.array([[v.score, *(feature_values(t)[n] for n in FEATURES)] for v, t in rows])
    x = x.reshape(-1, len(HYBRID_INPUTS))
    y = [t.label for _, t in rows]
    model = fit_logistic(x, y, HYBRID_INPUTS)
    threshold = PASS_THRESHOLD
    if max_false_pass is not None:
        chosen = neyman_pearson_threshold(model.predict(x), y, max_false_pass)
        threshold = min(chosen.threshold, NOTHING_PASSES)
    return Stack(model, float(threshold), max_false_pass,
                 {"n": len(rows), "positives": int(sum(y)), "abstained_excluded": len(trajectories) - len(rows),
                  "on": "validation verdicts of the LLM judge"})


class HybridJudge(BaseJudge):
    """An LLM judge (`TrajectoryJudge`) and a frozen `Stack`; see the module docstring.

    Args:
        llm: the LLM part.
        stack: the fitted stack over its score and the features.
    """

    def __init__(self, llm: TrajectoryJudge, stack: Stack):
        super().__init__()
        self.llm = llm
        self.stack = stack

    @classmethod
    def from_judge(cls, judge: TrajectoryJudge, where: str = "program") -> "HybridJudge":
        """The hybrid a loaded program describes (its manifest's ``"hybrid"``)."""
        return cls(judge, Stack.from_dict((judge.manifest or {}).get(HYBRID_KEY), f"{where}: {HYBRID_KEY}"))

    # -- what makes it a judge like the others
    @property
    def rubric(self) -> str:
        return self.llm.rubric

    @property
    def render_config(self) -> RenderConfig:
        return self.llm.render_config

    @render_config.setter
    def render_config(self, value: RenderConfig) -> None:
        self.llm.render_config = value

    @property
    def adapter(self) -> dspy.Adapter:
        return self.llm.adapter

    @property
    def manifest(self) -> dict | None:
        return self.llm.manifest

    @property
    def rubric_sha256(self) -> str:
        """The LLM part's `rubric_sha256` with the stack."""
        return digest({"llm": self.llm.rubric_sha256, HYBRID_KEY: self.stack.to_dict()})

    def operating_point(self) -> dict:
        return {"llm": self.llm.operating_point(), HYBRID_KEY: self.stack.to_dict()}

    def pass_rule(self) -> PassRule:
        """The stack's P(pass) against its threshold."""
        return PassRule("score", float(self.stack.threshold))

    def check_certificate_on_first_run(self, where: str) -> None:
        self.llm.check_certificate_on_first_run(where)  # the LLM part runs the check when it is called

    def render(self, trajectory: Trajectory | str, config: RenderConfig | None = None) -> str:
        """The LLM part's text (the features are a separate input, `inputs_of`)."""
        return self.llm.render(trajectory, config)

    def inputs_of(self, trajectory: Trajectory) -> dict:
        """``{"trajectory": the LLM part's text, "features": the trajectory's observable features}``."""
        return {"trajectory": self.llm.render(trajectory), "features": feature_values(trajectory)}

    def _inputs(self, trajectory, features) -> tuple[str, dict[str, float]]:
        trajectory = trajectory_input(trajectory)
        if isinstance(trajectory, Trajectory):
            return self.llm.render(trajectory), feature_values(trajectory)
        return trajectory, checked_features(features, self.stack.model.inputs[1:], "hybrid")

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

    def _prediction(self, llm_prediction, features: Mapping[str, float]) -> dspy.Prediction:
        llm = Verdict.from_dict(dict(llm_prediction))
        return verdict_prediction(self.stack.verdict(llm, features), llm_prediction.raw, before=llm)

    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Save as a frozen JSON program: the LLM part's, with the stack in its manifest."""
        if save_program:
            raise InputError("HybridJudge saves as JSON only; pickled programs are not supported")
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
