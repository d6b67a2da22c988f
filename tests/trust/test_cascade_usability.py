"""What a person reads of a cascade (issue #34): LM calls saved are claimed only where a stage makes LM calls (a
stage the fit dropped is not in the cascade), and the fit's text gives each stage's decided share of all the
calibration trajectories with D and FP and their exact intervals, and names a dropped stage only as dropped."""

from __future__ import annotations

import re

import dspy
import pytest

from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from rubricforge_dspy.trust.cascade import cascade_summary, fit_cascade, format_cascade_summary, format_fit_report
from tests.support.cascade import judge_answers
from tests.support.hybrid import dataset


@pytest.fixture(scope="module")
def floor():
    return FloorJudge(SymptomFloor.fit(dataset(40)))


def _guessing(messages):
    flip = sum(map(ord, last_user_text(messages))) % 2 == 0
    return {"reason": "A guess.", "passed": flip, "score": 0.95 if flip else 0.05}


def test_lm_calls_saved_only_where_a_stage_makes_lm_calls(floor):
    held_out = dataset(40, offset=5000)
    labels = [t.label for t in held_out]
    floors = Cascade([floor], [StageRule("floor", 0.9, 0.1)])
    summary = cascade_summary(floors, floors.batch(held_out), labels)
    assert summary["lm_calls"] == 0 and summary["lm_calls_saved"] is None
    assert summary["lm_calls_judging_everything"] is None and summary["lm_stages"] == []
    text = format_cascade_summary(summary)
    assert "saved" not in text and "no stage of the cascade makes LM calls" in text

    both = Cascade([floor, TrajectoryJudge()], [StageRule("floor", 0.9, 0.1), StageRule("judge", 0.8, 0.2)])
    with dspy.context(lm=ScriptedLM(judge_answers)):
        verdicts = both.batch(held_out)
    summary = cascade_summary(both, verdicts, labels)
    assert summary["lm_stages"] == ["judge"] and summary["lm_calls"] == verdicts.stage_calls["judge"]
    assert summary["lm_calls_saved"] == 40 - summary["lm_calls"] > 0
    assert f"({summary['lm_calls_saved']} saved)" in format_cascade_summary(summary)


def test_a_cascade_whose_llm_stage_the_fit_dropped_claims_no_lm_calls_saved(floor):
    with dspy.context(lm=ScriptedLM(_guessing)):
        cascade = fit_cascade([floor, TrajectoryJudge()], dataset(240, offset=8000), alpha=0.2, delta=0.1,
                              order_trajectories=dataset(120, offset=30_000))
    assert [r.name for r in cascade.rules] == ["floor"]
    held_out = dataset(20, offset=9000)
    summary = cascade_summary(cascade, cascade.batch(held_out), [t.label for t in held_out])
    assert summary["lm_calls_saved"] is None and "saved" not in format_cascade_summary(summary)


def test_the_fit_report_gives_each_kept_stage_its_share_of_all_with_d_and_fp_intervals(floor):
    with dspy.context(lm=ScriptedLM(_guessing)):
        cascade = fit_cascade([floor, TrajectoryJudge()], dataset(240, offset=8000), alpha=0.2, delta=0.1,
                              order_trajectories=dataset(120, offset=30_000))
    text = format_fit_report(cascade.fit_report)
    row = cascade.fit_report["stages"][0]
    assert "alpha 0.2, delta 0.1" in text and "exact 95% intervals" in text
    floor_line = next(line for line in text.splitlines() if line.startswith("  floor:"))
    assert f"decided {row['decided']} ({row['decided'] / 240:.0%} of all" in floor_line
    assert re.search(r"D \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\], FP \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", floor_line)
    assert not any(line.startswith("  judge:") for line in text.splitlines())  # dropped: not shown as a stage
    assert "dropped stage judge (it ran on 240 in the fit): certified to decide nothing" in text
    assert f"escalated to a person: {cascade.fit_report['escalated']} (" in text
