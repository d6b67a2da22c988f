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
    assert "steps.path: 2 (67%)  <- empty in more than 50%" in text and "final_answer: 1 (33%)\n" in text
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
    assert "task: 3 (100%)  <- empty in more than 50%" in report.format()


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


def _status_log(tmp_path, statuses, answer_from="answer"):
    """A JSON Lines log whose label is a status field, and a mapping whose final answer comes from `answer_from`."""
    data = tmp_path / "runs.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "q": f"task {i}", "answer": f"answer {i}", "status": status,
                                        "tool": f"ls {i}", "out": f"file{i}.txt", "err": None}) + "\n"
                            for i, status in enumerate(statuses)), encoding="utf-8")
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"name": "status_log", "records": {"from": "jsonl"}, "id": "id", "task": "q",
                                   "steps": {"path": "[@]", "action": "tool", "observation": "out", "error": "err"},
                                   "final_answer": answer_from,
                                   "label": {"field": "status", "pass": ["completedCorrect"]}}), encoding="utf-8")
    return data, mapping


def test_a_label_planted_in_the_final_answer_is_reported_as_a_leak(tmp_path):
    statuses = ["completedCorrect", "completedWrong", "completedCorrect", "completedWrong"]
    data, mapping = _status_log(tmp_path, statuses, answer_from="status")
    report = check_mapping(data, mapping)
    assert report.loaded == 4 and not report.ok
    assert ("the label field's value", "completedCorrect") in report.leaks
    assert report.leaks[("the label field's value", "completedCorrect")][0] == 2
    text = report.format()
    assert "LEAK: the label field's value 'completedCorrect'" in text and "the label leaks into the render" in text
    clean_data, clean = _status_log(tmp_path, statuses)
    assert check_mapping(clean_data, clean).ok  # the same log, the answer from its own field: nothing leaks


def test_a_success_word_that_follows_the_label_is_a_leak(tmp_path):
    data, mapping = _status_log(tmp_path, ["completedCorrect", "completedWrong"] * 3)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    for row in rows:  # the log writes "solved" into the outputs of the passing runs only
        row["out"] += " (solved)" if row["status"] == "completedCorrect" else ""
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    report = check_mapping(data, mapping)
    assert ("a success word that follows the label", "solved") in report.leaks and not report.ok


def test_a_constant_label_is_a_warning(tmp_path):
    data, mapping = _status_log(tmp_path, ["completedCorrect", "completedWrong", "completedCorrect"])
    document = json.loads(mapping.read_text())
    document["label"]["pass"] = ["completedCorect"]  # the typo labels every record 0
    mapping.write_text(json.dumps(document), encoding="utf-8")
    report = check_mapping(data, mapping)
    assert dict(report.labels) == {0: 3} and report.ok
    assert any("every one of the 3 labeled records has label 0" in w for w in report.warnings)
    assert report.format().endswith("OK, with 1 warning(s) (above)")


def test_an_error_flag_null_everywhere_is_fine(tmp_path):
    data, mapping = _status_log(tmp_path, ["completedCorrect", "completedWrong"])
    report = check_mapping(data, mapping)
    assert report.empty["steps.error"] == 2 and not report.mostly_empty and report.ok and not report.warnings
    assert "steps.error: 2 (100%)  (null: the tool output's text says which results failed)" in report.format()


def test_an_error_flag_that_marks_every_result_is_a_warning(tmp_path):
    """InterCode-Python writes valid_action null on every turn: `map(&!@, ...)` made each one a failure."""
    sample = SAMPLES["intercode_bash"]
    python = sample.mapping.parent / "python" / "ic_python_multiturn_gpt-3.5_7_turns.sample.json"
    document = json.loads(sample.mapping.read_text())
    document["errors"] = "map(&!@, turn_history.valid_action)"  # the mapping before issue 35
    negated = tmp_path / "negated.json"
    negated.write_text(json.dumps(document), encoding="utf-8")
    report = check_mapping(python, negated)
    assert report.flags["flag_true"] == report.flags["results"] == 12
    assert any("marks 12 of 12 tool results as failed" in w for w in report.warnings)
    shipped = check_mapping(python, sample.mapping)
    assert shipped.flags["flag_null"] == 12 and shipped.flags["text_error"] == 7 and not shipped.warnings
