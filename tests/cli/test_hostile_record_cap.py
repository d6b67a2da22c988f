"""One record cap for every reader (issue 42 item 7): the generic JSON Lines reader refuses a line over the record
cap (``$RUBRICFORGE_MAX_RECORD_MB``) as the mapped reader does, naming file, line and cap, and reads the lines
around it. Before the fix it read (and judged) a record of any size: a 400 MB line took 2.96 GB of memory."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.formats.jsonl import iter_json_lines, to_record
from tests.support.cascade import WEBSHOP


@pytest.fixture
def big_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RUBRICFORGE_MAX_RECORD_MB", "1")
    records = [to_record(t) for t in list(load_trajectories(WEBSHOP, label_threshold=0.0))[:3]]  # generic JSONL
    records[1]["metadata"] = {"padding": "x" * (3 << 20)}  # a 3 MiB record, over the 1 MiB cap
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_generic_line_reader_refuses_a_line_over_the_cap(big_line):
    values = list(iter_json_lines(big_line))
    assert [index for index, _ in values] == [0, 1, 2]
    bad = values[1][1]
    assert isinstance(bad, TrajectoryFormatError) and "over the record cap of 1,048,576 bytes" in str(bad)
    assert isinstance(values[0][1], dict) and isinstance(values[2][1], dict)


def test_stats_names_the_record_over_the_cap(big_line, capsys):
    code = main(["stats", "--data", str(big_line), "--format", "jsonl"])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert str(big_line) in captured.err and "record cap" in captured.err
