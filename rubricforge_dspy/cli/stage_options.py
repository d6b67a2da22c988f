"""The one definition of ``--allow-import-stage``: every command that loads a judge or a cascade takes it.

A Python stage (a stage file naming ``module:attr``, `judge.recorded`) is loaded by importing that module,
which runs its code: `load_judge` refuses unless asked. The flag is how a user asks, on every command that
may meet such a stage (``judge``, ``certify``, ``show``, ``label-next``, ``gate``, ``cascade fit``).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["ALLOW_IMPORT_HELP", "add_allow_import_argument", "allow_import"]

ALLOW_IMPORT_HELP = ("load a Python stage (a stage file naming code to import, module:attr): the module is "
                     "imported and RUNS WITH YOUR USER'S RIGHTS (it can read, change or send anything you can); "
                     "give it only for stage files and modules you trust. Without it such a stage is refused")


def add_allow_import_argument(parser: argparse.ArgumentParser | Any) -> None:
    """Add ``--allow-import-stage`` (`ALLOW_IMPORT_HELP`) to `parser`."""
    parser.add_argument("--allow-import-stage", action="store_true", help=ALLOW_IMPORT_HELP)


def allow_import(args: argparse.Namespace) -> bool:
    """Whether the command line allowed importing a Python stage (False for a command without the flag)."""
    return bool(getattr(args, "allow_import_stage", False))
