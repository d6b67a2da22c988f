"""The resource limits of a declarative mapping: a hostile mapping file or record ends with one line naming
the limit (exit 2), never a traceback, a hang or memory that grows with what the file asks for.

A mapping is a user's file of JMESPath expressions, and the data it reads are the user's too; each is
bounded where it could otherwise ask for unbounded work:

* The mapping file: at most `MAX_MAPPING_BYTES`, nested at most `MAX_MAPPING_DEPTH` levels, and a YAML
  mapping may not use aliases (``*name``): they are refused from the parser's events, before anything is
  built, so a "billion laughs" file is never expanded (`spec.load_mapping` does the reading).
* An expression: at most `MAX_EXPRESSION_CHARS` characters and `MAX_EXPRESSION_TOKENS` tokens, counted
  with jmespath's own lexer (which does not recurse) before the parser (which does, a few frames per
  token) sees it; its brackets nest at most `MAX_EXPRESSION_DEPTH` levels, and so does the tree it compiles
  to (the interpreter recurses once per level of that tree). `expression_problem` says which is exceeded.
* An evaluation of an expression that builds values sharing parts or calls a function (`needs_budget`;
  a path, projection or filter without them gives at most the record's own values): `search` runs
  jmespath's own interpreter with a budget of `MAX_EVAL_STEPS` units of work
  (one per node visited, one per element of every list or object a node returns, the elements a flatten
  or merge builds, the values an equality or ``contains`` compares, the values ``to_string`` writes, and
  the result's values, walked once), and of `max_record_bytes` characters for the strings it builds and
  returns (``join``, ``to_string``, and every string of the result, counted each time it is reached). A
  JMESPath result may share one value many times over (``[@, @] | [@, @] | ...`` doubles at each step
  without copying), so its size is walked, within the budget, before anything serializes it: an
  expression whose result would grow exponentially stops at the budget, in time and memory bounded by it.
  Exceeding it raises `EvaluationLimitError`, which the reader turns into a bad record naming the
  field, the expression and the limit (counted and listed, or raised, as ``on_error`` says).
* A record: at most `max_record_bytes` bytes (``$RUBRICFORGE_MAX_RECORD_MB``, default
  `DEFAULT_MAX_RECORD_MB` MiB): a longer JSON line, a larger per-record file, or a streamed record that
  grows past it is a bad record named by file and record, read in memory bounded by the cap
  (`source`). Data nest at most `MAX_STREAM_DEPTH` levels, the package's streaming depth guard.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from jmespath.exceptions import LexerError
from jmespath.lexer import Lexer
from jmespath.visitor import Options, TreeInterpreter

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats._json_stream import MAX_STREAM_DEPTH
from rubricforge_dspy.data.formats.mapping.functions import (
    CONTEXT_FUNCTIONS,
    FunctionLimitError,
    MappingFunctions,
    signature,
)

MAX_MAPPING_BYTES = 1 << 20  # a mapping is a few hundred bytes
MAX_MAPPING_DEPTH = 32  # a mapping nests 3 levels (records.glob, label.pass[...]); data nest MAX_STREAM_DEPTH
MAX_EXPRESSION_CHARS = 1000
MAX_EXPRESSION_TOKENS = 200  # the parser recurses at most 2 frames per token: far below Python's limit
MAX_EXPRESSION_DEPTH = 64  # brackets, and the compiled tree (the interpreter recurses once per level)
MAX_EVAL_STEPS = 2_000_000  # units of work per evaluation (about a second at worst)
RECORD_CAP_ENV = "RUBRICFORGE_MAX_RECORD_MB"
DEFAULT_MAX_RECORD_MB = 64

__all__ = ["MAX_MAPPING_BYTES", "MAX_MAPPING_DEPTH", "MAX_EXPRESSION_CHARS", "MAX_EXPRESSION_TOKENS",
           "MAX_EXPRESSION_DEPTH", "MAX_EVAL_STEPS", "MAX_STREAM_DEPTH", "RECORD_CAP_ENV", "DEFAULT_MAX_RECORD_MB",
           "EvaluationLimitError", "max_record_bytes", "expression_problem", "tree_problem", "needs_budget", "search"]

_OPENING = frozenset(("lparen", "lbracket", "lbrace", "filter"))  # "[?" closes with "]"; "[]" is one token
_CLOSING = frozenset(("rparen", "rbracket", "rbrace"))


class EvaluationLimitError(InputError):
    """An expression whose evaluation on a record went past a limit (`MAX_EVAL_STEPS`, or the characters
    of `max_record_bytes`): the record is a bad record, named with the expression and the limit."""


_local = threading.local()
_parsed_cap: tuple[str, int] = ("", 0)  # the variable's last text and its value


def max_record_bytes() -> int:
    """The record cap in bytes: ``$RUBRICFORGE_MAX_RECORD_MB`` MiB (a positive number), else
    `DEFAULT_MAX_RECORD_MB` MiB.

    Raises:
        InputError: the variable is set to something that is not a positive number.
    """
    global _parsed_cap
    text = os.environ.get(RECORD_CAP_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_RECORD_MB << 20
    if text == _parsed_cap[0]:
        return _parsed_cap[1]
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = -1.0
    if not 0 < megabytes < 1 << 40:
        raise InputError(f"{RECORD_CAP_ENV}={text!r}: give the record cap in MiB, a positive number "
                         f"(default {DEFAULT_MAX_RECORD_MB})")
    _parsed_cap = (text, max(1, int(megabytes * (1 << 20))))
    return _parsed_cap[1]


def expression_problem(text: str) -> str | None:
    """What makes `text` too big to compile (length, tokens, bracket nesting), or None. Counted without
    recursion, so it is safe on any text; a lexer error is left for the compiler to name."""
    if len(text) > MAX_EXPRESSION_CHARS:
        return (f"the expression is {len(text):,} characters; at most {MAX_EXPRESSION_CHARS:,} are read "
                "(a mapping field is a short path)")
    tokens = depth = deepest = 0
    try:
        for token in Lexer().tokenize(text):
            tokens += 1
            kind = token["type"]
            if kind in _OPENING:
                depth += 1
                deepest = max(deepest, depth)
            elif kind in _CLOSING:
                depth -= 1
    except LexerError:
        return None
    if tokens - 1 > MAX_EXPRESSION_TOKENS:  # the lexer ends with an "eof" token
        return f"the expression has {tokens - 1:,} tokens; at most {MAX_EXPRESSION_TOKENS} are read"
    if deepest > MAX_EXPRESSION_DEPTH:
        return f"brackets nest {deepest:,} levels deep; at most {MAX_EXPRESSION_DEPTH} are read"
    return None


def tree_problem(parsed: dict[str, Any]) -> str | None:
    """The compiled tree's depth over `MAX_EXPRESSION_DEPTH` (``a | b | c ...`` nests one level per
    pipe), or None; walked without recursion."""
    stack = [(parsed, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            return (f"the expression nests more than {MAX_EXPRESSION_DEPTH} levels deep once parsed (pipes, "
                    "dots and operators each add one): split it, or simplify it")
        stack.extend((child, depth + 1) for child in node.get("children", ()) if isinstance(child, dict))
    return None


class _Budget:
    """The work and the characters one evaluation may still spend."""

    __slots__ = ("steps", "chars", "limit", "char_limit")

    def __init__(self, steps: int, chars: int):
        self.steps = self.limit = steps
        self.chars = self.char_limit = chars

    def charge(self, steps: int, chars: int = 0) -> None:
        self.steps -= steps
        self.chars -= chars
        if self.steps < 0:
            raise EvaluationLimitError(f"the evaluation went past {self.limit:,} steps (an expression "
                                       "whose output grows with every step, or a record too large for it)")
        if self.chars < 0:
            raise EvaluationLimitError(f"the evaluation built or returned more than {self.char_limit:,} "
                                       f"characters (the record cap, {RECORD_CAP_ENV})")

    def walk(self, value: Any, chars: bool = True) -> None:
        """Charge every value reachable from `value`, each time it is reached (shared values count once per
        reference, as serializing or comparing them costs), and with `chars` the characters of its strings."""
        stack = [value]
        while stack:
            item = stack.pop()
            kind = type(item)
            if kind is str:
                self.charge(1, len(item) if chars else 0)
            elif kind is list:
                self.charge(1 + len(item))
                stack.extend(item)
            elif kind is dict:
                self.charge(1 + 2 * len(item), sum(map(len, item)) if chars else 0)
                stack.extend(item.values())
            else:
                self.charge(1)


class _Functions(MappingFunctions):
    """jmespath's functions and the mapping's (`functions`), with the ones whose work is not bounded by their
    arguments' lengths charged first: ``to_string`` (writes every shared value out), ``join`` (the characters
    it builds), ``contains`` (compares values deeply), ``merge`` (the keys it copies), and ``split``,
    ``lines``, ``regex_findall`` (the pieces and the characters they read)."""

    def __init__(self, budget: _Budget):
        self._budget = budget

    def charge(self, steps: int, chars: int = 0) -> None:
        self._budget.charge(steps, chars)

    @signature({"types": []})
    def _func_to_string(self, arg: Any) -> Any:
        if not isinstance(arg, str):
            self._budget.walk(arg)
        return super()._func_to_string(arg)

    @signature({"types": ["string"]}, {"types": ["array-string"]})
    def _func_join(self, separator: str, array: list[str]) -> Any:
        self._budget.charge(len(array), sum(map(len, array)) + len(separator) * len(array))
        return super()._func_join(separator, array)

    @signature({"types": ["array", "string"]}, {"types": []})
    def _func_contains(self, subject: Any, search: Any) -> Any:
        if isinstance(subject, list):
            self._budget.charge(len(subject))
            if isinstance(search, (list, dict)):
                self._budget.walk(subject, chars=False)
                self._budget.walk(search, chars=False)
        return super()._func_contains(subject, search)

    @signature({"types": ["object"], "variadic": True})
    def _func_merge(self, *arguments: dict[str, Any]) -> Any:
        self._budget.charge(sum(len(arg) for arg in arguments))
        return super()._func_merge(*arguments)


class _Interpreter(TreeInterpreter):  # type: ignore[misc]  # jmespath ships no types
    """jmespath's tree interpreter, charging `_Budget` for each node visited and each element returned."""

    def __init__(self, budget: _Budget):
        self._functions_with_budget = _Functions(budget)
        super().__init__(Options(custom_functions=self._functions_with_budget))
        self._budget = budget

    def renew(self, budget: _Budget) -> None:
        """Spend `budget` from now on."""
        self._budget = self._functions_with_budget._budget = budget

    def visit(self, node: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self._budget.charge(1)
        result = super().visit(node, *args, **kwargs)
        if type(result) in (list, dict):
            self._budget.charge(len(result))
        return result

    def visit_flatten(self, node: dict[str, Any], value: Any) -> list[Any] | None:
        base = self.visit(node["children"][0], value)
        if not isinstance(base, list):
            return None
        self._budget.charge(sum(len(item) if isinstance(item, list) else 1 for item in base))
        merged: list[Any] = []
        for item in base:
            if isinstance(item, list):
                merged.extend(item)
            else:
                merged.append(item)
        return merged

    def visit_comparator(self, node: dict[str, Any], value: Any) -> Any:
        if node["value"] in self._EQUALITY_OPS:  # == and != compare whole values, shared parts as often as met
            left = self.visit(node["children"][0], value)
            right = self.visit(node["children"][1], value)
            if isinstance(left, (list, dict)) and isinstance(right, (list, dict)):
                self._budget.walk(left, chars=False)
                self._budget.walk(right, chars=False)
            return self.COMPARATOR_FUNC[node["value"]](left, right)
        return super().visit_comparator(node, value)


_SHARING = frozenset(("multi_select_list", "multi_select_dict", "function_expression", "expref"))


def _shares(node: dict[str, Any]) -> bool:
    """True for a node that may build values sharing parts, or call a function that works more than once: a
    call of ``file()``, ``index()`` or ``key()`` gives one scalar and needs no budget."""
    kind = node.get("type")
    if kind == "function_expression" and node.get("value") in CONTEXT_FUNCTIONS:
        return False
    return kind in _SHARING


def needs_budget(parsed: dict[str, Any]) -> bool:
    """True when the compiled tree builds values that share parts (``[a, a]``, ``{x: a}``) or calls a
    function: only then can its work or its result outgrow the record (and its length), so only then is
    it evaluated with a budget. Paths, projections, filters, flattens, slices, comparisons and ``||``
    without them give the record's own values or lists of them: at most the record's size, each node
    visited at most once per value of the record."""
    stack = [parsed]
    while stack:
        node = stack.pop()
        if _shares(node):
            return True
        stack.extend(child for child in node.get("children", ()) if isinstance(child, dict))
    return False


def search(compiled: Any, value: Any, size: int = 0) -> Any:
    """`compiled` (a ``jmespath.compile`` result) evaluated on `value` within the budget: the result, which
    has been walked (so it serializes to at most `max_record_bytes` characters of strings, plus `size`).

    Args:
        compiled: the compiled expression.
        value: what it reads.
        size: the bytes of the document `value` was read from, when the expression selects from a whole
            document (a records path): the budget grows by 4 steps and 1 character per byte, so selecting
            every record of a large document stays within it. 0 for a record's fields.

    Raises:
        EvaluationLimitError: the evaluation, or its result, went past `MAX_EVAL_STEPS` or
            `max_record_bytes` characters (plus what `size` adds).
    """
    budget = _Budget(MAX_EVAL_STEPS + 4 * size, max_record_bytes() + size)
    interpreter = getattr(_local, "interpreter", None)
    if interpreter is None:  # one per thread, its budget renewed for each evaluation
        interpreter = _local.interpreter = _Interpreter(budget)
    interpreter.renew(budget)
    try:
        result = interpreter.visit(compiled.parsed, value)
    except FunctionLimitError as exc:
        raise EvaluationLimitError(str(exc)) from None
    if isinstance(result, (list, dict)):
        budget.walk(result)
    return result
