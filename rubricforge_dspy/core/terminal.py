"""Text from a file, made safe to print on a terminal: the one helper every command uses for it.

A name, a model or a date read from a program, a cascade or a floor is whatever its author wrote: an
escape sequence in it (``\\x1b[2J``, ``\\x1b]8;;...``) would clear the screen, rewrite earlier lines or
forge a link when printed raw; a carriage return or a line break would let it pass for another line of
the output; a bidirectional override (U+202E) would reorder what is shown. `terminal_safe` replaces each
such character by its Python escape (``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``), the way `repr` shows it,
and leaves all other text (printable Unicode, spaces, backslashes) as it is; `terminal_safe_strings` does
it to every string of a record read from a file.

A name the package *stores* and builds file names from (a cascade's stage names: ``<out>.<stage>.json``) is
checked instead, before any work: `check_name` allows `NAME_RULE` only, and says so in its error.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rubricforge_dspy.core.errors import InputError

__all__ = ["terminal_safe", "terminal_safe_strings", "check_name", "is_name", "NAME_RULE"]

NAME_RULE = ("1 to 64 characters: ASCII letters, digits, '_' and '-', and '.' after the first "
             "(e.g. 'floor', 'judge-4o', 'tool_v2')")
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")

# Control characters, format characters (bidi overrides, zero-width joiners), line and paragraph separators.
_UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp"))


def _escaped(char: str) -> str:
    if unicodedata.category(char) not in _UNSAFE_CATEGORIES:
        return char
    return char.encode("unicode_escape").decode("ascii")  # \x1b, \n, \u202e: as `repr` shows them


def terminal_safe(value: object, keep_newlines: bool = False) -> str:
    """``str(value)`` with every control, format and line-separator character shown as its escape.

    Args:
        value: what to print (a name from a file; anything else is turned into text with `str`).
        keep_newlines: keep ``\\n`` as a line break (for text whose lines the package itself joined;
            user-controlled parts of it should be made safe one by one first, so that none adds a line).

    Returns:
        The text, safe to write to a terminal: ``"a\\x1b[2Jb"`` becomes ``"a\\\\x1b[2Jb"`` (shown as
        ``a\\x1b[2Jb``).
    """
    text = str(value)
    if text.isprintable() or (keep_newlines and text.replace("\n", "").isprintable()):
        return text
    if keep_newlines:
        return "\n".join(terminal_safe(line) for line in text.split("\n"))
    return "".join(map(_escaped, text))


def terminal_safe_strings(value: Any) -> Any:
    """`value` (parsed JSON: dicts, lists, strings, numbers) with every string in it, keys included, made
    `terminal_safe`: for a record read from a file, before a formatter prints parts of it."""
    if isinstance(value, str):
        return terminal_safe(value)
    if isinstance(value, dict):
        return {terminal_safe_strings(k): terminal_safe_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [terminal_safe_strings(item) for item in value]
    return value


def check_name(name: object, what: str = "stage name") -> str:
    """`name` when it follows `NAME_RULE` (safe in a file name, on a terminal and in a report); else an
    `InputError` that shows the name escaped (`terminal_safe`) and says what is allowed.

    Args:
        name: the name given (a ``--name``, a name read from a saved cascade).
        what: what the name is, for the message.
    """
    if not isinstance(name, str) or not is_name(name):
        raise InputError(f"{what} {terminal_safe(repr(name))} is not allowed: a name is {NAME_RULE}")
    return name


def is_name(name: object) -> bool:
    """True when `name` follows `NAME_RULE` (`check_name` without the error)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None
