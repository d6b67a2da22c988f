"""`--map` on the commands that read trajectories, `rubricforge map check` and `rubricforge formats`
(docs/MAPPING.md): a log no built-in format reads is read through a mapping file, checked before use."""

from __future__ import annotations

import json
import os

import pytest

from rubricforge_dspy.cli.main import main
from tests.support.helpers import REPO

MAPPED = REPO / "evals" / "data" / "mapped"
BASH = MAPPED / "intercode_bash"
BASH_DATA = str(next(BASH.glob("*.sample.json")))
MINT = MAPPED / "mint_gsm8k"


@pytest.fixture(autouse=True)
def _registry_as_before():
    """`--map` registers the mapping in this process (as the command does in its own): unregister what a test
    added, so later tests see only the formats they expect."""
    from rubricforge_dspy.data.formats import format_names, unregister_format

    before = set(format_names())
    yield
    for name in set(format_names()) - before:
        unregister_format(name)


def test_stats_reads_a_log_through_its_mapping(capsys):
    assert main(["stats", "--map", str(BASH / "mapping.json"), "--data", BASH_DATA, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["trajectories"] == 4 and stats["positives"] == 3 and stats["skipped"] == 0


def test_without_the_mapping_the_log_is_an_unknown_format(capsys):
    assert main(["stats", "--data", BASH_DATA]) == 2
    assert "format" in capsys.readouterr().err


def test_render_through_a_yaml_mapping_shows_the_record_without_its_label(capsys):
    assert main(["render", "--map", str(MINT / "mapping.yaml"), "--data", str(MINT / "results.sample.jsonl"),
                 "--index", "0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("QUOTES:") and "EVENTS:" in text and "task_success" not in text


def test_map_and_format_together_are_refused(capsys):
    assert main(["stats", "--map", str(BASH / "mapping.json"), "--format", "jsonl", "--data", BASH_DATA]) == 2
    assert "give one" in capsys.readouterr().err


def test_an_unknown_format_is_a_usage_error_naming_the_formats(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["stats", "--format", "nope", "--data", BASH_DATA])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unknown format 'nope'" in err and "tau_bench" in err and "--map" in err


def test_map_check_reports_matches_and_the_first_record_as_the_judge_reads_it(capsys):
    assert main(["map", "check", "--map", str(BASH / "mapping.json"), "--data", BASH_DATA]) == 0
    out = capsys.readouterr().out
    assert "records matched: 4; loaded: 4; skipped: 0" in out and "--- as the judge reads it ---" in out


def test_map_check_exits_2_when_a_field_resolves_to_nothing(tmp_path, capsys):
    mapping = json.loads((BASH / "mapping.json").read_text())
    mapping["name"] = "bash_wrong_paths"
    mapping["task_id"] = "no_such_field"
    bad = tmp_path / "mapping.json"
    bad.write_text(json.dumps(mapping))
    assert main(["map", "check", "--map", str(bad), "--data", BASH_DATA]) == 2
    captured = capsys.readouterr()
    assert "task_id: 4" in captured.out and "does not read" in captured.err


def test_a_bad_mapping_names_its_key(tmp_path, capsys):
    bad = tmp_path / "mapping.json"
    bad.write_text(json.dumps({"name": "x", "records": {"from": "json"}, "id": "id", "task-id": "t"}))
    assert main(["stats", "--map", str(bad), "--data", BASH_DATA]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "task-id" in err


def test_formats_lists_built_in_and_mapping_formats(capsys):
    assert main(["formats", "--json", "--map", str(BASH / "mapping.json")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_name = {row["name"]: row for row in rows}
    assert by_name["tau_bench"]["origin"] == "built-in" and by_name["tau_bench"]["label_rule"] == "reward >= 1"
    assert by_name["intercode_bash"]["origin"].startswith("mapping")


def test_a_fifo_given_as_the_mapping_is_not_a_regular_file(tmp_path, capsys):
    fifo = tmp_path / "mapping.json"
    os.mkfifo(fifo)
    assert main(["stats", "--map", str(fifo), "--data", BASH_DATA]) == 2
    err = capsys.readouterr().err
    assert "FIFO" in err and "not a regular file" in err and "no such mapping file" not in err


def test_map_check_refuses_a_glob_outside_the_data_folder(tmp_path, capsys):
    mapping = json.loads((BASH / "mapping.json").read_text())
    mapping["records"] = {"from": "files", "glob": "/etc/*.json", "path": "*"}
    bad = tmp_path / "mapping.json"
    bad.write_text(json.dumps(mapping))
    assert main(["map", "check", "--map", str(bad), "--data", str(BASH)]) == 2
    err = capsys.readouterr().err
    assert "records.glob" in err and "is absolute" in err and "Traceback" not in err


def test_map_check_names_a_record_past_the_record_cap(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RUBRICFORGE_MAX_RECORD_MB", "0.001")  # 1,048 bytes: the sample's records are larger
    assert main(["map", "check", "--map", str(MINT / "mapping.yaml"), "--data", str(MINT / "results.sample.jsonl")
                 ]) == 2
    out = capsys.readouterr().out
    assert "over the record cap of 1,048 bytes" in out and "RUBRICFORGE_MAX_RECORD_MB" in out


# Every command that reads trajectories, on every shipped mapping and its sample (issue #35): a mapping that gives
# a label and no reward (reflexion_humaneval, mint, toolbench) reads like any other.
from tests.support.mapping_samples import SAMPLES  # noqa: E402


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, f"{argv}: exit {code}\n{captured.err[-2000:]}"
    return captured


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_command_reads_every_shipped_mapping(name, tmp_path, capsys):
    sample = SAMPLES[name]
    data = ["--map", str(sample.mapping), "--data", str(sample.data), "--skip-bad"]
    stats = json.loads(_run(["stats", *data, "--json"], capsys).out)
    assert stats["trajectories"] == len(sample.ids) and stats["positives"] == sum(sample.labels)
    assert stats["skipped"] == sample.skipped
    assert _run(["render", *data, "--index", "0"], capsys).out.strip()
    out = tmp_path / "converted.jsonl"
    _run(["convert", *data, "--out", str(out)], capsys)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in rows] == list(sample.ids)
    assert [row["label"] for row in rows] == list(sample.labels)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_floor_reads_every_shipped_mapping(name, capsys):
    """The floor on each shipped sample: fit and cross-validated; a sample with one trajectory of each class cannot
    be cross-validated (two folds need two of one class): refused by name, exit 2, never a traceback."""
    sample = SAMPLES[name]
    args = ["floor", "--map", str(sample.mapping), "--data", str(sample.data), "--skip-bad", "--json", "--folds", "2",
            "--resamples", "20"]
    if max(sample.labels.count(0), sample.labels.count(1)) < 2:
        assert main(args) == 2
        assert "at least 2 labeled trajectories of one class" in capsys.readouterr().err
        return
    floor = json.loads(_run(args, capsys).out)
    assert floor["data"] and floor["n"] == len(sample.ids)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_labels_join_onto_every_shipped_mapping(name, tmp_path, capsys):
    sample = SAMPLES[name]
    flipped = [1 - label for label in sample.labels]
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\n" + "".join(f"{i},{label}\n" for i, label in zip(sample.ids, flipped, strict=True)))
    data = ["--map", str(sample.mapping), "--data", str(sample.data), "--skip-bad", "--labels", str(labels)]
    stats = json.loads(_run(["stats", *data, "--json"], capsys).out)
    assert stats["positives"] == sum(flipped) and stats["unlabeled"] == 0
    out = tmp_path / "converted.jsonl"
    _run(["convert", *data, "--out", str(out)], capsys)
    assert [json.loads(line)["label"] for line in out.read_text().splitlines()] == flipped


def test_a_label_threshold_labels_the_labels_file_rewards_of_a_mapping_without_reward(tmp_path, capsys):
    sample = SAMPLES["mint"]
    rewards = tmp_path / "rewards.csv"
    rows = zip(sample.ids, (0.2, 0.6, 0.9), strict=True)
    rewards.write_text("id,reward\n" + "".join(f"{i},{r}\n" for i, r in rows))
    data = ["--map", str(sample.mapping), "--data", str(sample.data), "--labels", str(rewards), "--json"]
    stats = json.loads(_run(["stats", *data, "--label-threshold", ">=0.5"], capsys).out)
    assert stats["positives"] == 2 and stats["mean_reward"] == pytest.approx(0.5667, abs=1e-3)
    # without a reward anywhere, the threshold is refused with one line naming the mapping
    assert main(["stats", "--map", str(sample.mapping), "--data", str(sample.data), "--label-threshold", "0.5"]) == 2
    assert "gives no 'reward'" in capsys.readouterr().err
    labels_only = tmp_path / "labels.csv"
    labels_only.write_text("id,label\n" + "".join(f"{i},1\n" for i in sample.ids))
    assert main(["stats", "--map", str(sample.mapping), "--data", str(sample.data), "--labels", str(labels_only),
                 "--label-threshold", "0.5"]) == 2
    assert "nor the labels file" in capsys.readouterr().err


def test_a_labels_file_keyed_by_an_expression_joins_onto_a_mapping(tmp_path, capsys):
    sample = SAMPLES["mint"]
    labels = tmp_path / "labels.jsonl"
    rows = [{"task": {"name": i.split(":")[0], "n": int(i.split(":")[1])}, "label": 1} for i in sample.ids]
    labels.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = ["--map", str(sample.mapping), "--data", str(sample.data), "--labels", str(labels), "--json"]
    assert main(["stats", *data]) == 2  # keyed otherwise: the error says how
    assert "--labels-key" in capsys.readouterr().err
    stats = json.loads(_run(["stats", *data, "--labels-key", "join(':', [task.name, to_string(task.n)])"],
                            capsys).out)
    assert stats["positives"] == 3
