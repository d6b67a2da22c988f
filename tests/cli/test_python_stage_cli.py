"""A cascade with a Python stage is fitted, run, certified, shown, reported, ranked and gated from the command
line: every command that loads a judge or a cascade takes ``--allow-import-stage`` (one definition,
`cli.stage_options`), and refuses the stage without it, naming the flag (issue 41 item 7)."""

from __future__ import annotations

import importlib
import json

import pytest

from rubricforge_dspy.cli.main import build_parser, main
from rubricforge_dspy.judge.recorded import CallableJudge, save_python_stage
from tests.support.cascade import REWARD_ABOVE_0

MODULE = '''
from rubricforge_dspy.core.verdict import Verdict


def no_tool_error(trajectory):
    clean = not any(step.is_error for step in trajectory.steps)
    return Verdict.from_answer(clean, 0.9 if clean else 0.1, reason="tool error" if not clean else "clean")
'''


@pytest.fixture
def python_stage(tmp_path, monkeypatch):
    """A tiny module on the path (in tmp_path) and its stage file."""
    (tmp_path / "s41_tiny_stage.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("s41_tiny_stage")
    path = tmp_path / "stage.json"
    save_python_stage(CallableJudge(module.no_tool_error, import_path="s41_tiny_stage:no_tool_error"), path)
    yield path
    monkeypatch.delitem(__import__("sys").modules, "s41_tiny_stage", raising=False)


def test_every_command_that_loads_a_judge_takes_the_flag_and_its_help_names_the_risk():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for command in ("judge", "certify", "show", "label-next", "gate"):
        action = next(a for a in sub.choices[command]._actions if "--allow-import-stage" in a.option_strings)
        assert "RUNS WITH YOUR USER'S RIGHTS" in action.help


def test_a_python_stage_cascade_is_fitted_run_certified_shown_reported_ranked_and_gated(
        halves, python_stage, tmp_path, capsys):
    cascade = tmp_path / "cascade.json"
    allow = ["--allow-import-stage"]
    assert main(["cascade", "fit", "--stage", str(python_stage), "--name", "pystage", "--data",
                 str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.3", "--delta", "0.2", "--bound", "pooled",
                 "--method", "holm",
                 "--out", str(cascade), *allow]) == 0
    verdicts = tmp_path / "v.jsonl"
    run = ["judge", "--cascade", str(cascade), "--data", str(halves / "train.jsonl"), *REWARD_ABOVE_0,
           "--out", str(verdicts)]
    capsys.readouterr()
    assert main(run) == 2  # refused without the flag, naming it
    assert "--allow-import-stage" in capsys.readouterr().err and not verdicts.exists()
    assert main([*run, *allow]) == 0
    lines = [json.loads(x) for x in verdicts.read_text().splitlines()]
    assert lines and all(x["id"] for x in lines)
    assert main(["certify", str(cascade), "--data", str(halves / "train.jsonl"), *REWARD_ABOVE_0, *allow]) == 0
    assert main(["show", str(cascade), *allow]) == 0
    assert "pystage" in capsys.readouterr().out
    assert main(["report", "--predictions", str(verdicts), "--out", str(tmp_path / "r.md")]) == 0
    assert main(["label-next", "--program", str(cascade), "--data", str(halves / "train.jsonl"), "-k", "3",
                 "--out", str(tmp_path / "next.jsonl"), *allow]) == 0
    code = main(["gate", "--candidate", str(cascade), "--baseline", str(halves / "floor.json"), "--data",
                 str(halves / "train.jsonl"), *REWARD_ABOVE_0, *allow])
    assert code in (0, 4)  # an answer (yes or no), never a refusal of the stage (2) or a bug (1)
