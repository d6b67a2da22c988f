"""Recalibration that keeps the guarantee (issue 39, item 6): the audit draw (reproducible, uniform over the
units of everything judged, so uniform over the decided items too, and made from ids and tasks only, never
labels), the labels journal's ``sample`` field, and the refit's selection (escalated items' labels left out of the
bound and counted, the audit sample's and the original labels kept), through the library and the command line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.label_journal import JournalLine, exchangeable_labels, iter_journal, read_journal
from rubricforge_dspy.data.label_records import LabelFileError
from rubricforge_dspy.data.labels import join_labels
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.trust.label_next import draw_audit, read_audit
from tests.support.cascade import REWARD_ABOVE_0
from tests.support.helpers import make_dataset
from tests.support.records import write_labeled_jsonl


def _population(tasks: int = 20, trials: int = 3) -> list[tuple[str, str, bool]]:
    """(id, task, decided): tasks t00..t04 wholly escalated, the rest decided but for one trial of every third."""
    return [(f"t{t:02d}-{k}", f"t{t:02d}", t >= 5 and not (t % 3 == 0 and k == 0))
            for t in range(tasks) for k in range(trials)]


def test_the_draw_is_reproducible_from_its_seed_and_ignores_file_order_and_verdicts():
    items = _population()
    first = draw_audit(items, size=6, seed=7)
    again = draw_audit(list(reversed(items)), size=6, seed=7)
    flipped = draw_audit([(i, t, not d) for i, t, d in items], size=6, seed=7)  # other verdicts, same items
    assert first.units == again.units == flipped.units and first.digest == again.digest == flipped.digest
    assert first.population == flipped.population and first.unit == "task" and len(first.units) == 6
    assert set(first.ids) == {i for i, t, _ in items if t in first.units}  # a drawn task brings all its trials
    assert set(first.decided) | set(first.escalated) == set(first.ids) and not set(first.decided) & set(first.escalated)
    assert draw_audit(items, size=6, seed=8).units != first.units
    assert draw_audit(items, size=500, seed=0).units == tuple(sorted({t for _, t, _ in items}))  # all of a small set
    no_tasks = draw_audit([(f"x{i}", "", True) for i in range(10)], size=3, seed=0)
    assert no_tasks.unit == "item" and len(no_tasks.ids) == 3
    with pytest.raises(InputError):
        draw_audit(items, size=0)


def test_the_draw_is_uniform_over_tasks_so_over_decided_items_and_escalated_ones_alike():
    items = _population(tasks=20)
    seeds, size = 4000, 5
    tasks, decided_items = Counter(), Counter()
    for seed in range(seeds):
        draw = draw_audit(items, size=size, seed=seed)
        tasks.update(draw.units)
        decided_items.update(draw.decided)
    expected = seeds * size / 20  # each task's inclusion probability is size / tasks
    spread = 5 * (seeds * 0.25 * 0.75) ** 0.5  # five binomial standard deviations
    assert all(abs(tasks[f"t{t:02d}"] - expected) < spread for t in range(20))
    # every decided item is drawn at the same rate, and the wholly escalated tasks as often as the others: a
    # sample of decided items only would be a sample of what the old cascade found easy
    assert all(abs(decided_items[i] - expected) < spread for i, _, d in items if d)
    assert abs(sum(tasks[f"t{t:02d}"] for t in range(5)) / 5 - expected) < spread


def test_the_journal_records_the_sample_and_refuses_an_unknown_one(tmp_path):
    path = tmp_path / "labels.jsonl"
    lines = [JournalLine("a", 1, False, "", "ana", "2026-12-07T09:00:00+00:00", False, 0, "audit", "d1"),
             JournalLine("b", 0, False, "", "ana", "2026-12-07T09:00:01+00:00", False, 0, "escalated"),
             JournalLine("c", 1, False, "", "ana", "2026-12-07T09:00:02+00:00", False, 0)]
    path.write_text("".join(json.dumps(line.to_record()) + "\n" for line in lines))
    read = list(iter_journal(path))
    assert [(x.id, x.sample, x.audit) for x in read] == [("a", "audit", "d1"), ("b", "escalated", None),
                                                         ("c", None, None)]
    assert "sample" not in lines[2].to_record()  # a line of unknown sample is written as before
    assert set(read_journal(path).entries) == {"a", "b", "c"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**lines[0].to_record(), "sample": "random"}) + "\n")
    with pytest.raises(LabelFileError, match=r"bad.jsonl:1: sample must be one of audit, escalated, other"):
        list(iter_journal(bad))


def _journal(path: Path, samples: dict[str, str | None], flip: dict[str, int]) -> Path:
    lines = [JournalLine(ident, flip[ident], False, "", "ana", "2026-12-07T09:00:00+00:00", False, 0, sample,
                         "d" if sample == "audit" else None) for ident, sample in samples.items()]
    path.write_text("".join(json.dumps(line.to_record()) + "\n" for line in lines))
    return path


def test_the_refit_keeps_audit_and_original_labels_and_counts_the_rest_out(tmp_path):
    data = make_dataset(12)
    ids = [t.id for t in data]
    samples = {ids[0]: "audit", ids[1]: "audit", ids[2]: "escalated", ids[3]: "escalated", ids[4]: "escalated",
               ids[5]: "other", ids[6]: None}
    journal = _journal(tmp_path / "labels.jsonl", samples, {i: 1 for i in samples})
    selection = exchangeable_labels(join_labels(data, journal), journal)
    assert [t.id for t in selection.kept] == [ids[0], ids[1], *ids[7:]]  # the audit's and the data's own labels
    assert selection.audit == 2 and selection.audit_draws == ["d"]
    assert {k: len(v) for k, v in selection.left_out.items()} == {"escalated": 3, "other": 1, "unrecorded": 1}
    text = selection.summary()
    assert "for the stages' training, not the calibration" in text and "3 of escalated items" in text
    assert selection.to_dict()["left_out"] == {"escalated": 3, "other": 1, "unrecorded": 1}
    csv = tmp_path / "labels.csv"
    csv.write_text("id,label\n" + "".join(f"{i},1\n" for i in ids[:5]))
    plain = exchangeable_labels(join_labels(data, csv), csv)  # a labels file that is no journal: all kept
    assert len(plain.kept) == 12 and plain.journal is None and plain.summary() == ""


def test_cascade_fit_leaves_escalated_labels_out_of_the_bound_and_says_so(halves, tmp_path, capsys):
    from rubricforge_dspy.data.formats.jsonl import to_record, write_records

    data = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))
    ids, truth = [t.id for t in data], {t.id: int(t.label) for t in data}
    samples = {**{i: "escalated" for i in ids[:40]}, **{i: "audit" for i in ids[40:60]},
               **{i: "other" for i in ids[60:65]}, ids[70]: "escalated"}
    unlabeled = set(ids[:65])  # judged later, labeled only on the page; ids[70] is a calibration item relabeled there
    cal = tmp_path / "cal.jsonl"
    write_records((to_record(t, reward=None if t.id in unlabeled else t.reward,
                             label=None if t.id in unlabeled else t.label) for t in data), cal)
    # the audit sample's labels agree with the data's; the escalated and chosen items' labels are flipped: had they
    # calibrated the bound, the fit would have been made on labels no random sample gives
    journal = _journal(tmp_path / "labels.jsonl", samples,
                       {i: truth[i] if samples[i] == "audit" else 1 - truth[i] for i in samples})
    out = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--data", str(cal), *REWARD_ABOVE_0,
                 "--labels", str(journal), "--alpha", "0.1", "--delta", "0.1", "--bound", "pooled",
                 "--method", "split_fixed_sequence",
                 "--out", str(out)]) == 0  # the selection is under test, not the per-stage power
    printed = capsys.readouterr().out
    assert "left out of the bound, for the stages' training, not the calibration" in printed
    assert "45 labels: 40 of escalated items" in printed and "5 of items a person chose" in printed
    assert "1 of those are items the data labeled, relabeled on the page" in printed
    report = load_judge(out).fit_report
    assert report["units"]["trials_used"] == len(ids) - 45
    assert report["labels_selected"] == {"journal": str(journal), "calibration": len(ids) - 45, "audit": 20,
                                         "relabeled": 1, "audit_draws": ["d"],
                                         "left_out": {"escalated": 40, "other": 5, "unrecorded": 0}}


def _verdict_lines(path: Path, data, *, labels: bool, escalate: set[str]) -> Path:
    lines = []
    for t in data:
        line = {"id": t.id, "task_id": t.task_id, "passed": True, "score": 0.9, "abstained": False, "stage": "floor"}
        if t.id in escalate:
            line.update(passed=False, score=0.0, abstained=True, stage="escalated", error_kind="escalated")
        if labels:
            line["label"] = 1 - int(t.label)  # labels in the verdict file: the draw must not read them
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_label_next_draws_and_records_the_audit_sample_before_any_label(tmp_path, capsys):
    data = make_dataset(12, trials=2)  # 12 tasks, two trials each
    pool = write_labeled_jsonl(tmp_path / "pool.jsonl", data)
    escalate = {data[0].id, data[5].id}
    records = []
    for name, labels in (("plain", False), ("labeled", True)):
        verdicts = _verdict_lines(tmp_path / f"{name}.v.jsonl", data, labels=labels, escalate=escalate)
        out = tmp_path / f"{name}.jsonl"
        assert main(["label-next", "--verdicts", str(verdicts), "--data", str(pool), "-k", "3", "--out", str(out),
                     "--audit", "4", "--audit-seed", "11"]) == 0
        printed = capsys.readouterr().out
        assert "audit sample: 4 of 12 tasks drawn uniformly (seed 11" in printed
        records.append(read_audit(tmp_path / f"{name}.audit.json"))
        queue = [json.loads(x) for x in (tmp_path / f"{name}.audit.jsonl").read_text().splitlines()]
        assert [r["id"] for r in queue] == [t.id for t in data if t.id in set(records[-1].decided)]
        assert all(r["label"] is None and r["metadata"]["audit"]["draw"] == records[-1].digest for r in queue)
    assert records[0].units == records[1].units and records[0].digest == records[1].digest  # labels change nothing
    draw = records[0]
    assert draw == read_audit(tmp_path / "plain.audit.json") and draw.seed == 11 and len(draw.ids) == 8
    assert set(draw.escalated) == escalate & set(draw.ids)
    assert main(["label-next", "--verdicts", str(tmp_path / "plain.v.jsonl"), "--data", str(pool), "-k", "3",
                 "--out", str(tmp_path / "again.jsonl"), "--audit-out", str(tmp_path / "plain.audit.json")]) == 2
    assert "a draw is made once, before any label" in capsys.readouterr().err
    assert not (tmp_path / "again.jsonl").exists()  # refused before anything was written
