"""The loaders read through a mapping: ``load_trajectories(path, mapping=...)`` (and the other loading
functions) give what `iter_mapped` gives, with the same report; a mapping registered as a format is read by
name; a mapping and a format together are refused."""

from __future__ import annotations

import pytest

import rubricforge_dspy as rf
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats import (
    LoadReport,
    default_label_rule,
    format_named,
    formats,
    iter_trajectories,
    iter_trajectory_counts,
    load_trajectories,
    trajectory_at,
    unregister_format,
)
from rubricforge_dspy.data.formats._records import TrajectoryCounts
from rubricforge_dspy.data.formats.mapping import MappingError, iter_mapped, load_mapping, register_mapping
from tests.support.mapping_samples import SAMPLES


def _expected(sample):
    report = LoadReport()
    return list(iter_mapped(sample.data, sample.mapping, on_error="skip", report=report)), report


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_load_trajectories_with_a_mapping_gives_what_iter_mapped_gives(name):
    sample = SAMPLES[name]
    expected, report = _expected(sample)
    for mapping in (sample.mapping, str(sample.mapping), load_mapping(sample.mapping)):  # a path or a Mapping
        loaded = rf.load_trajectories(sample.data, mapping=mapping, on_error="skip")
        assert list(loaded) == expected and [t.id for t in loaded] == list(sample.ids)
        assert [(t.label, t.reward, t.steps, t.hidden) for t in loaded] == \
               [(t.label, t.reward, t.steps, t.hidden) for t in expected]
        assert (loaded.report.loaded, loaded.report.skipped, loaded.report.label_rules) == \
               (report.loaded, report.skipped, report.label_rules)


def test_the_other_loading_functions_take_a_mapping_too():
    sample = SAMPLES["intercode_sql"]
    expected, _ = _expected(sample)
    assert list(iter_trajectories(sample.data, mapping=sample.mapping)) == expected
    counts = list(iter_trajectory_counts(sample.data, mapping=sample.mapping))
    assert counts == [TrajectoryCounts.of(t) for t in expected]
    assert trajectory_at(sample.data, 2, mapping=sample.mapping) == (expected[2], 3)
    assert trajectory_at(sample.data, 99, mapping=sample.mapping) == (None, len(expected))
    examples = rf.load_examples(sample.data, mapping=sample.mapping)
    assert [e.trajectory.id for e in examples] == list(sample.ids)
    assert [e.label for e in examples] == list(sample.labels)


def test_a_bad_record_raises_or_is_skipped_as_for_a_format():
    sample = SAMPLES["toolbench"]  # one of its three files is not a record of the mapping
    with pytest.raises(rf.core.TrajectoryFormatError) as raised:
        load_trajectories(sample.data, mapping=sample.mapping)
    assert raised.value.file.endswith(".json") and raised.value.record is not None
    loaded = load_trajectories(sample.data, mapping=sample.mapping, on_error="skip")
    assert len(loaded) == 2 and loaded.report.n_skipped == 1
    assert loaded.report.skipped[0][:2] == (raised.value.file, raised.value.record)


def test_a_mapping_and_a_format_together_are_refused():
    sample = SAMPLES["intercode_sql"]
    with pytest.raises(InputError, match=r"either format='jsonl' or mapping=, not both"):
        load_trajectories(sample.data, format="jsonl", mapping=sample.mapping)
    with pytest.raises(InputError, match="not both"):
        list(iter_trajectory_counts(sample.data, format="intercode_sql", mapping=sample.mapping))
    with pytest.raises(InputError, match="not both"):
        rf.load_examples(sample.data, format="tau_bench", mapping=sample.mapping)


def test_an_invalid_mapping_is_an_error_naming_its_key(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "records": {"from": "jsonl"}, "steps": {"path": "a", "obsrvation": "o"}}')
    with pytest.raises(MappingError, match=r"key 'steps.obsrvation'"):
        load_trajectories(SAMPLES["mint"].data, mapping=bad)


@pytest.fixture
def registered():
    names = []

    def register(mapping):
        fmt = register_mapping(mapping)
        names.append(fmt.name)
        return fmt
    yield register
    for name in dict.fromkeys(names):
        if format_named(name) is not None:
            unregister_format(name)


def test_a_registered_mapping_is_a_format_read_by_name(registered):
    sample = SAMPLES["toolbench"]  # a folder of one file per record: read as the mapping says, never scanned
    fmt = registered(sample.mapping)
    assert fmt.name == "toolbench_dfs" and fmt.origin == f"mapping ({sample.mapping})"
    assert registered(sample.mapping) is fmt  # the same mapping again: the record held
    listed = {f.name: f.origin for f in formats()}
    assert listed["toolbench_dfs"] == fmt.origin and listed["jsonl"] == "built-in"
    assert default_label_rule("toolbench_dfs") == load_mapping(sample.mapping).label_rule
    expected, report = _expected(sample)
    by_name = load_trajectories(sample.data, format="toolbench_dfs", on_error="skip")
    assert list(by_name) == expected and by_name.report.skipped == report.skipped
    assert trajectory_at(sample.data, 1, format="toolbench_dfs", on_error="skip") == (expected[1], 2)


def test_a_mapping_named_as_a_registered_format_is_refused(tmp_path, registered):
    clash = tmp_path / "clash.json"
    clash.write_text('{"name": "tau_bench", "records": {"from": "jsonl"}, "task": "q", "final_answer": "a"}')
    with pytest.raises(InputError, match=r"'tau_bench' is registered already \(built-in.*choose another name"):
        registered(clash)
    other = tmp_path / "other.json"  # another mapping file under a name a mapping holds
    other.write_text('{"name": "intercode_sql", "records": {"from": "jsonl"}, "task": "q", "final_answer": "a"}')
    registered(SAMPLES["intercode_sql"].mapping)
    with pytest.raises(InputError, match=r"'intercode_sql' is registered already \(mapping "):
        registered(other)


def test_a_job_fingerprint_covers_the_mapping_file(tmp_path, registered):
    """A verdict file judged through one mapping is not resumed on data read through a changed one."""
    import json

    from rubricforge_dspy.apply.job import checked_input

    sample = SAMPLES["intercode_bash"]
    document = json.loads(sample.mapping.read_text(encoding="utf-8"))
    first, second = tmp_path / "a" / "mapping.json", tmp_path / "b" / "mapping.json"
    for path, task in ((first, "query"), (second, "join(' ', [query, 'Answer briefly.'])")):
        path.parent.mkdir()
        path.write_text(json.dumps({**document, "task": task}), encoding="utf-8")

    def fingerprint(mapping):
        fmt = registered(mapping)
        scan, data = checked_input([str(sample.data)], format=fmt.name, label_threshold=None, on_error="raise",
                                   limit=None)
        unregister_format(fmt.name)
        return scan, data
    scan, one = fingerprint(first)
    assert scan.trajectories == len(sample.ids)
    assert fingerprint(first)[1] == one and fingerprint(second)[1] != one
