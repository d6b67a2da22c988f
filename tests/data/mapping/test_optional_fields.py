"""Optional fields (``{"path": ..., "optional": true}``): their emptiness is counted and reported with its
share, never a failure of ``map check``; required fields keep the ``--empty-share`` threshold. And
``session_id``: a mapped field kept in ``hidden["session_id"]`` for session grouping (docs/MAPPING.md)."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.data.formats.mapping import MappingError, iter_mapped, load_mapping
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.pipeline.map_check import check_mapping


def _log(tmp_path, rows, **fields):
    mapping = {"name": "agent_log", "records": {"from": "jsonl"}, "id": "id", "task": "q",
               "actions": "acts", "observations": "obs", "reward": "r", **fields}
    (tmp_path / "map.json").write_text(json.dumps(mapping), encoding="utf-8")
    data = tmp_path / "log.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return data, tmp_path / "map.json"


def _rows(n=20, answered=2):
    """`n` records of an agent that answers in only `answered` of them."""
    return [{"id": f"t{i}", "q": f"task {i}", "acts": ["ls"], "obs": ["a.txt"], "r": i % 2,
             "answer": f"answer {i}" if i < answered else None, "sid": f"s{i // 4}"} for i in range(n)]


def test_an_optional_field_mostly_empty_is_reported_with_its_share_not_failed(tmp_path):
    data, mapping = _log(tmp_path, _rows(), final_answer={"path": "answer", "optional": True})
    report = check_mapping(data, mapping)
    assert report.ok and report.optional == ["final_answer"] and report.empty["final_answer"] == 18
    assert report.mostly_empty == []
    assert "final_answer: 18 (90%)  (optional: reported, not a problem)" in report.format()


def test_a_required_field_keeps_the_threshold(tmp_path):
    data, mapping = _log(tmp_path, _rows(), final_answer="answer")
    report = check_mapping(data, mapping)
    assert not report.ok and report.mostly_empty == [("final_answer", 18)]
    assert "final_answer: 18 (90%)  <- empty in more than 50%" in report.format()
    assert check_mapping(data, mapping, empty_share=0.95).ok  # the threshold as before


def test_optional_false_is_required(tmp_path):
    data, mapping = _log(tmp_path, _rows(), final_answer={"path": "answer", "optional": False})
    assert check_mapping(data, mapping).mostly_empty == [("final_answer", 18)]


def test_optional_fields_inside_steps_and_the_label(tmp_path):
    """The object form is a field anywhere an expression is: a step's field, a parallel list, the label field."""
    data, mapping = _log(tmp_path, _rows(), observations={"path": "missing", "optional": True},
                         label={"field": {"path": "r", "optional": True}, "pass": [1], "fail": [0]})
    loaded = load_mapping(mapping)
    assert loaded.optional_fields() == ["observations", "label"] and str(loaded.label_rule).startswith("r in")
    report = check_mapping(data, mapping)
    assert report.ok and report.empty["observations"] == 20


def test_an_optional_id_falls_back_to_the_default_id(tmp_path):
    rows = _rows(4)
    rows[1]["id"] = None
    data, mapping = _log(tmp_path, rows, id={"path": "id", "optional": True})
    assert [t.id for t in iter_mapped(data, mapping)] == ["t0", "log:1", "t2", "t3"]


@pytest.mark.parametrize("field", [{"path": "answer", "optinal": True}, {"optional": True},
                                   {"path": "answer", "optional": "yes"}])
def test_a_malformed_field_object_is_refused_naming_the_key(tmp_path, field):
    data, mapping = _log(tmp_path, _rows(2), final_answer=field)
    with pytest.raises(MappingError, match="final_answer"):
        load_mapping(mapping)


def test_session_id_is_kept_in_hidden_and_never_rendered(tmp_path):
    """A session id mapped from the log lands in ``hidden["session_id"]`` (as text), where session grouping
    reads it; the judge never sees it; a record without one is counted empty."""
    rows = _rows(6)
    for row in rows:
        row["sid"] = f"session-{row['id']}-x"
    rows[0]["sid"] = 4711
    rows[5]["sid"] = None
    data, mapping = _log(tmp_path, rows, session_id="sid")
    loaded = list(iter_mapped(data, mapping))
    assert [t.hidden.get("session_id") for t in loaded] == ["4711", "session-t1-x", "session-t2-x",
                                                            "session-t3-x", "session-t4-x", None]
    assert all("session-" not in render_trajectory(t) and "4711" not in render_trajectory(t) for t in loaded)
    assert check_mapping(data, mapping).empty["session_id"] == 1


def test_session_id_given_twice_is_refused(tmp_path):
    data, mapping = _log(tmp_path, _rows(2), session_id="sid", hidden={"session_id": "sid"})
    with pytest.raises(MappingError, match="hidden.session_id"):
        load_mapping(mapping)
