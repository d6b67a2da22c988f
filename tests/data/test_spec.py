"""`data.spec.DataSpec`: the frozen record of what data a command reads and how."""

import dataclasses

import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule
from rubricforge_dspy.data import DataSpec, DataSpecError
from rubricforge_dspy.data.formats import iter_trajectories
from rubricforge_dspy.data.labels import LabelJoin, LabelReading


def test_frozen_and_replace_returns_a_new_validated_record(tmp_path):
    spec = DataSpec([tmp_path / "a.jsonl"], label_rule=">=1")
    assert spec.paths == (str(tmp_path / "a.jsonl"),)
    assert spec.label_rule == LabelRule(1.0, inclusive=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.format = "jsonl"  # type: ignore[misc]
    spooled = spec.replace(paths=["spool.jsonl"], format="jsonl")
    assert (spooled.paths, spooled.format, spooled.label_rule) == (("spool.jsonl",), "jsonl", spec.label_rule)
    assert spec.paths == (str(tmp_path / "a.jsonl"),)  # the original is unchanged
    with pytest.raises(DataSpecError, match="on_error"):
        spec.replace(on_error="ignore")


@pytest.mark.parametrize("changes, words", [
    ({"on_error": "quiet"}, "on_error"),
    ({"limit": -1}, "limit"),
    ({"limit": True}, "limit"),
    ({"format": ""}, "format"),
    ({"session_key": ""}, "session_key"),
    ({"label_rule": "abc"}, "label_rule"),
    ({"labels_key": "id"}, "labels_key"),
    ({"label_reading": LabelReading()}, "label_reading"),
])
def test_contradictions_are_refused_as_input_errors(changes, words):
    with pytest.raises(DataSpecError, match=words) as caught:
        DataSpec(("a.jsonl",), **changes)
    assert isinstance(caught.value, InputError)  # exit 2 on the command line


def test_the_spec_reads_and_joins_what_it_says(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "task_id": "t", "reward": 0.5, "messages": [{"role": "user", "content": "hi"}]}\n'
                    '{"id": "b", "task_id": "t", "reward": 1.0, "messages": [{"role": "user", "content": "hi"}]}\n')
    labels = tmp_path / "l.jsonl"
    labels.write_text('{"key": "a", "label": 1}\n')
    spec = DataSpec([data], format="jsonl", label_rule=">=1", labels=labels, labels_key="key")
    read = {t.id: t.label for t in iter_trajectories(spec.paths, **spec.read_options())}
    assert read == {"a": 0, "b": 1}  # the spec's rule, not generic JSONL's reward > 0
    path = spec.labels_path
    assert path is not None and path == str(labels) and path.key == "key"
    join = LabelJoin(path)
    joined = {t.id: t.label for t in map(join.apply, iter_trajectories(spec.paths, **spec.read_options()))}
    assert joined["a"] == 1
    record = spec.to_dict()
    assert record["label_rule"] == str(LabelRule(1.0, inclusive=True)) and record["labels_key"] == "key"
