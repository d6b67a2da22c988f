"""Every option and positional argument of every `rubricforge` command says what it is for (``--help``)."""

from __future__ import annotations

import argparse

from rubricforge_dspy.cli.main import build_parser


def _undocumented(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _undocumented(child, f"{path} {name}")
        elif isinstance(action, argparse._HelpAction):
            continue
        elif not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            yield f"{path}: {'/'.join(action.option_strings) or action.dest}"


def test_every_cli_option_has_help_text():
    missing = list(_undocumented(build_parser(), "rubricforge"))
    assert missing == [], "options without help text:\n" + "\n".join(missing)


def test_the_walk_finds_an_option_without_help():
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers()
    child = sub.add_parser("y")
    child.add_argument("--documented", help="says what it is")
    child.add_argument("--bare")
    assert list(_undocumented(parser, "x")) == ["x y: --bare"]
