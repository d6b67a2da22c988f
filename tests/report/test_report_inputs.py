"""`rubricforge report` on what `rubricforge judge` writes: single and several verdict files,
labels joined from a file, inferred item fields, exact intervals on few items, task-clustered
intervals, calibration (ECE, reliability data) and contradictions per judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats

from rubricforge_dspy import metrics as M
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.report import RunError, compute_report, load_run, render_markdown
from tests.support.verdicts import verdict, write


def few_failures(tmp_path) -> Path:
    """8 passed items judged pass, 2 failed items both judged pass: false-pass rate 2/2."""
    lines = [verdict(i, True, 0.9, 1) for i in range(8)] + [verdict(8, True, 0.8, 0), verdict(9, True, 0.7, 0)]
    return write(tmp_path / "mine.jsonl", lines)


def test_single_verdict_file_report_via_the_cli(tmp_path, capsys):
    preds = few_failures(tmp_path)
    out = tmp_path / "out" / "report.md"
    assert main(["report", "--predictions", str(preds), "--out", str(out)]) == 0
    md = out.read_text()
    # Exact Clopper-Pearson, not the degenerate percentile bootstrap "1.000 [1.000, 1.000]".
    low, high = stats.beta.ppf(0.025, 2, 1), 1.0
    assert f"| **mine** (reference) | 1.000 [{low:.3f}, {high:.3f}] |" in md
    numbers = json.loads(out.with_suffix(".json").read_text())
    row = numbers["main"][0]
    assert (row["false_pass_ci_low"], row["false_pass_ci_high"]) == pytest.approx((low, high))
    # Inferred item fields are stated, not silent.
    warnings = " ".join(numbers["warnings"])
    assert "without 'task_id'; defaulted to its id" in warnings and "no 'n_steps'" in warnings
    assert numbers["task_clustered"] is None and "## Task-clustered intervals" not in md
    assert (out.parent / "figures" / "reliability.png").exists()


def test_plain_verdict_files_name_a_reference_judge_and_the_lm_their_lines_record(tmp_path):
    """Issue #26 item 9: a report of plain verdict files called the first one "(induced)" and its judge LM
    "n/a", though nothing was induced and every line records the model. It is the *reference* judge, and the
    judge LM is the lines' ``model``; a run (with run.json) keeps "induced"."""
    mine = write(tmp_path / "mine.jsonl", [verdict(i, i < 8, 0.9 if i < 8 else 0.1, int(i < 8),
                                                   model="openai/qwen3-8b") for i in range(10)])
    other = write(tmp_path / "other.jsonl", [verdict(i, True, 0.9, int(i < 8), model="gpt-x") for i in range(10)])
    out = tmp_path / "out" / "report.md"
    assert main(["report", "--predictions", str(mine), str(other), "--out", str(out)]) == 0
    md = out.read_text()
    facts = md.split("## ")[0]
    assert "- judge LM `openai/qwen3-8b` (as its verdict lines record it)" in facts
    assert "- reference judge `mine` (the first verdict file; the others are compared with it)" in facts
    assert "induced" not in facts and "n/a" not in facts and "reflection LM" not in facts
    assert "| **mine** (reference) |" in md and "(induced)" not in md
    meta = json.loads(out.with_suffix(".json").read_text())["meta"]
    assert (meta["reference_kind"], meta["lm"], meta["lm_source"]) == ("reference", "openai/qwen3-8b", "verdict lines")
    unrecorded = write(tmp_path / "bare" / "mine.jsonl", [verdict(i, i < 8, 0.5, int(i < 8)) for i in range(10)])
    bare = render_markdown(compute_report(load_run(unrecorded), n_resamples=50))
    assert "judge LM not recorded (the verdict lines carry no `model`)" in bare
    run_dir = tmp_path / "run"
    write(run_dir / "predictions" / "induced.jsonl", [verdict(i, i < 8, 0.5, int(i < 8)) for i in range(10)])
    (run_dir / "run.json").write_text(json.dumps({"judges": ["induced"], "lm": "openai/judge-lm"}))
    induced = compute_report(load_run(run_dir), n_resamples=50)
    assert (induced["meta"]["reference_kind"], induced["meta"]["lm_source"]) == ("induced", "run.json")
    assert "- induced judge `induced`" in render_markdown(induced)


def test_several_files_one_per_judge(tmp_path):
    a = few_failures(tmp_path)
    b = write(tmp_path / "other.jsonl", [verdict(i, i < 8, 0.9 if i < 8 else 0.1, int(i < 8)) for i in range(10)])
    run = load_run([a, b])
    assert run.judges == ("mine", "other") and run.induced == "mine"
    report = compute_report(run, n_resamples=200)
    other = report["main"][1]
    assert other["false_pass_rate"] == 0.0 and other["mcnemar"]["c"] == 2
    with pytest.raises(RunError, match="share a judge name"):
        load_run([a, a])


def test_labels_are_required_and_can_be_joined(tmp_path):
    lines = [verdict(i, i % 2 == 0, 0.8 if i % 2 == 0 else 0.2, None) for i in range(6)]
    preds = write(tmp_path / "unlabeled.jsonl", lines)
    with pytest.raises(RunError, match=r"unlabeled\.jsonl:1: report needs labels: id 'x00'.*--labels"):
        load_run(preds)
    labels = write(tmp_path / "labels.jsonl", [{"id": f"x{i:02d}", "label": int(i < 3)} for i in range(6)])
    run = load_run(preds, labels=labels)
    assert run.items.label.tolist() == [1, 1, 1, 0, 0, 0]
    write(tmp_path / "short.jsonl", [{"id": "x00", "label": 1}])
    with pytest.raises(RunError, match=r"id 'x01' has no label in the labels file"):
        load_run(preds, labels=tmp_path / "short.jsonl")
    assert main(["report", "--predictions", str(preds), "--labels", str(labels), "--out",
                 str(tmp_path / "r.md")]) == 0


def test_tasks_that_repeat_get_task_clustered_intervals(tmp_path):
    lines = [verdict(i, i % 3 != 0, 0.7, int(i % 2 == 0), task_id=f"t{i // 4}") for i in range(24)]
    run = load_run(write(tmp_path / "j.jsonl", lines))
    report = compute_report(run, n_resamples=500)
    tc = report["task_clustered"]
    assert tc["n_tasks"] == 6 and tc["max_items_per_task"] == 4
    assert report["settings"]["bootstrap"] == "task-clustered"
    y = run.items.label
    v = run.predictions["j"].verdict
    ref = M.bootstrap_ci(M.accuracy, y, v, n_resamples=500, seed=0, clusters=list(run.items.task_id))
    assert (tc["rows"][0]["accuracy_ci_low"], tc["rows"][0]["accuracy_ci_high"]) == pytest.approx(tuple(ref))
    md = render_markdown(report)
    assert "## Task-clustered intervals" in md and "resample whole tasks" in md


def test_calibration_and_contradictions_per_judge(tmp_path):
    lines = []
    for i in range(20):
        label = int(i < 10)
        score = 0.95 if label else 0.6  # failed items scored 0.6: over-confident
        lines.append(verdict(i, score >= 0.5 and i != 3, score, label, contradiction=i in (3, 12),
                             score_calibrated=0.9 if label else 0.1))
    lines[12]["passed"] = False
    run = load_run(write(tmp_path / "j.jsonl", lines))
    report = compute_report(run, n_resamples=200)
    cal = report["calibration"]["rows"][0]
    y, s = run.items.label, run.predictions["j"].score
    assert cal["ece"] == pytest.approx(M.expected_calibration_error(y, s, 10))
    assert cal["ece"] == pytest.approx(0.5 * 0.05 + 0.5 * 0.6)
    assert cal["ece_calibrated"] == pytest.approx(0.1)
    con = report["contradictions"][0]
    assert con["contradictions"] == 2 and con["n_verdicts"] == 20
    assert (con["ci_low"], con["ci_high"]) == pytest.approx(M.proportion_ci(2, 20))
    md = render_markdown(report)
    assert "ECE after calibration" in md and "## Contradictions" in md
