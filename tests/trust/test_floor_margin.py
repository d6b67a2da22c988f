"""The floor outside its own module: the `rubricforge floor` command, the certificate's margin over the
floor, the gate's --require-beats-floor, and the report's floor section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.judge_names import gives_away
from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.core.verdict import read_lines
from rubricforge_dspy.judge.floor import SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import data_fingerprint, data_ids, freeze, read_program
from rubricforge_dspy.report import write_report
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text
from rubricforge_dspy.trust.certify import certify_program
from rubricforge_dspy.trust.floor_margin import CROSS_VALIDATED_FLOOR, PROGRAM_FLOOR, floor_margin_of_records
from rubricforge_dspy.trust.gate import gate_programs
from tests.support.helpers import SHIPPED, bundled_missing, make_dataset
from tests.support.records import write_jsonl
from tests.support.verdicts import paper_pairing, write_verdicts

# -- rubricforge floor ------------------------------------------------------------------------------

def test_floor_command_json_and_verdict_files(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", make_dataset(30, trials=2))
    assert main(["floor", "--data", data, "--json", "--resamples", "200", "--verdicts-dir", str(tmp_path / "v"),
                 "--save-floor", str(tmp_path / "floor.json")]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["judge"]: row for row in report["rows"]}
    assert set(rows) == {"floor", "length_only", "heuristic"} and report["n"] == 60
    length = rows["length_only"]
    assert report["length_gives_away"] == gives_away(length["auc"], length["auc_ci_low"])
    for name in rows:
        lines = [record for _, record in read_lines(tmp_path / "v" / f"{name}.jsonl")]
        assert len(lines) == 60 and all(x["label"] in (0, 1) for x in lines)
        failed = [x for x in lines if x["label"] == 0]
        assert rows[name]["false_pass_rate"] == sum(x["passed"] for x in failed) / len(failed)
    assert SymptomFloor.from_json((tmp_path / "floor.json").read_text()).trained_on["n"] == 60


def test_floor_command_text_on_shipped_data_names_every_row(capsys):
    assert main(["floor", "--data", str(SHIPPED["adapt"]), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("floor", "length_only", "heuristic", "exact", "Episode length"))


def test_floor_command_joins_labels_and_reports_missing_ones(tmp_path, capsys):
    """--labels is the one join every command uses (`labels.py`): a trajectory the file does not label keeps
    its own label, and it is counted and named on stderr, never dropped silently."""
    trajectories = make_dataset(20)
    data = write_jsonl(tmp_path / "d.jsonl", trajectories)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": t.id, "label": int(i % 3 == 0)}) + "\n"
                              for i, t in enumerate(trajectories)))
    assert main(["floor", "--data", data, "--labels", str(labels), "--json", "--resamples", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["positives"] == sum(i % 3 == 0 for i in range(20))
    labels.write_text(labels.read_text().split("\n", 1)[1])
    assert main(["floor", "--data", data, "--labels", str(labels), "--json", "--resamples", "100"]) == 0
    captured = capsys.readouterr()
    assert "1 trajectories without a label" in captured.err and trajectories[0].id in captured.err
    expected = int(trajectories[0].label) + sum(i % 3 == 0 for i in range(1, 20))
    assert json.loads(captured.out)["positives"] == expected


def test_floor_command_refuses_one_class(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [t for t in make_dataset(20) if t.label])
    assert main(["floor", "--data", data]) == 2
    assert "one class" in capsys.readouterr().err


# -- margin, certificate ----------------------------------------------------------------------------

def _records(labels, passed):
    return [{"id": f"i{i}", "label": y, "passed": p, "score": 0.9 if p else 0.1, "abstained": False}
            for i, (y, p) in enumerate(zip(labels, passed, strict=True))]


def test_margin_counts_items_only_one_side_got_right():
    labels, induced, geval = paper_pairing()
    margin = floor_margin_of_records(_records(labels, induced), _records(labels, geval), source="test")
    assert (margin["mcnemar"]["b"], margin["mcnemar"]["c"]) == (3, 0) and margin["beats_floor"]
    assert margin["margin"]["false_pass_rate"] == round(6 / 52 - 9 / 52, 4) and not margin["significant"]
    with pytest.raises(ValueError, match="same items"):
        floor_margin_of_records(_records(labels, induced), _records(labels[:-1], geval[:-1]), source="test")


def lenient(messages):
    text = last_user_text(messages)
    failed = "payment method not found" in text and int(text.split("HAT")[1][:3]) % 4 != 3
    return {"reason": "r", "passed": not failed, "score": 0.1 if failed else 0.8}


def test_certificate_records_the_margin_over_the_programs_own_floor(tmp_path):
    train = make_dataset(8)
    held_out = [t for t in make_dataset(24) if int(t.task_id[1:]) >= 8]
    lm = ScriptedLM(lenient, model="scripted")
    plain, own = tmp_path / "plain.json", tmp_path / "own.json"
    freeze(TrajectoryJudge(), plain, data_fingerprint=data_fingerprint(train), seen=data_ids(train))
    freeze(TrajectoryJudge(), own, data_fingerprint=data_fingerprint(train), seen=data_ids(train),
           extra={"floor": SymptomFloor.fit(train).to_dict()})
    for path, source in ((plain, CROSS_VALIDATED_FLOOR), (own, PROGRAM_FLOOR)):
        certificate = certify_program(path, held_out, lm=lm, resamples=100)
        floor = certificate["floor"]
        assert floor["source"] == source and floor["n"] == 16
        # the lenient judge passes 4 of 8 failures the error symptom gives away: the floor is better
        assert floor["judge"]["accuracy"] == 0.75 and floor["floor"]["accuracy"] == 1.0
        assert not floor["beats_floor"] and floor["mcnemar"] == {**floor["mcnemar"], "b": 0, "c": 4}
        assert read_program(path)["rubricforge"]["certificate"]["floor"] == floor


# -- gate ---------------------------------------------------------------------------------------------

def test_gate_can_require_beating_the_floor_with_verdict_files(tmp_path, capsys):
    labels, induced, geval = paper_pairing()
    a = write_verdicts(tmp_path / "induced.jsonl", labels, induced)
    b = write_verdicts(tmp_path / "geval.jsonl", labels, geval)
    perfect = write_verdicts(tmp_path / "floor.jsonl", labels, [bool(y) for y in labels])
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", b, "--floor-verdicts", perfect]) == 0
    assert "Candidate vs symptom floor (not required)" in capsys.readouterr().out
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", b, "--floor-verdicts", perfect,
                 "--require-beats-floor"]) == 4  # no: not 1, a bug's code
    assert "does not beat the symptom floor" in capsys.readouterr().out
    weak = write_verdicts(tmp_path / "weak.jsonl", labels, [True] * len(labels))
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", b, "--floor-verdicts", weak,
                 "--require-beats-floor"]) == 0
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", b, "--require-beats-floor"]) == 2


def test_gate_programs_require_beating_the_floor(tmp_path):
    def respond(messages):
        failed = "payment method not found" in last_user_text(messages)
        strict = "never fixed fails" in system_text(messages)
        return {"reason": "r", "passed": not (failed and strict), "score": 0.1 if failed and strict else 0.9}

    strict, lenient_path = tmp_path / "strict.json", tmp_path / "lenient.json"
    freeze(TrajectoryJudge(SEED_RUBRIC + "\nA tool ERROR that is never fixed fails the episode."), strict)
    freeze(TrajectoryJudge(SEED_RUBRIC), lenient_path)
    data, lm = make_dataset(40), ScriptedLM(respond)
    result = gate_programs(strict, lenient_path, data, lm=lm, verdicts_dir=tmp_path / "v")
    assert result.may_replace and result.floor["source"] == CROSS_VALIDATED_FLOOR
    # the strict judge is exactly as good as counting tool errors: it ties with the floor, not beats it
    assert not result.beats_floor
    assert not gate_programs(strict, lenient_path, data, lm=lm, verdicts_dir=tmp_path / "w",
                             require_beats_floor=True).may_replace


# -- report -------------------------------------------------------------------------------------------

def _lines(path, labels, scores):
    with path.open("w") as handle:
        for i, (y, s) in enumerate(zip(labels, scores, strict=True)):
            handle.write(json.dumps({"id": f"x{i:03d}", "task_id": f"t{i}", "label": y, "passed": s >= 0.5,
                                     "score": s, "abstained": False, "n_steps": 5}) + "\n")
    return path


def test_report_says_above_the_tables_when_length_gives_the_outcome_away(tmp_path):
    labels = [i % 2 for i in range(40)]
    judge = _lines(tmp_path / "induced.jsonl", labels, [0.9 if i % 3 else 0.2 for i in range(40)])
    floor = _lines(tmp_path / "floor.jsonl", labels, [0.8 if y else 0.3 for y in labels])
    length = _lines(tmp_path / "length_only.jsonl", labels, [0.7 if y else 0.4 for y in labels])
    out = write_report([judge, floor, length], tmp_path / "r.md", figures=False, n_resamples=300)
    text = out.read_text()
    assert text.index("Episode length gives the outcome away here") < text.index("## Main table")
    assert "does **not** beat the symptom floor" in text
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["floor"]["gives_away"] is True and report["floor"]["vs_floor"]["beats_floor"] is False

    out = write_report([judge], tmp_path / "alone.md", figures=False, n_resamples=100)
    assert "has no floor or length-only row" in out.read_text()
    assert any("no floor rows" in w for w in json.loads(out.with_suffix(".json").read_text())["warnings"])


def test_protocol_says_why_there_is_no_hybrid_row(tmp_path):
    from rubricforge_dspy.core.verdict import Verdict
    from rubricforge_dspy.data.split import Split
    from rubricforge_dspy.pipeline.protocol import write_hybrid_predictions

    passed_only = [t for t in make_dataset(4) if t.label]
    split = Split(train=make_dataset(6), val=passed_only, test=make_dataset(4))
    notes = write_hybrid_predictions(tmp_path, split, [Verdict.from_answer(True, 0.9)] * len(passed_only),
                                     tmp_path / "induced.jsonl", tmp_path / "p.json", None)
    assert len(notes) == 1 and notes[0].startswith("no hybrid row") and "passed and failed" in notes[0]
    assert not (tmp_path / "hybrid.jsonl").exists()


def test_report_of_verdict_files_gets_floor_rows_from_the_labeled_data(tmp_path, capsys):
    from rubricforge_dspy.core.verdict import Verdict, verdict_line

    trajectories = make_dataset(30, trials=2)
    data = write_jsonl(tmp_path / "d.jsonl", trajectories)
    verdicts = tmp_path / "mine.jsonl"
    verdicts.write_text("".join(json.dumps(verdict_line(t, Verdict.from_answer(True, 0.9))) + "\n"
                                for t in trajectories[:40]))  # a lenient judge on 40 of the items
    out = tmp_path / "r" / "report.md"
    assert main(["report", "--predictions", str(verdicts), "--floor-data", data, "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    rows = {row["judge"]: row for row in report["main"]}
    assert set(rows) == {"mine", "floor", "length_only"} and rows["floor"]["n"] == 40
    assert rows["floor"]["false_pass_rate"] < rows["mine"]["false_pass_rate"] == 1.0
    assert not any("no floor rows" in w for w in report["warnings"])
    assert report["floor"]["vs_floor"]["beats_floor"] is False
    short = write_jsonl(tmp_path / "short.jsonl", trajectories[:10])
    assert main(["report", "--predictions", str(verdicts), "--floor-data", short, "--out", str(out)]) == 2
    assert "not in the data" in capsys.readouterr().err


def test_floor_refuses_unlabeled_traces_unless_labels_are_given(tmp_path, capsys):
    from rubricforge_dspy.data.formats import load_trajectories

    traces = Path(__file__).resolve().parents[2] / "evals" / "data" / "langfuse"
    if not traces.is_dir():
        pytest.skip(bundled_missing(traces))
    trajectories = load_trajectories(traces)
    assert main(["floor", "--data", str(traces)]) == 2
    assert "no label" in capsys.readouterr().err
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": t.id, "label": i % 2}) + "\n" for i, t in enumerate(trajectories)))
    code = main(["floor", "--data", str(traces), "--labels", str(labels), "--json", "--folds", "2",
                 "--resamples", "50"])
    assert len(trajectories) >= 4 and code == 0
    assert json.loads(capsys.readouterr().out)["n"] == len(trajectories)


# -- the false-pass rate is compared first (issue 41 item 7) ------------------------------------------

def _passes_everything(n_failed: int = 7, n_passed: int = 7):
    """A judge that passes every item and a floor that fails every item: equal accuracy (b == c), but the
    judge passes all the failed items and the floor none."""
    labels = [0] * n_failed + [1] * n_passed
    judge = [{"id": f"i{i}", "label": y, "passed": True, "score": 0.9, "abstained": False}
             for i, y in enumerate(labels)]
    floor = [{"id": f"i{i}", "label": y, "passed": False, "score": 0.1, "abstained": False}
             for i, y in enumerate(labels)]
    return judge, floor


def test_a_judge_passing_every_failed_item_is_worse_than_a_floor_passing_none_in_words():
    from rubricforge_dspy.trust.floor_margin import margin_lines

    margin = floor_margin_of_records(*_passes_everything(), source=PROGRAM_FLOOR)
    assert margin["mcnemar"]["b"] == margin["mcnemar"]["c"] == 7  # a tie on accuracy
    assert margin["false_pass_worse"] and not margin["beats_floor"]
    headline = margin_lines(margin)[0]
    assert "ties" not in headline and "does NOT beat the floor" in headline
    assert "false-pass rate 1.000 (7/7 failed items passed) is WORSE than the floor's 0.000 (0/7" in headline
    # a certificate written before the flag existed says so too (from its recorded rates)
    old = {k: v for k, v in margin.items() if k != "false_pass_worse"} | {"beats_floor": False}
    assert margin_lines(old)[0] == headline  # `show` and `certify` print a certificate's floor through margin_lines


def test_the_false_pass_rate_is_named_first_when_it_is_no_worse():
    from rubricforge_dspy.trust.floor_margin import margin_lines

    judge, floor = _passes_everything()
    margin = floor_margin_of_records(floor, judge, source=PROGRAM_FLOOR)  # swapped: the judge fails everything
    assert not margin["false_pass_worse"]
    assert margin_lines(margin)[0].endswith(
        "false-pass rate 0.000, no worse than the floor's 1.000; ties with the floor on accuracy")


def test_the_gate_refuses_a_candidate_that_passes_more_failed_items_than_the_floor(tmp_path, capsys):
    judge, floor = _passes_everything()
    baseline = [dict(r, passed=r["label"] == 1) for r in judge]
    paths = {}
    for name, records in (("candidate", judge), ("baseline", baseline), ("floor", floor)):
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in records))
    flags = ["gate", "--candidate-verdicts", str(paths["candidate"]), "--baseline-verdicts", str(paths["baseline"]),
             "--floor-verdicts", str(paths["floor"])]
    main(flags)  # the floor not required: the comparison is reported in words beside the decision
    out = capsys.readouterr().out
    assert "WARNING: its false-pass rate (1.000) is worse than the symptom floor's (0.000)" in out
    assert main([*flags, "--require-beats-floor"]) == 4
    out = capsys.readouterr().out
    assert "FAIL: keep the baseline" in out
    assert ("it does not beat the symptom floor: its false-pass rate (1.000) is worse than the symptom floor's "
            "(0.000)") in out
