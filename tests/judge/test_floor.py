"""The symptom floor: features per format, no hidden field in any feature, JSON round trip, task-grouped
cross-validation, and the length giveaway rule."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from rubricforge_dspy.core.judge_names import gives_away
from rubricforge_dspy.core.trajectory import Step
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.features import FEATURES, LENGTH_FEATURES, feature_matrix, feature_values
from rubricforge_dspy.judge.floor import FloorError, SymptomFloor
from rubricforge_dspy.trust.floor_cv import cross_validate, floor_report, grouped_folds, task_groups
from tests.support.helpers import SHIPPED, bundled_missing, make_dataset, make_trajectory

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"


def test_features_of_a_known_episode():
    good, bad = feature_values(make_trajectory(0, success=True)), feature_values(make_trajectory(1, success=False))
    assert set(good) == set(FEATURES)
    assert good["successful_commits"] == 1 and good["tool_errors"] == 0 and good["unbacked_claim"] == 0
    assert good["unconfirmed_commits"] == 0  # the user said yes before the booking
    assert bad["tool_errors"] == 1 and bad["failed_commits"] == 1 and bad["successful_commits"] == 0
    assert bad["unbacked_claim"] == 1 and bad["claim_after_failed_commit"] == 1
    assert bad["tool_error_rate"] == 0.5 and bad["tool_calls"] == 2 and bad["user_turns"] == 2


@pytest.mark.parametrize("fmt", sorted(SHIPPED))
def test_features_are_defined_for_every_shipped_format(fmt):
    trajectories = load_trajectories(SHIPPED[fmt])
    x = feature_matrix(trajectories)
    assert x.shape == (len(trajectories), len(FEATURES)) and np.isfinite(x).all()
    column = dict(zip(FEATURES, x.T, strict=True))
    assert (column["tool_calls"] > 0).any() and column["log_steps"].std() > 0
    if fmt != "adapt":  # ADaPT logs hold actions only: no tool results, so no errors and no commits
        assert (column["successful_commits"] > 0).any()


def test_no_evaluator_field_reaches_a_feature():
    """Canaries in reward, label, hidden, id and task: the features stay the same."""
    for original in [*make_dataset(6), *load_trajectories(SHIPPED["tau_bench"])[:5]]:
        canary = dataclasses.replace(
            original, id="CANARY-ID", task_id="CANARY-TASK", agent="CANARY", reward=0.123456, label=1 - original.label,
            hidden={"reward_info": {"reward": 1.0, "note": "booked confirmed error ERROR"},
                    "gold_actions": [{"name": "book_reservation"}] * 5, "instruction": "yes yes yes CANARY"})
        assert feature_values(canary) == feature_values(original)
    floor = SymptomFloor.fit(make_dataset(10))
    flipped = [dataclasses.replace(t, label=1 - t.label, reward=1.0 - t.reward, hidden={"x": "CANARY"})
               for t in make_dataset(10)]
    assert np.array_equal(floor.predict_proba(flipped), floor.predict_proba(make_dataset(10)))


def test_floor_json_round_trip_is_exact_and_predicts_like_sklearn():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    trajectories = load_trajectories(SHIPPED["tau_bench"])
    floor = SymptomFloor.fit(trajectories)
    text = floor.to_json()
    again = SymptomFloor.from_json(text)
    assert again.to_json() == text and again == floor
    assert np.array_equal(again.predict_proba(trajectories), floor.predict_proba(trajectories))
    assert "pickle" not in text and json.loads(text)["model"]["inputs"] == list(FEATURES)
    reference = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, class_weight="balanced", max_iter=5000))
    reference.fit(feature_matrix(trajectories), [t.label for t in trajectories])
    np.testing.assert_allclose(floor.predict_proba(trajectories),
                               reference.predict_proba(feature_matrix(trajectories))[:, 1], atol=1e-6)


def test_length_only_reads_steps_and_turns_only():
    model = SymptomFloor.length_only(make_dataset(10))
    assert model.features == LENGTH_FEATURES and model.name == "length_only"


@pytest.mark.parametrize("change, problem", [
    (lambda d: d.update(kind="pickle"), "not a symptom floor"),
    (lambda d: d["model"].update(coef=[1.0]), f"'coef' must be a list of {len(FEATURES)}"),
    (lambda d: d["model"].update(inputs=["reward"] + list(FEATURES[1:])), "feature names"),
    (lambda d: d["model"].update(intercept=float("nan")), "intercept"),
    (lambda d: d.update(version=99), "version"),
])
def test_a_bad_floor_file_is_refused_with_the_reason(change, problem):
    data = SymptomFloor.fit(make_dataset(10)).to_dict()
    change(data)
    with pytest.raises(FloorError, match=problem):
        SymptomFloor.from_dict(data)


def test_fitting_needs_both_classes():
    with pytest.raises(FloorError, match="passed and failed"):
        SymptomFloor.fit([make_trajectory(i, success=True) for i in range(4)])


def test_task_grouped_folds_never_put_one_task_on_both_sides():
    data = make_dataset(23, trials=4)
    groups = np.array(task_groups(data))
    folds = grouped_folds(data, n_splits=5, seed=3)
    assert len(folds) == 5
    seen = np.zeros(len(data), dtype=int)
    for train, test in folds:
        assert not set(groups[train]) & set(groups[test])
        seen[test] += 1
    assert (seen == 1).all()
    cv = cross_validate(data, folds=folds)
    for number, (_, test) in enumerate(folds):
        assert (cv.folds[test] == number).all()


def test_cross_validated_floor_learns_the_symptom_and_the_report_says_so():
    data = make_dataset(30, trials=2)  # failures hit a tool error and still claim success
    report = floor_report(data, n_resamples=200)
    rows = {row["judge"]: row for row in report["rows"]}
    assert rows["floor"]["kappa"] == 1.0 and rows["floor"]["false_pass_rate"] == 0.0
    assert rows["floor"]["false_pass_ci_high"] > 0.0  # an exact interval, not a point
    assert rows["length_only"]["auc"] < 0.75 and report["length_gives_away"] is False
    assert report["n"] == 60 and report["tasks"] == 30 and sum(report["folds"]["test_sizes"]) == 60


def _padded(t, extra: int):
    steps = list(t.steps[:-1]) + [Step("assistant", "Let me check again."), Step("user", "ok")] * extra + [t.steps[-1]]
    return dataclasses.replace(t, steps=tuple(steps))


def test_length_gives_the_outcome_away_when_failures_run_long():
    """Successes and failures look alike except for length: the length-only row catches it."""
    rng = np.random.default_rng(0)
    data = []
    for i in range(60):
        t = make_trajectory(i, success=i % 2 == 0)
        t = dataclasses.replace(t, steps=tuple(s if s.kind != "tool_result" else dataclasses.replace(s, is_error=False)
                                               for s in t.steps))  # no error symptom left
        data.append(_padded(t, int(rng.integers(0, 3)) + (0 if t.label else 4)))
    report = floor_report(data, n_resamples=300)
    rows = {row["judge"]: row for row in report["rows"]}
    assert rows["length_only"]["auc"] > 0.9 and report["length_gives_away"] is True


def test_giveaway_rule():
    assert gives_away(0.8, 0.6) is True
    assert gives_away(0.8, 0.45) is False  # could be chance
    assert gives_away(0.7, 0.6) is False  # below the AUC bar
    assert gives_away(float("nan"), None) is None


def test_few_tasks_get_fewer_folds_and_every_item_is_scored_once():
    data = make_dataset(3)  # 3 tasks, 2 passed
    folds = grouped_folds(data, n_splits=5)
    assert 2 <= len(folds) <= 3 and sorted(i for _, test in folds for i in test) == [0, 1, 2]
    with pytest.raises(FloorError, match="at least 2 tasks"):
        grouped_folds(make_dataset(1, trials=3))


def test_public_names():
    from rubricforge_dspy import judge

    assert judge.SymptomFloor is SymptomFloor and judge.HybridJudge.__name__ == "HybridJudge"


@pytest.mark.parametrize("folder", ["otel", "langfuse"])
def test_features_are_defined_for_the_trace_formats(folder):
    if not (DATA / folder).is_dir():
        pytest.skip(bundled_missing(DATA / folder))
    trajectories = load_trajectories(DATA / folder)
    x = feature_matrix(trajectories)
    assert len(trajectories) >= 2 and np.isfinite(x).all()
    assert (x[:, FEATURES.index("tool_calls")] > 0).any() and (x[:, FEATURES.index("user_turns")] > 0).all()


def test_cross_validation_of_one_trajectory_per_class_is_refused_by_name():
    """Two labeled trajectories, one of each class: no two folds exist; a FloorError (exit 2) says why."""
    from rubricforge_dspy.judge.floor import FloorError
    from rubricforge_dspy.trust.floor_cv import grouped_folds
    from tests.support.helpers import make_trajectory

    items = [make_trajectory(0, success=True, task="a"), make_trajectory(1, success=False, task="b")]
    with pytest.raises(FloorError, match="at least 2 labeled trajectories of one class"):
        grouped_folds(items)
