"""A hostile mapping file or record ends with one line naming the limit (exit 2), never a traceback, a hang or
memory that grows with what the file asks for (docs/MAPPING.md, "Limits").

Runs that could exhaust the machine on a regression (the YAML alias bomb, an expression whose output grows
exponentially, a 400 MB string, data nested 100,000 levels) run `rubricforge map check` in a child process
with 1 GiB of address space and a generous timeout; the rest run in this process.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats.mapping import MappingError, iter_mapped, load_mapping
from rubricforge_dspy.data.formats.mapping.limits import (
    MAX_EXPRESSION_DEPTH,
    MAX_EXPRESSION_TOKENS,
    RECORD_CAP_ENV,
    EvaluationLimitError,
    search,
)
from rubricforge_dspy.data.formats.mapping.spec import compile_field
from tests.support.helpers import REPO

# The classic "billion laughs" in YAML, inside a key the schema checks: 9 levels of 9 aliases, 9^9 strings once
# expanded (the schema checker's message used to expand it: past 1 GiB, or a minute without one).
LOLS = ",".join(['"lol"'] * 9)
ALIASES = [f"  {c}: &{c} [{','.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
BOMB = "name: bomb\nrecords: {from: jsonl}\nid: id\ntask: task\nhidden:\n" + "\n".join(
    [f"  a: &a [{LOLS}]", *ALIASES]) + "\n"
MAPPING = {"name": "limits_test", "records": {"from": "jsonl"}, "id": "id", "task": "task",
           "final_answer": "answer"}
RECORDS = [{"id": "r1", "task": "add 2 and 2", "answer": "4"}, {"id": "r2", "task": "add 3 and 3", "answer": "6"}]


@pytest.fixture(autouse=True)
def _registry_as_before():
    """A command run here registers its mapping in this process: unregister what a test added."""
    from rubricforge_dspy.data.formats import format_names, unregister_format

    before = set(format_names())
    yield
    for name in set(format_names()) - before:
        unregister_format(name)


def write_mapping(tmp_path, **changes):
    mapping = {**MAPPING, **changes}
    path = tmp_path / "mapping.json"
    path.write_text(json.dumps(mapping))
    return path


def write_data(tmp_path, records=RECORDS, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run(args, env=None, timeout=60):
    """`rubricforge ARGS` in a child process with 1 GiB of address space: (exit code, stdout, stderr, seconds)."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rubricforge_dspy.cli.main", *map(str, args)], text=True,
                          capture_output=True, timeout=timeout, cwd=REPO, preexec_fn=cap,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def one_line(stderr: str) -> str:
    """The error line of a run that must fail with one clear line and no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


# --- the mapping file ---------------------------------------------------------------------------------------

def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    bomb = tmp_path / "mapping.yaml"
    bomb.write_text(BOMB)
    assert len(bomb.read_bytes()) <= 500
    code, out, err, seconds = run(["map", "check", "--map", bomb, "--data", write_data(tmp_path)], timeout=30)
    line = one_line(err)
    assert code == 2 and "alias" in line and str(bomb) in line
    assert seconds < 30


def test_any_yaml_alias_is_refused_naming_where_it_is(tmp_path):
    path = tmp_path / "mapping.yaml"
    path.write_text("name: x\nrecords: {from: jsonl}\nid: &ident id\ntask_id: *ident\ntask: task\n")
    with pytest.raises(MappingError, match=r"alias \(\*ident\) \(line 4"):
        load_mapping(path)


def test_a_fifo_mapping_is_not_a_regular_file(tmp_path, capsys):
    fifo = tmp_path / "mapping.json"
    os.mkfifo(fifo)
    assert main(["map", "check", "--map", str(fifo), "--data", str(write_data(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "FIFO" in err and "not a regular file" in err and "no such" not in err


def test_a_fifo_given_as_the_data_is_not_a_regular_file(tmp_path, capsys):
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    assert main(["map", "check", "--map", str(write_mapping(tmp_path)), "--data", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert "FIFO" in err and "no such file" not in err


def test_a_missing_mapping_is_still_named_missing(tmp_path):
    with pytest.raises(MappingError, match="no such mapping file"):
        load_mapping(tmp_path / "nope.json")


def test_a_mapping_file_over_the_size_cap_is_refused_unread(tmp_path):
    path = tmp_path / "mapping.json"
    path.write_text(json.dumps({**MAPPING, "hidden": {f"k{i}": "id" for i in range(100_000)}}))
    with pytest.raises(MappingError, match="larger than 1,048,576 bytes"):
        load_mapping(path)


@pytest.mark.parametrize("suffix, depth", [(".json", 100_000), (".json", 100), (".yaml", 100), (".yaml", 100_000)])
def test_a_mapping_nested_past_the_depth_cap_is_refused(tmp_path, suffix, depth):
    path = tmp_path / f"mapping{suffix}"
    path.write_text(json.dumps({**MAPPING, "x": [[[]]]}).replace("[[[]]]", "[" * depth + "]" * depth))
    with pytest.raises(MappingError, match="nested more than 32 levels|exceeded maximum nesting depth"):
        load_mapping(path)


# --- expressions ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expression, words", [
    ("(" * 500 + "id" + ")" * 500, "characters"),
    ("|".join(["id"] * 20_000), "characters"),
    ("(" * 70 + "id" + ")" * 70, "brackets nest 70 levels"),
    ("!" * 300 + "id", f"at most {MAX_EXPRESSION_TOKENS} are read"),
    ("|".join(["id"] * 70), f"more than {MAX_EXPRESSION_DEPTH} levels deep once parsed"),
])
def test_an_expression_past_a_size_limit_is_refused_before_it_is_compiled(tmp_path, capsys, expression, words):
    mapping = write_mapping(tmp_path, task=expression)
    assert main(["map", "check", "--map", str(mapping), "--data", str(write_data(tmp_path))]) == 2
    line = one_line(capsys.readouterr().err)
    assert "key 'task'" in line and words in line and len(line) < 600


def test_expressions_within_the_limits_still_compile_and_evaluate():
    value = {"a": {"b": [{"c": 1}, {"c": 2}]}}
    assert search(compile_field("a.b[*].c | [0]", "m", "k")._compiled, value) == 1
    deep = "(" * 60 + "a.b[?c > `1`].c" + ")" * 60
    assert compile_field(deep, "m", "k")(value) == [2]


# An expression's output doubles at each step: 2^30 values, or 2^30 copies of the task once written out.
EXPONENTIAL = {
    "shared references": "|".join(["[@, @]"] * 30),
    "flattened copies": "|".join(["[@, @][]"] * 24),
    "to_string": "to_string(" + "|".join(["[@, @]"] * 30) + ")",
    "join": "join('', " + "|".join(["[@, @][]"] * 24) + ")",
}


@pytest.mark.parametrize("expression", EXPONENTIAL.values(), ids=EXPONENTIAL.keys())
def test_an_exponentially_growing_expression_stops_at_the_evaluation_budget(expression):
    with pytest.raises(EvaluationLimitError, match="past 2,000,000 steps|the record cap"):
        compile_field(expression, "m", "task")({"task": "add 2 and 2", "items": [[1, 2], [3, 4]]})


def test_an_exponential_expression_in_map_check_is_a_named_bad_record_fast_and_small(tmp_path):
    mapping = write_mapping(tmp_path, task="|".join(["[@, @]"] * 30))
    code, out, err, seconds = run(["map", "check", "--map", mapping, "--data", write_data(tmp_path)], timeout=60)
    assert code == 2 and "does not read" in one_line(err) and seconds < 60
    assert "skipped: 2" in out and "evaluation went past 2,000,000 steps" in out and "task: '[@, @]" in out


# --- records --------------------------------------------------------------------------------------------------

def big_record_files(tmp_path, size: int):
    """The same three records (the middle one with a `size`-character task) in each layout a mapping reads:
    JSON Lines, a streamed JSON array, a nested array read whole (a filter path), one file per record."""
    records = [RECORDS[0], {"id": "big", "task": "x" * size, "answer": "4"}, RECORDS[1]]
    lines = write_data(tmp_path, records)
    array = tmp_path / "array.json"
    array.write_text(json.dumps(records))
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"run": {"items": records}}))
    folder = tmp_path / "per_record"
    folder.mkdir()
    for record in records:
        (folder / f"{record['id']}.json").write_text(json.dumps(record))
    return {"jsonl": ({"from": "jsonl"}, lines), "array": ("@", array),
            "nested array, streamed": ("run.items[*]", nested), "read whole": ("run.items[?id]", nested),
            "files": ({"from": "files"}, folder)}


@pytest.mark.parametrize("layout", ["jsonl", "array", "nested array, streamed", "read whole", "files"])
def test_a_record_over_the_cap_is_a_named_bad_record_and_the_others_load(tmp_path, monkeypatch, layout):
    monkeypatch.setenv(RECORD_CAP_ENV, "1")  # 1 MiB
    records, data = big_record_files(tmp_path, 2 << 20)[layout]
    mapping = load_mapping(write_mapping(tmp_path, records=records))
    from rubricforge_dspy.data.formats import LoadReport

    report = LoadReport()
    loaded = [t.id for t in iter_mapped(data, mapping, on_error="skip", report=report)]
    assert len(report.skipped) == 1
    file, record, problem = report.skipped[0]
    assert "over the record cap of 1,048,576 bytes" in problem and RECORD_CAP_ENV in problem
    assert record in (1, "big") or file.endswith("big.json")
    assert "r1" in loaded and (len(loaded) == 2 or "the rest of the file is not read" in problem)
    with pytest.raises(TrajectoryFormatError, match="over the record cap"):
        list(iter_mapped(data, mapping))  # on_error="raise": the bad record ends the load (exit 2)


def test_a_bad_record_cap_setting_is_an_input_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(RECORD_CAP_ENV, "lots")
    mapping = write_mapping(tmp_path)
    assert main(["map", "check", "--map", str(mapping), "--data", str(write_data(tmp_path))]) == 2
    assert RECORD_CAP_ENV in capsys.readouterr().err


def test_a_400_mb_string_is_refused_by_the_default_cap_in_bounded_memory(tmp_path):
    data = tmp_path / "data.jsonl"
    with open(data, "wb") as handle:  # written lazily: never 400 MB in this process either
        handle.write(json.dumps(RECORDS[0]).encode() + b"\n" + b'{"id": "big", "answer": "4", "task": "')
        chunk = b"x" * (1 << 20)
        for _ in range(400):
            handle.write(chunk)
        handle.write(b'"}\n' + json.dumps(RECORDS[1]).encode() + b"\n")
    code, out, err, seconds = run(["map", "check", "--map", write_mapping(tmp_path), "--data", data], timeout=120)
    assert code == 2 and "does not read" in one_line(err) and seconds < 120
    assert "loaded: 2; skipped: 1" in out and "over the record cap of 67,108,864 bytes" in out


def test_the_400_mb_record_is_named_in_the_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(RECORD_CAP_ENV, "0.5")  # the same path as the default cap on a 400 MB line, quicker
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(RECORDS[0]) + "\n" + json.dumps({"id": "big", "task": "x" * (1 << 20)}) + "\n"
                    + json.dumps(RECORDS[1]) + "\n")
    assert main(["map", "check", "--map", str(write_mapping(tmp_path)), "--data", str(data)]) == 2
    out = capsys.readouterr().out
    assert "loaded: 2; skipped: 1" in out and "record 1: line 2 is 1,048,6" in out and "record cap" in out


def test_data_nested_past_the_streaming_guard_is_a_named_bad_record_in_bounded_memory(tmp_path):
    nested = tmp_path / "nested.json"
    nested.write_text('{"run": {"items": [' + json.dumps(RECORDS[0]) + ', {"id": "deep", "x": '
                      + "[" * 100_000 + "]" * 100_000 + "}]}}")
    mapping = write_mapping(tmp_path, records="run.items[*]")
    code, out, err, seconds = run(["map", "check", "--map", mapping, "--data", nested], timeout=60)
    assert code == 2 and "does not read" in one_line(err)


@pytest.mark.parametrize("depth, loads", [(300, True), (600, False)])
def test_a_json_line_nests_at_most_as_deep_as_the_streaming_guard_allows(tmp_path, depth, loads):
    deep = {"id": "deep", "task": "t", "answer": "a", "meta": json.loads("[" * depth + "]" * depth)}
    data = write_data(tmp_path, [RECORDS[0], deep])
    mapping = load_mapping(write_mapping(tmp_path, hidden={"meta": "meta"}))
    from rubricforge_dspy.data.formats import LoadReport

    report = LoadReport()
    ids = [t.id for t in iter_mapped(data, mapping, on_error="skip", report=report)]
    assert ids == (["r1", "deep"] if loads else ["r1"])
    assert loads or "nested too deeply (more than 512 levels" in report.skipped[0][2]


# --- globs ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("glob, words", [("/etc/*.json", "is absolute"), ("~/*.json", "is absolute"),
                                         ("../*.json", "climbs out of the data folder"),
                                         ("runs/../../*.json", "climbs out of the data folder")])
def test_a_glob_outside_the_data_folder_is_refused(tmp_path, capsys, glob, words):
    mapping = write_mapping(tmp_path, records={"from": "files", "glob": glob})
    folder = tmp_path / "data"
    folder.mkdir()
    assert main(["map", "check", "--map", str(mapping), "--data", str(folder)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "records.glob" in line and words in line


def test_a_relative_glob_reads_the_folder_and_its_subfolders(tmp_path):
    folder = tmp_path / "data" / "runs"
    folder.mkdir(parents=True)
    for record in RECORDS:
        (folder / f"{record['id']}.json").write_text(json.dumps(record))
    mapping = load_mapping(write_mapping(tmp_path, records={"from": "files", "glob": "runs/*.json"}))
    assert sorted(t.id for t in iter_mapped(tmp_path / "data", mapping)) == ["r1", "r2"]
