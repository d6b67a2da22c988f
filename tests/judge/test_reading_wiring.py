"""The long-episode judges wired in: loaded by `load_judge` (registered stage kinds), stages of a fitted and
saved cascade, their reading settings in the verdict cache's fingerprint, their evidence on the verdict line."""

from __future__ import annotations

import dspy
import pytest

from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text
from tests.judge._long_episodes import long_trajectory, marker, write_long_jsonl

BUDGET = RenderConfig(max_tokens=1500)


def act(action, argument="", passed=False, score=0.0, reason=""):
    return {"action": action, "argument": argument, "passed": passed, "score": score, "reason": reason}


def segments_answers(messages):
    """A window reader that notes a wrong date and a tool error in the steps it is shown; a verdict that fails an
    episode whose notes say so."""
    text = last_user_text(messages)
    if "overview" in system_text(messages):
        if "wrong date" in text or "tool error" in text:
            return {"passed": False, "score": 0.1, "reason": "wrong date or a tool error"}
        return {"passed": True, "score": 0.9, "reason": "booked"}
    notes = [note for mark, note in (("wrong date", "the agent booked the wrong date"),
                                     ("(ERROR)", "a tool error the final answer hides")) if mark in text]
    return {"findings": "; ".join(notes) or "none"}


@pytest.mark.parametrize("make", [lambda: SegmentsJudge("rubric S", render_config=BUDGET, overlap=2),
                                  lambda: ExplorerJudge("rubric E", max_iters=5, render_config=BUDGET)],
                         ids=["segments", "explorer"])
def test_load_judge_loads_a_frozen_long_episode_judge(make, tmp_path):
    judge = make()
    path = tmp_path / "reader.json"
    judge.save(path)
    loaded = load_judge(path, lm=ScriptedLM(segments_answers))
    assert type(loaded) is type(judge) and loaded.rubric == judge.rubric
    assert loaded.reading_settings() == judge.reading_settings()
    assert all(  # the LM given to load_judge is attached to every predictor
        p.lm is not None for p in loaded.predictors())


def test_a_loaded_segments_judge_runs_and_reads_every_step(tmp_path):
    path = tmp_path / "segments.json"
    SegmentsJudge(render_config=BUDGET).save(path)
    seen: list[str] = []

    def answers(messages):
        seen.append("\n".join(str(m.get("content") or "") for m in messages))
        return segments_answers(messages)

    prediction = load_judge(path, lm=ScriptedLM(answers))(trajectory=long_trajectory(100))
    assert all(any(marker(n) in s for s in seen) for n in range(1, 101))
    assert prediction.evidence["complete"] is True and prediction.evidence["steps_read"] == list(range(1, 101))


def test_a_cascade_floor_then_segments_fits_runs_saves_and_loads(tmp_path):
    from rubricforge_dspy.judge.cascade import Cascade
    from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
    from rubricforge_dspy.trust.cascade import fit_cascade
    from tests.support.hybrid import dataset

    floor = FloorJudge(SymptomFloor.fit(dataset(40)))
    segments = SegmentsJudge(render_config=RenderConfig(max_tokens=600))
    with dspy.context(lm=ScriptedLM(segments_answers)):
        cascade = fit_cascade([floor, segments], dataset(200, offset=10_000), alpha=0.2, delta=0.1)
        items = dataset(40, offset=50_000)
        verdicts = cascade.batch(items, num_threads=1)
    names = [row["name"] for row in cascade.fit_report["stages"]]
    assert len(names) == 2 and any(row["decided"] for row in cascade.fit_report["stages"][1:])
    assert len(verdicts) == 40 and not any(v.abstained for v in verdicts if v.error_kind != "escalated")
    decided_by_segments = [v for v, s in zip(verdicts, verdicts.stages, strict=True) if s == names[1]]
    assert decided_by_segments and all(v.passed == (t.label == 1) for v, s, t in
                                       zip(verdicts, verdicts.stages, items, strict=True) if s == names[1])
    # the deciding stage's evidence is the cascade verdict's: a segments verdict says it read every step
    assert all(v.evidence.read == "segments" and v.evidence.steps_read == tuple(range(1, v.evidence.steps + 1))
               for v in decided_by_segments)
    assert all(v.evidence is None for v, s in zip(verdicts, verdicts.stages, strict=True) if s == names[0])
    path = tmp_path / "cascade.json"
    cascade.save(path)
    loaded = load_judge(path)
    assert isinstance(loaded, Cascade) and isinstance(loaded.stages[1], SegmentsJudge)
    with dspy.context(lm=ScriptedLM(segments_answers)):
        again = loaded.batch(items, num_threads=1)
    assert [v.passed for v in again] == [v.passed for v in verdicts] and again.stages == verdicts.stages


@pytest.mark.parametrize(("one", "other"), [
    (lambda: SegmentsJudge(render_config=BUDGET, overlap=1), lambda: SegmentsJudge(render_config=BUDGET, overlap=2)),
    (lambda: ExplorerJudge(render_config=BUDGET, max_iters=8), lambda: ExplorerJudge(render_config=BUDGET,
                                                                                      max_iters=9)),
    (lambda: ExplorerJudge(render_config=BUDGET, max_prompt_tokens=9000),
     lambda: ExplorerJudge(render_config=BUDGET, max_prompt_tokens=9001)),
], ids=["segments-overlap", "explorer-iterations", "explorer-tokens"])
def test_the_fingerprint_differs_with_the_reading_settings(one, other):
    """The verdict cache is keyed by the fingerprint: a verdict read with another overlap or other caps is not
    reused (same rubric, render, adapter and LM)."""
    assert judge_fingerprint(one(), None).sha256 != judge_fingerprint(other(), None).sha256
    assert judge_fingerprint(one(), None).sha256 == judge_fingerprint(one(), None).sha256


def test_a_verdict_cache_does_not_answer_a_judge_with_other_reading_settings(tmp_path):
    """The same rubric, render and LM, another window overlap: judged again, not answered from the cache."""
    from rubricforge_dspy.apply.stream import run_judge_file

    data = write_long_jsonl(tmp_path / "long.jsonl", items=2)
    requests: list[int] = []

    def answers(messages):
        requests.append(1)
        return segments_answers(messages)

    lm = ScriptedLM(answers)
    first = run_judge_file(SegmentsJudge(render_config=BUDGET, overlap=1), data, tmp_path / "a.jsonl", lm=lm)
    made = len(requests)
    again = run_judge_file(SegmentsJudge(render_config=BUDGET, overlap=1), data, tmp_path / "b.jsonl", lm=lm)
    assert first.judged == 2 and made > 2 and again.cached == 2 and len(requests) == made
    other = run_judge_file(SegmentsJudge(render_config=BUDGET, overlap=3), data, tmp_path / "c.jsonl", lm=lm)
    assert other.cached == 0 and len(requests) > made


def test_the_verdict_line_records_what_the_judge_read():
    from rubricforge_dspy.judge.execution import judge_verdict

    trajectory = long_trajectory(60)
    actions = [act("read_step", "41"), act("read_step", "57"), act("verdict", score=0.2, reason="[41] failed")]
    calls: list[int] = []

    def answers(messages):
        calls.append(1)
        return actions[min(len(calls), len(actions)) - 1]

    with dspy.context(lm=ScriptedLM(answers)):
        verdict = judge_verdict(ExplorerJudge(render_config=BUDGET), trajectory)
    line = verdict_line(trajectory, verdict)
    assert line["evidence"]["steps_read"] == [41, 57] and line["evidence"]["read"] == "explore"
    assert line["evidence"]["steps"] == 60 and line["evidence"]["complete"] is False
    assert verdict == Verdict.from_answer(False, 0.2, "[41] failed")  # evidence is not what the verdict says
    assert "evidence" not in verdict.to_dict()
    assert "evidence" not in verdict_line(trajectory, Verdict.from_answer(True, 0.9, "ok"))  # a judge that did not say


def test_a_saved_reading_judge_is_a_stage_spec(tmp_path):
    """`cascade fit --stage FILE` names a saved segments or explorer judge by its file (`stage_from_spec`)."""
    from rubricforge_dspy.judge.loading import stage_from_spec

    for judge in (SegmentsJudge(render_config=BUDGET), ExplorerJudge(render_config=BUDGET)):
        path = tmp_path / f"{judge.read_mode}.json"
        judge.save(path)
        stage = stage_from_spec(str(path))
        assert type(stage) is type(judge) and stage.needs_trajectory and stage.calls_lm
