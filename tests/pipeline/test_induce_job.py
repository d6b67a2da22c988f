"""The induction job (split -> induce -> floor -> hybrid -> certify), through the library and `rubricforge induce`,
offline with scripted LMs."""

from __future__ import annotations

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.export import convert_trajectories
from rubricforge_dspy.data.split import Split, split_by_task
from rubricforge_dspy.induction.inducer import InductionConfig
from rubricforge_dspy.judge.floor import SymptomFloor
from rubricforge_dspy.pipeline.induce_job import induction_split, run_induce_job
from rubricforge_dspy.program.store import read_program
from tests.support.helpers import make_dataset
from tests.support.induction import scripted_lms


def test_the_job_freezes_the_floor_hybrid_and_certificate_into_one_program(tmp_path):
    split = induction_split(make_dataset(30), seed=0)
    judge_lm, reflection_lm = scripted_lms()
    out = tmp_path / "p.json"
    job = run_induce_job(split, out, judge_lm=judge_lm, reflection_lm=reflection_lm,
                         config=InductionConfig(budget=60, minibatch=3), hybrid=True)

    manifest = read_program(out)["rubricforge"]
    assert job.induction.beat_seed and job.program == out
    # the floor is the one fit on the training split, written after induction
    assert manifest["floor"] == SymptomFloor.fit(split.train).to_dict()
    assert manifest["floor"]["trained_on"]["n"] == len(split.train)
    assert manifest["hybrid"] == job.hybrid.to_dict()
    assert manifest["certificate"] == job.certificate and job.not_certified is None
    assert job.certificate["false_pass"]["n"] == sum(1 for t in split.test if t.label == 0)
    assert job.induction.manifest["floor"] == manifest["floor"]


def test_one_class_training_split_notes_no_floor_and_one_class_test_split_is_not_certified(tmp_path):
    split = split_by_task(make_dataset(30), seed=0)
    # a training split of failures only, a test split of successes only
    one_class = Split(train=[t for t in split.train if t.label == 0], val=split.val,
                      test=[t for t in split.test if t.label == 1])
    judge_lm, reflection_lm = scripted_lms()
    out = tmp_path / "p.json"
    job = run_induce_job(one_class, out, judge_lm=judge_lm, reflection_lm=reflection_lm,
                         config=InductionConfig(budget=30, minibatch=2))
    manifest = read_program(out)["rubricforge"]
    assert "floor" not in manifest
    floor_notes = [n for n in manifest["induction"]["notes"] if n.startswith("no symptom floor in the manifest")]
    assert len(floor_notes) == 1 and floor_notes[0] in job.induction.notes
    assert job.certificate is None and "certificate" not in manifest
    assert job.not_certified.startswith("not certified: the test split is empty or has one class")


def test_sampling_takes_one_trial_of_n_tasks_before_the_split():
    data = make_dataset(40, trials=3)
    split = induction_split(data, sample_tasks=12, seed=3)
    items = [*split.train, *split.val, *split.test]
    assert len({t.task_id for t in items}) == 12 == len(items)
    assert split.summary() == induction_split(data, sample_tasks=12, seed=3).summary()


def test_rubricforge_induce_runs_the_job(tmp_path, capsys, scripted_cli):
    data = tmp_path / "data.jsonl"
    convert_trajectories(make_dataset(30), data)
    out = tmp_path / "programs" / "p.json"
    code = main(["induce", "--data", str(data), "--out", str(out), "--budget", "60", "--minibatch", "3", "--hybrid",
                 "--preset", "embedded"])
    captured = capsys.readouterr()
    assert code == 0
    manifest = read_program(out)["rubricforge"]
    assert {"floor", "hybrid", "certificate"} <= set(manifest)
    assert f"frozen: {out}" in captured.out and "<- best" in captured.out
    assert "hybrid: LLM score + " in captured.err and "certified on the test split: false-pass rate" in captured.err
    for name in ("train", "val", "test"):
        assert f"{name:>5}: " in captured.err
