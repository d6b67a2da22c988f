"""The symptom floor: a logistic regression over the observable features of `floor.features`, stored as
plain JSON (never a pickle).

`LogisticModel` is the one linear model here (the floor, the length-only model and the hybrid judge's
stack all are one): inputs are standardized with the training mean and scale
(``sklearn.preprocessing.StandardScaler``), then ``p = 1 / (1 + exp(-(coef . x_std + intercept)))``
with coefficients from ``sklearn.linear_model.LogisticRegression`` (lbfgs, L2 penalty ``C = 1``,
``class_weight="balanced"``: both classes weigh the same whatever the base rate, so ``p >= 0.5`` is a
usable decision on a mostly-passing or mostly-failing set). Predictions are computed from the stored
numbers with numpy, so a model read back from JSON predicts exactly what the fitted one did.

`SymptomFloor` is that model over named trajectory features: the *floor* (every feature of
``FEATURES``) or the *length-only* model (``LENGTH_FEATURES``). It passes a trajectory when
``p >= 0.5`` (the verdict threshold of `rubricforge_dspy.core.verdict`), and returns verdicts in the shape
every judge returns. JSON layout (``to_dict``)::

    {"kind": "rubricforge.symptom_floor", "version": 1, "name": "floor" | "length_only",
     "model": {"inputs": [...], "mean": [...], "scale": [...], "coef": [...], "intercept": x,
               "solver": {...}},
     "trained_on": {"n": .., "positives": .., "tasks": ..}}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import dspy
import numpy as np

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.core.judge_names import FLOOR, LENGTH_ONLY
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.core.verdict import PASS_THRESHOLD, Verdict
from rubricforge_dspy.data.formats._json_stream import MAX_STREAM_DEPTH, within_depth
from rubricforge_dspy.evidence.features import (
    FEATURES,
    LENGTH_FEATURES,
    FeatureTable,
    check_names,
    feature_matrix,
    feature_values,
)
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.judge.contract import BaseJudge, JudgeT, trajectory_input, verdict_prediction
from rubricforge_dspy.lm.fingerprint import digest

__all__ = ["FloorError", "LogisticModel", "fit_logistic", "SymptomFloor", "FloorJudge", "checked_features",
           "FLOOR_KIND", "FLOOR_VERSION"]

FLOOR_KIND = "rubricforge.symptom_floor"
FLOOR_VERSION = 1
SOLVER = {"estimator": "sklearn.linear_model.LogisticRegression", "C": 1.0, "penalty": "l2", "solver": "lbfgs",
          "class_weight": "balanced", "scaler": "sklearn.preprocessing.StandardScaler"}


def checked_features(features: Mapping[str, float] | None, names: Sequence[str], judge: str) -> dict[str, float]:
    """`features` checked to hold a finite number for every name in `names` (the `features` input of the
    hybrid and the floor); raises `InputError` saying what to pass when they are missing."""
    if features is None:
        raise InputError(f"the {judge} judge reads the trajectory's observable features, not only its text: pass "
                         "a Trajectory (judge(trajectory=t)), or the text with features=feature_values(t)")
    missing = [name for name in names if name not in features]
    if missing:
        raise InputError(f"the {judge} judge needs the features {missing}; compute them with "
                         "rubricforge_dspy.evidence.features.feature_values(trajectory)")
    values = {name: float(features[name]) for name in names}
    if not all(np.isfinite(list(values.values()))):
        raise InputError(f"the {judge} judge's features must be finite numbers, got {values}")
    return values


class FloorError(InputError):
    """Data that cannot fit a floor, or a stored floor that cannot be read; the message says which."""


def _numbers(data: Mapping[str, Any], key: str, n: int | None, where: str) -> tuple[float, ...]:
    values = data.get(key)
    if not isinstance(values, list) or (n is not None and len(values) != n):
        raise FloorError(f"{where}: '{key}' must be a list of {n if n is not None else 'some'} numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise FloorError(f"{where}: '{key}' holds a value that is not a finite number")
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class LogisticModel:
    """A fitted, standardized logistic regression over named inputs (see the module docstring)."""

    inputs: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    solver: dict[str, Any] = field(default_factory=lambda: dict(SOLVER))

    def decision(self, x: np.ndarray) -> np.ndarray:
        """The linear score ``coef . (x - mean) / scale + intercept`` of each row of `x`."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, len(self.inputs))
        z = (x - np.array(self.mean)) / np.array(self.scale)
        linear: np.ndarray = z @ np.array(self.coef) + self.intercept
        return linear

    def predict(self, x: np.ndarray) -> np.ndarray:
        """P(passed) of each row of `x` (columns in the order of ``inputs``)."""
        probabilities: np.ndarray = 1.0 / (1.0 + np.exp(-self.decision(x)))
        return probabilities

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "mean": list(self.mean), "scale": list(self.scale),
                "coef": list(self.coef), "intercept": self.intercept, "solver": dict(self.solver)}

    @classmethod
    def from_dict(cls, data: object, where: str = "model") -> "LogisticModel":
        if not isinstance(data, Mapping):
            raise FloorError(f"{where}: expected a JSON object")
        inputs = data.get("inputs")
        if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs) \
                or len(set(inputs)) != len(inputs):
            raise FloorError(f"{where}: 'inputs' must be a non-empty list of distinct names")
        n = len(inputs)
        scale = _numbers(data, "scale", n, where)
        if any(s <= 0 for s in scale):
            raise FloorError(f"{where}: every 'scale' must be positive")
        intercept = data.get("intercept")
        if not isinstance(intercept, (int, float)) or isinstance(intercept, bool) or not math.isfinite(intercept):
            raise FloorError(f"{where}: 'intercept' must be a finite number")
        return cls(tuple(inputs), _numbers(data, "mean", n, where), scale, _numbers(data, "coef", n, where),
                   float(intercept), dict(data.get("solver") or {}))


def fit_logistic(x: np.ndarray, y: Sequence[int], inputs: Sequence[str]) -> LogisticModel:
    """Fit `LogisticModel` on rows `x` (columns named `inputs`) and 0/1 labels `y`; needs both classes."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x = np.asarray(x, dtype=np.float64).reshape(-1, len(inputs))
    labels = np.asarray(list(y), dtype=int)
    if len(labels) != len(x) or not len(labels):
        raise FloorError(f"need one label per row and at least one row, got {len(x)} rows and {len(labels)} labels")
    if len(np.unique(labels)) < 2:
        raise FloorError(f"fitting needs passed and failed trajectories to learn from; all {len(labels)} are "
                         f"{'passed' if labels[0] else 'failed'}")
    scaler = StandardScaler().fit(x)
    regression = LogisticRegression(C=SOLVER["C"], solver="lbfgs", class_weight="balanced", max_iter=5000)
    regression.fit(scaler.transform(x), labels)
    return LogisticModel(tuple(inputs), tuple(float(v) for v in scaler.mean_),
                         tuple(float(v) for v in scaler.scale_), tuple(float(v) for v in regression.coef_[0]),
                         float(regression.intercept_[0]))


@dataclass(frozen=True)
class SymptomFloor:
    """The floor (or the length-only model): `LogisticModel` over trajectory features; passes at p >= 0.5."""

    name: str
    model: LogisticModel
    trained_on: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fit(cls, trajectories: Iterable[Trajectory] | FeatureTable, features: Sequence[str] = FEATURES,
            name: str | None = None) -> "SymptomFloor":
        """Fit on labeled `trajectories` (their labels, and their steps through `feature_matrix`), or on a
        `FeatureTable` of them (the same numbers, computed once); an unlabeled one (``label=None``) raises
        `UnlabeledError` (`InputError` for a table)."""
        table = trajectories.require_labels("the floor fit") if isinstance(trajectories, FeatureTable) \
            else FeatureTable.build(require_labels(trajectories, "the floor fit"))
        features = check_names(features)
        name = name or (LENGTH_ONLY if features == LENGTH_FEATURES else FLOOR)
        model = fit_logistic(table.matrix(features), table.labels.tolist(), features)
        return cls(name, model, {"n": len(table), "positives": int(table.labels.sum()), "tasks": table.n_tasks})

    @classmethod
    def length_only(cls, trajectories: Iterable[Trajectory]) -> "SymptomFloor":
        return cls.fit(trajectories, LENGTH_FEATURES, LENGTH_ONLY)

    @property
    def features(self) -> tuple[str, ...]:
        return self.model.inputs

    def predict_proba(self, trajectories: Iterable[Trajectory] | FeatureTable) -> np.ndarray:
        """P(passed) of each trajectory (or each item of a `FeatureTable`)."""
        if isinstance(trajectories, FeatureTable):
            return self.model.predict(trajectories.matrix(self.features)) if len(trajectories) else np.zeros(0)
        items = list(trajectories)
        if not items:
            return np.zeros(0)
        return self.model.predict(feature_matrix(items, self.features))

    def probability(self, features: Mapping[str, float]) -> float:
        """P(passed) from the trajectory's feature values (at least the model's `features`)."""
        return float(self.model.predict(np.array([[float(features[name]) for name in self.features]]))[0])

    def verdict(self, trajectory: Trajectory) -> Verdict:
        """The floor's verdict on `trajectory` (its steps only)."""
        return self.verdict_of(float(self.predict_proba([trajectory])[0]))

    def verdict_of(self, p: float) -> Verdict:
        """The verdict of probability `p`: passed when ``p >= 0.5``."""
        return Verdict.from_answer(p >= PASS_THRESHOLD, p, f"{self.name}: logistic regression on "
                                   f"{len(self.features)} observable feature(s), p(pass) = {p:.3f}")

    def __call__(self, trajectory: Trajectory) -> dspy.Prediction:
        """The verdict in the shape every judge returns (a `dspy.Prediction` of a produced `Verdict`)."""
        return dspy.Prediction(**self.verdict(trajectory).to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": FLOOR_KIND, "version": FLOOR_VERSION, "name": self.name, "model": self.model.to_dict(),
                "trained_on": dict(self.trained_on)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: object, where: str = "floor") -> "SymptomFloor":
        if not isinstance(data, Mapping) or data.get("kind") != FLOOR_KIND:
            raise FloorError(f"{where}: not a symptom floor (expected \"kind\": \"{FLOOR_KIND}\")")
        if data.get("version") != FLOOR_VERSION:
            raise FloorError(f"{where}: floor version {data.get('version')!r}; this release reads {FLOOR_VERSION}")
        model = LogisticModel.from_dict(data.get("model"), f"{where}: model")
        try:
            check_names(model.inputs, f"{where}: model inputs")
        except ValueError as error:
            raise FloorError(str(error)) from None
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise FloorError(f"{where}: 'name' must be a non-empty string")
        return cls(name, model, dict(data.get("trained_on") or {}))

    @classmethod
    def from_json(cls, text: str, where: str = "floor") -> "SymptomFloor":
        """The floor `text` holds (`to_json`); `FloorError` naming `where` for anything else, including arrays
        or objects nested more than `MAX_STREAM_DEPTH` deep (refused before they are parsed or hashed)."""
        if not within_depth(text):
            raise FloorError(f"{where}: arrays or objects nested too deeply (more than {MAX_STREAM_DEPTH} levels; a "
                             "floor nests a few): refusing to read it")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise FloorError(f"{where}: not JSON ({error.msg})") from None
        return cls.from_dict(data, where)


class FloorJudge(BaseJudge):
    """A `SymptomFloor` behind the judge contract (`judge.contract.BaseJudge`), so the floor runs wherever
    a judge does (`dspy.Evaluate`, ``batch``, ``as_metric``). It reads no text and calls no LM: its input
    is the trajectory's observable ``features``, computed from a `Trajectory`, or passed with the text.

    Args:
        floor: the fitted floor (or length-only model).
    """

    def __init__(self, floor: SymptomFloor):
        super().__init__()
        self.floor = floor
        self.manifest: dict[str, Any] | None = None

    cost_per_item: float = 0.0  # free: no LM call, no judge verdict

    @property
    def stage_name(self) -> str:  # type: ignore[override]  # (a class attribute on the contract)
        """The floor's own name (``floor``)."""
        return self.floor.name

    @property
    def calls_lm(self) -> bool:
        return False

    @property
    def rubric(self) -> str:
        return ""

    @property
    def rubric_sha256(self) -> str:
        """sha256 of the stored floor (`SymptomFloor.to_dict`)."""
        return digest(self.floor.to_dict())

    def operating_point(self) -> dict[str, Any]:
        return {"floor": self.floor.to_dict(), "threshold": PASS_THRESHOLD}

    def render(self, trajectory: Trajectory | str, config: RenderConfig | None = None) -> str:
        """The trajectory's text (what the floor's reason may be read against; the floor itself reads
        only the features)."""
        trajectory = trajectory_input(trajectory)
        return render_trajectory(trajectory, config or RenderConfig()) if isinstance(trajectory, Trajectory) \
            else trajectory

    def inputs_of(self, trajectory: Trajectory) -> dict[str, Any]:
        """``{"trajectory": trajectory, "features": its observable features}`` (no text is rendered)."""
        return {"trajectory": trajectory, "features": feature_values(trajectory)}

    def forward(self, trajectory: Trajectory | str, features: Mapping[str, float] | None = None) -> dspy.Prediction:
        """The floor's verdict.

        Args:
            trajectory: a `Trajectory` (its features are computed), or text (then `features` is required).
            features: the observable features (`evidence.features.feature_values`).

        Returns:
            The contract's Prediction (``raw``: the model's probability and decision).

        Raises:
            InputError: text without features.
        """
        trajectory = trajectory_input(trajectory)
        if features is None and isinstance(trajectory, Trajectory):
            features = feature_values(trajectory)
        p = self.floor.probability(checked_features(features, self.floor.features, self.floor.name))
        return verdict_prediction(self.floor.verdict_of(p), {"passed": p >= PASS_THRESHOLD, "score": p})

    async def aforward(self, trajectory: Trajectory | str,
                       features: Mapping[str, float] | None = None) -> dspy.Prediction:
        """`forward` (no I/O: the floor is a formula)."""
        return type(self).forward(self, trajectory, features)  # (not `self.forward`: DSPy warns on a direct call)

    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Write the floor as its plain JSON (`SymptomFloor.to_json`); `load_judge` reads it back."""
        if save_program:
            raise InputError("FloorJudge saves as JSON only; pickled programs are not supported")
        Path(path).write_text(self.floor.to_json(), encoding="utf-8")

    def load(self: JudgeT, path: PathArg, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False,
             allow_unverified: bool = False) -> JudgeT:
        """Read a floor JSON file into this judge; returns it."""
        if allow_pickle:
            raise InputError(f"{path}: FloorJudge loads JSON only, never pickles")
        self.floor = SymptomFloor.from_json(regular_file(path, "floor file").read_text(encoding="utf-8"), str(path))
        return self
