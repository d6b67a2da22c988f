"""The functions a mapping's expressions may call beyond JMESPath's own, registered once for every mapping.

JMESPath has no way to split a string or to say where a record came from, and agent logs often hold the
steps in one string (an action history in one text field, a ReAct transcript) and the record's identity in
the file's name (``<model>/overall.json``). So every expression of a mapping (and a ``--labels-key``) is
evaluated with `MappingFunctions` (a ``jmespath.functions.Functions`` subclass, passed through jmespath's
``Options``):

* ``split(s, sep)``: `s` cut at every `sep` (a non-empty string), as Python's ``str.split``;
* ``lines(s)``: `s` cut into its lines (``str.splitlines``, line ends dropped);
* ``regex_findall(s, pattern)``: Python's ``re.findall``: a list of the matches, or of the group's text for a
  pattern with one group, or of lists of the groups' texts for several. Python's ``re`` has no timeout, so a
  pattern is bounded before it runs: at most `MAX_PATTERN_CHARS` characters, no backreference, and no repeat
  of a group that itself repeats (``(a+)+``, the exponential case); and `s` is at most `MAX_REGEX_INPUT`
  characters (a longer string is an error naming the limit: cut it with ``split``/``lines`` first and map the
  pattern over the pieces). A pattern whose several unbounded repeats can match the same text (``.*x.*x.*y``)
  can still take time polynomial in the string's length: prefer ``split`` where it does the job;
* ``file()``, ``index()``, ``key()``: the record's data file (its path under the data folder without the
  suffix, as ``$file`` gives it), its index in that file (the JSON Lines line, the position in a document), and
  its key in its container (as ``$key``: in a dict of records, the innermost member name, never a list index);
  null outside a record (``--labels-key``);
* ``key(n)``: the member name at the n-th level of a records path through nested objects (``*.*`` on
  ``{category: {trial: record}}``: ``key(0)`` the category, ``key(1)`` = ``key()`` the trial; ``key(-1)`` the
  innermost). `n` is a whole number (``key(0)`` is written as JMESPath's ``key(`0`)``, both are accepted); a level
  the records path does not have is an error naming the levels it has.

Every function's output is charged to the evaluation budget of `limits` when the expression runs with one
(every expression that calls a function does, except those calling only ``file``, ``index`` and ``key``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

from jmespath import functions
from jmespath.visitor import Options, TreeInterpreter

from rubricforge_dspy.core.errors import InputError

MAX_PATTERN_CHARS = 200
MAX_REGEX_INPUT = 32_768  # characters: a quadratic pattern on this many takes well under a second
CONTEXT_FUNCTIONS = frozenset(("file", "index", "key"))  # their output is one scalar: no budget needed

__all__ = ["MappingFunctions", "MAX_PATTERN_CHARS", "MAX_REGEX_INPUT", "CONTEXT_FUNCTIONS", "OPTIONS",
           "FunctionLimitError", "interpreter", "set_record", "pattern_problem", "key_at", "key_literals"]

# a group holding a repeat, itself repeated: (a+)+, (a*)*, (?:ab+){2,}
_NESTED_REPEAT = re.compile(r"\((?:[^()\\]|\\.)*(?:[*+]|\{\d*,\d*\})(?:[^()\\]|\\.)*\)(?:[*+]|\{\d*,\d*\})")
_BACKREFERENCE = re.compile(r"\\[1-9]|\(\?P=")


class FunctionLimitError(InputError):
    """A mapping function called past one of its limits (a pattern too long or nested, a string too long)."""


_F = TypeVar("_F", bound=Callable[..., Any])


def signature(*arguments: dict[str, Any]) -> Callable[[_F], _F]:
    """jmespath's ``functions.signature`` decorator (the argument types a JMESPath function takes), typed:
    it marks the function and returns it unchanged."""
    decorate: Callable[[_F], _F] = functions.signature(*arguments)
    return decorate


_record = threading.local()  # the record being read: file, index, key


def set_record(file: str | None, index: Any, key: Any, keys: tuple[Any, ...] = ()) -> None:
    """Make `file`, `index` and `key` the record's for ``file()``/``index()``/``key()`` on this thread until
    the next call (the reader sets it once per record: cheaper than a context manager); `keys` are the member
    names of the objects the records path went through, outermost first (``key(n)``)."""
    _record.values = (file, index, key, keys)


def _current() -> tuple[str | None, Any, Any, tuple[Any, ...]]:
    values: tuple[str | None, Any, Any, tuple[Any, ...]] = getattr(_record, "values", (None, None, None, ()))
    return values


def key_at(level: Any) -> Any:
    """``key(level)``: the member name at `level` of the record's records path (see the module docstring).

    Raises:
        FunctionLimitError: `level` is not a whole number, or the records path has no such level.
    """
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not float(level).is_integer():
        raise FunctionLimitError(f"key(n): n must be a whole number (the level, 0 the outermost), got {level!r}")
    keys = _current()[3]
    n = int(level)
    if not -len(keys) <= n < len(keys):
        has = (f"{len(keys)} level(s) of member names (key(0) .. key({len(keys) - 1}))" if keys else
               "no member names (a JSON Lines line, an array element, a file: key() is its index or name)")
        raise FunctionLimitError(f"key({n}): the records path gives this record {has}")
    return keys[n]


@lru_cache(maxsize=256)
def _compiled_pattern(pattern: str) -> re.Pattern[str]:
    problem = pattern_problem(pattern)
    if problem is not None:
        raise FunctionLimitError(f"regex_findall pattern {pattern[:80]!r}: {problem}")
    return re.compile(pattern)


def pattern_problem(pattern: str) -> str | None:
    """What makes `pattern` unsafe or unusable for ``regex_findall`` (see the module docstring), or None."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"{len(pattern):,} characters; a pattern is at most {MAX_PATTERN_CHARS}"
    if _BACKREFERENCE.search(pattern):
        return "a backreference (\\1, (?P=name)) is refused: it makes matching take exponential time"
    if _NESTED_REPEAT.search(pattern):
        return ("a repeated group that itself repeats ((a+)+, (a*)*) is refused: it makes matching take "
                "exponential time; repeat the group's content once")
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"not a regular expression ({exc})"
    return None


def key_literals(text: str) -> str:
    """`text` with every ``key(N)`` (a bare number, which JMESPath only takes between brackets) written as
    ``key(`N`)``, found with jmespath's own lexer, so a ``'key(0)'`` inside a string is left as it is; `text`
    as it is when it does not lex (the compiler then names the problem)."""
    from jmespath.exceptions import LexerError
    from jmespath.lexer import Lexer

    if "key" not in text:
        return text
    try:
        tokens = list(Lexer().tokenize(text))
    except LexerError:
        return text
    out, last = [], 0
    for i in range(len(tokens) - 3):
        name, opening, number, closing = tokens[i:i + 4]
        if (name["type"], name["value"], opening["type"], number["type"], closing["type"]) == \
                ("unquoted_identifier", "key", "lparen", "number", "rparen"):
            out += [text[last:number["start"]], f"`{number['value']}`"]
            last = number["end"]
    return "".join(out) + text[last:]


class MappingFunctions(functions.Functions):  # type: ignore[misc]  # jmespath ships no types
    """jmespath's functions and the mapping's own: ``split``, ``lines``, ``regex_findall``, ``file``,
    ``index``, ``key`` (the module docstring says what each does). `charge` is called with the items and
    characters each builds (a no-op here; the budgeted subclass in `limits` spends its budget)."""

    def charge(self, steps: int, chars: int = 0) -> None:
        """Spend `steps` units of work and `chars` characters (nothing to spend without a budget)."""

    @signature({"types": ["string"]}, {"types": ["string"]})
    def _func_split(self, text: str, separator: str) -> list[str]:
        if not separator:
            raise FunctionLimitError("split(s, sep): sep is empty; give the text between the pieces")
        parts = text.split(separator)
        self.charge(len(parts), len(text))
        return parts

    @signature({"types": ["string"]})
    def _func_lines(self, text: str) -> list[str]:
        parts = text.splitlines()
        self.charge(len(parts), len(text))
        return parts

    @signature({"types": ["string"]}, {"types": ["string"]})
    def _func_regex_findall(self, text: str, pattern: str) -> list[Any]:
        compiled = _compiled_pattern(pattern)
        if len(text) > MAX_REGEX_INPUT:
            raise FunctionLimitError(f"regex_findall reads at most {MAX_REGEX_INPUT:,} characters, this string has "
                                     f"{len(text):,}: cut it first (split(), lines()) and map the pattern over the "
                                     "pieces")
        found = compiled.findall(text)
        found = [list(groups) if isinstance(groups, tuple) else groups for groups in found]
        self.charge(len(found), len(text))
        return found

    @signature()
    def _func_file(self) -> str | None:
        return _current()[0]

    @signature()
    def _func_index(self) -> Any:
        return _current()[1]

    @signature()
    def _func_key(self) -> Any:
        return _current()[2]

    def call_function(self, function_name: str, resolved_args: list[Any]) -> Any:
        """jmespath's dispatch, with ``key`` taking an optional level (``key()``, ``key(n)``): JMESPath's
        signatures cannot say "zero or one argument"."""
        if function_name == "key" and len(resolved_args) == 1:
            return key_at(resolved_args[0])
        return super().call_function(function_name, resolved_args)


OPTIONS = Options(custom_functions=MappingFunctions())
_local = threading.local()


def interpreter() -> TreeInterpreter:
    """This thread's interpreter with the mapping functions, made once (``ParsedResult.search`` makes one per
    call: a measurable share of a mapped read)."""
    found = getattr(_local, "interpreter", None)
    if found is None:
        found = _local.interpreter = TreeInterpreter(OPTIONS)
    return found
