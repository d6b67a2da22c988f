"""Calibration on a synthetic judge whose miscalibration is known: true P(pass | score) = score**3."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rubricforge_dspy.judge.loading import load_judge as load
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.operating_point import CalibrationError, fit, from_manifest, neyman_pearson_threshold
from rubricforge_dspy.metrics import expected_calibration_error
from rubricforge_dspy.program.store import freeze, read_program, update_manifest


def overconfident_judge(n, seed):
    """Raw scores uniform on [0, 1]; the item truly passed with probability score**3."""
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0, 1, n)
    labels = (rng.uniform(0, 1, n) < scores ** 3).astype(int)
    return scores, labels


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_calibration_lowers_held_out_ece(method):
    val_scores, val_labels = overconfident_judge(3000, seed=1)
    test_scores, test_labels = overconfident_judge(3000, seed=2)
    calibration = fit(val_scores, val_labels, method)
    before = expected_calibration_error(test_labels, test_scores)
    after = expected_calibration_error(test_labels, calibration.apply_many(test_scores))
    # Known miscalibration: E|s - s**3| = 1/2 - 1/4 = 0.25 before; the map removes most of it.
    assert before == pytest.approx(0.25, abs=0.03)
    assert after < before / 3
    # the map is monotone and close to the truth s**3 in the middle
    grid = np.linspace(0.05, 0.95, 19)
    assert np.all(np.diff(calibration.apply_many(grid)) >= -1e-12)
    assert calibration.apply(0.8) == pytest.approx(0.8 ** 3, abs=0.1)


def test_calibration_is_plain_json_in_a_loadable_program(tmp_path):
    scores, labels = overconfident_judge(500, seed=3)
    path = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), path)
    calibration = fit(scores, labels, "isotonic")
    update_manifest(path, {"calibration": calibration.to_dict()})
    stored = json.loads(path.read_text())["rubricforge"]["calibration"]
    assert stored["method"] == "isotonic" and stored["n"] == 500 and stored["ece_after"] < stored["ece_before"]
    again = from_manifest(read_program(path)["rubricforge"])
    assert again.apply(0.7) == pytest.approx(calibration.apply(0.7))
    assert load(path).calibration.apply(0.7) == pytest.approx(calibration.apply(0.7))  # still a loadable program


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.2])
def test_neyman_pearson_threshold_bounds_the_validation_false_pass_rate(alpha):
    scores, labels = overconfident_judge(2000, seed=4)
    calibrated = fit(scores, labels, "platt").apply_many(scores)
    chosen = neyman_pearson_threshold(calibrated, labels, alpha)
    negatives = calibrated[labels == 0]
    assert np.mean(negatives >= chosen.threshold) == chosen.false_pass_rate <= alpha
    # the smallest such threshold: one step lower breaks the bound
    lower = np.unique(calibrated)[np.unique(calibrated) < chosen.threshold]
    if lower.size:
        assert np.mean(negatives >= lower[-1]) > alpha
    # on fresh data from the same judge the rate lands near alpha
    test_scores, test_labels = overconfident_judge(4000, seed=5)
    test_calibrated = fit(scores, labels, "platt").apply_many(test_scores)
    assert np.mean(test_calibrated[test_labels == 0] >= chosen.threshold) == pytest.approx(alpha, abs=0.03)


def test_bad_input_is_refused():
    with pytest.raises(CalibrationError, match="passed and failed"):
        fit([0.2, 0.9], [1, 1])
    with pytest.raises(CalibrationError, match="in \\[0, 1\\]"):
        fit([0.2, 1.5], [0, 1])
    with pytest.raises(CalibrationError, match="no failed items"):
        neyman_pearson_threshold([0.2, 0.9], [1, 1], 0.1)
    nothing = neyman_pearson_threshold([0.9, 0.95], [0, 0], 0.0)
    assert nothing.to_dict()["threshold"] is None and nothing.false_pass_rate == 0.0
