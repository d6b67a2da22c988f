"""A judge's prediction says what it read (``evidence``), and `judge_verdict` takes it to the verdict (and so
to its line); a segment or explorer judge's prediction fills it the same way (issue 40 item 1)."""

from __future__ import annotations

import dspy
import pytest

from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.trajectory import Source, Step, Trajectory
from rubricforge_dspy.core.verdict import EvidenceRecord, verdict_line
from rubricforge_dspy.evidence.render import RenderConfig, render_with_evidence
from rubricforge_dspy.judge.execution import as_verdict, judge_verdict
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing import ScriptedLM


def _long(n: int) -> Trajectory:
    steps = [Step("user", content="Fix the bug.")]
    steps += [Step("assistant", content=f"step {i}\n" + "log line\n" * 200) for i in range(1, n - 1)]
    steps.append(Step("final_answer", content="Fixed."))
    return Trajectory(id="long", task_id="t", domain="d", agent="a", steps=tuple(steps), reward=None, label=None,
                      source=Source("test", 0))


def test_a_trajectory_judged_gives_its_render_record_and_text_gives_none():
    config = RenderConfig(max_tokens=2000)
    judge = TrajectoryJudge(render_config=config)
    trajectory = _long(40)
    lm = ScriptedLM(lambda messages: {"reason": "ok", "passed": True, "score": 0.9})
    with dspy.context(lm=lm):
        verdict = judge_verdict(judge, trajectory)
        from_text = judge_verdict(judge, judge.render(trajectory))
    expected = render_with_evidence(trajectory, config)[1]
    assert expected.elided > 0 and verdict.evidence == expected and not verdict.abstained
    assert verdict_line(trajectory, verdict)["evidence"] == expected.to_dict()
    assert from_text.evidence is None and "evidence" not in verdict_line(trajectory, from_text)


def test_a_prediction_with_a_malformed_record_is_a_bug_not_a_verdict():
    record = EvidenceRecord(steps=9, whole=9, clipped=0, elided=0, chars_cut=0, complete=True, read="segments")
    said = dspy.Prediction(passed=True, score=0.8, reason="ok", evidence=record.to_dict())
    assert as_verdict(said).evidence == record
    with pytest.raises(RubricForgeError, match="evidence"):
        as_verdict(dspy.Prediction(passed=True, score=0.8, reason="ok", evidence={**record.to_dict(), "whole": 3}))
    with pytest.raises(RubricForgeError, match="evidence"):
        as_verdict(dspy.Prediction(passed=True, score=0.8, reason="ok", evidence="all of it"))
