"""What a person reads first in a run's report: the cascade fit the demo wrote (`rubricforge report` reads a run's
``cascade_fit.json`` too), whether the induced judge is the seed rubric and which rubric it judges with, no figure
of one point on empty axes (the section says why) and no warning per judge for bootstrap resamples on which a
statistic was undefined (said once, counted in report.json)."""

from __future__ import annotations

import json

from rubricforge_dspy.pipeline.report_job import report_main
from rubricforge_dspy.report import compute_report, load_run, write_report
from tests.report.test_report import SEED_RUBRIC, SWEEP, build_run

REFUSED = {"certified": False, "n": 7, "alpha": 0.1, "delta": 0.1, "reason": "cascade fit refused: too few",
           "needed_decided": 22, "needed_labels": 30, "embedded": True}


def _one_candidate(root):
    meta = json.loads((root / "run.json").read_text())
    meta.update(sweep=SWEEP[:1], beat_seed=False)
    (root / "run.json").write_text(json.dumps(meta))


def test_report_of_a_run_leads_with_its_cascade_fit(tmp_path):
    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    (root / "cascade_fit.json").write_text(json.dumps(REFUSED))
    text = report_main(root, tmp_path / "out" / "report.md").read_text()
    first = next(line for line in text.splitlines() if line.startswith("## "))
    assert first == "## Trust or escalate: what a certified cascade would do here"
    assert "**Nothing certified.**" in text and "about 30 labeled tasks" in text and "135M" in text
    assert json.loads((tmp_path / "out" / "report.json").read_text())["cascade_fit"]["needed_labels"] == 30
    # the same from its predictions/ folder; and verdict files carry no fit
    assert "## Trust or escalate" in report_main(root / "predictions", tmp_path / "b" / "report.md").read_text()
    files = report_main([root / "predictions" / "induced.jsonl"], tmp_path / "c" / "report.md").read_text()
    assert "## Trust or escalate" not in files


def test_a_malformed_cascade_fit_is_named(tmp_path):
    import pytest

    from rubricforge_dspy.report import RunError

    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    (root / "cascade_fit.json").write_text("[1, 2]")
    with pytest.raises(RunError, match="cascade_fit.json: not a cascade fit"):
        write_report(root, tmp_path / "out" / "report.md", figures=False)


def test_the_report_says_when_the_induced_judge_is_the_seed_and_draws_no_one_point_sweep(tmp_path):
    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    _one_candidate(root)
    text = write_report(root, root / "report.md", n_resamples=300).read_text()
    assert "**The induced judge is the seed rubric, unchanged.**" in text
    assert SEED_RUBRIC.strip().splitlines()[0] in text  # the rubric it judges with is shown
    assert not (root / "figures" / "sweep.png").exists() and "figures/sweep.png" not in text
    assert "No figure: the sweep holds one candidate" in text


def test_an_induced_rubric_is_shown_without_the_seed_sentence(tmp_path):
    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    meta = json.loads((root / "run.json").read_text())
    (root / "run.json").write_text(json.dumps({**meta, "beat_seed": True}))
    text = write_report(root, root / "report.md", n_resamples=300).read_text()
    assert "scored higher on the validation split than the seed" in text and "seed rubric, unchanged" not in text
    assert (root / "figures" / "sweep.png").exists()  # several candidates: the figure is drawn


def test_resamples_left_out_of_an_interval_are_said_once_not_warned_per_judge(tmp_path):
    root = build_run(tmp_path / "RUN", n=6, ablation=False, sweep=False)  # few items: one-outcome resamples
    report = compute_report(load_run(root), n_resamples=500)
    assert report["bootstrap_excluded"], "six items must give resamples holding one outcome"
    assert not any("undefined (nan)" in w for w in report["warnings"])
    from rubricforge_dspy.report import render_markdown

    md = render_markdown(report)
    assert "undefined (nan)" not in md and md.count("left out of that interval") == 1
