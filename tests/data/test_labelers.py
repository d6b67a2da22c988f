"""Labels from several people: text values, a labeler column, the resolution rules, the agreement between
labelers (against hand-computed values and Krippendorff's published example), `stats --labels` and `certify`
beside each labeler (issue 41 item 2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.labels import LabelFileError, LabelReading, read_label_file
from rubricforge_dspy.metrics import krippendorff_alpha_nominal, labeler_agreement
from tests.support.records import jsonl_record, write_lines

VALUES = "Successful=1,Unsuccessful=0,Unsure=skip"
# id, annotator, value: t1 both say yes, t2 they disagree, t3 A unsure, t4 both no, t5 one annotator only
ROWS = [("t1", "A", "Successful"), ("t1", "B", "Successful"), ("t2", "A", "Unsuccessful"), ("t2", "B", "Successful"),
        ("t3", "A", "Unsure"), ("t3", "B", "Unsuccessful"), ("t4", "A", "Unsuccessful"), ("t4", "B", "Unsuccessful"),
        ("t5", "A", "Successful")]


def annotations(tmp_path, rows=ROWS, name="annotations.csv"):
    path = tmp_path / name
    path.write_text("id,annotator,trajectory_success\n" + "".join(f"run:{i}:0,{who},{v}\n" for i, who, v in rows))
    return path


def reading(**changes):
    return LabelReading(**{"column": "trajectory_success", "values": VALUES, "labeler_column": "annotator",
                           **changes})


# -- the statistics ----------------------------------------------------------------------------------------------

def test_krippendorff_alpha_reproduces_the_published_nominal_example():
    # Krippendorff (2011), "Computing Krippendorff's alpha-reliability", section C: 4 observers, 12 units,
    # missing values; nominal alpha = 0.743.
    n = None
    observers = [[1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
                 [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
                 [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
                 [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n]]
    assert krippendorff_alpha_nominal(list(zip(*observers, strict=True))) == pytest.approx(0.743, abs=5e-4)
    ratings = [{who: v for who, v in zip("ABCD", unit, strict=True) if v is not None}
               for unit in zip(*observers, strict=True)]
    result = labeler_agreement(ratings, resamples=100)  # the vectorized form: the same number
    assert result["alpha"]["value"] == pytest.approx(0.743, abs=5e-4) and result["single"] == 1


def test_two_labeler_statistics_match_the_hand_computation():
    # a = 1 1 0 0 1 0, b = 1 1 0 1 1 0: p_o = 5/6; p_e = 1/2 * 4/6 + 1/2 * 2/6 = 1/2 -> kappa = 2/3.
    # alpha: coincidences o11 = 6, o00 = 4, o01 = o10 = 1; n1 = 7, n0 = 5, n = 12 -> 1 - 11 * 2 / (2 * 7 * 5).
    ratings = [{"a": x, "b": y} for x, y in [(1, 1), (1, 1), (0, 0), (0, 1), (1, 1), (0, 0)]]
    result = labeler_agreement(ratings + [{"a": 1}], resamples=300, seed=7)
    assert result["items"] == 6 and result["single"] == 1 and result["labelers"] == ["a", "b"]
    assert result["raw_agreement"]["value"] == pytest.approx(5 / 6)
    (pair,) = result["pairs"]
    assert pair["n"] == 6 and pair["kappa"]["value"] == pytest.approx(2 / 3)
    assert result["alpha"]["value"] == pytest.approx(1 - 22 / 70)
    for stat in (result["raw_agreement"], result["alpha"], pair["kappa"]):
        assert stat["low"] <= stat["value"] <= stat["high"]
    assert result["interval"] == {"method": "percentile bootstrap over items", "confidence": 0.95,
                                  "resamples": 300, "seed": 7}
    assert labeler_agreement(ratings, resamples=300, seed=7)["alpha"] == result["alpha"]  # the seed fixes it


def test_kappa_per_pair_is_scikit_learns_on_three_labelers():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, 60)
    labels = {who: np.where(rng.random(60) < noise, 1 - truth, truth) for who, noise in
              (("a", 0.1), ("b", 0.2), ("c", 0.3))}
    ratings = [{who: int(v[i]) for who, v in labels.items()} for i in range(60)]
    result = labeler_agreement(ratings, resamples=50)
    assert [(p["a"], p["b"]) for p in result["pairs"]] == [("a", "b"), ("a", "c"), ("b", "c")]
    for pair in result["pairs"]:
        assert pair["kappa"]["value"] == pytest.approx(cohen_kappa_score(labels[pair["a"]], labels[pair["b"]]))
        assert pair["agreement"]["value"] == pytest.approx(np.mean(labels[pair["a"]] == labels[pair["b"]]))
    all_same = np.mean([len({labels[w][i] for w in labels}) == 1 for i in range(60)])
    assert result["raw_agreement"]["value"] == pytest.approx(all_same)


def test_alpha_is_undefined_not_a_number_when_every_label_is_the_same():
    with pytest.warns(UserWarning, match="undefined"):
        assert math.isnan(krippendorff_alpha_nominal([[1, 1], [1, 1]]))


# -- reading and resolving --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rule", "labels", "unresolved"), [
    ("first", {"run:t1:0": 1, "run:t2:0": 0, "run:t3:0": 0, "run:t4:0": 0, "run:t5:0": 1}, []),
    ("majority", {"run:t1:0": 1, "run:t3:0": 0, "run:t4:0": 0, "run:t5:0": 1}, ["run:t2:0"]),
    ("unanimous", {"run:t1:0": 1, "run:t3:0": 0, "run:t4:0": 0, "run:t5:0": 1}, ["run:t2:0"]),
])
def test_resolution_rules(tmp_path, rule, labels, unresolved):
    read = read_label_file(annotations(tmp_path), reading=reading(resolve=rule))
    assert {i: e.label for i, e in read.entries.items()} == labels
    assert sorted(read.unresolved) == unresolved and sorted(read.unlabeled) == unresolved
    assert read.disagreements == ["run:t2:0"] and read.skipped_values == 1
    assert read.ratings["run:t3:0"] == {"A": None, "B": 0} and read.ratings["run:t5:0"] == {"A": 1}


def test_majority_of_three_and_the_adjudicator(tmp_path):
    rows = [("t1", "A", "Successful"), ("t1", "B", "Unsuccessful"), ("t1", "C", "Successful"),
            ("t2", "A", "Successful"), ("t2", "B", "Unsuccessful"), ("t2", "boss", "Unsuccessful"),
            ("t3", "A", "Successful"), ("t3", "B", "Unsuccessful"), ("t4", "A", "Unsure"), ("t4", "B", "Unsure"),
            ("t5", "A", "Successful"), ("t5", "B", "Successful")]
    path = annotations(tmp_path, rows)
    major = read_label_file(path, reading=reading(resolve="majority"))
    assert major.entries["run:t1:0"].label == 1 and major.entries["run:t2:0"].label == 0  # boss votes here: 2 of 3
    assert major.unresolved == {"run:t3:0": "majority tie (1 of 2 say 1)"}
    assert major.blank == ["run:t4:0"]  # only skip values: no label, counted
    judged = read_label_file(path, reading=reading(resolve="adjudicated", adjudicator="boss"))
    assert judged.entries["run:t2:0"].label == 0 and "boss" not in judged.ratings["run:t2:0"]
    assert sorted(judged.unresolved) == ["run:t1:0", "run:t3:0"]  # a disagreement the boss did not settle
    assert "did not adjudicate" in judged.unresolved["run:t3:0"]
    assert judged.entries["run:t5:0"].label == 1  # labelers who agree need no adjudicator
    with pytest.raises(LabelFileError, match="needs --adjudicator"):
        reading(resolve="adjudicated")


def test_bad_annotation_files_name_the_line(tmp_path):
    with pytest.raises(LabelFileError, match=r"annotations.csv:3: trajectory_success 'Maybe' is not among"):
        read_label_file(annotations(tmp_path, [("t1", "A", "Successful"), ("t1", "B", "Maybe")]), reading=reading())
    with pytest.raises(LabelFileError, match=r"labeler 'A' labels id 'run:t1:0' twice \(lines 2 and 3\)"):
        read_label_file(annotations(tmp_path, [("t1", "A", "Successful"), ("t1", "A", "Successful")]),
                        reading=reading())
    with pytest.raises(LabelFileError, match="appears twice"):  # without a labeler column, ids stay unique
        read_label_file(annotations(tmp_path), reading=reading(labeler_column=None))


def test_a_jmespath_expression_reads_the_values_and_null_is_no_label(tmp_path):
    expression = ("trajectory_success == 'Successful' && `1` || "
                  "(trajectory_success == 'Unsuccessful' && `0` || null)")
    read = read_label_file(annotations(tmp_path), reading=reading(values=expression, resolve="majority"))
    assert {i: e.label for i, e in read.entries.items()} == {"run:t1:0": 1, "run:t3:0": 0, "run:t4:0": 0,
                                                             "run:t5:0": 1}
    assert read.skipped_values == 1


def test_a_jsonl_file_with_a_labeler_member(tmp_path):
    path = tmp_path / "labels.jsonl"
    write_lines(path, [{"id": "x", "labeler": "A", "label": 1}, {"id": "x", "labeler": "B", "label": 0},
                       {"id": "y", "labeler": "A", "label": 1}, {"id": "y", "labeler": "B", "label": 1}])
    read = read_label_file(path, reading=LabelReading(resolve="unanimous"))
    assert read.disagreements == ["x"] and {i: e.label for i, e in read.entries.items()} == {"y": 1}


# -- the command line -------------------------------------------------------------------------------------------

FLAGS = ["--label-column", "trajectory_success", "--label-values", VALUES, "--labeler-column", "annotator"]


def test_stats_labels_prints_agreement_and_disagreements(tmp_path, capsys):
    data = write_lines(tmp_path / "runs.jsonl", [jsonl_record(i, reward=None) for i in range(1, 6)])
    out_file = tmp_path / "disagreements.jsonl"
    assert main(["stats", "--data", str(data), "--labels", str(annotations(tmp_path)), *FLAGS,
                 "--label-resolve", "majority", "--disagreements-out", str(out_file)]) == 0
    out = capsys.readouterr().out
    # 3 items labeled twice (t1, t3 has one label, t2, t4): t1, t2, t4 -> agree on 2 of 3; kappa on
    # A = 1 0 0, B = 1 1 0: p_o = 2/3, p_e = 1/3 * 2/3 + 2/3 * 1/3 = 4/9 -> kappa = (2/3 - 4/9) / (5/9) = 0.40
    assert "2 labelers agree on 66.7%" in out and "of 3 items labeled at least twice" in out
    assert "A vs B: agree on 66.7%" in out and "Cohen's kappa 0.40" in out and "Krippendorff's alpha" in out
    assert "run:t2:0: A=0, B=1 -> no label" in out and "seed 0" in out
    assert [json.loads(line) for line in out_file.read_text().splitlines()] == [
        {"id": "run:t2:0", "labels": {"A": 0, "B": 1}, "resolved": None}]
    assert main(["stats", "--data", str(data), "--labels", str(annotations(tmp_path)), *FLAGS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["positives"] == 2 and report["labelers"]["agreement"]["pairs"][0]["kappa"]["value"] == \
        pytest.approx(0.4)


def test_label_flags_without_a_labels_file_are_refused(tmp_path, capsys):
    data = write_lines(tmp_path / "runs.jsonl", [jsonl_record(1)])
    assert main(["stats", "--data", str(data), "--label-resolve", "majority"]) == 2
    assert "give the file with --labels FILE" in capsys.readouterr().err


def test_text_values_without_a_labeler_column_keep_one_row_per_id(tmp_path):
    path = tmp_path / "verdicts.csv"
    path.write_text("id,outcome\nx, Successful \ny,unsuccessful\nz,Unsure\n")
    read = read_label_file(path, reading=LabelReading(column="outcome", values=VALUES))
    assert {i: e.label for i, e in read.entries.items()} == {"x": 1, "y": 0}
    assert read.blank == ["z"] and read.skipped_values == 1 and not read.ratings


def test_stats_json_gives_an_undefined_kappa_as_null(tmp_path, capsys):
    data = write_lines(tmp_path / "runs.jsonl", [jsonl_record(i, reward=None) for i in range(1, 3)])
    rows = [("t1", "A", "Successful"), ("t1", "B", "Successful"), ("t2", "A", "Successful"), ("t2", "B", "Successful")]
    assert main(["stats", "--data", str(data), "--labels", str(annotations(tmp_path, rows)), *FLAGS, "--json"]) == 0
    pair = json.loads(capsys.readouterr().out)["labelers"]["agreement"]["pairs"][0]
    assert pair["agreement"]["value"] == 1.0 and pair["kappa"] == {"value": None, "low": None, "high": None}
