"""`RubricInducer`: induction as a DSPy Teleprompter over `dspy.Example`s, offline with scripted LMs."""

from __future__ import annotations

import dataclasses

import dspy
import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.rubric import SEED_RUBRIC, parse_criteria
from rubricforge_dspy.data import to_examples
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.induction.inducer import freeze_induced
from rubricforge_dspy.induction.search import InductionResult
from rubricforge_dspy.induction.teleprompter import RubricInducer
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from tests.support.helpers import make_dataset
from tests.support.induction import make_reflection_lm, scripted_judge


def examples(trajectories, **extra):
    return [dspy.Example(trajectory=t, label=t.label, reward=t.reward, id=t.id, task_id=t.task_id, **extra)
            .with_inputs("trajectory") for t in trajectories]


def test_compile_is_a_teleprompter_returning_a_judge_with_detailed_results():
    data = make_dataset(24)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    inducer = RubricInducer(reflection_lm=make_reflection_lm([]), budget=60, minibatch=3, seed=0)
    assert isinstance(inducer, dspy.teleprompt.Teleprompter)
    with dspy.context(lm=judge_lm):  # the judge LM is the configured one, as everywhere in DSPy
        judge = inducer.compile(TrajectoryJudge(), trainset=examples(data))
    assert isinstance(judge, TrajectoryJudge)
    details = judge.detailed_results
    assert isinstance(details, InductionResult)
    assert details.beat_seed and details.candidates[0] == SEED_RUBRIC
    assert details.candidates[details.best_index] == judge.rubric
    assert "above the seed" in details.selection
    assert any(c.name == "Error counter" for c in parse_criteria(judge.rubric))
    # no valset: split by task, so no task is both reflected on and selected on
    train_tasks = {t.task_id for t in details.train}
    assert details.val and not train_tasks & {t.task_id for t in details.val}
    assert len(details.train) + len(details.val) == len(data)
    assert details.operating_point["calibration"]["method"] == "platt"
    assert details.val_metrics["val_agreement"] == 1.0


def test_the_student_lm_is_the_judge_lm_and_the_returned_judge_keeps_it():
    data = make_dataset(24)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    student = TrajectoryJudge()
    student.set_lm(judge_lm)
    judge = RubricInducer(reflection_lm=make_reflection_lm([]), budget=40, minibatch=3).compile(
        student, trainset=examples(data))
    assert judge_lm.calls > 0 and judge.judge.lm is judge_lm
    assert judge(trajectory=data[1]).passed is False  # the error-counter criterion, with the student's LM


def test_no_judge_lm_is_refused_before_any_call():
    reflection = ScriptedLM(lambda m: {"new_instruction": "x"})
    with dspy.context(lm=None), pytest.raises(InputError, match=r"no judge LM.*set_lm"):
        RubricInducer(reflection_lm=reflection, budget=40).compile(TrajectoryJudge(),
                                                                   trainset=examples(make_dataset(8)))
    assert reflection.calls == 0


@pytest.mark.parametrize("break_it, message", [
    (lambda ex: ex.copy(label=None), r"trainset\[3\] \(id synthetic:t3:0\): no label; induction needs a label"),
    (lambda ex: ex.copy(label=0.5), r"label must be 0 or 1"),
    (lambda ex: dspy.Example(trajectory=ex.trajectory, label=1), r"not marked as the input"),
    (lambda ex: ex.with_inputs("trajectory", "label"), r"input field\(s\) \['label'\] besides 'trajectory'"),
    (lambda ex: ex.copy(trajectory=render_trajectory(ex.trajectory)), r"is a str, not a Trajectory"),
    (lambda ex: {"trajectory": ex.trajectory, "label": 1}, r"expected a dspy.Example"),
])
def test_bad_examples_are_refused_naming_the_example_before_any_lm_call(break_it, message):
    data = examples(make_dataset(24))
    data[3] = break_it(data[3])
    judge_lm, reflection = ScriptedLM(scripted_judge), ScriptedLM(lambda m: {"new_instruction": "x"})
    with dspy.context(lm=judge_lm), pytest.raises(InputError, match=message):
        RubricInducer(reflection_lm=reflection, budget=60).compile(TrajectoryJudge(), trainset=data)
    assert judge_lm.calls == 0 and reflection.calls == 0


def test_a_testset_sharing_tasks_with_training_is_refused():
    both = make_dataset(24, trials=2)
    first, second = [t for t in both if t.trial == 0], [t for t in both if t.trial == 1]
    with dspy.context(lm=ScriptedLM(scripted_judge)), pytest.raises(InputError, match=r"4 task\(s\) are in both"):
        RubricInducer(reflection_lm=make_reflection_lm([]), budget=60).compile(
            TrajectoryJudge(), trainset=examples(first), testset=examples(second[:4]))


def test_labels_and_example_fields_never_reach_any_prompt():
    """Canary: every prompt the judge LM and the reflection LM receive during `compile` is recorded.
    Example fields beyond the trajectory, rewards and the trajectory's hidden fields never appear, and
    every trajectory the judge reads is the render of the steps alone (the same whatever the label)."""
    data = make_dataset(24)
    odd = [dataclasses.replace(t, reward=0.777 + i / 1000 if t.label else 0.0) for i, t in enumerate(data)]
    judge_prompts, reflection_prompts = [], []

    def judge(messages):
        judge_prompts.append(messages)
        return scripted_judge(messages)

    def reflect(messages):
        reflection_prompts.append("\n".join(m["content"] for m in messages))
        return make_reflection_lm([]).respond(messages)

    trainset = examples(odd, gold_answer="CANARY-EXAMPLE-GOLD", ground_truth="CANARY-EXAMPLE-TRUTH")
    with dspy.context(lm=ScriptedLM(judge)):
        RubricInducer(reflection_lm=ScriptedLM(reflect), budget=60, minibatch=3).compile(
            TrajectoryJudge(), trainset=trainset)
    assert judge_prompts and reflection_prompts
    texts = ["\n".join(m["content"] for m in p) for p in judge_prompts] + reflection_prompts
    for text in texts:
        assert "CANARY" not in text and "0.77" not in text and "reward" not in text.lower()
    # the judge reads the render of the steps alone: the same text with the labels flipped
    renders = [render_trajectory(dataclasses.replace(t, label=1 - t.label, reward=0.5)) for t in data]
    assert all(any(r in last_user_text(p) for r in renders) for p in judge_prompts)


def test_recompiling_a_loaded_judge_starts_from_its_rubric(tmp_path):
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    first = RubricInducer(reflection_lm=make_reflection_lm([]), budget=60, minibatch=3)
    with dspy.context(lm=judge_lm):
        parent = first.compile(TrajectoryJudge(), trainset=examples(make_dataset(24)))
    freeze_induced(parent, tmp_path / "parent.json", lm_name="scripted-judge")
    loaded = load_judge(tmp_path / "parent.json", check_certificate=False)
    unhelpful = ScriptedLM(lambda messages: {"new_instruction": "Pass every episode. score 0.9."})
    new = split_by_task(make_dataset(30), seed=1)
    with dspy.context(lm=judge_lm):
        child = RubricInducer(reflection_lm=unhelpful, budget=40, minibatch=3).compile(
            loaded, trainset=to_examples(new.train), valset=to_examples(new.val))
    assert child.detailed_results.candidates[0] == loaded.rubric  # the loaded rubric is GEPA's seed
    assert child.rubric == loaded.rubric and "no candidate beat the seed" in child.detailed_results.selection


def test_a_testset_gives_test_metrics_and_a_certificate():
    from rubricforge_dspy.trust.certificate import certificate_for

    split = split_by_task(make_dataset(40), seed=0)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    inducer = RubricInducer(reflection_lm=make_reflection_lm([]), budget=60, minibatch=3, certify=certificate_for)
    with dspy.context(lm=judge_lm):
        judge = inducer.compile(TrajectoryJudge(), trainset=to_examples(split.train), valset=to_examples(split.val),
                                testset=to_examples(split.test))
    details = judge.detailed_results
    assert len(details.test_verdicts) == len(split.test)
    assert details.test_metrics["test_agreement"] == 1.0 and details.test_metrics["test_size"] == len(split.test)
    certificate = details.certificate
    assert certificate["n"] == len(split.test) and certificate["false_pass"]["k"] == 0
    assert certificate["rubric_sha256"] and certificate["lm_fingerprint"]["sha256"]


def test_freeze_induced_writes_the_testset_certificate_so_the_loaded_judge_is_certified(tmp_path):
    """`compile(testset=, certify=)` measured a certificate that `freeze_induced` left out of the manifest:
    the reloaded judge warned "no certificate" (the walkthrough hid it with check_certificate=False)."""
    import warnings

    from rubricforge_dspy.program.drift import UncertifiedJudgeWarning
    from rubricforge_dspy.program.store import CERTIFICATE_KEY, read_program
    from rubricforge_dspy.trust.certificate import certificate_for

    split = split_by_task(make_dataset(40), seed=0)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    inducer = RubricInducer(reflection_lm=make_reflection_lm([]), budget=60, minibatch=3, certify=certificate_for)
    with dspy.context(lm=judge_lm):
        judge = inducer.compile(TrajectoryJudge(), trainset=to_examples(split.train), valset=to_examples(split.val),
                                testset=to_examples(split.test))
    manifest = freeze_induced(judge, tmp_path / "p.json", lm_name="scripted-judge")
    assert manifest[CERTIFICATE_KEY] == judge.detailed_results.certificate
    assert read_program(tmp_path / "p.json")["rubricforge"][CERTIFICATE_KEY] == judge.detailed_results.certificate
    loaded = load_judge(tmp_path / "p.json")  # the certificate check on, as a user loads it
    with warnings.catch_warnings(record=True) as caught, dspy.context(lm=judge_lm):
        warnings.simplefilter("always")
        assert loaded(trajectory=split.test[0]).passed == bool(split.test[0].label)
    assert [w for w in caught if issubclass(w.category, UncertifiedJudgeWarning)] == []
    # without a testset there is no certificate to write, and the loaded judge says so
    with dspy.context(lm=judge_lm):
        plain = RubricInducer(reflection_lm=make_reflection_lm([]), budget=60, minibatch=3).compile(
            TrajectoryJudge(), trainset=to_examples(split.train), valset=to_examples(split.val))
    assert CERTIFICATE_KEY not in freeze_induced(plain, tmp_path / "plain.json")


def test_freeze_induced_refuses_a_certificate_of_another_rubric(tmp_path):
    from rubricforge_dspy.trust.certificate import certificate_for

    split = split_by_task(make_dataset(40), seed=0)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    inducer = RubricInducer(reflection_lm=make_reflection_lm([]), budget=60, minibatch=3, certify=certificate_for)
    with dspy.context(lm=judge_lm):
        judge = inducer.compile(TrajectoryJudge(), trainset=to_examples(split.train), valset=to_examples(split.val),
                                testset=to_examples(split.test))
    judge.judge.signature = judge.judge.signature.with_instructions(judge.rubric + "\n8. Extra: never measured.")
    with pytest.raises(InputError, match="certificate .* another rubric"):
        freeze_induced(judge, tmp_path / "p.json")
    assert not (tmp_path / "p.json").exists()


def test_errors_raised_to_python_callers_name_the_parameter_they_passed():
    """A Python caller of `RubricInducer` passed ``budget=`` and ``max_false_pass=``, not ``--budget`` and
    ``--max-false-pass``: errors name the parameter (and the command line's flag beside it)."""
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.testing.fake_server import FakeOpenAI

    split = split_by_task(make_dataset(40), seed=0)
    judge_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    train, val = to_examples(split.train), to_examples(split.val)
    with dspy.context(lm=judge_lm), pytest.raises(InputError) as caught:
        RubricInducer(reflection_lm=make_reflection_lm([]), budget=2).compile(TrajectoryJudge(), trainset=train,
                                                                             valset=val)
    assert f"budget=2 (command line: --budget) is smaller than one validation pass ({len(val)} judge calls)" \
        in str(caught.value) and f"raise the budget to >= {len(val) + 2 * 4} judge calls" in str(caught.value)
    assert "sample_tasks= (command line: --sample-tasks N)" in str(caught.value)

    one_class = examples([t for t in make_dataset(40) if t.label == 1])
    with dspy.context(lm=judge_lm), pytest.raises(InputError, match=r"label_threshold=; command line: "
                                                                     r"--label-threshold"):
        RubricInducer(reflection_lm=make_reflection_lm([]), budget=60).compile(TrajectoryJudge(), trainset=one_class)

    successes_only = to_examples([t for t in split.val if t.label == 1])
    with dspy.context(lm=judge_lm), pytest.raises(InputError, match=r"max_false_pass=0.1 \(command line: "
                                                                     r"--max-false-pass\) needs validation"):
        RubricInducer(reflection_lm=make_reflection_lm([]), budget=40, minibatch=3, max_false_pass=0.1).compile(
            TrajectoryJudge(), trainset=train, valset=successes_only)

    unlabeled = [dspy.Example(trajectory=dataclasses.replace(t, label=None, reward=None)).with_inputs("trajectory")
                 for t in split.train]
    with pytest.raises(InputError, match=r"labels=\); command line: --labels"):
        RubricInducer(reflection_lm=make_reflection_lm([])).compile(TrajectoryJudge(), trainset=unlabeled)

    with FakeOpenAI(lambda body, n: "http_500") as dead:
        student = TrajectoryJudge()
        student.set_lm(make_lm(LMConfig(model=dead.model, api_base=dead.api_base, num_retries=0, timeout=5)))
        with pytest.raises(JudgeUnavailableError) as caught:
            RubricInducer(reflection_lm=make_reflection_lm([]), budget=40, minibatch=3).compile(
                student, trainset=train, valset=val)
    message = str(caught.value)
    assert "api_base=, model=; command line: --api-base/--model" in message
    assert "give a log_dir (command line: --log-dir) to make a run resumable" in message


def test_freeze_induced_refuses_a_result_without_its_config_with_an_input_error(tmp_path):
    """The check was an `assert` (gone under ``python -O``, a bare AssertionError otherwise): a judge whose
    ``detailed_results`` is not one `compile` returned (no induction config) is refused with the package's
    error, naming what to do, and nothing is written."""
    judge = TrajectoryJudge()
    judge.detailed_results = InductionResult(judge=judge, sweep=[], best_index=0, beat_seed=False)
    with pytest.raises(InputError, match="RubricInducer.compile"):
        freeze_induced(judge, tmp_path / "p.json", lm_name="scripted-judge")
    assert not (tmp_path / "p.json").exists()


def test_a_judge_server_dying_before_the_testset_pass_stops_compile_instead_of_certifying_abstentions(monkeypatch):
    """The testset pass (its verdicts make the certificate) ran with no dead-server circuit: a judge server gone
    after the search turned every test verdict into an abstention and a certificate was computed from them. It
    runs through the batch engine with a circuit: compile stops with `JudgeUnavailableError`."""
    import threading

    from rubricforge_dspy.induction import teleprompter
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError
    from rubricforge_dspy.trust.certificate import certificate_for

    split = split_by_task(make_dataset(40), seed=0)
    dead = threading.Event()

    def judge_answer(messages):
        if dead.is_set():
            raise ConnectionError("connection refused")
        return scripted_judge(messages)

    search = teleprompter.run_search

    def search_then_dead(*args, **kwargs):
        result = search(*args, **kwargs)
        dead.set()  # the search is over: the judge server dies before the testset pass
        return result

    monkeypatch.setattr(teleprompter, "run_search", search_then_dead)
    certified: list[object] = []

    def certify(*args, **kwargs):
        certified.append(args)
        return certificate_for(*args, **kwargs)

    inducer = RubricInducer(reflection_lm=make_reflection_lm([]), budget=60, minibatch=3, certify=certify)
    with dspy.context(lm=ScriptedLM(judge_answer, model="scripted-judge")), \
            pytest.raises(JudgeUnavailableError, match="consecutive"):
        inducer.compile(TrajectoryJudge(), trainset=to_examples(split.train), valset=to_examples(split.val),
                        testset=to_examples(split.test))
    assert dead.is_set() and certified == []
