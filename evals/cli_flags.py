"""Count the command line's flags: per command (a leaf of the subcommand tree, e.g. ``cascade fit``), the
optional arguments it takes (``-h/--help`` left out; an option with several spellings counts once), their
sum over commands, the distinct flag names across commands, and the flags that are aliases of another
flag of the same command (same ``dest``). Prints JSON; ``--out FILE`` writes it too.

    PYTHONPATH=$PWD python -m evals.cli_flags --out evals/results/cli_flags.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """Every leaf command's parser, by its space-joined name."""
    found: dict[str, argparse.ArgumentParser] = {}
    subparsers = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subparsers:
        return {" ".join(prefix): parser}
    seen: set[int] = set()
    for action in subparsers:
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias of a command already counted
                continue
            seen.add(id(sub))
            found.update(_commands(sub, (*prefix, name)))
    return found


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions
            if action.option_strings and not isinstance(action, argparse._HelpAction)]


def count_flags(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The counts (see the module docstring) of ``parser`` and its subcommands."""
    commands = _commands(parser)
    per_command = {name: len(_options(sub)) for name, sub in sorted(commands.items()) if name}
    names = sorted({option for sub in commands.values() for action in _options(sub)
                    for option in action.option_strings if option.startswith("--")})
    same_dest = {}
    for name, sub in sorted(commands.items()):
        by_dest: dict[str, list[str]] = {}
        for action in _options(sub):
            by_dest.setdefault(action.dest, []).append(action.option_strings[-1])
        twins = {dest: flags for dest, flags in by_dest.items() if len(flags) > 1}
        if twins:
            same_dest[name] = twins
    return {"commands": len(per_command), "flags_total": sum(per_command.values()),
            "distinct_flag_names": len(names), "per_command": per_command,
            "flags_sharing_a_dest": same_dest}


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", default=None)
    args = cli.parse_args(argv)
    from rubricforge_dspy.cli.main import build_parser

    counts = count_flags(build_parser())
    text = json.dumps(counts, indent=2, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
