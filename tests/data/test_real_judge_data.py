"""The shipped real-judge sets (evals/real_judges.py): they load, ids join 1:1 with the recorded verdicts, labels
are 0/1, the recorded stage decides with the judge's own verdict, and no label reaches what a judge reads."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from evals.real_judges import DATA, SETS, judge_alone, load_real_judge_set, load_real_judge_sets
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.verdict import read_verdicts
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.judge.recorded import RecordedJudge


@pytest.fixture(scope="module")
def sets():
    return load_real_judge_sets()


def test_devai_loads_with_its_groups(sets):
    data = sets["devai"]
    assert len(data.trajectories) == 1097
    assert len(data.task_ids) == len(data.trajectories)
    assert data.task_ids == [str(t.task_id) for t in data.trajectories]
    assert len(set(data.task_ids)) == 55
    assert {t.agent for t in data.trajectories} == {"GPT-Pilot", "MetaGPT", "OpenHands"}
    assert len({t.id for t in data.trajectories}) == len(data.trajectories)


@pytest.mark.parametrize("name", sorted(SETS))
def test_labels_binary_and_ids_join_one_to_one(sets, name):
    data = sets[name]
    labels = [t.label for t in data.trajectories]
    assert set(labels) == {0, 1}  # both classes, nothing unlabeled
    ids = {t.id for t in data.trajectories}
    assert data.verdicts
    for path in data.verdicts.values():
        lines = read_verdicts(path)
        assert set(lines) == ids and len(lines) == len(ids)
        for ident, line in lines.items():  # the judge gave pass/fail only: score derived plainly from passed
            assert line["score"] == (1.0 if line["passed"] else 0.0), ident
            assert not line["abstained"] and not line["contradiction"]


@pytest.mark.parametrize("name", sorted(SETS))
def test_recorded_stage_decides_with_the_judges_passed(sets, name):
    data = sets[name]
    for path in data.verdicts.values():
        lines = read_verdicts(path)
        stage = RecordedJudge.from_file(path)
        for trajectory in data.trajectories[::7]:
            prediction = stage(trajectory)
            assert bool(prediction.passed) == bool(lines[trajectory.id]["passed"]), trajectory.id


def test_a_verdict_file_that_misses_an_id_is_refused(tmp_path):
    data_file, judges = SETS["devai"]
    for relative in (data_file, *judges.values()):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DATA / relative, tmp_path / relative)
    verdict_file = tmp_path / next(iter(judges.values()))
    kept = verdict_file.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]
    verdict_file.write_text("".join(kept), encoding="utf-8")
    with pytest.raises(InputError, match="1 trajectories without a line"):
        load_real_judge_set("devai", tmp_path)


@pytest.mark.parametrize("name", sorted(SETS))
def test_no_label_in_the_rendered_trajectory(sets, name):
    data = sets[name]
    config = RenderConfig()
    verdict_reasons = {line["reason"] for path in data.verdicts.values() for line in read_verdicts(path).values()}
    for trajectory in data.trajectories:
        shown = render_trajectory(trajectory, config)
        flipped = dataclasses.replace(trajectory, label=1 - trajectory.label, reward=float(1 - trajectory.label))
        assert render_trajectory(flipped, config) == shown, trajectory.id  # the label changes nothing shown
        for hidden in ("human_as_a_judge", "satisfied=", '"satisfied"', '"label"', "gray_box", *verdict_reasons):
            assert hidden not in shown, (trajectory.id, hidden)
        assert json.dumps(trajectory.hidden.get("metadata", {}))[:40] not in shown


def test_judge_alone_counts_match_the_lines(sets):
    data = sets["devai"]
    judge = next(iter(data.verdicts))
    row = judge_alone(data, judge)
    lines = read_verdicts(data.verdicts[judge])
    labels = {t.id: t.label for t in data.trajectories}
    wrong = sum(bool(lines[i]["passed"]) != bool(labels[i]) for i in labels)
    false_pass = sum(bool(lines[i]["passed"]) and labels[i] == 0 for i in labels)
    assert row["disagreement"]["k"] == wrong and row["disagreement"]["n"] == len(labels)
    assert row["false_pass_rate"]["k"] == false_pass
    assert row["false_pass_rate"]["n"] == sum(v == 0 for v in labels.values())
    low, high = row["false_pass_rate"]["ci95_exact"]
    assert low < row["false_pass_rate"]["rate"] < high
