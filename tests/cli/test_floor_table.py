"""`rubricforge floor`'s one streaming pass (`pipeline.floor_job.read_floor_data`): the `FeatureTable` gives the
numbers of the Trajectory-list path."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from rubricforge_dspy.cli.data_options import data_spec, load_data
from rubricforge_dspy.cli.floor import cmd_floor
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.evidence.features import FEATURES, FeatureTable, feature_matrix
from rubricforge_dspy.evidence.symptoms import heuristic_verdict
from rubricforge_dspy.judge.floor import SymptomFloor
from rubricforge_dspy.pipeline.floor_job import read_floor_data
from rubricforge_dspy.trust.floor_cv import cross_validate, floor_report, write_cv_verdicts
from tests.support.helpers import bundled_missing, make_dataset

SHIPPED = Path(__file__).resolve().parents[2] / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


def _args(**extra) -> argparse.Namespace:
    base = dict(data=[SHIPPED], format="auto", labels=None, label_threshold=None, skip_bad=False, command="floor",
                folds=5, seed=0, resamples=200, json=True, out=None, verdicts_dir=None, save_floor=None)
    return argparse.Namespace(**{**base, **extra})


@pytest.fixture(scope="module")
def shipped():
    if not SHIPPED.is_file():
        pytest.skip(bundled_missing(SHIPPED))
    return SHIPPED


def test_table_holds_the_features_and_heuristic_of_each_trajectory():
    data = make_dataset(6, trials=2)
    table = FeatureTable.build(iter(data))
    assert len(table) == len(data) and table.ids == tuple(t.id for t in data)
    assert np.array_equal(table.x, feature_matrix(data))
    assert table.heuristic_score.tolist() == [heuristic_verdict(t)[1] for t in data]
    assert table.labels.tolist() == [t.label for t in data]
    sub = table.take([3, 1])
    assert sub.ids == (data[3].id, data[1].id) and np.array_equal(sub.x, feature_matrix([data[3], data[1]]))


def test_table_path_gives_the_list_paths_numbers():
    data = make_dataset(8, trials=2)
    table = FeatureTable.build(data)
    assert floor_report(table, n_resamples=100) == floor_report(data, n_resamples=100)
    a, b = cross_validate(table), cross_validate(data)
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.folds, b.folds)
    assert SymptomFloor.fit(table).to_dict() == SymptomFloor.fit(data).to_dict()


def test_an_unlabeled_item_in_a_table_is_refused():
    data = make_dataset(4)
    table = FeatureTable.build([dataclasses.replace(data[0], label=None), *data[1:]])
    with pytest.raises(InputError, match=f"1 of 4 trajectories have none.*{data[0].id}"):
        floor_report(table)
    with pytest.raises(InputError, match="the floor fit needs labels"):
        SymptomFloor.fit(table)


@pytest.mark.slow
def test_floor_output_is_identical_through_the_table_and_the_list(shipped, tmp_path, capsys):
    loaded = load_data(_args(), need_labels=True)
    trajectories = loaded.trajectories
    capsys.readouterr()
    read = read_floor_data(data_spec(_args()))
    table = read.table
    assert read.left_out == loaded.left_out and len(read.report.skipped) == len(loaded.report.skipped)
    by_list = floor_report(trajectories, n_resamples=200)
    by_table = floor_report(table, n_resamples=200)
    assert json.dumps(by_table, sort_keys=True) == json.dumps(by_list, sort_keys=True)
    # the verdict files and the saved floor, too
    write_cv_verdicts(trajectories, tmp_path / "list")
    write_cv_verdicts(table, tmp_path / "table")
    for name in ("floor", "length_only", "heuristic"):
        assert (tmp_path / "table" / f"{name}.jsonl").read_text() == (tmp_path / "list" / f"{name}.jsonl").read_text()
    assert SymptomFloor.fit(table).to_json() == SymptomFloor.fit(trajectories).to_json()
    # the command (which streams) prints the list path's report
    assert cmd_floor(_args()) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {k: printed[k] for k in by_list} == json.loads(json.dumps(by_list))


def _deep_size(value, seen=None) -> int:
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return value.nbytes + sys.getsizeof(value)
    size = sys.getsizeof(value)
    if isinstance(value, (tuple, list)):
        size += sum(_deep_size(v, seen) for v in value)
    return size


def test_the_table_holds_no_trajectory_and_a_few_hundred_bytes_per_item(shipped, capsys):
    table = read_floor_data(data_spec(_args())).table
    fields = [getattr(table, name) for name in table.__dataclass_fields__]
    assert not any(isinstance(v, Trajectory) for f in fields if isinstance(f, tuple) for v in f)
    per_item = sum(_deep_size(f) for f in fields) / len(table)
    assert len(table) >= 50 and per_item < 500, per_item
    assert table.x.shape == (len(table), len(FEATURES))
