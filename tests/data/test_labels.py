"""Labels joined by id (`rubricforge_dspy.data.labels`), per-format label rules and the label warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import LabelRule, label_from_reward, parse_label_rule
from rubricforge_dspy.data.formats import default_label_rule, load_trajectories
from rubricforge_dspy.data.label_checks import LabelTally
from rubricforge_dspy.data.labels import LabelFileError, join_labels, read_label_file
from tests.support.records import jsonl_record, write_lines

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
AIRLINE = DATA / "tau_bench_official" / "gpt-4o-airline.json"
WEBSHOP = DATA / "react_webshop" / "react_webshop_davinci002_500.jsonl"
ADAPT = DATA / "adapt" / "ADaPT_maxd3_webshop_gpt-3.5-turbo.json"


def unlabeled_file(tmp_path, n=4) -> Path:
    return write_lines(tmp_path / "runs.jsonl", [jsonl_record(i, reward=None) for i in range(n)])


# ------------------------------------------------------------------------------- label rules

def test_label_rules_parse_and_apply():
    assert parse_label_rule("0.5") == LabelRule(0.5) and parse_label_rule(">=1") == LabelRule(1.0, True)
    assert parse_label_rule("reward > 0") == LabelRule(0.0)
    assert [label_from_reward(r, ">=1") for r in (0.75, 0.9999999, 1.0)] == [0, 1, 1]
    assert [label_from_reward(r, 0.0) for r in (0.0, 0.01)] == [0, 1]
    with pytest.raises(ValueError, match="expected a number"):
        parse_label_rule("high")


def test_each_loader_states_its_rule_and_webshop_counts_full_rewards_only():
    assert str(default_label_rule("webshop_react")) == "reward >= 1"
    assert str(default_label_rule("jsonl")) == "reward > 0"
    webshop = load_trajectories(WEBSHOP)
    report = webshop.report
    rewards = [t.reward for t in webshop]
    assert sum(t.label for t in webshop) == sum(r >= 1.0 for r in rewards)
    assert report.label_rules == {"webshop_react": "reward >= 1"}
    assert {t.hidden["label_rule"] for t in webshop} == {"reward >= 1"}
    old = load_trajectories(WEBSHOP, label_threshold=0.0)
    assert sum(t.label for t in old) == sum(r > 0 for r in rewards) > sum(t.label for t in webshop)
    adapt = load_trajectories(ADAPT)  # ADaPT's own 'success' flag is score == 1
    assert [t.label for t in adapt] == [int(t.hidden["success"]) for t in adapt]


# ------------------------------------------------------------------------------- label files

def test_csv_jsonl_and_swebench_label_files(tmp_path):
    csv = tmp_path / "l.csv"
    csv.write_text("id,label,reward\na,1,\nb,,0.4\nc,fail,\nd,,\n")
    f = read_label_file(csv)
    assert f.kind == "csv" and set(f.entries) == {"a", "b", "c"} and f.blank == ["d"]
    assert f.entries["b"].resolve(LabelRule(0.0)) == (1, 0.4) and f.entries["b"].resolve(LabelRule(1.0, True))[0] == 0
    jl = tmp_path / "l.jsonl"
    jl.write_text('{"id": "a", "label": 0}\n\n{"id": "b", "reward": 1.0, "extra": "ignored"}\n')
    assert {k: (e.label, e.reward) for k, e in read_label_file(jl).entries.items()} == {"a": (0, None),
                                                                                       "b": (None, 1.0)}
    harness = tmp_path / "report.json"
    harness.write_text(json.dumps({"total_instances": 5, "submitted_ids": ["r", "u", "e", "x", "p"],
                                   "completed_ids": ["r", "u"], "resolved_ids": ["r"], "unresolved_ids": ["u"],
                                   "empty_patch_ids": ["p"], "error_ids": ["e"], "incomplete_ids": [],
                                   "schema_version": 2}))
    f = read_label_file(harness)
    assert f.kind == "swebench"
    assert {k: e.label for k, e in f.entries.items()} == {"r": 1, "u": 0, "p": 0}
    assert f.unlabeled == {"e": "error_ids", "x": "submitted_ids"}  # outcome unknown: not labeled
    old = tmp_path / "results.json"
    old.write_text(json.dumps({"generated": ["a", "b", "c"], "applied": ["a", "b"], "resolved": ["a"],
                               "no_generation": ["d"], "test_errored": ["c"]}))
    assert {k: e.label for k, e in read_label_file(old).entries.items()} == {"a": 1, "b": 0, "d": 0}
    per_instance = tmp_path / "per.json"
    per_instance.write_text(json.dumps({"x": {"resolved": True, "patch_exists": True}, "y": {"resolved": False}}))
    assert {k: e.label for k, e in read_label_file(per_instance).entries.items()} == {"x": 1, "y": 0}


@pytest.mark.parametrize("name,text,needle", [
    ("dup.csv", "id,label\na,1\nb,0\na,1\n", "'a' appears twice (lines 2 and 4)"),
    ("dup.jsonl", '{"id": "a", "label": 1}\n{"id": "a", "label": 0}\n', "'a' appears twice (lines 1 and 2)"),
    ("bad.csv", "id,label\na,maybe\n", "bad.csv:2: label must be 0 or 1"),
    ("nohdr.csv", "a,1\n", "needs a header with an 'id' column"),
    ("conflict.json", json.dumps({"resolved_ids": ["a"], "unresolved_ids": ["a"]}), "listed as resolved"),
    ("other.json", json.dumps({"passed": ["a"]}), "unknown list(s) ['passed']"),
])
def test_bad_label_files_name_file_and_line(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LabelFileError) as info:
        read_label_file(path)
    assert needle in str(info.value) and name in str(info.value)


# ------------------------------------------------------------------------------- join

def test_join_sets_labels_and_reports_both_unmatched_sides(tmp_path):
    trajectories = load_trajectories(unlabeled_file(tmp_path))
    assert all(t.label is None for t in trajectories)
    labels = tmp_path / "l.csv"
    labels.write_text("id,label,reward\nrun:t0:0,1,\nrun:t1:0,,0.5\nnope:1,0,\nnope:2,1,\n")
    joined = join_labels(trajectories, labels)
    report = joined.report
    by_id = {t.id: t for t in joined}
    assert (by_id["run:t0:0"].label, by_id["run:t0:0"].reward) == (1, 1.0)  # label only: reward = label
    assert (by_id["run:t1:0"].label, by_id["run:t1:0"].reward) == (1, 0.5)  # jsonl rule: reward > 0
    assert by_id["run:t2:0"].label is None and by_id["run:t0:0"].label is not None
    assert report.without_label == ["run:t2:0", "run:t3:0"] and report.without_trajectory == ["nope:1", "nope:2"]
    assert report.to_dict()["label_ids_without_trajectory"] == 2 and "2 trajectories without a label" in \
        report.summary()
    strict = join_labels(trajectories, labels, rule=">=1")  # an explicit threshold applies to file rewards
    assert {t.id: t.label for t in strict}["run:t1:0"] == 0


def test_label_file_overrides_loader_labels_and_uses_the_loaders_rule(tmp_path):
    webshop = load_trajectories(WEBSHOP)
    partial = next(t for t in webshop if 0 < t.reward < 1)
    full = next(t for t in webshop if t.reward >= 1)
    labels = tmp_path / "l.jsonl"
    labels.write_text(json.dumps({"id": partial.id, "reward": 0.9}) + "\n" + json.dumps({"id": full.id, "label": 0})
                      + "\n")
    joined = join_labels(webshop, labels)
    report = joined.report
    by_id = {t.id: t for t in joined}
    assert by_id[partial.id].label == 0 and by_id[partial.id].reward == 0.9  # WebShop's rule: reward >= 1
    assert by_id[full.id].label == 0 and by_id[full.id].reward == full.reward  # label only: own reward kept
    assert report.changed == 1 and len(report.without_label) == len(webshop) - 2


# ------------------------------------------------------------------------------- warnings

def test_tally_warns_on_one_class_and_graded_rewards_at_zero(tmp_path):
    one_class = LabelTally()
    for t in load_trajectories(write_lines(tmp_path / "a.jsonl", [jsonl_record(1), jsonl_record(3)])):
        one_class.add(t)
    assert any("have label 1 (pass)" in w for w in one_class.warnings())
    graded = LabelTally()
    for t in load_trajectories(WEBSHOP, label_threshold=0.0):
        graded.add(t)
    rewards = [t.reward for t in load_trajectories(WEBSHOP)]
    (warning,) = graded.warnings()
    assert f"{sum(0 < r < 1 for r in rewards)} of 500 rewards labeled by 'reward > 0' are graded" in warning
    assert f"gives {sum(r >= 1 for r in rewards)}" in warning
    default = LabelTally()
    for t in load_trajectories(WEBSHOP):
        default.add(t)
    assert default.warnings() == []


def test_stats_reports_join_and_warnings_in_json(tmp_path, capsys):
    data = unlabeled_file(tmp_path)
    assert main(["stats", "--data", str(data), "--json"]) == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    assert stats["unlabeled"] == 4 and stats["positives"] == 0 and "none of the 4" in captured.err
    labels = tmp_path / "l.csv"
    labels.write_text("id,label\nrun:t0:0,1\nrun:t1:0,1\nghost,0\n")
    assert main(["stats", "--data", str(data), "--labels", str(labels), "--json"]) == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    join = stats["labels"]["labels_join"]
    assert (join["matched"], join["trajectories_without_label"], join["label_ids_without_trajectory"]) == (2, 2, 1)
    assert stats["unlabeled"] == 2 and stats["positives"] == 2
    assert any("label 1 (pass)" in w for w in stats["warnings"]) and "WARNING: all 2 labeled" in captured.err
    assert "1 label ids without a trajectory (e.g. ghost)" in captured.err


def test_stats_warns_about_graded_rewards_at_zero(capsys):
    assert main(["stats", "--data", str(WEBSHOP), "--label-threshold", "0", "--json"]) == 0
    captured = capsys.readouterr()
    assert "every partial success counts as a pass" in captured.err
    assert json.loads(captured.out)["warnings"][0].startswith("265 of 500")


def test_induce_leaves_unlabeled_out_and_refuses_none_labeled(tmp_path, capsys):
    data = unlabeled_file(tmp_path)
    assert main(["induce", "--data", str(data), "--out", str(tmp_path / "p.json")]) == 2
    assert "all 4 trajectories have no label" in capsys.readouterr().err


def test_report_reads_labels_through_the_labels_module(tmp_path):
    from rubricforge_dspy.report import read_labels

    csv = tmp_path / "l.csv"
    csv.write_text("id,reward\na,0.5\nb,0\n")
    assert read_labels(csv) == {"a": {"label": 1, "reward": 0.5}, "b": {"label": 0, "reward": 0.0}}
    assert read_labels(csv, ">=1")["a"]["label"] == 0


def test_gate_refuses_labels_with_verdict_files(tmp_path, capsys):
    a, b, labels = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "l.csv"
    for path in (a, b):
        path.write_text("")
    labels.write_text("id,label\nx,1\n")
    assert main(["gate", "--candidate-verdicts", str(a), "--baseline-verdicts", str(b), "--labels", str(labels)]) == 2
    assert "verdict files carry their labels" in capsys.readouterr().err


def test_demo_data_takes_labels(tmp_path, monkeypatch):
    import rubricforge_dspy.pipeline.demo as demo

    seen = {}

    def fake_protocol(sample, out, **kwargs):
        seen["labels"] = sorted((t.id, t.label) for t in sample)
        raise SystemExit(0)

    monkeypatch.setattr(demo, "run_protocol", fake_protocol)
    data = write_lines(tmp_path / "runs.jsonl", [jsonl_record(i, reward=None) for i in range(3)])
    labels = tmp_path / "l.csv"
    labels.write_text("id,label\nrun:t0:0,1\nrun:t1:0,0\n")
    with pytest.raises(SystemExit):
        main(["demo", "--data", str(data), "--labels", str(labels), "--tasks", "3", "--out", str(tmp_path / "o"),
              "--preset", "embedded", "--api-base", "http://127.0.0.1:9/v1", "--model", "m"])
    assert seen["labels"] == [("run:t0:0", 1), ("run:t1:0", 0)]  # the unlabeled one left out, said on stderr


def test_report_joins_a_swebench_results_file_and_notes_unused_ids(tmp_path):
    from rubricforge_dspy.report import load_run
    from tests.support.verdicts import verdict, write

    preds = write(tmp_path / "preds.jsonl", [verdict(i, i < 2, 0.9 if i < 2 else 0.1, None) for i in range(4)])
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"resolved_ids": ["x00", "x02"], "unresolved_ids": ["x01", "x03", "x09"],
                                   "error_ids": ["x07"]}))
    run = load_run(preds, labels=results)
    assert run.items.label.tolist() == [1, 0, 1, 0]
    assert any("1 label id(s) match no verdict (e.g. x09)" in note for note in run.warnings)


# ------------------------------------------------------------------------------- the review page's journal

def journal_bytes(ident: str, label: int | None) -> bytes:
    """One labels-journal line as `rubricforge review` writes it (compact JSON, its newline)."""
    return json.dumps({"rubricforge_labels": 1, "id": ident, "label": label, "skip": False, "note": "",
                       "labeler": "ana", "time": "2026-11-27T20:31:04+00:00", "undo": False},
                      separators=(",", ":")).encode() + b"\n"


def test_a_journal_torn_in_the_middle_and_at_the_end_reads_every_whole_label_and_counts_the_torn(tmp_path, capsys):
    """What a full disk left under the old writer: half a line, later labels appended right after it (so glued
    to it), and another half line at the end. Every whole label is read; the torn pieces are counted, loudly."""
    data = unlabeled_file(tmp_path)
    path = tmp_path / "labels.jsonl"
    t0, t1, t2, t3 = (journal_bytes(f"run:t{i}:0", i % 2) for i in range(4))
    path.write_bytes(t0 + t1[:30] + t2 + t3 + t1[:25])  # line 2: torn t1 glued to t2; line 4: torn tail
    read = read_label_file(path)
    assert {k: e.label for k, e in read.entries.items()} == {"run:t0:0": 0, "run:t2:0": 0, "run:t3:0": 1}
    assert read.torn == [2, 4] and "2 torn lines" in read.summary()
    assert main(["stats", "--data", str(data), "--labels", str(path)]) == 0
    err = capsys.readouterr().err
    assert "3 of 3 labels joined" in err and "2 torn lines" in err


def test_a_whole_last_journal_line_without_its_newline_is_read(tmp_path, capsys):
    data = unlabeled_file(tmp_path)
    path = tmp_path / "labels.jsonl"
    path.write_bytes(journal_bytes("run:t0:0", 1) + journal_bytes("run:t1:0", 0).rstrip(b"\n"))
    read = read_label_file(path)
    assert {k: e.label for k, e in read.entries.items()} == {"run:t0:0": 1, "run:t1:0": 0} and read.torn == []
    assert main(["stats", "--data", str(data), "--labels", str(path)]) == 0
    err = capsys.readouterr().err
    assert "2 of 2 labels joined" in err and "torn" not in err


def test_a_label_entry_with_neither_label_nor_reward_is_an_input_error_not_an_assert():
    """`LabelEntry.resolve` checks explicitly (issue 42 item 6): an assert vanished under ``python -O`` and the
    rule was then applied to None; now the package's InputError names the line, with or without -O."""
    from rubricforge_dspy.core.errors import InputError
    from rubricforge_dspy.data.label_records import LabelEntry

    assert LabelEntry(label=None, reward=0.5, line=2).resolve(parse_label_rule(">=0.5")) == (1, 0.5)
    with pytest.raises(InputError, match="line 7 has neither a label nor a reward"):
        LabelEntry(label=None, reward=None, line=7).resolve(parse_label_rule(">=0.5"))
