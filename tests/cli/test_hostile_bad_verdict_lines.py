"""Hostile verdict files (issue 42 item 7): one byte that is not UTF-8, or a NaN/Infinity in a confidence field,
in any verdict file a command reads is bad input: exit 2 naming the file and the line, no traceback, before any
work. Before the fix a bad byte gave exit 1 with a `UnicodeDecodeError` traceback, and a NaN ``score_calibrated``
was accepted (it compares false with every threshold, so the item silently escalated)."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from tests.support.cascade import REWARD_ABOVE_0
from tests.support.recorded import other_tool_verdicts

BAD_LINE = 7  # the line of the verdict file that is spoiled


def _spoil(path, how: str) -> None:
    lines = path.read_bytes().split(b"\n")
    record = json.loads(lines[BAD_LINE - 1])
    if how == "byte":
        lines[BAD_LINE - 1] = lines[BAD_LINE - 1].replace(b'"other-tool"', b'"other\xff-tool"')
    else:
        record["score"] = 0.9 if record["passed"] else 0.1
        text = json.dumps(record)[:-1] + f', "score_calibrated": {how}}}'
        lines[BAD_LINE - 1] = text.encode()
    path.write_bytes(b"\n".join(lines))


def _commands(halves, verdicts, tmp_path):
    cal = str(halves / "cal.jsonl")
    return {
        "cascade fit --stage": ["cascade", "fit", "--stage", str(halves / "floor.json"), "--stage", str(verdicts),
                                "--data", cal, *REWARD_ABOVE_0, "--alpha", "0.05", "--bound", "pooled",
                                "--method", "holm", "--out", str(tmp_path / "cascade.json")],
        "report": ["report", "--predictions", str(verdicts), *REWARD_ABOVE_0, "--floor-data", cal,
                   "--out", str(tmp_path / "report")],
        "floor --judge-verdicts": ["floor", "--data", cal, *REWARD_ABOVE_0, "--judge-verdicts", str(verdicts),
                                   "--save-floor", str(tmp_path / "hybrid.json")],
        "review": ["review", "--data", cal, "--verdicts", str(verdicts),
                   "--labels-out", str(tmp_path / "labels.jsonl"), "--labeler", "tester"],
        "label-next": ["label-next", "--data", cal, *REWARD_ABOVE_0, "--verdicts", str(verdicts), "-k", "3",
                       "--out", str(tmp_path / "next.jsonl")],
    }


COMMANDS = ["cascade fit --stage", "report", "floor --judge-verdicts", "review", "label-next"]


@pytest.mark.parametrize("how", ["byte", "NaN", "Infinity"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_verdict_line_exits_2_naming_file_and_line(halves, tmp_path, capsys, command, how):
    verdicts = tmp_path / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    _spoil(verdicts, how)
    code = main(_commands(halves, verdicts, tmp_path)[command])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{verdicts}:{BAD_LINE}" in err and "Traceback" not in err
    assert ("not UTF-8" in err) if how == "byte" else ("score_calibrated" in err)
    assert not (tmp_path / "cascade.json").exists() and not (tmp_path / "hybrid.json").exists()
