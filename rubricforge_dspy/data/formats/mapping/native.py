"""The fast path of a mapping's plain expressions: a Python function per compiled tree that gives what jmespath's
interpreter gives (`native`), for the paths, comparisons and size-bounded calls most mapping fields are, read
several times faster than the interpreter walks its tree; any other expression is left to the interpreter
(`spec.Expr`)."""

from __future__ import annotations

from typing import Any

from jmespath.exceptions import JMESPathTypeError

from rubricforge_dspy.data.formats.mapping.functions import OPTIONS
from rubricforge_dspy.data.formats.mapping.limits import EvaluationLimitError, max_record_bytes

FUNCTIONS = OPTIONS.custom_functions


_NATIVE_FUNCTIONS = frozenset(("to_string", "to_number", "length", "type", "not_null", "starts_with", "ends_with",
                               "contains", "join", "split", "lines", "regex_findall", "file", "index", "key"))


def _native_call(node: dict[str, Any]) -> Any:
    """A call of `_NATIVE_FUNCTIONS` on plain paths (no call inside: ``to_string(to_string(...))`` may grow
    each time), or ``map(&e, list)`` with a plain `e`, or None. Each gives at most about the record's size
    (a string of it, or one value per element), so it needs no evaluation budget."""
    name, children = node.get("value"), node["children"]
    if name == "map" and len(children) == 2 and children[0].get("type") == "expref":
        inner, listed = native(children[0]["children"][0], calls=False), native(children[1], calls=False)
        if inner is None or listed is None:
            return None

        def mapped(value: Any) -> Any:
            found = listed(value)
            if not isinstance(found, list):
                raise JMESPathTypeError("map", found, FUNCTIONS._type_of(found) if found is not None else "null",
                                        ["array"])
            return [inner(item) for item in found]
        return mapped
    if name == "join" and len(children) == 2 and children[1].get("type") == "multi_select_list":
        return _native_join(children)
    if name not in _NATIVE_FUNCTIONS:
        return None
    arguments = [native(child, calls=False) for child in children]
    if any(argument is None for argument in arguments):
        return None
    return lambda value: FUNCTIONS.call_function(name, [argument(value) for argument in arguments])


def _native_join(children: list[dict[str, Any]]) -> Any:
    """``join(sep, [a, to_string(b), ...])`` (ids made of several fields) with plain elements, each a path or one
    call of a path: the pieces are measured before they are joined, and more than `max_record_bytes`
    characters is an `EvaluationLimitError` (what the budget would say)."""
    separator = native(children[0], calls=False)
    elements = [native(child) for child in children[1]["children"]]
    if separator is None or any(element is None for element in elements):
        return None

    def join(value: Any) -> Any:
        pieces = None if value is None else [element(value) for element in elements]  # [..] of null is null
        glue = separator(value)
        if isinstance(glue, str) and isinstance(pieces, list) and all(isinstance(p, str) for p in pieces):
            if sum(map(len, pieces)) + len(glue) * len(pieces) > max_record_bytes():
                raise EvaluationLimitError(f"join would build more than {max_record_bytes():,} characters "
                                           "(the record cap)")
        return FUNCTIONS.call_function("join", [glue, pieces])
    return join


def native(node: dict[str, Any], calls: bool = True) -> Any:
    """A Python function giving what jmespath's interpreter gives for a plain path (``a.b``, ``@``, ``a[0]``,
    ``a.b[-1].c``), ``||``, ``&&``, ``!``, ``==``, ``!=`` and literals of them, ``[a, b][i]``, and calls that
    give about the record's size at most (`_native_call`, `_native_join`), or None for any other expression
    (left to the interpreter, with the budget where `needs_budget` says). Most mapping fields are such, and a
    function reads them several times faster than the interpreter walks its tree. The semantics are the
    interpreter's (`visit_field`, `visit_subexpression`, `visit_index`, `visit_or_expression`...): a member of
    anything but an object, an index of anything but a list or past its end, is null."""
    kind = node.get("type")
    if kind == "current":
        return _identity
    if kind == "literal":
        constant = node["value"]
        if isinstance(constant, (list, dict)):
            return None  # shared by every call: left to the interpreter, which copies nothing either
        return lambda value: constant
    if kind == "comparator" and node["value"] in ("eq", "ne"):
        left, right = (native(child, calls) for child in node["children"])
        if left is None or right is None:
            return None
        equal = node["value"] == "eq"
        return lambda value: _equal(left(value), right(value)) is equal
    if kind == "function_expression":
        return _native_call(node) if calls else None
    if kind == "index_expression" and node["children"][0].get("type") == "multi_select_list" \
            and node["children"][1].get("type") == "index":  # [a, b][i]: one element, nothing shared
        elements = [native(child, calls) for child in node["children"][0]["children"]]
        if any(element is None for element in elements):
            return None
        position = node["children"][1]["value"]
        if not -len(elements) <= position < len(elements):
            return lambda value: None
        chosen = elements[position]
        return lambda value: None if value is None else chosen(value)
    if kind == "field":
        name = node["value"]
        return lambda value: value.get(name) if isinstance(value, dict) else None
    if kind == "index":
        position = node["value"]

        def index(value: Any) -> Any:
            if not isinstance(value, list):
                return None
            try:
                return value[position]
            except IndexError:
                return None
        return index
    if kind in ("or_expression", "and_expression", "not_expression"):
        parts = [native(child, calls) for child in node["children"]]
        if any(part is None for part in parts):
            return None
        if kind == "not_expression":
            return lambda value: jmespath_false(parts[0](value))
        left, right = parts
        if kind == "or_expression":
            return lambda value: right(value) if jmespath_false(found := left(value)) else found
        return lambda value: found if jmespath_false(found := left(value)) else right(value)
    if kind in ("subexpression", "index_expression"):
        parts = [native(child, calls) for child in node["children"]]
        if any(part is None for part in parts):
            return None

        def chain(value: Any) -> Any:
            for part in parts:
                value = part(value)
                if value is None:
                    return None
            return value
        return chain
    return None


def _identity(value: Any) -> Any:
    return value


def _equal(left: Any, right: Any) -> bool:
    """JMESPath's equality (`TreeInterpreter._equals`): a number never equals a boolean."""
    if type(left) is bool or type(right) is bool:
        return type(left) is type(right) and bool(left == right)
    return bool(left == right)


def jmespath_false(value: Any) -> bool:
    """JMESPath's falsehood (``TreeInterpreter._is_false``): null, false, an empty string, list or object."""
    return value is None or value is False or (isinstance(value, (str, list, dict)) and not value)
