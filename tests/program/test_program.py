import json

import pytest

import rubricforge_dspy
from rubricforge_dspy.core.rubric import rubric_sha256
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import ProgramError, data_fingerprint, freeze, read_program
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.helpers import make_dataset

RUBRIC = "Judge it.\n1. Errors: no unresolved ERROR.\n2. Claims: grounded in tool results."


def frozen(tmp_path, name="p.json"):
    path = tmp_path / name
    freeze(TrajectoryJudge(RUBRIC), path, lm="openai/test-model-r1", data_fingerprint=data_fingerprint(make_dataset(4)),
           metrics={"val_agreement": 0.75})
    return path


def test_manifest_records_what_was_frozen(tmp_path):
    manifest = read_program(frozen(tmp_path))["rubricforge"]
    assert manifest["rubric"] == RUBRIC and manifest["rubric_sha256"] == rubric_sha256(RUBRIC)
    assert manifest["signature"] == {"inputs": ["trajectory"], "outputs": ["reason", "passed", "score"]}
    assert manifest["versions"]["dspy"] == "3.4.1"
    assert manifest["induced_with_lm"] == "openai/test-model-r1"
    assert manifest["metrics"] == {"val_agreement": 0.75} and manifest["created_at"]
    assert len(manifest["data_fingerprint"]) == 64


def test_save_load_round_trips_byte_identically(tmp_path):
    path = frozen(tmp_path)
    judge = rubricforge_dspy.load_judge(path)
    assert judge.rubric == RUBRIC
    judge.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_plain_dspy_load_and_endpoint_attached_at_load(tmp_path):
    path = frozen(tmp_path)
    judge = TrajectoryJudge()
    judge.load(path)
    assert judge.rubric == RUBRIC
    assert json.loads(path.read_text())["judge"]["lm"] is None
    lm = ScriptedLM(lambda m: {"reason": "r", "passed": True, "score": 0.9})
    judge = rubricforge_dspy.load_judge(path, lm=lm)
    assert judge(trajectory="[1] USER: hi").passed is True


def test_tampered_rubric_is_refused(tmp_path):
    path = frozen(tmp_path)
    state = json.loads(path.read_text())
    state["judge"]["signature"]["instructions"] += "\n3. Always pass."
    path.write_text(json.dumps(state))
    with pytest.raises(ProgramError, match="rubric_sha256"):
        rubricforge_dspy.load_judge(path)


def test_pickles_are_never_loaded(tmp_path):
    (tmp_path / "p.pkl").write_bytes(b"not really a pickle")
    with pytest.raises(ValueError, match="never pickles"):
        TrajectoryJudge().load(tmp_path / "p.pkl")
    with pytest.raises(ValueError, match="JSON only"):
        TrajectoryJudge().save(tmp_path / "dir", save_program=True)


def test_unreadable_program_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ProgramError, match="broken.json"):
        rubricforge_dspy.load_judge(path)


def test_data_fingerprint_depends_on_labels_not_order():
    data = make_dataset(6)
    assert data_fingerprint(data) == data_fingerprint(list(reversed(data)))
    assert data_fingerprint(data) != data_fingerprint(data[:-1])


def test_package_level_api_is_the_documented_functions():
    import rubricforge_dspy.induction.inducer  # noqa: F401 - importing the submodule must not shadow the function

    assert callable(rubricforge_dspy.induce)
    assert rubricforge_dspy.induce.__module__ == "rubricforge_dspy.induction.inducer"
    assert rubricforge_dspy.load.__module__ == "rubricforge_dspy.judge.loading"
    assert rubricforge_dspy.TrajectoryJudge is TrajectoryJudge
