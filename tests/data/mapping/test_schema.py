"""A bad mapping is refused before any data is read, with an error naming the mapping file and the key."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats.mapping import MappingError, iter_mapped, load_mapping
from tests.support.mapping_samples import SAMPLES

GOOD = {"name": "demo", "records": {"from": "jsonl"}, "id": "id", "actions": "acts", "observations": "obs",
        "reward": "r", "label": "reward >= 1"}


def _write(tmp_path, document, name="map.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document) if name.endswith(".json") else document, encoding="utf-8")
    return path


@pytest.mark.parametrize("change, key, words", [
    ({"task-id": "x"}, "task-id", "unknown key"),
    ({"records": {"from": "csv"}}, "records.from", "is not one of"),
    ({"records": {"from": "jsonl", "path": "items"}}, "records.path", "one record per line"),
    ({"observations": "obs[?"}, "observations", "not a JMESPath expression"),
    ({"steps": {"path": "s", "observation": "o"}}, "actions", "exactly one of"),
    ({"label": {"rule": "reward >= high"}}, "label.rule", "label threshold"),
    ({"label": "status == 'done", "reward": None}, "label", "cannot read the value"),
    ({"label": {"field": "status"}}, "label.pass", "passing values"),
    ({"hidden": {"gold": ""}}, "hidden.gold", ""),
    ({"name": "has space"}, "name", ""),
])
def test_a_schema_or_expression_error_names_the_key(tmp_path, change, key, words):
    document = {**GOOD, **change}
    document = {k: v for k, v in document.items() if v is not None}
    path = _write(tmp_path, document)
    with pytest.raises(MappingError) as info:
        load_mapping(path)
    assert info.value.key == key, str(info.value)
    assert str(path) in str(info.value) and f"key '{key}'" in str(info.value)
    assert words in str(info.value)
    assert isinstance(info.value, InputError)  # exit 2 (bad input) on the command line


def test_a_missing_required_key_is_named(tmp_path):
    document = {k: v for k, v in GOOD.items() if k != "records"}
    with pytest.raises(MappingError, match="key 'records'.*required"):
        load_mapping(_write(tmp_path, document))


def test_a_rule_on_the_reward_needs_a_reward(tmp_path):
    document = {k: v for k, v in GOOD.items() if k != "reward"}
    with pytest.raises(MappingError) as info:
        load_mapping(_write(tmp_path, document))
    assert info.value.key == "label.rule"


def test_parallel_lists_need_actions(tmp_path):
    document = {k: v for k, v in GOOD.items() if k != "actions"}
    with pytest.raises(MappingError) as info:
        load_mapping(_write(tmp_path, document))
    assert info.value.key == "observations"


def test_malformed_yaml_and_json_name_the_file(tmp_path):
    with pytest.raises(MappingError, match="malformed YAML"):
        load_mapping(_write(tmp_path, "name: [unclosed\n", "m.yaml"))
    bad = tmp_path / "m.json"
    bad.write_text('{"name": "x",', encoding="utf-8")
    with pytest.raises(MappingError, match=r"m\.json: malformed JSON \(line 1"):
        load_mapping(bad)
    with pytest.raises(MappingError, match="no such mapping file"):
        load_mapping(tmp_path / "absent.json")


def test_the_shipped_mappings_are_valid_and_yaml_equals_json(tmp_path):
    for sample in SAMPLES.values():
        assert load_mapping(sample.mapping).name
    yaml_mapping = load_mapping(SAMPLES["intercode_sql"].mapping)
    import yaml

    as_json = _write(tmp_path, yaml.safe_load(SAMPLES["intercode_sql"].mapping.read_text()), "same.json")
    assert load_mapping(as_json) == yaml_mapping.__class__(**{**yaml_mapping.__dict__, "file": str(as_json)})


def test_a_bad_record_names_the_file_and_record_and_is_counted(tmp_path):
    mapping = _write(tmp_path, GOOD)
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "acts": ["ls"], "obs": ["x"], "r": 1},
        {"id": "b", "acts": ["ls", "cd"], "obs": ["x", "y", "z"], "r": 0},  # lists do not line up
        {"id": "c", "acts": ["ls"], "obs": ["x"], "r": "high"},  # not a number
        {"acts": ["ls"], "obs": ["x"], "r": 1},  # no id
        {"id": "a", "acts": ["pwd"], "obs": ["/"], "r": 1},  # repeated id
    ]) + "\n", encoding="utf-8")
    with pytest.raises(Exception) as info:
        list(iter_mapped(data, mapping))
    assert f"{data}, record 1" in str(info.value) and "observations has 3 items but actions has 2" in str(info.value)
    from rubricforge_dspy.data.formats import LoadReport

    report = LoadReport()
    loaded = list(iter_mapped(data, mapping, on_error="skip", report=report))
    assert [t.id for t in loaded] == ["a"] and report.loaded == 1
    problems = {record: problem for _, record, problem in report.skipped}
    assert sorted(problems) == [1, 2, 3, 4]
    assert "reward must be a number" in problems[2]
    assert "id: 'id' resolved to nothing" in problems[3]
    assert "duplicate trajectory id 'a'" in problems[4]


def test_value_sets_and_label_rules(tmp_path):
    document = {"name": "s", "records": {"from": "jsonl"}, "id": "id", "task": "q", "final_answer": "a",
                "label": {"field": "status", "pass": ["completedCorrect"], "fail": ["completedWrong", "timeout"]}}
    mapping = _write(tmp_path, document)
    data = tmp_path / "d.jsonl"
    rows = [{"id": "1", "q": "t", "a": "x", "status": "completedCorrect"},
            {"id": "2", "q": "t", "a": "y", "status": "timeout"},
            {"id": "3", "q": "t", "a": "z", "status": None},
            {"id": "4", "q": "t", "a": "w", "status": "crashed"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    from rubricforge_dspy.data.formats import LoadReport

    report = LoadReport()
    loaded = list(iter_mapped(data, mapping, on_error="skip", report=report))
    assert [(t.id, t.label) for t in loaded] == [("1", 1), ("2", 0), ("3", None)]
    (_, record, problem), = report.skipped
    assert record == 3 and "'crashed'" in problem and "neither the pass set" in problem
    with pytest.raises(InputError, match="does not apply"):
        list(iter_mapped(data, mapping, label_threshold=">=1"))
    # a short rule string is the same value set, without a fail set (anything else is a fail)
    short = _write(tmp_path, {**document, "label": "status == 'completedCorrect'"}, "short.json")
    assert [t.label for t in iter_mapped(data, short)] == [1, 0, None, 0]
    listed = _write(tmp_path, {**document, "label": "status in ['timeout', 'crashed']"}, "in.json")
    assert [t.label for t in iter_mapped(data, listed)] == [0, 1, None, 1]


def test_a_reward_threshold_overrides_the_mapping_rule():
    sample = SAMPLES["intercode_bash"]
    assert [t.label for t in iter_mapped(sample.data, sample.mapping)] == [1, 1, 0, 1]
    relaxed = list(iter_mapped(sample.data, sample.mapping, label_threshold=">=0.6"))
    assert [t.label for t in relaxed] == [1, 1, 1, 1] and relaxed[0].hidden["label_rule"] == "reward >= 0.6"
