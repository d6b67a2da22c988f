"""Examples as data (`load_examples`, `to_examples`), the named list results of `load_trajectories` and
`join_labels`, and ``label=None`` as THE unlabeled case: at the riskiest consumers (the report's
agreement, the floor fit, the induction input check) an unlabeled run is refused, never counted as a
failure."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import dspy
import pytest

from rubricforge_dspy.core.trajectory import Trajectory, UnlabeledError, labeled_only, require_labels
from rubricforge_dspy.core.verdict import Verdict, read_verdicts, verdict_line
from rubricforge_dspy.data import (
    Examples,
    Joined,
    Trajectories,
    join_labels,
    load_examples,
    load_trajectories,
    to_examples,
)
from rubricforge_dspy.data.label_checks import LabelTally
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from tests.support.helpers import make_dataset

CANARY = "CANARY-EXAMPLES-5d1c"
CANARY_REWARD = 0.7315926  # read from the data: label 1 under reward > 0
LABEL_FILE_REWARD = 0.4142135  # read from the label file: label 1 under reward > 0
FULL_VIEW = RenderConfig(max_tokens=10**7, max_step_chars=10**7)  # render everything, hide nothing


def _record(i: int, reward, **extra) -> dict:
    return {
        "id": f"run:t{i}:0", "task_id": f"t{i}",
        "messages": [
            {"role": "system", "content": f"{CANARY}.system"},
            {"role": "user", "content": f"Book flight {i}."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{\"n\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "Booked."},
        ],
        "reward": reward,
        "metadata": {"reward_info": f"{CANARY}.reward_info", "gold_actions": [f"{CANARY}.gold"]},
        **extra,
    }


def write_trajectories(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def data(tmp_path):
    """t0 labeled by its reward (the canary value), t1 failed, t2 and t3 unlabeled (reward null); a
    label file labels t2 with a reward of its own and a canary column, and leaves t3 unlabeled."""
    runs = write_trajectories(tmp_path / "runs.jsonl", [_record(0, CANARY_REWARD), _record(1, 0.0),
                                                  _record(2, None), _record(3, None)])
    labels = tmp_path / "labels.csv"
    labels.write_text(f"id,reward,note\nrun:t2:0,{LABEL_FILE_REWARD},{CANARY}.label_file\n", encoding="utf-8")
    return runs, labels


def test_load_examples_joins_labels_and_keeps_unlabeled_as_none(data):
    runs, labels = data
    examples = load_examples(runs, labels=labels)
    assert isinstance(examples, Examples) and isinstance(examples, list) and len(examples) == 4
    by_id = {ex.id: ex for ex in examples}
    assert all(isinstance(ex, dspy.Example) and isinstance(ex.trajectory, Trajectory) for ex in examples)
    assert all(set(ex.inputs().keys()) == {"trajectory"} for ex in examples)
    assert set(examples[0].labels().keys()) == {"label", "reward", "task_id", "id"}
    assert (by_id["run:t0:0"].label, by_id["run:t0:0"].reward) == (1, pytest.approx(CANARY_REWARD))
    assert (by_id["run:t1:0"].label, by_id["run:t1:0"].reward) == (0, 0.0)
    assert (by_id["run:t2:0"].label, by_id["run:t2:0"].reward) == (1, pytest.approx(LABEL_FILE_REWARD))
    assert (by_id["run:t3:0"].label, by_id["run:t3:0"].reward) == (None, None)  # unlabeled: the caller decides
    assert by_id["run:t3:0"].task_id == "t3"
    report = examples.report
    assert report.load.loaded == 4 and report.join.matched == 1 and report.join.without_label == ["run:t0:0",
                                                                                                 "run:t1:0",
                                                                                                 "run:t3:0"]
    assert (report.labeled, report.unlabeled, report.tally.positives) == (3, 1, 2)
    assert "1 unlabeled" in report.summary()
    assert [ex.id for ex in examples.labeled()] == ["run:t0:0", "run:t1:0", "run:t2:0"]


def test_rendered_example_carries_no_label_reward_or_hidden_canary(data):
    runs, labels = data
    examples = load_examples(runs, labels=labels, format="jsonl")
    assert examples[0].trajectory.hidden["metadata"]["reward_info"].startswith(CANARY)  # the canaries were read
    assert examples[2].trajectory.hidden["label_source"].endswith(":2")
    for ex in examples:
        text = render_trajectory(ex.trajectory, FULL_VIEW)
        assert "Book flight" in text  # the observable steps are there
        for canary in (CANARY, str(CANARY_REWARD), str(LABEL_FILE_REWARD), "label_source", "reward"):
            assert canary not in text, (ex.id, canary)


def test_require_label_names_the_first_unlabeled_file_and_record(data):
    runs, labels = data
    with pytest.raises(UnlabeledError) as caught:
        load_examples(runs, labels=labels, require_label=True)
    message = str(caught.value)
    assert "run:t3:0" in message and str(runs) in message and "record 3" in message and "1 of 4" in message


def test_to_examples_keeps_the_report_of_what_it_was_given(data):
    runs, labels = data
    loaded = load_trajectories(runs)
    examples = to_examples(loaded)
    assert examples.report.load is loaded.report and examples.report.join is None
    assert examples.report.unlabeled == 2
    joined = join_labels(loaded, labels)
    assert to_examples(joined).report.join is joined.report
    with pytest.raises(TypeError, match="item 1 is a dict"):
        to_examples([loaded[0], {"id": "x"}])


def test_load_and_join_return_lists_with_a_report(data):
    runs, labels = data
    loaded = load_trajectories(runs)
    assert isinstance(loaded, Trajectories) and isinstance(loaded, list)
    assert loaded.report.loaded == 4 and "loaded 4" in repr(loaded)
    assert [t.label for t in loaded] == [1, 0, None, None]
    assert type(loaded[:2]) is list  # a slice is a plain list: the report describes the whole load
    joined = join_labels(loaded, labels)
    assert isinstance(joined, Joined) and joined.report.matched == 1 and joined.report.changed == 1
    assert [t.label for t in joined] == [1, 0, 1, None]
    with pytest.raises(ValueError):  # the old tuple form fails loudly
        trajectories, report = loaded


def test_trajectory_label_none_is_the_unlabeled_case():
    t = make_dataset(1)[0]
    unlabeled = replace(t, label=None, reward=None)
    assert t.labeled and not unlabeled.labeled
    with pytest.raises(ValueError, match="0, 1 or None"):
        replace(t, label=2)
    assert labeled_only([t, unlabeled]) == [t]
    with pytest.raises(UnlabeledError, match="the floor fit needs labels, but 1 of 2"):
        require_labels([t, unlabeled], "the floor fit")


def _with_unlabeled(n: int = 12, unlabeled: int = 4) -> list[Trajectory]:
    """Labeled trajectories (half passed) plus `unlabeled` ones (label None) that, counted as failures,
    would change every statistic."""
    data = make_dataset(n)
    return data + [replace(t, id=f"{t.id}:u", task_id=f"u{i}", label=None, reward=None)
                   for i, t in enumerate(make_dataset(unlabeled))]


def test_tally_counts_unlabeled_apart_from_failures():
    tally = LabelTally()
    for t in _with_unlabeled(12, 4):
        tally.add(t)
    assert (tally.labeled, tally.unlabeled, tally.positives, tally.negatives) == (12, 4, 6, 6)


def test_report_refuses_unlabeled_verdicts_instead_of_counting_them_failed(tmp_path):
    from rubricforge_dspy.report import write_report
    from rubricforge_dspy.report.records import RunError

    trajectories = _with_unlabeled(12, 4)
    path = tmp_path / "verdicts.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for t in trajectories:
            handle.write(json.dumps(verdict_line(t, Verdict.from_answer(False, 0.1, "no"))) + "\n")
    lines = read_verdicts(path)
    assert [(lines[t.id]["label"], lines[t.id]["reward"]) for t in trajectories[-4:]] == [(None, None)] * 4
    assert lines[trajectories[0].id]["label"] == trajectories[0].label
    with pytest.raises(RunError, match="4 of 16 verdicts are unlabeled"):
        write_report(path, tmp_path / "report.md", figures=False, n_resamples=100)
    # labeled through a label file, the same verdicts are reported
    labels = tmp_path / "labels.jsonl"
    write_trajectories(labels, [{"id": t.id, "label": 0} for t in trajectories[-4:]])
    out = write_report(path, tmp_path / "report.md", figures=False, n_resamples=100, labels=labels)
    assert out.exists()


def test_old_verdict_lines_read_unchanged(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"id": "a", "passed": True, "score": 0.9, "abstained": False, "label": 1,
                                "reward": 1.0}) + "\n" +
                    json.dumps({"id": "b", "passed": False, "score": 0.1, "abstained": False, "label": None,
                                "reward": None}) + "\n", encoding="utf-8")
    lines = read_verdicts(path)
    assert (lines["a"]["label"], lines["b"]["label"]) == (1, None)


def test_floor_fit_refuses_unlabeled_trajectories():
    from rubricforge_dspy.judge.floor import SymptomFloor
    from rubricforge_dspy.trust.floor_cv import floor_report

    data = _with_unlabeled(12, 4)
    with pytest.raises(UnlabeledError, match="the floor fit needs labels, but 4 of 16"):
        SymptomFloor.fit(data)
    with pytest.raises(UnlabeledError, match="4 of 16"):
        floor_report(data)
    assert SymptomFloor.fit(labeled_only(data)).trained_on == {"n": 12, "positives": 6, "tasks": 12}


def test_induction_input_check_refuses_unlabeled_trajectories():
    from rubricforge_dspy.induction import InductionConfig
    from rubricforge_dspy.induction.inducer import check_induction_data

    data = _with_unlabeled(24, 2)
    train, val = data[:12], data[12:]
    config = InductionConfig(budget=400)
    with pytest.raises(UnlabeledError, match="induction needs labels, but 2 of 26"):
        check_induction_data(train, val, config)
    check_induction_data(train, labeled_only(val), config)  # the labeled ones pass the check


def test_split_and_certify_refuse_unlabeled():
    from rubricforge_dspy.trust.certify import _check_labels

    data = _with_unlabeled(12, 1)
    with pytest.raises(UnlabeledError, match="split_by_task"):
        split_by_task(data)
    with pytest.raises(UnlabeledError, match="certificate needs labels"):
        _check_labels(data, "test.jsonl")
