"""The cascade is a judge like the others: call, acall, batch, dspy.Evaluate, a DSPy metric and a TRL reward
(an escalated item is an abstention, never a silent fail); it saves as JSON beside its stages, pinned by
their sha256; a later stage sees only what the earlier ones left."""

from __future__ import annotations

import asyncio
import json
import math
import warnings

import dspy
import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.verdict import check_line, verdict_line
from rubricforge_dspy.judge.cascade import ESCALATED, Cascade, CascadeVerdicts, StageRule, is_cascade_file, read_cascade
from rubricforge_dspy.judge.contract import PREDICTION_FIELDS
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import ProgramError
from rubricforge_dspy.rewards import as_reward_function
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.cascade import UNSURE, judge_answers
from tests.support.helpers import make_trajectory
from tests.support.hybrid import dataset


def unsure(i: int):
    import dataclasses

    from rubricforge_dspy.core.trajectory import Step

    t = make_trajectory(i, success=True, task=f"unsure{i}")
    return dataclasses.replace(t, steps=(*t.steps[:-1], Step("final_answer", f"Booked, I think {UNSURE}")))


@pytest.fixture
def floor():
    return FloorJudge(SymptomFloor.fit(dataset(40)))


@pytest.fixture
def cascade(floor):
    """The floor may only fail (it sees tool errors), the judge decides both ways when sure."""
    return Cascade([floor, TrajectoryJudge()], [StageRule("floor", math.inf, 0.2), StageRule("judge", 0.8, 0.2)])


def test_call_and_acall_name_the_deciding_stage_and_the_floor_costs_no_call(cascade):
    lm = ScriptedLM(judge_answers)
    errored, wrong, ok = dataset(4, offset=500)[2], dataset(4, offset=500)[3], dataset(4, offset=500)[0]
    with dspy.context(lm=lm):
        by_floor = cascade(trajectory=errored)
        assert lm.calls == 0, "a floor-decided trajectory made an LM call"
        assert by_floor.stage == "floor" and by_floor.stage_index == 0 and by_floor.passed is False
        assert set(PREDICTION_FIELDS) <= set(by_floor.keys()) and not by_floor.abstained
        by_judge = cascade(trajectory=wrong)
        assert by_judge.stage == "judge" and by_judge.passed is False and lm.calls == 1
        passed = cascade(trajectory=ok)
        assert passed.stage == "judge" and passed.passed is True and passed.score_calibrated == pytest.approx(0.9)
        escalated = cascade(trajectory=unsure(900))
        assert escalated.abstained and escalated.error_kind == ESCALATED and escalated.stage == ESCALATED
        assert escalated.passed is False and "judge: confidence 0.500" in escalated.error
        for t in (errored, wrong, ok, unsure(900)):
            assert asyncio.run(cascade.acall(trajectory=t)) == cascade(trajectory=t)
    with pytest.raises(InputError, match="features"):
        cascade(trajectory="[1] USER: only text")


def test_batch_runs_stage_by_stage_and_counts_what_each_decided(cascade):
    items = [*dataset(12, offset=600), unsure(901), unsure(902)]
    lm = ScriptedLM(judge_answers)
    with dspy.context(lm=lm):
        verdicts = cascade.batch(items, num_threads=2)
        awaited = asyncio.run(cascade.abatch(items, concurrency=3))
    errored = sum("error" in t.task_id for t in items)
    assert isinstance(verdicts, CascadeVerdicts)
    assert verdicts.stage_calls == {"floor": len(items), "judge": len(items) - errored}
    assert lm.calls == 2 * (len(items) - errored)  # the judge saw only what the floor left, both times
    assert verdicts.decided_by == {"floor": errored, "judge": len(items) - errored - 2, ESCALATED: 2}
    assert verdicts.errors == {ESCALATED: 2} and verdicts.n_abstained == 2
    assert list(awaited) == list(verdicts) and awaited.stages == verdicts.stages
    for t, v, stage in zip(items, verdicts, verdicts.stages, strict=True):
        line = check_line({**verdict_line(t, v), "stage": stage}, "test")  # the verdict line schema takes it
        if stage != ESCALATED:
            assert v.passed == bool(t.label), t.id
        assert line["error_kind"] == (ESCALATED if stage == ESCALATED else None)


def test_evaluate_and_metric_count_an_escalation_as_an_abstention(cascade):
    items = [*dataset(8, offset=700), unsure(903)]
    devset = [dspy.Example(trajectory=t, label=t.label).with_inputs("trajectory") for t in items]
    lm = ScriptedLM(judge_answers)
    with dspy.context(lm=lm):
        result = dspy.Evaluate(devset=devset,
                               metric=lambda e, p, trace=None: (not p.abstained) and p.passed == bool(e.label),
                               num_threads=2, display_progress=False)(cascade)
        assert result.score == pytest.approx(100 * 8 / 9, abs=0.01)
        metric = Cascade([TrajectoryJudge()], [StageRule("judge", 0.8, 0.2)]).as_metric(lm=lm)
        example = dspy.Example(question="q").with_inputs("question")
        scores = [metric(example, dspy.Prediction(trajectory={}, answer="maybe"))]
    assert scores == [0.0] and metric.abstentions == 1 and metric.verdicts == 1


def test_a_trl_reward_gets_no_reward_for_an_escalated_completion():
    judge_only = Cascade([TrajectoryJudge()], [StageRule("judge", 0.8, 0.2)])
    prompt = [{"role": "user", "content": "Book flight HAT123."}]
    sure = [{"role": "assistant", "content": "Your flight is booked!"}]
    doubtful = [{"role": "assistant", "content": "maybe booked"}]
    reward = as_reward_function(judge_only, lm=ScriptedLM(judge_answers), max_concurrency=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = reward(prompts=[prompt, prompt], completions=[sure, doubtful])
    assert out == [pytest.approx(0.9), None]
    assert reward.counters.abstained == 1 and reward.counters.by_kind[ESCALATED] == 1
    assert any("escalated: 1" in str(w.message) for w in caught)


def test_save_and_load_round_trip_and_a_tampered_stage_is_refused(cascade, tmp_path):
    path = tmp_path / "cascade.json"
    cascade.save(path)
    saved = json.loads(path.read_text())
    assert [s["path"] for s in saved["judge"]["stages"]] == ["cascade.floor.json", "cascade.judge.json"]
    assert saved["judge"]["stages"][0]["t_pass"] is None and saved["judge"]["stages"][0]["t_fail"] == 0.2
    assert is_cascade_file(path) and not is_cascade_file(tmp_path / "cascade.floor.json")
    loaded = read_cascade(path, load_judge, check_certificate=False)
    assert [r.to_dict() for r in loaded.rules] == [r.to_dict() for r in cascade.rules]
    assert loaded.rubric_sha256 == cascade.rubric_sha256
    into = Cascade([FloorJudge(cascade.stages[0].floor), TrajectoryJudge()], [(0.9, 0.1), (0.9, 0.1)])
    assert into.load(path) is into and [r.to_dict() for r in into.rules] == [r.to_dict() for r in cascade.rules]
    with pytest.raises(ProgramError, match="malformed program"):
        Cascade([TrajectoryJudge()], [(0.9, 0.1)]).load(path)  # stage 0 of another kind refuses the floor's file
    three = Cascade([FloorJudge(cascade.stages[0].floor), TrajectoryJudge(), TrajectoryJudge()], [(0.9, 0.1)] * 3)
    with pytest.raises(InputError, match="build the cascade from its file with load_judge"):
        three.load(path)  # another structure: load_judge builds it from the file
    items = dataset(8, offset=800)
    with dspy.context(lm=ScriptedLM(judge_answers)):
        assert list(loaded.batch(items)) == list(cascade.batch(items))
    # an edited stage file: its sha256 no longer matches
    floor_file = tmp_path / "cascade.floor.json"
    floor = json.loads(floor_file.read_text())
    floor["model"]["intercept"] += 5.0
    floor_file.write_text(json.dumps(floor))
    with pytest.raises(ProgramError, match="sha256"):
        read_cascade(path, load_judge)
    # an edited threshold in the cascade itself: its program_sha256 no longer matches
    cascade.save(path)
    text = json.loads(path.read_text())
    text["judge"]["stages"][1]["t_pass"] = 0.5
    path.write_text(json.dumps(text))
    with pytest.raises(ProgramError, match="program_sha256"):
        read_cascade(path, load_judge)
    with pytest.warns(Warning, match="loaded anyway"):
        assert read_cascade(path, load_judge, allow_unverified=True).rules[1].t_pass == 0.5


def test_bad_rules_are_refused():
    with pytest.raises(InputError, match="t_fail < t_pass"):
        StageRule("judge", 0.3, 0.5)
    with pytest.raises(InputError, match="one rule per stage"):
        Cascade([TrajectoryJudge()], [])


def test_a_stage_path_outside_the_cascade_folder_is_refused(cascade, tmp_path):
    path = tmp_path / "inner" / "cascade.json"
    cascade.save(path)
    state = json.loads(path.read_text())
    state["judge"]["stages"][0]["path"] = "../cascade.floor.json"
    path.write_text(json.dumps(state))
    with pytest.raises(ProgramError, match="stay inside it"), pytest.warns(Warning, match="loaded anyway"):
        read_cascade(path, load_judge, allow_unverified=True)
