"""`check_mapping` (what `rubricforge map check` prints): match counts, skipped records, per-field empty
counts with the fields empty in more than a share flagged, and the first record as the judge reads it."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats.mapping import MappingError, iter_mapped
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.pipeline.map_check import check_mapping
from tests.support.mapping_samples import SAMPLES


def test_counts_empty_fields_and_renders_the_first_record():
    sample = SAMPLES["reflexion_humaneval"]
    report = check_mapping(sample.data, sample.mapping)
    assert (report.records, report.loaded, report.skipped) == (3, 3, [])
    assert report.empty["steps.path"] == 2 and report.empty["final_answer"] == 1
    assert report.empty.get("task", 0) == 0 and report.empty.get("label", 0) == 0
    assert ("steps.path", 2) in report.mostly_empty and ("final_answer", 1) not in report.mostly_empty
    assert not report.ok and dict(report.labels) == {1: 2, 0: 1}
    first = next(iter_mapped(sample.data, sample.mapping))
    assert report.first_render == render_trajectory(first) and report.first_id == "HumanEval/0"
    text = report.format()
    assert "records matched: 3; loaded: 3; skipped: 0" in text
    assert "steps.path: 2  <- empty in more than 50%" in text and "final_answer: 1\n" in text
    assert "has_close_elements" in text  # the task, as the judge reads it
    assert "distance = abs(elem - elem2)" not in text  # the gold solution is hidden
    assert text.endswith("NOT OK: mostly empty: steps.path, steps.thought")
    assert check_mapping(sample.data, sample.mapping, empty_share=0.9).ok


def test_a_misspelled_path_is_reported_never_silently_empty(tmp_path):
    document = json.loads(SAMPLES["reflexion_humaneval"].mapping.read_text())
    document["task"] = "promt"  # typo: resolves to nothing in every record
    mapping = tmp_path / "typo.json"
    mapping.write_text(json.dumps(document), encoding="utf-8")
    report = check_mapping(SAMPLES["reflexion_humaneval"].data, mapping)
    assert report.empty["task"] == 3 and ("task", 3) in report.mostly_empty
    assert "task: 3  <- empty in more than 50%" in report.format()


def test_skipped_records_are_listed_with_file_and_record():
    sample = SAMPLES["toolbench"]
    report = check_mapping(sample.data, sample.mapping)
    assert (report.records, report.loaded, len(report.skipped)) == (3, 2, 1)
    assert report.empty["messages.path"] == 1 and report.empty["final_answer"] == 1
    text = report.format()
    assert "69_ChatGPT_DFS_woFilter_w2.json, record G1_answer/69_ChatGPT_DFS_woFilter_w2: no observable step" in text
    assert "NOT OK: 1 records skipped" in text


def test_nothing_matched_is_not_ok(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    report = check_mapping(empty, SAMPLES["toolbench"].mapping)
    assert report.loaded == 0 and not report.ok
    assert "no file in this folder matches the mapping's glob '**/*.json'" in report.format()
    assert "no record loaded: nothing to render" in report.format()


def test_bad_arguments_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="empty_share"):
        check_mapping(SAMPLES["mint"].data, SAMPLES["mint"].mapping, empty_share=1.5)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "records": "*", "actions": "a", "lable": "ok == true"}), encoding="utf-8")
    with pytest.raises(MappingError, match="key 'lable'"):
        check_mapping(SAMPLES["mint"].data, bad)


def test_unreadable_lines_are_counted_and_named(tmp_path):
    source = SAMPLES["mint"]
    data = tmp_path / "results.jsonl"
    lines = source.data.read_text(encoding="utf-8").splitlines()
    data.write_text("\n".join([lines[0], '{"state": {"history": [', lines[2]]) + "\n", encoding="utf-8")
    report = check_mapping(data, source.mapping)
    assert (report.records, report.unreadable, report.loaded) == (2, 1, 2)
    (file, record, problem), = report.skipped
    assert record == 1 and "malformed JSON (line 2" in problem
    assert "records matched: 2 (and 1 unreadable); loaded: 2; skipped: 1" in report.format()
