"""The command line's flags: a deprecated alias still works and says which flag to use
(`RubricForgeDeprecationWarning`, printed on stderr); the data flags are one argument group on every command
that reads trajectories; the flag counter (evals/cli_flags.py) sees every command."""

from __future__ import annotations

import argparse

import pytest

from evals.cli_flags import count_flags
from rubricforge_dspy.cli.data_options import DATA_GROUP
from rubricforge_dspy.cli.main import build_parser, main
from rubricforge_dspy.core.errors import RubricForgeDeprecationWarning

DATA_FLAGS = {"--data", "--format", "--map", "--label-threshold", "--labels", "--labels-key", "--skip-bad",
              "--session-key"}


def _sample(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "task_id": "t", "reward": 1, "messages": [{"role": "user", "content": "'
                    + "word " * 400 + '"}]}\n')
    return str(data)


def test_render_max_tokens_is_a_deprecated_name_of_render_tokens(tmp_path, capsys):
    data = _sample(tmp_path)
    assert main(["render", "--data", data, "--render-tokens", "200"]) == 0
    current = capsys.readouterr()
    with pytest.warns(RubricForgeDeprecationWarning, match="--render-tokens"):
        assert main(["render", "--data", data, "--max-tokens", "200"]) == 0
    old = capsys.readouterr()
    assert old.out == current.out  # the same render
    assert "warning: --max-tokens is deprecated here: use --render-tokens" in old.err
    assert "deprecated" not in current.err


def _groups(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    return {group.title or "": {option for action in group._group_actions for option in action.option_strings}
            for group in parser._action_groups}


@pytest.mark.parametrize("command", ["judge", "stats", "convert", "render", "induce", "certify", "floor",
                                     "label-next", "gate"])
def test_the_data_flags_are_one_group(command):
    sub = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    groups = _groups(sub.choices[command])
    assert DATA_FLAGS <= groups[DATA_GROUP]
    for title, flags in groups.items():  # nowhere else
        assert title == DATA_GROUP or not flags & DATA_FLAGS, (command, title)


def test_the_flag_counter_sees_every_command_and_no_twin():
    counts = count_flags(build_parser())
    assert {"judge", "cascade fit", "map check", "floor"} <= set(counts["per_command"])
    assert counts["flags_total"] == sum(counts["per_command"].values())
    assert counts["per_command"]["judge"] >= len(DATA_FLAGS)
    assert counts["flags_sharing_a_dest"] == {"render": {"render_tokens": ["--render-tokens", "--max-tokens"]}}
