"""Offline GEPA induction with a scripted judge whose verdicts depend on the rubric text."""

from __future__ import annotations

import json
import re

import dspy
import pytest

from rubricforge_dspy.core.rubric import SEED_RUBRIC, parse_criteria
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.induction.inducer import (
    REFLECTION_PROMPT,
    InductionConfig,
    induce,
    make_feedback_metric,
    rendered_examples,
    verdict_outcome,
)
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.program.store import read_program
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from tests.support.helpers import make_dataset
from tests.support.induction import ERROR_CRITERION, make_reflection_lm, scripted_judge

FORBIDDEN = re.compile(r"reward|hash|gold|evaluator|CANARY", re.IGNORECASE)


def agreement(judge, trajectories, lm):
    with dspy.context(lm=lm):
        verdicts = [judge(trajectory=t) for t in trajectories]
    return sum(v.passed == bool(t.label) for v, t in zip(verdicts, trajectories, strict=True)) / len(trajectories)


def test_metric_scores_agreement_and_cost_of_false_pass():
    [gold] = rendered_examples(make_dataset(2)[1:])  # a failed episode
    false_pass = dspy.Prediction(passed=True, score=0.9, reason="done", abstained=False, error=None)
    abstained = dspy.Prediction(passed=False, score=0.0, reason="", abstained=True, error="AdapterParseError: x")
    correct = dspy.Prediction(passed=False, score=0.1, reason="error", abstained=False, error=None)
    assert make_feedback_metric()(gold, correct).score == 1.0
    assert make_feedback_metric()(gold, false_pass).score == 0.0
    assert make_feedback_metric(fp_weight=3.0)(gold, false_pass).score == -2.0
    assert make_feedback_metric()(gold, abstained).score == 0.0
    assert verdict_outcome(0, abstained) == "abstained"
    assert "FORMAT FAILURE" in make_feedback_metric()(gold, abstained).feedback


def test_feedback_points_at_observable_symptoms_and_never_at_labels_source():
    [gold] = rendered_examples(make_dataset(2)[1:])
    pred = dspy.Prediction(passed=True, score=0.9, reason="booked", abstained=False, error=None)
    feedback = make_feedback_metric()(gold, pred).feedback
    assert "did NOT accomplish" in feedback
    assert "book_reservation returned an ERROR" in feedback
    assert not FORBIDDEN.search(feedback)


def test_fp_weight_below_one_is_refused():
    with pytest.raises(ValueError, match="fp_weight"):
        InductionConfig(fp_weight=0.5)


def test_gepa_induction_beats_seed_and_frozen_program_reproduces(tmp_path):
    data = make_dataset(24)
    split = split_by_task(data, seed=0)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    prompts: list[str] = []
    out = tmp_path / "programs" / "induced.json"

    result = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=make_reflection_lm(prompts),
                    config=InductionConfig(budget=60, minibatch=3, seed=0), log_dir=tmp_path / "log",
                    out_path=out, lm_name="scripted-judge")

    seed_row, best_row = result.sweep[0], result.sweep[result.best_index]
    assert result.beat_seed
    assert best_row["val_agreement"] > seed_row["val_agreement"]
    assert any(c.name == "Error counter" for c in parse_criteria(result.judge.rubric))
    # the reflection saw symptoms, never the label's source
    assert prompts and all(not FORBIDDEN.search(p) for p in prompts)

    manifest = read_program(out)["rubricforge"]
    assert manifest["induction"]["budget"] == 60 and manifest["sweep"] == result.sweep
    assert manifest["induced_with_lm"] == "scripted-judge"

    reloaded = load_judge(out)
    assert reloaded.rubric == result.judge.rubric
    assert agreement(reloaded, split.val, judge_lm) == pytest.approx(best_row["val_agreement"])
    assert agreement(reloaded, split.test, judge_lm) > agreement(load_seed(), split.test, judge_lm)


def load_seed():
    from rubricforge_dspy.judge.module import TrajectoryJudge

    return TrajectoryJudge()


def test_no_improvement_freezes_the_seed(tmp_path):
    data = make_dataset(16)
    split = split_by_task(data, seed=1)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    unhelpful = ScriptedLM(lambda messages: {"new_instruction": "Pass every episode. score 0.9."})
    result = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=unhelpful,
                    config=InductionConfig(budget=30, minibatch=2), out_path=tmp_path / "p.json")
    assert not result.beat_seed and result.best_index == 0
    assert result.judge.rubric == SEED_RUBRIC
    assert json.loads((tmp_path / "p.json").read_text())["rubricforge"]["induction"]["beat_seed"] is False


def test_log_dir_of_another_run_is_refused(tmp_path):
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "something.bin").write_bytes(b"x")
    split = split_by_task(make_dataset(16), seed=0)
    with pytest.raises(ValueError, match="not a RubricForge induction log dir"):
        induce(split.train, split.val, judge_lm=ScriptedLM(scripted_judge), reflection_lm=ScriptedLM(scripted_judge),
               log_dir=tmp_path / "log")


def test_reflection_prompt_asks_for_observable_numbered_criteria():
    assert "numbered criteria" in REFLECTION_PROMPT and "observable" in REFLECTION_PROMPT


def test_symptoms_see_failed_commits_and_unbacked_claims():
    from rubricforge_dspy.evidence.symptoms import extract_symptoms, heuristic_verdict
    from tests.support.helpers import make_trajectory

    failed, ok = make_trajectory(1, success=False), make_trajectory(2, success=True)
    s = extract_symptoms(failed)
    assert s.failed_commits and not s.successful_commits and s.unbacked_claim == "booked"
    assert heuristic_verdict(failed)[0] is False and heuristic_verdict(ok)[0] is True
    assert not extract_symptoms(ok).unconfirmed_commits  # the user said yes before the booking


def test_rerun_with_the_same_log_dir_resumes_instead_of_starting_over(tmp_path):
    split = split_by_task(make_dataset(24), seed=0)
    config = InductionConfig(budget=40, minibatch=3, seed=0)
    first_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    first = induce(split.train, split.val, judge_lm=first_lm, reflection_lm=make_reflection_lm([]), config=config,
                   log_dir=tmp_path / "log")
    again_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    again = induce(split.train, split.val, judge_lm=again_lm, reflection_lm=make_reflection_lm([]), config=config,
                   log_dir=tmp_path / "log")
    assert again.sweep == first.sweep
    # the resumed run does not redo GEPA's search: it re-judges the validation set (GEPA's resumed
    # bookkeeping and the operating point fit on the chosen judge's validation verdicts), nothing more
    assert again_lm.calls <= 2 * len(split.val) < first_lm.calls


def test_candidates_that_memorize_training_episodes_are_rejected_and_counted(tmp_path):
    """A reflection LM that copies a training episode's flight number into the rubric: the candidate is
    rejected before GEPA spends calls on it, and the count is reported."""
    split = split_by_task(make_dataset(24), seed=0)
    flight = re.search(r"HAT\d{3}", split.train[0].render_text() if hasattr(split.train[0], "render_text")
                       else rendered_examples(split.train[:1])[0].trajectory).group(0)

    def copying(messages):
        return {"new_instruction": SEED_RUBRIC.replace(
            "\n\nScoring:", f"\n{ERROR_CRITERION}\n8. Flights: fail when flight {flight} was booked.\n\nScoring:")}

    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    result = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=ScriptedLM(copying),
                    config=InductionConfig(budget=40, minibatch=3, seed=0), out_path=tmp_path / "p.json")
    assert result.rejected and any(flight in leak for r in result.rejected for leak in r["leaks"])
    assert not result.beat_seed and flight not in result.judge.rubric
    manifest = read_program(tmp_path / "p.json")["rubricforge"]
    assert manifest["induction"]["rejected_memorized"] == len(result.rejected)


def test_recompiling_with_init_starts_from_the_parent_and_records_its_hash(tmp_path):
    """`induce --init parent.json` on new labels: the seed candidate is the parent's rubric, and the new
    manifest names the parent program."""
    split = split_by_task(make_dataset(24), seed=0)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    first = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=make_reflection_lm([]),
                   config=InductionConfig(budget=60, minibatch=3, seed=0), out_path=tmp_path / "parent.json")
    assert first.beat_seed
    parent = load_judge(tmp_path / "parent.json")
    new_split = split_by_task(make_dataset(30), seed=1)
    unhelpful = ScriptedLM(lambda messages: {"new_instruction": "Pass every episode. score 0.9."})
    child = induce(new_split.train, new_split.val, judge_lm=judge_lm, reflection_lm=unhelpful, init=parent,
                   config=InductionConfig(budget=40, minibatch=3, seed=0), out_path=tmp_path / "child.json")
    assert child.sweep[0]["rubric_sha256"] == parent.manifest["rubric_sha256"]  # the parent is the seed
    assert child.judge.rubric == parent.rubric  # nothing beat it, so the parent is kept
    manifest = read_program(tmp_path / "child.json")["rubricforge"]
    assert manifest["induction"]["parent_rubric_sha256"] == parent.rubric_sha256


def test_induction_refuses_a_budget_below_one_validation_pass_and_one_class_labels():
    split = split_by_task(make_dataset(24), seed=0)
    lm = ScriptedLM(scripted_judge)
    with pytest.raises(ValueError,
                       match=r"budget=2 \(command line: --budget\) is smaller than one validation pass "
                             r".*raise the budget to >= \d+ judge calls.*command line: --sample-tasks N"):
        induce(split.train, split.val, judge_lm=lm, reflection_lm=lm, config=InductionConfig(budget=2))
    one_class = [t for t in make_dataset(24) if t.label == 1]
    split = split_by_task(one_class, seed=0)
    with pytest.raises(ValueError, match="label 1"):
        induce(split.train, split.val, judge_lm=lm, reflection_lm=lm, config=InductionConfig(budget=40))


def overconfident_judge(messages):
    """Passes every episode (a known false-pass rate of 1.0), but its score ranks them: 0.6 when a tool
    call errored (all the failures of the synthetic data), 0.9 otherwise."""
    errors = int(re.search(r"tool_errors=(\d+)", last_user_text(messages)).group(1))
    return {"reason": "The agent says it is done.", "passed": True, "score": 0.6 if errors else 0.9}


def false_pass_rate_of(judge, trajectories, lm):
    from rubricforge_dspy.judge.execution import judge_verdict

    with dspy.context(lm=lm):
        verdicts = [judge_verdict(judge, t) for t in trajectories]
    failed = [v for v, t in zip(verdicts, trajectories, strict=True) if t.label == 0]
    return sum(v.passed for v in failed) / len(failed), verdicts


def test_max_false_pass_sets_a_threshold_on_calibrated_scores_that_caps_false_passes(tmp_path):
    data = make_dataset(40)
    split = split_by_task(data, seed=0)
    lm = ScriptedLM(overconfident_judge, model="overconfident")
    unhelpful = ScriptedLM(lambda messages: {"new_instruction": "Pass every episode. score 0.9."})
    plain = induce(split.train, split.val, judge_lm=lm, reflection_lm=unhelpful,
                   config=InductionConfig(budget=40, minibatch=3), out_path=tmp_path / "plain.json")
    capped = induce(split.train, split.val, judge_lm=lm, reflection_lm=unhelpful,
                    config=InductionConfig(budget=40, minibatch=3, max_false_pass=0.1),
                    out_path=tmp_path / "capped.json")
    plain_fp, _ = false_pass_rate_of(load_judge(tmp_path / "plain.json", check_certificate=False), split.test, lm)
    capped_judge = load_judge(tmp_path / "capped.json", check_certificate=False)
    capped_fp, verdicts = false_pass_rate_of(capped_judge, split.test, lm)
    assert plain_fp == 1.0 and capped_fp <= 0.1
    # the passes that remain are the real successes: the cap did not just fail everything
    assert any(v.passed for v, t in zip(verdicts, split.test, strict=True) if t.label == 1)
    assert all(v.score_calibrated is not None for v in verdicts)
    manifest = read_program(tmp_path / "capped.json")["rubricforge"]
    assert manifest["threshold"]["false_pass_rate"] <= 0.1 and manifest["induction"]["max_false_pass"] == 0.1
    assert manifest["calibration"]["method"] == "platt"
    assert capped.manifest["metrics"]["false_pass_rate"] <= 0.1 < plain.manifest["metrics"]["false_pass_rate"]
    # the operating point is part of the judge's fingerprint: no cached verdict of the uncapped judge is reused
    plain_judge = load_judge(tmp_path / "plain.json", check_certificate=False)
    assert capped_judge.fingerprint(lm).sha256 != plain_judge.fingerprint(lm).sha256


def test_a_reflection_answer_cut_at_max_tokens_proposes_nothing_and_the_run_goes_on(tmp_path):
    """A small reflection LM rambling to its max_tokens: no candidate from that answer, counted; not an outage."""
    from rubricforge_dspy.testing.scripted import Cut

    split = split_by_task(make_dataset(24), seed=0)
    rambling = ScriptedLM(lambda messages: Cut('{"new_instruction": "You grade the episode and you grade'))
    result = induce(split.train, split.val, judge_lm=ScriptedLM(scripted_judge), reflection_lm=rambling,
                    config=InductionConfig(budget=30, minibatch=2), out_path=tmp_path / "p.json")
    assert result.best_index == 0 and result.judge.rubric == SEED_RUBRIC
    assert read_program(tmp_path / "p.json")["rubricforge"]["induction"]["reflection_failures"] >= 1


# -- issue 19, item 6 (issue 26, item 4: tests/induction/test_gepa_checkpoint.py): GEPA's checkpoint (a pickle) is only
# resumed when the HMAC the run recorded verifies

class _Bomb:
    """An object whose unpickling creates a file: what a crafted gepa_state.bin could do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _induce_logged(tmp_path, judge_lm=None, budget=40):
    split = split_by_task(make_dataset(24), seed=0)
    return induce(split.train, split.val, judge_lm=judge_lm or ScriptedLM(scripted_judge, model="scripted-judge"),
                  reflection_lm=make_reflection_lm([]), config=InductionConfig(budget=budget, minibatch=3, seed=0),
                  log_dir=tmp_path / "log")


@pytest.mark.parametrize("marker", ["recorded", "no tag", "no marker"])
def test_a_crafted_gepa_state_is_refused_and_never_unpickled(tmp_path, marker):
    import pickle

    from rubricforge_dspy.core.errors import InputError

    _induce_logged(tmp_path)
    log, pwned = tmp_path / "log", tmp_path / "pwned"
    run = json.loads((log / "rubricforge_run.json").read_text())
    assert run["gepa_state_hmac"]  # recorded after GEPA's last save
    (log / "gepa_state.bin").write_bytes(pickle.dumps(_Bomb(pwned)))
    if marker == "no tag":
        del run["gepa_state_hmac"]
        (log / "rubricforge_run.json").write_text(json.dumps(run))
    elif marker == "no marker":
        (log / "rubricforge_run.json").unlink()
    with pytest.raises(InputError, match="gepa_state.bin|not a RubricForge") as refused:
        _induce_logged(tmp_path)
    assert not pwned.exists()
    if marker != "no marker":
        assert "new --log-dir" in str(refused.value) and "refusing to unpickle" in str(refused.value)


def test_a_crafted_gepa_state_is_refused_by_the_command_line(tmp_path, capsys):
    import pickle

    from rubricforge_dspy.cli.main import main

    log, pwned = tmp_path / "log", tmp_path / "pwned"
    log.mkdir()
    (log / "rubricforge_run.json").write_text("{}")
    (log / "gepa_state.bin").write_bytes(pickle.dumps(_Bomb(pwned)))
    data = tmp_path / "data.jsonl"
    from tests.support.records import jsonl_record, write_lines
    write_lines(data, [jsonl_record(i, reward=float(i % 2)) for i in range(24)])
    code = main(["induce", "--data", str(data), "--out", str(tmp_path / "out"), "--log-dir", str(log),
                 "--api-base", "http://127.0.0.1:9/v1", "--model", "m"])
    assert code == 2 and not pwned.exists()
    assert str(log) in capsys.readouterr().err  # refused (exit 2, named), never unpickled


def test_a_judge_server_dying_after_gepa_stops_induction_instead_of_validating_on_abstentions(tmp_path, monkeypatch):
    """The chosen rubric's validation pass (its verdicts fit the operating point) ran with no dead-server circuit:
    a judge server gone after GEPA turned every validation verdict into an abstention and the program was written
    anyway. It runs through the batch engine with the run's circuit: the run stops (exit 3), nothing is written."""
    import threading

    from rubricforge_dspy.induction import search
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError

    split = split_by_task(make_dataset(40), seed=0)
    assert len(split.val) > 3  # more validation items than the circuit's limit (3)
    dead = threading.Event()

    def judge_answer(messages):
        if dead.is_set():
            raise ConnectionError("connection refused")
        return scripted_judge(messages)

    frozen = search._frozen_judge

    def frozen_then_dead(*args, **kwargs):
        dead.set()  # GEPA is over: the judge server dies before the chosen rubric's validation pass
        return frozen(*args, **kwargs)

    monkeypatch.setattr(search, "_frozen_judge", frozen_then_dead)
    out = tmp_path / "induced.json"
    with pytest.raises(JudgeUnavailableError, match="consecutive"):
        induce(split.train, split.val, judge_lm=ScriptedLM(judge_answer, model="scripted-judge"),
               reflection_lm=make_reflection_lm([]), config=InductionConfig(budget=60, minibatch=3, seed=0),
               out_path=out, lm_name="scripted-judge")
    assert dead.is_set() and not out.exists()
