"""The render's `EvidenceRecord` is computed from what it really did: its elision markers add up to
``elided``, the numbered steps it shows are ``whole + clipped``, a render that fits is complete; and the
record round-trips through a verdict line, whose schema refuses a malformed one (issue 40 item 1)."""

from __future__ import annotations

import re

import pytest

from rubricforge_dspy.core.presets import EMBEDDED, SERVER
from rubricforge_dspy.core.trajectory import Source, Step, Trajectory
from rubricforge_dspy.core.verdict import (
    EvidenceRecord,
    Verdict,
    VerdictLineError,
    check_line,
    line_evidence,
    token_usage,
    verdict_line,
)
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence import render
from rubricforge_dspy.evidence.render import ELISION, RenderConfig, render_trajectory, render_with_evidence
from tests.support.render_corpus import SHIPPED, synthetic_trajectories

_ELISION_LINE = re.compile(re.escape(ELISION).replace(r"\{n\}", r"(\d+)") + r"\Z")
_STEP_LINE = re.compile(r"\[(\d+)\] ")


def test_the_record_counts_what_the_render_showed(monkeypatch):
    fitted = []
    fit_lines = render._fit_lines

    def recorded(*args):
        out = fit_lines(*args)
        fitted.append(out)
        return out

    monkeypatch.setattr(render, "_fit_lines", recorded)
    trajectories = synthetic_trajectories() + [t for path in SHIPPED[2:6] for t in load_trajectories(path)]
    seen = {"elided": 0, "clipped": 0, "complete": 0}
    for config in (RenderConfig.of(SERVER), RenderConfig.of(EMBEDDED), RenderConfig(max_tokens=300, max_step_chars=40)):
        for trajectory in trajectories:
            fitted.clear()
            text, evidence = render_with_evidence(trajectory, config)
            assert text == render_trajectory(trajectory, config)
            lines, _, last = fitted[-1]
            assert last == evidence
            # the renderer's own lines: each element of `lines` is one part (a step, the footer, a marker)
            marked = sum(int(m.group(1)) for line in lines if (m := _ELISION_LINE.match(line)))
            numbered = {int(m.group(1)) for line in lines if (m := _STEP_LINE.match(line))}
            assert evidence.steps == len(trajectory.steps)
            assert evidence.elided == marked
            assert evidence.whole + evidence.clipped == len(numbered)
            assert numbered <= set(range(1, len(trajectory.steps) + 1))
            assert evidence.complete == (evidence.clipped == evidence.elided == evidence.chars_cut == 0)
            assert bool(evidence.clipped or evidence.elided) == (evidence.chars_cut > 0)
            seen["elided"] += evidence.elided > 0
            seen["clipped"] += evidence.clipped > 0 and evidence.elided == 0
            seen["complete"] += evidence.complete
    assert all(seen.values()), seen  # every case occurred


def _steps(n: int, size: int) -> Trajectory:
    steps = [Step("user", content="Do the task.")]
    steps += [Step("assistant", content=f"step {i} " + "x" * size) for i in range(1, n - 1)]
    steps.append(Step("final_answer", content="done"))
    return Trajectory(id="t", task_id="t", domain="d", agent="a", steps=tuple(steps), reward=None, label=None,
                      source=Source("test", 0))


def test_clipped_characters_are_those_the_clip_markers_name():
    trajectory = _steps(4, 40_000)  # two long steps, cut head and tail, none elided
    text, evidence = render_with_evidence(trajectory, RenderConfig.of(SERVER))
    named = sum(int(n) for n in re.findall(r"\[\.\.\. (\d+) chars elided \.\.\.\]", text))
    assert (evidence.elided, evidence.clipped, evidence.whole) == (0, 2, 2)
    assert evidence.chars_cut == named > 0
    whole = render_with_evidence(_steps(4, 100), RenderConfig.of(SERVER))[1]
    assert whole == EvidenceRecord.whole_episode(4) and whole.describe() == "read all 4 steps"


def test_the_record_refuses_counts_that_do_not_add_up():
    with pytest.raises(ValueError, match="must equal steps"):
        EvidenceRecord(steps=10, whole=3, clipped=1, elided=5, chars_cut=9, complete=False)
    with pytest.raises(ValueError, match="complete exactly"):
        EvidenceRecord(steps=10, whole=10, clipped=0, elided=0, chars_cut=0, complete=False)
    with pytest.raises(ValueError, match="read mode"):
        EvidenceRecord(steps=1, whole=1, clipped=0, elided=0, chars_cut=0, complete=True, read="skim")
    with pytest.raises(ValueError, match="steps_read"):
        EvidenceRecord(steps=5, whole=2, clipped=0, elided=3, chars_cut=9, complete=False, read="explore",
                       steps_read=(1, 6))
    record = EvidenceRecord(steps=103, whole=14, clipped=2, elided=87, chars_cut=250_000, complete=False)
    assert record.describe() == "read 16 of 103 steps; 87 elided, 2 clipped, 250,000 characters cut"


def test_a_line_carries_evidence_and_tokens_and_an_old_line_still_reads():
    trajectory = _steps(6, 10)
    evidence = EvidenceRecord(steps=6, whole=2, clipped=1, elided=3, chars_cut=120, complete=False,
                              read="explore", steps_read=(1, 2, 6))
    line = verdict_line(trajectory, Verdict.from_answer(True, 0.9, "ok"), evidence=evidence,
                        tokens=token_usage(1200, 40, 1))
    assert check_line(line, "x:1") is line
    assert line_evidence(line) == evidence and line["tokens"] == {"prompt": 1200, "completion": 40, "calls": 1}
    # the verdict's own evidence is the default
    carried = verdict_line(trajectory, Verdict(passed=True, score=0.9, evidence=evidence))
    assert carried["evidence"] == evidence.to_dict()
    old = {k: v for k, v in line.items() if k not in ("evidence", "tokens")}
    assert line_evidence(check_line(old, "x:2")) is None  # evidence unknown, not an error
    for bad in ({**evidence.to_dict(), "elided": -1}, {**evidence.to_dict(), "read": "skim"},
                {k: v for k, v in evidence.to_dict().items() if k != "complete"}):
        with pytest.raises(VerdictLineError, match="evidence"):
            check_line({**line, "evidence": bad}, "x:3")
    with pytest.raises(VerdictLineError, match="tokens"):
        check_line({**line, "tokens": {"prompt": 1, "completion": "2", "calls": 1}}, "x:4")
