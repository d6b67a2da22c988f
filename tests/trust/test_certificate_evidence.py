"""A certificate records the evidence its verdicts were made on; applying it to verdicts made on other evidence
(certified on complete, rechecked on cut, or the reverse) warns, and so does a gate between a judge that read
whole episodes and one that read cut ones (issue 40 item 1)."""

from __future__ import annotations

import json
import warnings

import pytest

from rubricforge_dspy.core.verdict import EvidenceRecord
from rubricforge_dspy.trust.certificate import EvidenceMismatchWarning, compute_certificate, evidence_shares, recheck
from rubricforge_dspy.trust.gate import gate_verdict_files

WHOLE = EvidenceRecord.whole_episode(10).to_dict()
CUT = EvidenceRecord(steps=100, whole=14, clipped=2, elided=84, chars_cut=90_000, complete=False).to_dict()


def lines(evidence, n=40, offset=0):
    out = []
    for i in range(n):
        label = int(i % 2 == 0)
        passed = bool(label) or i % 10 == 1
        line = {"id": f"x{i + offset}", "task_id": f"t{i + offset}", "label": label, "passed": passed,
                "score": 0.9 if passed else 0.1, "abstained": False}
        if evidence is not None:
            line["evidence"] = evidence
        out.append(line)
    return out


def test_the_certificate_records_its_evidence_and_a_recheck_on_other_evidence_warns():
    certificate = compute_certificate(lines(WHOLE), resamples=50)
    assert certificate["evidence"] == {"complete": 40, "cut": 0, "unknown": 0, "cut_share": 0.0}
    with pytest.warns(EvidenceMismatchWarning, match="rests on complete evidence.*on cut evidence"):
        recheck(certificate, lines(CUT, offset=100))
    reverse = compute_certificate(lines(CUT), resamples=50)
    with pytest.warns(EvidenceMismatchWarning, match="rests on cut evidence.*on complete evidence"):
        recheck(reverse, lines(WHOLE, offset=100))
    with warnings.catch_warnings():
        warnings.simplefilter("error", EvidenceMismatchWarning)
        recheck(certificate, lines(WHOLE, offset=100))  # the same evidence: no warning
        recheck(certificate, lines(None, offset=100))  # unknown evidence: nothing to compare
        recheck(compute_certificate(lines(None), resamples=50), lines(CUT, offset=100))
    assert evidence_shares(lines(None))["cut_share"] is None


def test_the_gate_warns_when_the_two_judges_read_differently(tmp_path):
    def write(name, records):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return path

    whole, cut = write("whole.jsonl", lines(WHOLE)), write("cut.jsonl", lines(CUT))
    with pytest.warns(EvidenceMismatchWarning, match="baseline's verdicts"):
        gate_verdict_files(cut, whole)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EvidenceMismatchWarning)
        gate_verdict_files(whole, write("whole2.jsonl", lines(WHOLE)))
