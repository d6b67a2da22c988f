"""Judge files built to break the loader (issue 33, items 4 and 6): a program, a floor or a cascade with an
array nested 1,000 deep, and cascades whose stages lead back to themselves. Each is bad input: exit 2 with one
line naming the file and the limit (or the cycle), never a RecursionError traceback (exit 1)."""

from __future__ import annotations

import json
import math

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats._json_stream import MAX_STREAM_DEPTH
from rubricforge_dspy.judge import cascade as cascade_module
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.floor import FloorError, FloorJudge, SymptomFloor
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import PROGRAM_SHA_KEY, ProgramError, freeze
from tests.support.helpers import AIRLINE
from tests.support.hybrid import dataset

DEEP = "[" * 1000 + "]" * 1000  # parsed by orjson (its limit is 1024), deeper than json.dumps hashes
MARK = "__DEEP__"


def with_deep_array(state: dict, put, reseal: bool = True) -> str:
    """The JSON text of `state` with a 1,000-deep array where `put(state, MARK)` puts the marker; resealed
    (a matching program_sha256 cannot be computed over it, so the recorded one is left as it is) unless not."""
    put(state, MARK)
    if not reseal:
        state["rubricforge"][PROGRAM_SHA_KEY] = "0" * 64
    return json.dumps(state).replace(json.dumps(MARK), DEEP)


def one_line_naming(err: str, path) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err and "RecursionError" not in err, err[-2000:]
    assert str(path) in lines[0] and str(MAX_STREAM_DEPTH) in lines[0] and "nested too deeply" in lines[0], lines
    return lines[0]


@pytest.fixture
def floor():
    return FloorJudge(SymptomFloor.fit(dataset(40)))


def test_a_program_with_an_array_nested_1000_deep_exits_2_naming_it(tmp_path, capsys):
    """User sees: `show` on a program whose manifest holds a 1,000-deep array (sealed or not, with or without
    --allow-unverified-program) exits 2 naming the file and the limit; `judge` too, before any call. Before: a
    RecursionError traceback while the program was hashed (exit 1)."""
    path = tmp_path / "p.json"
    freeze(TrajectoryJudge("Judge it."), path)
    path.write_text(with_deep_array(json.loads(path.read_text()), lambda s, m: s["rubricforge"].update(metrics=[m]),
                                    reseal=False))
    for extra in ([], ["--allow-unverified-program"]):
        assert main(["show", str(path), *extra]) == 2
        one_line_naming(capsys.readouterr().err, path)
    assert main(["judge", "--data", str(AIRLINE), "--limit", "1", "--out", str(tmp_path / "v.jsonl"),
                 "--program", str(path), "--api-base", "http://127.0.0.1:9/v1", "--model", "m"]) == 2
    one_line_naming(capsys.readouterr().err, path)
    with pytest.raises(ProgramError, match="nested too deeply"):
        load_judge(path, allow_unverified=True)


def test_a_floor_with_an_array_nested_1000_deep_is_refused_naming_it(tmp_path, floor, capsys):
    """A floor file whose ``trained_on`` holds a 1,000-deep array: `load_judge`, `FloorJudge.load` and `show`
    refuse it by name (the floor's digest used to recurse into it)."""
    path = tmp_path / "floor.json"
    path.write_text(with_deep_array(floor.floor.to_dict(), lambda s, m: s["trained_on"].update(x=m)))
    with pytest.raises(ProgramError, match=f"{path}.*nested too deeply.*{MAX_STREAM_DEPTH}"):
        load_judge(path)
    with pytest.raises(FloorError, match=f"{path}.*nested too deeply"):
        FloorJudge(floor.floor).load(path)
    assert main(["show", str(path)]) == 2
    one_line_naming(capsys.readouterr().err, path)


def test_a_cascade_or_its_stage_nested_1000_deep_exits_2_naming_it(tmp_path, floor, capsys):
    """User sees: `judge --cascade` on a cascade whose manifest holds a 1,000-deep array, or whose stage file
    does, exits 2 naming that file and the limit; `show` too. Before: RecursionError while hashing (exit 1)."""
    path = tmp_path / "cascade.json"
    Cascade([floor], [StageRule("floor", 0.9, 0.1)]).save(path)
    saved = path.read_text()
    stage = tmp_path / "cascade.floor.json"

    def judge_cascade():
        return main(["judge", "--data", str(AIRLINE), "--limit", "1", "--out", str(tmp_path / "v.jsonl"),
                     "--cascade", str(path), "--allow-unverified-program"])

    path.write_text(with_deep_array(json.loads(saved), lambda s, m: s["rubricforge"].update(fit=[m]), reseal=False))
    assert judge_cascade() == 2
    one_line_naming(capsys.readouterr().err, path)
    assert main(["show", str(path), "--allow-unverified-program"]) == 2
    one_line_naming(capsys.readouterr().err, path)

    path.write_text(saved)
    stage.write_text(with_deep_array(floor.floor.to_dict(), lambda s, m: s["trained_on"].update(x=m)))
    with pytest.warns(Warning, match="sha256 differs"):
        assert judge_cascade() == 2
    one_line_naming(capsys.readouterr().err, stage)


def point_stage_at(cascade_path, stage_file: str) -> None:
    state = json.loads(cascade_path.read_text())
    state["judge"]["stages"][0]["path"] = stage_file
    cascade_path.write_text(json.dumps(state))


def test_a_cascade_that_is_its_own_stage_exits_2_naming_the_cycle(tmp_path, floor, capsys):
    """User sees: a cascade whose stage is the cascade file itself, loaded with --allow-unverified-program (its
    hashes cannot match), exits 2 naming the cycle. Before: RecursionError (exit 1)."""
    path = tmp_path / "self.json"
    Cascade([floor], [StageRule("floor", 0.9, 0.1)]).save(path)
    point_stage_at(path, "self.json")
    with pytest.warns(Warning, match="loaded anyway"), pytest.raises(ProgramError, match="cycle") as raised:
        load_judge(path, allow_unverified=True)
    assert f"{path} -> {path}" in str(raised.value)
    with pytest.warns(Warning, match="loaded anyway"):
        assert main(["judge", "--data", str(AIRLINE), "--limit", "1", "--out", str(tmp_path / "v.jsonl"),
                     "--cascade", str(path), "--allow-unverified-program"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"cycle of stages: {path} -> {path}" in err


def test_a_cycle_of_two_cascades_exits_2_naming_it(tmp_path, floor, capsys):
    """A -> B -> A (each the other's stage): refused naming both files in order."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        Cascade([floor], [StageRule("floor", 0.9, 0.1)]).save(path)
    point_stage_at(a, "b.json")
    point_stage_at(b, "a.json")
    with pytest.warns(Warning, match="loaded anyway"):
        assert main(["show", str(a), "--allow-unverified-program"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"cycle of stages: {a} -> {b} -> {a}" in err


def test_a_cascade_of_cascades_loads_and_too_deep_a_nesting_is_refused(tmp_path, floor, monkeypatch):
    """Nesting without a cycle still loads (a stage may be a cascade), and the same file twice in one cascade
    (not a cycle) too; nesting deeper than `MAX_CASCADE_NESTING` is refused by name."""
    inner = Cascade([floor, floor], [StageRule("floor", 0.9, 0.1), StageRule("again", math.inf, 0.5)])
    outer = Cascade([inner, floor], [StageRule("inner", 0.9, 0.1), StageRule("floor", 0.8, 0.2)])
    path = tmp_path / "outer.json"
    outer.save(path)
    loaded = load_judge(path)
    assert isinstance(loaded.stages[0], Cascade) and [r.name for r in loaded.stages[0].rules] == ["floor", "again"]
    monkeypatch.setattr(cascade_module, "MAX_CASCADE_NESTING", 1)
    with pytest.raises(ProgramError, match="nested more than 1 deep"):
        load_judge(path)


def test_the_depth_limit_is_the_streaming_guards_and_a_file_at_it_loads(tmp_path, floor):
    """One limit: a floor nested exactly `MAX_STREAM_DEPTH` deep loads, one level more is refused."""
    for depth, loads in ((MAX_STREAM_DEPTH, True), (MAX_STREAM_DEPTH + 1, False)):
        path = tmp_path / f"floor{depth}.json"
        deep = "[" * (depth - 2) + "]" * (depth - 2)  # inside {"trained_on": {"x": ...}}
        path.write_text(floor.floor.to_json().replace('"trained_on": {', f'"trained_on": {{"x": {deep}, ', 1))
        if loads:
            assert isinstance(load_judge(path), FloorJudge)
        else:
            with pytest.raises(ProgramError, match="nested too deeply"):
                load_judge(path)
