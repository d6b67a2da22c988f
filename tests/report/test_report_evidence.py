"""`report` splits disagreement and false-pass rate by what the judge read (the verdict line's ``evidence``):
complete, cut, unknown; and shows the share judged on cut evidence (issue 40 item 1)."""

from __future__ import annotations

from rubricforge_dspy.core.verdict import EvidenceRecord
from rubricforge_dspy.report import compute_report, load_run, render_markdown
from tests.support.verdicts import verdict, write

WHOLE = EvidenceRecord.whole_episode(10).to_dict()
CUT = EvidenceRecord(steps=103, whole=14, clipped=2, elided=87, chars_cut=250_000, complete=False).to_dict()


def test_the_report_splits_rates_by_complete_and_cut_evidence(tmp_path):
    lines = []
    # 10 items on complete evidence: 6 failed, 1 of them passed (a false pass), 4 passed labeled pass
    for i in range(10):
        label = int(i >= 6)
        lines.append(verdict(i, bool(label) or i == 0, 0.9 if (label or i == 0) else 0.1, label, evidence=WHOLE))
    # 8 on cut evidence: 4 failed, 3 of them passed; 4 passes; one passed item failed
    for i in range(10, 18):
        label = int(i >= 14)
        passed = (i in (10, 11, 12)) or (label == 1 and i != 17)
        lines.append(verdict(i, passed, 0.9 if passed else 0.1, label, evidence=CUT))
    # 2 older lines without the field
    lines += [verdict(18, False, 0.1, 0), verdict(19, True, 0.9, 1)]
    report = compute_report(load_run(write(tmp_path / "j.jsonl", lines)), n_resamples=50)
    (row,) = report["evidence"]
    assert (row["complete"]["n"], row["cut"]["n"], row["unknown"]["n"]) == (10, 8, 2)
    assert row["cut"]["share"] == 8 / 20
    assert (row["complete"]["false_passes"], row["complete"]["n_failed"]) == (1, 6)
    assert (row["cut"]["false_passes"], row["cut"]["n_failed"]) == (3, 4)
    assert row["complete"]["disagreements"] == 1 and row["cut"]["disagreements"] == 4
    assert row["cut"]["false_pass_rate"] == 0.75
    low, high = row["cut"]["false_pass_ci"]
    assert low < 0.75 < high
    text = render_markdown(report)
    assert "## Evidence read" in text and "judged on cut evidence" in text and "40.0%" in text


def test_a_report_on_lines_without_evidence_has_no_evidence_section(tmp_path):
    lines = [verdict(i, i % 2 == 0, 0.9 if i % 2 == 0 else 0.1, int(i % 3 == 0)) for i in range(12)]
    report = compute_report(load_run(write(tmp_path / "j.jsonl", lines)), n_resamples=50)
    assert report["evidence"] is None and "## Evidence read" not in render_markdown(report)
