"""Using a cascade (issue #34, "usability, as measured"): a cascade of floors needs no LM (none resolved, none in
its job: a resume under another configured LM is the same job); a resumed run counts the escalations of the
earlier runs; an escalated line carries the confidence and the name of the stage that escalated it."""

from __future__ import annotations

import dspy

from rubricforge_dspy.apply.cascade import run_cascade
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import StageRule
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.cascade import REWARD_ABOVE_0, lines_of, save_cascade

UNSURE = {"reason": "Cannot tell from the pages.", "passed": True, "score": 0.5}


def _data(halves, n):
    return list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))[:n]


def test_a_cascade_of_floors_resolves_no_lm_and_resumes_under_another_configured_lm(halves, tmp_path):
    cascade_file = save_cascade(halves, tmp_path, None)
    out = tmp_path / "v.jsonl"
    with dspy.context(lm=ScriptedLM(lambda messages: UNSURE, model="one")):
        first = run_cascade(load_judge(cascade_file), _data(halves, 20), out, cascade_file=cascade_file)
    with dspy.context(lm=ScriptedLM(lambda messages: UNSURE, model="another")):  # not this job's business
        second = run_cascade(load_judge(cascade_file), _data(halves, 40), out, cascade_file=cascade_file)
    with dspy.context(lm=None):
        third = run_cascade(load_judge(cascade_file), _data(halves, 40), out, cascade_file=cascade_file)
    assert (first.judged, second.judged, second.resumed, third.resumed) == (20, 20, 20, 40)
    assert all(x["model"] is None for x in lines_of(out))


def test_judge_cascade_of_floors_needs_no_api_base_and_claims_no_lm_calls_saved(halves, tmp_path, capsys,
                                                                                 monkeypatch):
    import importlib
    import pkgutil

    import rubricforge_dspy.cli
    import rubricforge_dspy.cli.lm_options as lm_options

    # every command module imported (and bound to the real lm_from_args) before the patch: one first imported under
    # it would keep the refusal after this test
    for module in pkgutil.iter_modules(rubricforge_dspy.cli.__path__, "rubricforge_dspy.cli."):
        if not module.name.endswith("__main__"):  # that one runs the command line
            importlib.import_module(module.name)

    def refuse(*args, **kwargs):
        raise AssertionError("a cascade of floors must not open an LM (nor start the embedded server)")

    monkeypatch.setattr(lm_options, "lm_from_args", refuse)
    monkeypatch.setattr("rubricforge_dspy.cli.judge.lm_from_args", refuse)
    cascade = save_cascade(halves, tmp_path, None)
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--limit", "30", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "LM calls: 0 (no LLM stage)" in err and "saved" not in err


def test_a_resumed_run_counts_the_escalations_of_the_earlier_runs(halves, tmp_path):
    cascade_file = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out = tmp_path / "v.jsonl"
    with dspy.context(lm=ScriptedLM(lambda messages: UNSURE)):
        first = run_cascade(load_judge(cascade_file), _data(halves, 20), out, cascade_file=cascade_file)
        second = run_cascade(load_judge(cascade_file), _data(halves, 40), out, cascade_file=cascade_file)
    in_file = sum(x["stage"] == "escalated" for x in lines_of(out))
    assert first.escalated > 0 and second.escalated > 0 and in_file == first.escalated + second.escalated
    assert second.escalated_in_file == in_file
    assert f"escalated to a person: {second.escalated} this run, {in_file} in all" in second.format()
    assert len(lines_of(out.with_name(out.name + ".escalated.jsonl"))) == in_file


def test_an_escalated_line_carries_the_confidence_and_the_stage_that_escalated_it(halves, tmp_path):
    out = tmp_path / "v.jsonl"
    with dspy.context(lm=ScriptedLM(lambda messages: UNSURE)):
        cascade = load_judge(save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2)))
        run_cascade(cascade, _data(halves, 40), out)
        batch = cascade.batch(_data(halves, 40))
        one = cascade(_data(halves, 40)[[s == "escalated" for s in batch.stages].index(True)])
    escalated = [x for x in lines_of(out) if x["stage"] == "escalated"]
    assert escalated and all(x["abstained"] and x["error_kind"] == "escalated" for x in escalated)
    assert all(x["score_calibrated"] == 0.5 and x["escalation_confidence"] == 0.5 and x["escalated_by"] == "judge"
               for x in escalated)
    in_batch = [v for v, s in zip(batch, batch.stages, strict=True) if s == "escalated"]
    assert in_batch and all(v.score_calibrated == 0.5 and "judge confidence 0.500" in v.error for v in in_batch)
    assert one.score_calibrated == 0.5 and one.escalated_by == "judge" and one.error_kind == "escalated"

    floors = tmp_path / "floors"
    floors.mkdir()
    floor_only = load_judge(save_cascade(halves, floors, None))
    run_cascade(floor_only, _data(halves, 60), floors / "v.jsonl")
    by_floor = [x for x in lines_of(floors / "v.jsonl") if x["stage"] == "escalated"]
    assert by_floor and all(x["escalated_by"] == "floor" and 0.05 < x["score_calibrated"] < 0.95 for x in by_floor)
