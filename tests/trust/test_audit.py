"""The Goodhart audit: drift, GoodhartWarning, the baseline from the manifest, the labeling round trip."""

from __future__ import annotations

import json
import warnings

import dspy
import pytest
from scipy import stats

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from rubricforge_dspy.trust.audit import (
    AuditReport,
    GoodhartWarning,
    audit,
    baseline_from_manifest,
    load_labeled,
    sample_for_labeling,
)
from tests.support.helpers import make_dataset

PASS = {"reason": "Looks done.", "passed": True, "score": 0.9}
FAIL = {"reason": "A call returned an ERROR.", "passed": False, "score": 0.1}


def gullible():
    """Passes everything: every failed trajectory is a false pass."""
    return ScriptedLM(lambda messages: PASS, model="gullible")


def careful():
    """Fails trajectories with an error: right on `make_dataset` (failures hit an error)."""
    return ScriptedLM(lambda messages: FAIL if "(ERROR)" in last_user_text(messages) else PASS, model="careful")


def test_drift_is_detected_and_warned():
    data = make_dataset(8)  # 4 passed, 4 failed
    with pytest.warns(GoodhartWarning, match=r"rose from 0\.100 at freeze to 1\.000"):
        report = audit(TrajectoryJudge(), data, baseline_false_pass_rate=0.1, lm=gullible())
    assert report.drifted and report.false_pass_rate == 1.0 and report.delta == pytest.approx(0.9)
    assert report.n == 8 and report.n_failed == 4 and report.accuracy == 0.5 and report.n_abstained == 0
    assert sorted(report.false_pass_ids) == sorted(t.id for t in data if t.label == 0)
    assert report.judge_lm == "gullible" and report.baseline_source == "argument"
    text = report.format()
    assert "DRIFTED" in text and "false-pass rate now: 1.000 [0.398, 1.000], at freeze: 0.100" in text


def test_no_drift_when_the_judge_still_catches_failures():
    with warnings.catch_warnings():
        warnings.simplefilter("error", GoodhartWarning)
        report = audit(TrajectoryJudge(), make_dataset(8), baseline_false_pass_rate=0.0, lm=careful())
    assert not report.drifted and report.false_pass_rate == 0.0 and report.accuracy == 1.0
    assert "no drift detected" in report.format()


def test_drift_is_a_one_sided_exact_binomial_test():
    data = make_dataset(8)  # 4 failures, all false passes
    # P(X >= 4 | n = 4, p = 0.5) = 0.0625: a rise from 0.5 to 1.0 on 4 failures is not significant at 0.05.
    report = audit(TrajectoryJudge(), data, baseline_false_pass_rate=0.5, lm=gullible())
    assert report.p_value == pytest.approx(stats.binom.sf(3, 4, 0.5)) == pytest.approx(0.0625)
    assert not report.drifted and "p = 0.0625" in report.format()
    with pytest.warns(GoodhartWarning, match=r"p = 0\.0625 < 0\.1"):
        assert audit(TrajectoryJudge(), data, baseline_false_pass_rate=0.5, alpha=0.1, lm=gullible()).drifted
    # The old fixed +0.1 threshold would have flagged 0.8 -> 1.0; four failures cannot show that.
    assert not audit(TrajectoryJudge(), data, baseline_false_pass_rate=0.8, lm=gullible()).drifted
    assert report.interval == pytest.approx((stats.beta.ppf(0.025, 4, 1), 1.0))


def test_baseline_is_the_certificate_else_validation(tmp_path):
    judge = TrajectoryJudge()
    freeze(judge, tmp_path / "judge.json", metrics={"false_pass_rate": 0.25, "val_agreement": 0.8})
    loaded = load_judge(tmp_path / "judge.json")
    assert baseline_from_manifest(loaded) == (0.25, "validation")
    with pytest.warns(GoodhartWarning):
        report = audit(loaded, make_dataset(8), lm=gullible())
    assert report.baseline_source == "validation" and report.baseline_false_pass_rate == 0.25 and report.drifted
    assert any("validation split" in n and "certify" in n for n in report.notes)
    # A certificate (held-out labeled data) is the baseline when the manifest has one.
    loaded.manifest = {**loaded.manifest, "certificate": {"false_pass_rate": 0.9, "n_negatives": 10,
                                                          "false_passes": 9}}
    assert baseline_from_manifest(loaded) == (0.9, "certificate")
    report = audit(loaded, make_dataset(8), lm=gullible())
    assert report.baseline_source == "certificate" and not report.drifted
    assert not any("validation split" in n for n in report.notes)
    loaded.manifest["certificate"]["false_passes"] = 3
    with pytest.raises(ValueError, match="certificate is inconsistent"):
        baseline_from_manifest(loaded)
    # an explicit baseline wins over the manifest
    report = audit(load_judge(tmp_path / "judge.json"), make_dataset(8), baseline_false_pass_rate=0.95, lm=gullible())
    assert report.baseline_source == "argument" and not report.drifted


def test_missing_baseline_or_failures_cannot_drift():
    judge = TrajectoryJudge()
    freeze_less = audit(judge, make_dataset(4), lm=gullible())
    assert freeze_less.baseline_source == "none" and not freeze_less.drifted and freeze_less.delta is None
    assert any("drift cannot be judged" in n for n in freeze_less.notes)
    judge.manifest = {"metrics": {"false_pass_rate": None}}  # induction found no failed validation episode
    assert baseline_from_manifest(judge) == (None, "none")
    only_passes = [t for t in make_dataset(8) if t.label == 1]
    report = audit(judge, only_passes, baseline_false_pass_rate=0.0, lm=gullible())
    assert report.false_pass_rate is None and not report.drifted and report.n_failed == 0
    assert "undefined" in report.format()


def test_abstentions_count_as_fail_verdicts():
    broken = ScriptedLM(lambda messages: "not json", model="broken")
    report = audit(TrajectoryJudge(), make_dataset(4), baseline_false_pass_rate=0.0, lm=broken)
    assert report.n_abstained == 4 and report.false_pass_rate == 0.0 and report.accuracy == 0.5
    assert any("abstentions" in n for n in report.notes)


def test_bad_audit_arguments():
    with pytest.raises(ValueError, match="at least one"):
        audit(TrajectoryJudge(), [], lm=gullible())
    with pytest.raises(ValueError, match="baseline_false_pass_rate"):
        audit(TrajectoryJudge(), make_dataset(2), baseline_false_pass_rate=1.5, lm=gullible())
    with pytest.raises(ValueError, match="alpha"):
        audit(TrajectoryJudge(), make_dataset(2), alpha=0.0, lm=gullible())


def test_report_round_trips_to_json():
    report = audit(TrajectoryJudge(), make_dataset(4), baseline_false_pass_rate=0.5, lm=careful())
    data = json.loads(json.dumps(report.to_dict()))
    assert set(data) >= {"n", "n_failed", "n_abstained", "accuracy", "false_pass_rate",
                         "baseline_false_pass_rate", "baseline_source", "alpha", "p_value", "drifted", "delta",
                         "interval", "false_pass_ids", "notes"}
    assert isinstance(report, AuditReport) and data["delta"] == -0.5


# ------------------------------------------------------------------ labeling round trip


def fill(path, labels):
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "label": labels(r)}) + "\n" for r in records))
    return records


def test_labeling_round_trip(tmp_path):
    data = make_dataset(6)
    path = sample_for_labeling(data, k=4, seed=3, path=tmp_path / "sample.jsonl")
    text = path.read_text()
    assert "CANARY" not in text  # hidden fields (gold actions, instructions) are never written
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 4 and all(r["label"] is None for r in records)
    assert "TOOL RESULT book_reservation" in records[0]["transcript"]
    assert [r["id"] for r in records] == [json.loads(x)["id"] for x in
                                          sample_for_labeling(data, 4, 3, path=tmp_path / "again.jsonl")
                                          .read_text().splitlines()]  # the seed fixes the sample

    with pytest.raises(TrajectoryFormatError, match=r"sample\.jsonl, record 0: 4 record\(s\) still unlabeled"):
        load_labeled(path)

    by_id = {t.id: t for t in data}
    fill(path, lambda r: by_id[r["id"]].label)
    loaded = load_labeled(path)
    assert [t.id for t in loaded] == [r["id"] for r in records]
    for t in loaded:
        original = by_id[t.id]
        assert t.steps == original.steps and t.label == original.label and t.reward == float(original.label)
        assert t.hidden == {} and t.source.file == str(path)
    report = audit(TrajectoryJudge(), loaded, baseline_false_pass_rate=0.0, lm=careful())
    assert report.n == 4 and report.accuracy == 1.0


def test_label_spellings(tmp_path):
    path = sample_for_labeling(make_dataset(4), k=4, path=tmp_path / "s.jsonl")
    spellings = iter(["pass", "FAIL", True, 0])
    fill(path, lambda r: next(spellings))
    assert [t.label for t in load_labeled(path)] == [1, 0, 1, 0]


@pytest.mark.parametrize("mutate, message", [
    (lambda lines: lines[:1] + ["{not json"] + lines[2:], r"record 1: malformed JSON \(line 2"),
    (lambda lines: [json.dumps({**json.loads(lines[0]), "label": "maybe"})] + lines[1:],
     r"record 0: line 1, id '.*': label must be 1 \(accomplished\) or 0"),
    (lambda lines: lines + [lines[0]], r"record 4: line 5, id '.*': duplicate id"),
    (lambda lines: [json.dumps({k: v for k, v in json.loads(lines[0]).items() if k != "label"})] + lines[1:],
     r"record 0: .*no 'label' field"),
    (lambda lines: [json.dumps({**json.loads(lines[0]), "steps": [{"kind": "robot"}]})] + lines[1:],
     r"record 0: .*step 0 must be an object whose 'kind'"),
    (lambda lines: [json.dumps({**json.loads(lines[0]), "steps": []})] + lines[1:],
     r"record 0: .*'steps' must be a non-empty list"),
    (lambda lines: ["[1, 2]"] + lines[1:], r"record 0: line 1 is not a JSON object"),
])
def test_bad_labeled_files_name_file_and_record(tmp_path, mutate, message):
    path = sample_for_labeling(make_dataset(4), k=4, path=tmp_path / "bad.jsonl")
    fill(path, lambda r: 1)
    path.write_text("\n".join(mutate(path.read_text().splitlines())) + "\n")
    with pytest.raises(TrajectoryFormatError, match=message) as info:
        load_labeled(path)
    assert info.value.file == str(path) and "bad.jsonl" in str(info.value)


def test_sampling_arguments(tmp_path):
    data = make_dataset(3)
    assert len(sample_for_labeling(data, k=10, path=tmp_path / "all.jsonl").read_text().splitlines()) == 3
    with pytest.raises(ValueError, match="k must be"):
        sample_for_labeling(data, k=0, path=tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="unique"):
        sample_for_labeling(data + data[:1], k=2, path=tmp_path / "x.jsonl")
    with pytest.raises(FileNotFoundError, match="no such labeled sample"):
        load_labeled(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TrajectoryFormatError, match="no records"):
        load_labeled(tmp_path / "empty.jsonl")


def test_audit_runs_under_the_configured_lm_when_none_is_given():
    lm = careful()
    with dspy.context(lm=lm):
        report = audit(TrajectoryJudge(), make_dataset(4), baseline_false_pass_rate=0.0)
    assert lm.calls == 4 and report.judge_lm == "careful"


def test_a_dead_judge_server_stops_the_audit_instead_of_reporting_on_abstentions():
    """The audit judges through the one in-memory engine (`BaseJudge.batch`): a server that refuses every call
    opens the dead-server circuit, so no drift report is computed from a batch of abstentions."""
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError

    calls = []

    def refused(messages):
        calls.append(1)
        raise ConnectionError("connection refused")

    data = make_dataset(60)
    with pytest.raises(JudgeUnavailableError):
        audit(TrajectoryJudge(), data, baseline_false_pass_rate=0.1, lm=ScriptedLM(refused, model="dead"))
    assert len(calls) < len(data)  # stopped early: not one refused call per item
