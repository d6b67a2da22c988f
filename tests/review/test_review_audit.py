"""The review page's audit sample, without a browser: the queue puts the audit's decided items right after the
escalated ones, each label records its sample (escalated, audit, other), a draw given with ``--audit`` (what
`label-next --audit` wrote) is the one used, and ``audit_size=0`` draws none (issue 39, item 6)."""

from __future__ import annotations

import json

from rubricforge_dspy.review import ReviewInputs, ReviewState
from rubricforge_dspy.trust.label_next import draw_audit, write_audit
from tests.review.conftest import DEMO_DATA, DEMO_VERDICTS, journal_lines


def _verdicts(tmp_path, escalated: int):
    lines = [json.loads(x) for x in DEMO_VERDICTS.read_text().splitlines() if x.strip()]
    lines[escalated].update(stage="escalated", abstained=True, passed=False, error_kind="escalated")
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path, [x["id"] for x in lines]


def test_the_queue_leads_with_escalated_then_audit_items_and_each_label_records_its_sample(tmp_path):
    verdicts, ids = _verdicts(tmp_path, escalated=3)
    items = [(i, json.loads(line)["task_id"], i != ids[3]) for i, line in zip(ids, verdicts.read_text().splitlines(),
                                                                              strict=True)]
    draw = next(d for seed in range(50) if ids[3] not in (d := draw_audit(items, size=2, seed=seed)).ids)
    write_audit(draw, tmp_path / "given.audit.json")
    labels = tmp_path / "labels.jsonl"
    state = ReviewState(ReviewInputs(data=[DEMO_DATA], verdicts=verdicts, labels_out=labels, labeler="t",
                                     audit=tmp_path / "given.audit.json"))
    try:
        assert state.audit == draw and not (tmp_path / "labels.jsonl.audit.json").exists()
        order = [state.verdicts.ids[i] for i in state.queue.order]
        assert order[0] == ids[3] and set(order[1:1 + len(draw.decided)]) == set(draw.decided)
        assert [state.queue.group_name(i) for i in state.queue.order][:1 + len(draw.decided)] == \
            ["escalated"] + ["audit"] * len(draw.decided)
        other = next(i for i in ids if i not in draw.ids and i != ids[3])
        for ident in (ids[3], draw.decided[0], other):
            state.label(ident, "fail")
        assert state.audit_status()["labeled"] == 1
    finally:
        state.close()
    assert [(x["id"], x["sample"], x.get("audit")) for x in journal_lines(labels)] == [
        (ids[3], "escalated", None), (draw.decided[0], "audit", draw.digest), (other, "other", None)]


def test_no_audit_sample_when_its_size_is_zero(tmp_path):
    verdicts, ids = _verdicts(tmp_path, escalated=0)
    labels = tmp_path / "labels.jsonl"
    state = ReviewState(ReviewInputs(data=[DEMO_DATA], verdicts=verdicts, labels_out=labels, labeler="t",
                                     audit_size=0))
    try:
        assert state.audit is None and state.audit_status() is None
        assert "audit" not in [state.queue.group_name(i) for i in state.queue.order]
        state.label(ids[1], "pass")
    finally:
        state.close()
    assert not (tmp_path / "labels.jsonl.audit.json").exists()
    assert journal_lines(labels)[0]["sample"] == "other"
