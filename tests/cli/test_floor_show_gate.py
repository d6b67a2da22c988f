"""`show` and `gate` take a floor file, as `cascade fit --stage` does: `show` describes it, `gate` judges with it
(and starts no LM when neither judge calls one)."""

from __future__ import annotations

from rubricforge_dspy.cli.main import main
from tests.support.cascade import REWARD_ABOVE_0


def test_show_describes_a_floor_file(halves, capsys):
    assert main(["show", str(halves / "floor.json")]) == 0
    shown = capsys.readouterr().out
    assert f"floor: {halves / 'floor.json'}" in shown
    assert "symptom floor 'floor'" in shown and "no LM call" in shown and "trained on 250 trajectories" in shown


def test_gate_takes_floor_files_without_starting_an_lm(halves, tmp_path, capsys, monkeypatch):
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.judge.floor import SymptomFloor

    length = tmp_path / "length.json"
    length.write_text(SymptomFloor.length_only(list(load_trajectories(halves / "train.jsonl", label_threshold=0.0)))
                      .to_json())

    def no_lm(*args, **kwargs):
        raise AssertionError("an LM was started for judges that call none")

    monkeypatch.setattr("rubricforge_dspy.cli.trust.lm_from_args", no_lm)
    code = main(["gate", "--candidate", str(halves / "floor.json"), "--baseline", str(length), "--data",
                 str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--verdicts-dir", str(tmp_path / "v")])
    out = capsys.readouterr()
    assert code in (0, 4), out.err
    assert "candidate" in out.out.lower() and (tmp_path / "v" / "candidate.jsonl").exists()


def test_floor_save_floor_into_a_missing_folder_creates_it(halves, tmp_path, capsys):
    saved = tmp_path / "not" / "yet" / "floor.json"
    code = main(["floor", "--data", str(halves / "train.jsonl"), *REWARD_ABOVE_0, "--resamples", "50",
                 "--save-floor", str(saved)])
    assert code == 0, capsys.readouterr().err
    assert saved.is_file() and main(["show", str(saved)]) == 0


def test_floor_save_floor_under_a_file_is_exit_2_before_any_work(halves, tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    code = main(["floor", "--data", str(halves / "train.jsonl"), *REWARD_ABOVE_0,
                 "--save-floor", str(tmp_path / "a-file" / "floor.json")])
    err = capsys.readouterr().err
    assert code == 2 and "a-file" in err and "Traceback" not in err
