"""Calibrated scores: a monotone map from the judge's raw score to P(the trajectory passed), fit on
labeled validation verdicts and stored as plain JSON in the program's manifest (key ``"calibration"``).

Two methods (scikit-learn):

- ``"platt"``: Platt scaling, a logistic regression of the label on the raw score,
  ``p = 1 / (1 + exp(-(a * score + b)))`` (J. Platt, "Probabilistic outputs for support vector machines",
  1999). Fit with ``sklearn.linear_model.LogisticRegression`` (lbfgs, ``C = 1e6``: effectively
  unpenalized; Platt's target smoothing is not used). Stored: ``{"a": .., "b": ..}``.
- ``"isotonic"``: isotonic regression of the label on the score (Zadrozny & Elkan, KDD 2002), fit with
  ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")``. Stored: its thresholds
  ``{"x": [...], "y": [...]}``; applied by linear interpolation between them, as scikit-learn predicts.

`neyman_pearson_threshold` then chooses the pass threshold on calibrated scores so that the validation
false-pass rate stays at most ``alpha`` (see its docstring for the rule).

A calibration map never sees anything but the score and the label: no text, no reward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from rubricforge_dspy.core.errors import InputError

CALIBRATION_KEY = "calibration"
METHODS = ("platt", "isotonic")
NOTHING_PASSES = 1.01  # a pass threshold above every calibrated score (JSON has no infinity)


class CalibrationError(InputError):
    """Data that cannot fit a calibration map, or a stored map that cannot be read."""


@dataclass(frozen=True)
class Calibration:
    """A fitted map from raw score to calibrated probability. `n`: verdicts it was fit on."""

    method: str
    parameters: dict[str, Any]
    n: int
    extra: dict[str, Any] = field(default_factory=dict)

    def apply_many(self, scores: Sequence[float] | np.ndarray) -> np.ndarray:
        s = np.clip(np.asarray(scores, dtype=float), 0.0, 1.0)
        if self.method == "platt":
            z = self.parameters["a"] * s + self.parameters["b"]
            probabilities: np.ndarray = 1.0 / (1.0 + np.exp(-z))
            return probabilities
        interpolated: np.ndarray = np.clip(np.interp(s, self.parameters["x"], self.parameters["y"]), 0.0, 1.0)
        return interpolated

    def apply(self, score: float) -> float:
        """The calibrated score of one raw score."""
        return float(self.apply_many([score])[0])

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "parameters": self.parameters, "n": self.n, **self.extra}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Calibration":
        method = data.get("method")
        if method not in METHODS:
            raise CalibrationError(f"calibration method must be one of {METHODS}, got {method!r}")
        parameters = dict(data.get("parameters") or {})
        needed = ("a", "b") if method == "platt" else ("x", "y")
        if any(name not in parameters for name in needed):
            raise CalibrationError(f"a {method} calibration needs parameters {needed}, got {sorted(parameters)}")
        if method == "isotonic" and (len(parameters["x"]) != len(parameters["y"]) or not parameters["x"]):
            raise CalibrationError("isotonic thresholds x and y must be non-empty and of equal length")
        extra = {k: v for k, v in data.items() if k not in ("method", "parameters", "n")}
        return cls(method, parameters, int(data.get("n") or 0), extra)


def _arrays(scores: Iterable[float], labels: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
    s, y = np.asarray(list(scores), dtype=float), np.asarray(list(labels))
    if s.shape != y.shape or s.ndim != 1:
        raise CalibrationError(f"scores and labels must be two 1-D sequences of one length, "
                               f"got {s.shape} and {y.shape}")
    if not np.all(np.isfinite(s)) or s.min(initial=0) < 0 or s.max(initial=1) > 1:
        raise CalibrationError("scores must be finite numbers in [0, 1]")
    if not np.isin(y, (0, 1)).all():
        raise CalibrationError("labels must be 0 or 1")
    return s, y.astype(int)


def fit(scores: Iterable[float], labels: Iterable[int], method: str = "platt") -> Calibration:
    """Fit a calibration map on validation verdicts (raw scores and 0/1 labels); needs both classes."""
    if method not in METHODS:
        raise CalibrationError(f"method must be one of {METHODS}, got {method!r}")
    s, y = _arrays(scores, labels)
    if len(np.unique(y)) < 2:
        raise CalibrationError(f"calibration needs passed and failed items; "
                               f"all {len(y)} labels are {y[0] if len(y) else '-'}")
    if method == "platt":
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=1e6, solver="lbfgs", max_iter=1000).fit(s.reshape(-1, 1), y)
        parameters: dict[str, Any] = {"a": float(model.coef_[0, 0]), "b": float(model.intercept_[0])}
    else:
        from sklearn.isotonic import IsotonicRegression

        model = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(s, y)
        parameters = {"x": [float(v) for v in model.X_thresholds_], "y": [float(v) for v in model.y_thresholds_]}
    # metrics imports scipy and scikit-learn (~1 s): only fitting a calibration pays for it, not every judge run
    from rubricforge_dspy.metrics import expected_calibration_error

    calibration = Calibration(method, parameters, int(len(y)))
    ece_before = expected_calibration_error(y, s)
    ece_after = expected_calibration_error(y, calibration.apply_many(s))
    return Calibration(method, parameters, int(len(y)),
                       {"ece_before": round(ece_before, 4), "ece_after": round(ece_after, 4), "ece_bins": 10,
                        "note": "ECE on the data the map was fit on (in-sample)"})


def from_manifest(manifest: Mapping[str, Any] | None) -> Calibration | None:
    """The calibration stored in a program's manifest, or None."""
    data = (manifest or {}).get(CALIBRATION_KEY)
    return Calibration.from_dict(data) if data else None


@dataclass(frozen=True)
class Threshold:
    """A pass threshold (pass when ``score >= threshold``) and what it achieves on the data it was chosen on."""

    threshold: float
    false_pass_rate: float
    true_pass_rate: float
    alpha: float
    negatives: int
    positives: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: a threshold of ``inf`` (pass nothing) and an undefined rate are written as null."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()}


def neyman_pearson_threshold(scores: Iterable[float], labels: Iterable[int], alpha: float) -> Threshold:
    """The pass threshold on (calibrated) scores with validation false-pass rate at most `alpha`.

    Rule: a trajectory passes when ``score >= t``. Among the candidate thresholds (every distinct
    score, and ``inf``: pass nothing), take the *smallest* ``t`` whose false-pass rate on the
    validation items, ``#{failed, score >= t} / #failed``, is ``<= alpha``: the most passes (highest
    true-pass rate) the constraint allows (the Neyman-Pearson criterion: maximize power subject to a
    bound on type-I error, here a false pass). Ties at ``t`` pass together, so the bound holds exactly
    on validation. It is an empirical bound: on new data the rate varies around it (with few failed
    items, a lot); the certificate measures it on held-out data.
    """
    if not 0.0 <= alpha < 1.0:
        raise CalibrationError(f"alpha must be in [0, 1), got {alpha}")
    s, y = _arrays(scores, labels)
    negatives, positives = s[y == 0], s[y == 1]
    if negatives.size == 0:
        raise CalibrationError("no failed items: the false-pass rate cannot be bounded")
    for t in [*np.unique(s), math.inf]:
        fpr = float(np.mean(negatives >= t))
        if fpr <= alpha:
            tpr = float(np.mean(positives >= t)) if positives.size else math.nan
            return Threshold(float(t), fpr, tpr, alpha, int(negatives.size), int(positives.size))
    raise AssertionError("unreachable: t = inf passes nothing")
