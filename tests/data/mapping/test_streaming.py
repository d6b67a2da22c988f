"""Mapped JSON Lines and JSON documents stream: records come one at a time (a bad tail is met after the good
records were yielded), and memory holds a record, not the file (tracemalloc, a generous bound; the measured
numbers are evals/results/mapping.json)."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats.mapping import iter_mapped, parse_mapping

BASE = {"name": "gen", "id": "id", "task": "q", "actions": "turns[*].act", "observations": "turns[*].obs",
        "reward": "score", "label": "reward >= 1"}


def _record(i: int, width: int = 50) -> dict:
    return {"id": f"r{i}", "q": f"task {i}", "score": i % 2,
            "turns": [{"act": f"cmd {i}.{j}", "obs": "x" * width} for j in range(20)], "ok": i % 3 == 0}


def _mapping(records) -> object:
    return parse_mapping({**BASE, "records": records}, "<test>")


LAYOUTS = {
    "array": ({"from": "json", "path": "@"}, lambda rs: rs),
    "dict of records": ("*", lambda rs: {r["id"]: r for r in rs}),
    "nested array": ("run.items[*]", lambda rs: {"meta": {"model": "m"}, "run": {"items": rs}}),
    "nested dict": ("run.by_id.*", lambda rs: {"run": {"by_id": {r["id"]: r for r in rs}}}),
    "filter (whole document)": ("items[?ok]", lambda rs: {"items": rs}),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_record_layout_reads_the_records_jmespath_selects(tmp_path, layout):
    path_expr, shape = LAYOUTS[layout]
    records = [_record(i, 5) for i in range(12)]
    data = tmp_path / "d.json"
    data.write_text(json.dumps(shape(records)), encoding="utf-8")
    loaded = list(iter_mapped(data, _mapping(path_expr)))
    expected = [r for r in records if r["ok"]] if "filter" in layout else records
    assert [t.id for t in loaded] == [r["id"] for r in expected]
    assert [t.label for t in loaded] == [int(r["score"] >= 1) for r in expected]
    assert all(len(t.steps) == 41 for t in loaded)  # the task, then 20 actions with their observations


def test_a_path_matching_no_record_is_an_error_naming_the_file(tmp_path):
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"run": {"items": []}}), encoding="utf-8")
    with pytest.raises(TrajectoryFormatError, match=r"d\.json: records.path 'other\.items\[\*\]' matched no records"):
        list(iter_mapped(data, _mapping("other.items[*]")))


@pytest.mark.parametrize("kind", ["jsonl", "array", "dict of records"])
def test_records_before_a_broken_tail_are_yielded_first(tmp_path, kind):
    records = [_record(i, 5) for i in range(5)]
    data = tmp_path / "d.json"
    if kind == "jsonl":
        text = "".join(json.dumps(r) + "\n" for r in records) + '{"id": "r5", "q": \n'
        mapping = _mapping({"from": "jsonl"})
    elif kind == "array":
        text = "[" + ",".join(json.dumps(r) for r in records) + ', {"id": "r5", "q":'
        mapping = _mapping("@")
    else:
        text = "{" + ",".join(f'"{r["id"]}": {json.dumps(r)}' for r in records) + ', "r5": {"id": '
        mapping = _mapping("*")
    data.write_text(text, encoding="utf-8")
    seen = []
    with pytest.raises(TrajectoryFormatError) as info:
        for trajectory in iter_mapped(data, mapping):
            seen.append(trajectory.id)
    assert seen == [f"r{i}" for i in range(5)]
    assert str(data) in str(info.value) and info.value.record == 5


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["jsonl", "array", "dict of records"])
def test_memory_holds_a_record_not_the_file(tmp_path, layout):
    records = (_record(i, 3000) for i in range(200))  # about 12 MB of JSON, 60 kB a record
    data = tmp_path / "big.json"
    with open(data, "w", encoding="utf-8") as out:
        if layout == "jsonl":
            for r in records:
                out.write(json.dumps(r) + "\n")
            mapping = _mapping({"from": "jsonl"})
        else:
            out.write("[" if layout == "array" else "{")
            for i, r in enumerate(records):
                item = json.dumps(r) if layout == "array" else f'"{r["id"]}": {json.dumps(r)}'
                out.write(("," if i else "") + item)
            out.write("]" if layout == "array" else "}")
            mapping = _mapping("@" if layout == "array" else "*")
    size = data.stat().st_size
    tracemalloc.start()
    try:
        n = sum(1 for _ in iter_mapped(data, mapping))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 200
    assert peak < size / 4, f"peak {peak} bytes for a {size}-byte file: the file was held whole"


def test_a_path_naming_one_object_reads_it_as_one_record(tmp_path):
    data = tmp_path / "one.json"
    data.write_text(json.dumps({"meta": {"v": 1}, "episode": _record(7, 5)}), encoding="utf-8")
    loaded = list(iter_mapped(data, _mapping("episode")))
    assert [t.id for t in loaded] == ["r7"] and len(loaded[0].steps) == 41
