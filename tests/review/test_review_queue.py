"""The review queue's order and filters, and the byte-offset indexes under it."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.core.verdict import VerdictLineError
from rubricforge_dspy.review.index import DataIndex, VerdictFileIndex
from rubricforge_dspy.review.labels import LabelsFile
from rubricforge_dspy.review.queue import Filters, Queue


def verdict(ident, passed, score, **more):
    return {"id": ident, "task_id": more.pop("task", "t"), "passed": passed, "score": score, "abstained": False,
            "reason": "ok", **more}


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_escalated_then_label_next_then_false_passes_then_false_fails_then_closeness(tmp_path):
    rows = [
        verdict("far", True, 0.99),                              # rest, far from the threshold
        verdict("near", False, 0.45),                            # rest, near it
        verdict("false-fail", False, 0.1, label=1),
        verdict("false-pass", True, 0.9, label=0),
        verdict("agreed", True, 0.9, label=1),                   # a label that agrees: rest
        verdict("picked-2", True, 0.7), verdict("picked-1", True, 0.99),
        verdict("esc-far", False, 0.0, stage="escalated"), verdict("esc-near", False, 0.5, escalated=True),
        verdict("floor", False, 0.2, stage="floor"),
    ]
    index = VerdictFileIndex(write(tmp_path / "v.jsonl", rows))
    with LabelsFile(tmp_path / "l.jsonl", "ana") as labels:
        queue = Queue(index, labels, label_next={"picked-1": 1, "picked-2": 2})
        order = [index.ids[i] for i in queue.order]
        assert order == ["esc-near", "esc-far", "picked-1", "picked-2", "false-pass", "false-fail",
                         "near", "floor", "agreed", "far"]
        labels.label("near", "fail")
        unlabeled, _ = queue.view(Filters(labeled="no"))
        assert "near" not in [index.ids[i] for i in unlabeled] and len(unlabeled) == len(rows) - 1
        floor, _ = queue.view(Filters(stage="floor"))
        assert [index.ids[i] for i in floor] == ["floor"]
        assert queue.progress()["labeled"] == 1 and queue.progress()["total"] == len(rows)


def test_an_existing_labels_file_overrides_the_verdict_lines_labels(tmp_path):
    index = VerdictFileIndex(write(tmp_path / "v.jsonl", [verdict("a", True, 0.9, label=1), verdict("b", True, 0.9)]))
    with LabelsFile(tmp_path / "l.jsonl", "ana") as labels:
        queue = Queue(index, labels, existing={"a": 0})
        assert [index.ids[i] for i in queue.order][0] == "a" and queue.group_name(queue.order[0]) == "false pass"


def test_a_repeated_verdict_id_is_refused_naming_both_lines(tmp_path):
    path = write(tmp_path / "v.jsonl", [verdict("a", True, 0.9), verdict("b", True, 0.9), verdict("a", False, 0.1)])
    with pytest.raises(VerdictLineError, match=r"v.jsonl:3: duplicate id 'a' \(first on line 1\)"):
        VerdictFileIndex(path)


def test_the_data_index_reads_one_record_by_offset_whatever_its_key_order(tmp_path):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "done"}]
    rows = [{"id": "first", "task_id": "t1", "messages": messages, "reward": 1.0},
            {"task_id": "t2", "messages": messages, "reward": 0.0, "id": "id-last"},
            {"id": "esc\\\"aped\u00e9", "task_id": "t3", "messages": messages, "reward": 0.0}]
    path = write(tmp_path / "d.jsonl", rows)
    data = DataIndex([path])
    assert sorted(data.ids()) == sorted(r["id"] for r in rows)
    for row in rows:
        assert data.get(row["id"]).id == row["id"]
    assert data.get("absent") is None


def test_escalated_lines_come_nearest_the_threshold_first_by_the_escalating_stage_confidence(tmp_path):
    """Escalations are abstentions (score 0.0): their order is the confidence of the stage that escalated them
    (``score_calibrated``), nearest the threshold first; one without a confidence comes last."""

    def escalated(ident, confidence):
        return {"id": ident, "task_id": "t", "passed": False, "score": 0.0, "abstained": True,
                "error": "escalated: no stage was sure", "error_kind": "escalated", "stage": "escalated",
                "score_calibrated": confidence, "escalated_by": None if confidence is None else "judge"}

    rows = [escalated("none", None), escalated("far", 0.21), escalated("nearest", 0.52), escalated("near", 0.7),
            verdict("rest", True, 0.5)]
    index = VerdictFileIndex(write(tmp_path / "v.jsonl", rows))
    with LabelsFile(tmp_path / "l.jsonl", "ana") as labels:
        order = [index.ids[i] for i in Queue(index, labels).order]
    assert order == ["nearest", "near", "far", "none", "rest"]


def test_the_task_filter_matches_any_part_of_the_name_in_any_case(tmp_path):
    rows = [verdict("a", True, 0.9, task="airline/12"), verdict("b", True, 0.5, task="Airline/3"),
            verdict("c", True, 0.9, task="retail/1"), verdict("d", False, 0.1, task="airline/12")]
    index = VerdictFileIndex(write(tmp_path / "v.jsonl", rows))
    with LabelsFile(tmp_path / "l.jsonl", "ana") as labels:
        queue = Queue(index, labels)

        def ids(task):
            return [index.ids[i] for i in queue.view(Filters(task=task))[0]]

        assert ids("AIR") == [index.ids[i] for i in queue.order if index.ids[i] != "c"]  # queue order kept
        assert ids("line/1") == [index.ids[i] for i in queue.order if index.ids[i] in ("a", "d")]
        assert ids("retail/1") == ["c"] and ids("nothing") == []
