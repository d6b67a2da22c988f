"""The mapping file: its schema check, its compiled JMESPath expressions and its label rule.

A mapping is JSON (always) or YAML (with PyYAML installed), validated against
``rubricforge_dspy/core/schemas/mapping.schema.json`` before any data is read; every error names the
mapping file and the offending key (``records.from``, ``steps.observation``, ``label``...).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Union

import jmespath
from jmespath.exceptions import JMESPathError

from rubricforge_dspy.core.errors import InputError, MissingFileError
from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.core.trajectory import ANY_POSITIVE_REWARD, LabelRule, parse_label_rule
from rubricforge_dspy.data.formats.mapping.functions import OPTIONS, interpreter, key_literals
from rubricforge_dspy.data.formats.mapping.limits import (
    MAX_MAPPING_BYTES,
    MAX_MAPPING_DEPTH,
    EvaluationLimitError,
    expression_problem,
    needs_budget,
    search,
    tree_problem,
)
from rubricforge_dspy.data.formats.mapping.native import native

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "core" / "schemas" / "mapping.schema.json"
SPECIAL = ("$key", "$file", "$index")  # not JMESPath: the record's key, its file (under the data folder, no
# suffix) and its index in the file; inside an expression: key(), file(), index() (`functions`)
RECORD_FIELDS = ("id", "task_id", "session_id", "domain", "agent", "trial", "task", "system", "final_answer",
                 "reward")
STEP_FIELDS = ("thought", "action", "tool", "arguments", "observation", "error")
MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool", "arguments", "call_id", "tool_call_id", "error")
PARALLEL_FIELDS = ("actions", "observations", "errors", "thoughts")
_DEFAULT_GLOB = {"json": "*.json", "jsonl": "*.jsonl", "files": "*.json"}
_MESSAGE_DEFAULTS = {"role": "role", "content": "content"}
_VALUE_RULE = re.compile(r"^\s*(?P<field>.+?)\s+(?P<op>==|in)\s+(?P<value>.+?)\s*$", re.DOTALL)


class MappingError(InputError):
    """A mapping file that cannot be used: the message names the file, the key and the problem."""

    def __init__(self, file: str, key: str | None, problem: str):
        self.file = str(file)
        self.key = key
        self.problem = problem
        where = self.file if not key else f"{self.file}: key '{key}'"
        super().__init__(f"{where}: {problem}")


class Expr:
    """One field of a mapping: a compiled JMESPath expression (evaluated with the mapping functions,
    `functions.MappingFunctions`), or ``$key`` / ``$file`` / ``$index``. `optional` (``{"path": ...,
    "optional": true}`` in the mapping): a field whose emptiness ``map check`` reports without failing."""

    __slots__ = ("text", "_compiled", "key", "_budgeted", "_parsed", "_native", "optional")

    def __init__(self, text: str, compiled: Any = None, key: str | None = None, optional: bool = False):
        self.text = text
        self.optional = optional
        self._compiled = compiled
        self._parsed = compiled.parsed if compiled is not None else None
        self.key = key
        self._budgeted = compiled is not None and needs_budget(compiled.parsed)
        self._native = native(self._parsed) if self._parsed is not None else None

    def __call__(self, value: Any, key: Any = None, file: str = "", size: int = 0, index: Any = None) -> Any:
        """The value of the expression on `value`: an expression that may build more than it reads
        (`needs_budget`) is evaluated within the budget (`limits.search`, grown by `size`, the bytes of the
        document `value` is, for a records path).

        Raises:
            EvaluationLimitError: the evaluation went past a limit; the message names the field and the
                expression (the reader makes the record a bad record).
        """
        if self._native is not None:  # a plain path (most fields): read without the interpreter
            return self._native(value)
        if not self._budgeted:
            if self._parsed is not None:
                return interpreter().visit(self._parsed, value)
            return key if self.text == "$key" else file if self.text == "$file" else index
        try:
            return search(self._compiled, value, size)
        except EvaluationLimitError as exc:
            where = f"{self.key}: " if self.key else ""
            raise EvaluationLimitError(f"{where}{_shown(self.text)}: {exc}") from None

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


@dataclass(frozen=True)
class ValueSetRule:
    """A label read from a field: 1 when its value is in `passing`; 0 when it is in `failing`, or, with no
    `failing` set, for any other value; a value in neither set is an error naming the record. A field that
    resolves to nothing (null) leaves the record unlabeled (``label=None``) and is counted."""

    field: str
    passing: tuple[Any, ...] = ()
    failing: tuple[Any, ...] | None = None

    def label(self, value: Any) -> int:
        """The label of `value` (never called with None); ValueError for a value in neither set."""
        if _contains(self.passing, value):
            return 1
        if self.failing is None or _contains(self.failing, value):
            return 0
        raise ValueError(f"label field '{self.field}' is {value!r}: in neither the pass set {list(self.passing)} "
                         f"nor the fail set {list(self.failing)} (add it to one of them in the mapping)")

    def __str__(self) -> str:
        text = f"{self.field} in {json.dumps(list(self.passing))}"
        return text if self.failing is None else f"{text} (fail: {json.dumps(list(self.failing))})"


def _contains(values: tuple[Any, ...], value: Any) -> bool:
    """`value` in `values`, where True never equals 1 (a JSON boolean is not a number)."""
    return any(type(v) is type(value) and v == value or (_number(v) and _number(value) and v == value)
               for v in values)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


LabelSpec = Union[LabelRule, ValueSetRule]
FUNCTIONS = OPTIONS.custom_functions


@dataclass(frozen=True)
class Mapping:
    """A validated mapping (`load_mapping`): where the records are and how each becomes a `Trajectory`.

    Attributes:
        name: the format name (``rubricforge formats`` lists it).
        source: ``"json"`` (one document; `records_path` says where the records are), ``"jsonl"`` (one
            record per line) or ``"files"`` (one file per record, found with `glob` in a folder).
        records_path: the JMESPath of the records in a document (``*``: the values of an object).
        glob: the pattern of data files in a folder.
        fields: record field name -> `Expr` (``id``, ``task_id``, ``domain``, ``agent``, ``trial``,
            ``task``, ``system``, ``final_answer``, ``reward``).
        mode: ``"steps"``, ``"parallel"``, ``"messages"``, or ``"none"`` (a task and an answer only): how
            the observable steps are written.
        step_fields: the expressions of the chosen mode (per step, per message, or the parallel lists).
        roles: source role name -> ``user``/``assistant``/``system``/``tool``/``observation``/``skip``.
        label_rule: a `LabelRule` on the reward, or a `ValueSetRule` on a field, or None (unlabeled).
        label_field: the `Expr` a `ValueSetRule` reads.
        hidden: name -> `Expr` of values kept in ``hidden`` (never rendered).
        file: the mapping file.
        record_filter: ``records.filter``: a record on which it is false, null or empty is left out, counted
            (`MapStats.filtered`); None keeps every record.
    """

    name: str
    source: str
    records_path: str | None
    glob: str
    fields: dict[str, Any] = field(compare=False)
    mode: str
    step_fields: dict[str, Any] = field(compare=False)
    roles: dict[str, Any] = field(default_factory=dict, compare=False)
    label_rule: LabelSpec | None = None
    label_field: Expr | None = field(default=None, compare=False)
    hidden: dict[str, Any] = field(default_factory=dict, compare=False)
    file: str = ""
    record_filter: Expr | None = field(default=None, compare=False)
    filter_text: str | None = None

    def field_names(self) -> list[str]:
        """Every mapped field, as `check_mapping` counts them (``steps.observation``, ``label``...)."""
        return list(self._named_exprs())

    def optional_fields(self) -> list[str]:
        """The fields marked ``optional`` (named as `field_names` names them): ``map check`` reports how often
        they are empty, and does not fail on it."""
        return [name for name, expr in self._named_exprs().items() if expr.optional]

    def _named_exprs(self) -> dict[str, Expr]:
        named = dict(self.fields)
        prefix = {"steps": "steps.", "messages": "messages.", "parallel": "", "none": ""}[self.mode]
        named.update((prefix + key, expr) for key, expr in self.step_fields.items())
        if self.label_field is not None:
            named["label"] = self.label_field
        return named


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The mapping JSON Schema (draft 2020-12)."""
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return loaded


def _shown(text: str) -> str:
    """An expression as a message shows it: quoted, cut to 80 characters."""
    return repr(text) if len(text) <= 80 else repr(text[:80]) + f"... ({len(text):,} characters)"


def _read_bytes(path: Path) -> bytes:
    """The mapping file's bytes, once `regular_file` shows a regular file of at most `MAX_MAPPING_BYTES`."""
    try:
        regular_file(path, "mapping file")
    except MissingFileError:
        raise MappingError(str(path), None, "no such mapping file") from None
    with open(path, "rb") as handle:
        data = handle.read(MAX_MAPPING_BYTES + 1)
    if len(data) > MAX_MAPPING_BYTES:
        raise MappingError(str(path), None, f"larger than {MAX_MAPPING_BYTES:,} bytes, the most a mapping file may "
                                            "be (a mapping is a few hundred bytes): refusing to read it")
    return data


def _too_deep(path: Path) -> MappingError:
    return MappingError(str(path), None, f"nested more than {MAX_MAPPING_DEPTH} levels deep (a mapping nests 3): "
                                         "refusing to read it")


def _depth(document: Any) -> int:
    """How deeply lists and objects nest in `document`, walked without recursion."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            deepest = max(deepest, depth)
            if depth <= MAX_MAPPING_DEPTH:
                stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return deepest


def _read_yaml(path: Path, text: str) -> Any:
    """A YAML mapping, its parser events checked first: an alias (``*name``), which a mapping never needs
    and which expands a few hundred bytes into billions of values, and nesting past `MAX_MAPPING_DEPTH`
    are refused before anything is built."""
    try:
        import yaml
    except ImportError:
        raise MappingError(str(path), None, "a YAML mapping needs PyYAML (pip install pyyaml), or write it "
                                            "as JSON") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    opening, closing = (yaml.MappingStartEvent, yaml.SequenceStartEvent), (yaml.MappingEndEvent,
                                                                        yaml.SequenceEndEvent)
    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                raise MappingError(str(path), None, f"a YAML alias (*{event.anchor}){where}: aliases are refused "
                                                    "(a mapping needs none, and they can expand without end); "
                                                    "write the value out")
            if isinstance(event, opening):
                depth += 1
                if depth > MAX_MAPPING_DEPTH:
                    raise _too_deep(path)
            elif isinstance(event, closing):
                depth -= 1
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise MappingError(str(path), None, f"malformed YAML: {exc}") from None


def _read_document(path: Path) -> Any:
    try:
        text = _read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MappingError(str(path), None, f"not UTF-8 text (byte {exc.start})") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        return _read_yaml(path, text)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MappingError(str(path), None, f"malformed JSON (line {exc.lineno}, column {exc.colno}): "
                                            f"{exc.msg}") from None
    except RecursionError:
        raise _too_deep(path) from None
    if _depth(document) > MAX_MAPPING_DEPTH:
        raise _too_deep(path)
    return document


def load_mapping(path: PathArg) -> Mapping:
    """Read and check a mapping file (``.json``, or ``.yaml``/``.yml`` with PyYAML).

    Args:
        path: the mapping file.

    Returns:
        The `Mapping`, every expression compiled.

    Raises:
        MappingError: the file is missing, malformed, fails the schema (the message names the key), holds
            a JMESPath expression that does not compile, or a label rule that cannot be read; or it is past a
            limit (`limits`: its size, its nesting, a YAML alias, an expression's length, tokens or depth,
            a glob that is absolute or climbs out of the data folder).
        NotARegularFileError: the path is a FIFO, a device, a directory...: not a regular file.
    """
    path = Path(path)
    return parse_mapping(_read_document(path), str(path))


def _schema_problem(document: Any, file: str) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(schema()).iter_errors(document))
    if error is None:
        return
    key = ".".join(str(p) for p in error.absolute_path)
    message = error.message
    if error.validator == "additionalProperties":
        unexpected = re.findall(r"'([^']+)'", message.split("(")[-1])
        if unexpected:
            key = ".".join(filter(None, [key, unexpected[0]]))
            message = "unknown key (see docs/MAPPING.md for the keys a mapping may have)"
    elif error.validator == "required":
        missing = re.findall(r"'([^']+)'", message)
        key = ".".join(filter(None, [key, missing[0] if missing else ""]))
        message = "missing: this key is required"
    raise MappingError(file, key or None, message[:300])


def compile_field(field: str | dict[str, Any], file: str, key: str) -> Expr:
    """One mapping field compiled (`Expr`); `MappingError` naming `file` and `key` when it is not JMESPath.
    `field` is an expression, or ``{"path": expression, "optional": true}`` (a field whose emptiness is
    reported, not failed: `Expr.optional`). ``key(N)`` with a bare number is read as ``key(`N`)``."""
    optional = False
    if isinstance(field, dict):
        if not isinstance(field.get("path"), str) or set(field) - {"path", "optional"} \
                or not isinstance(field.get("optional", False), bool):
            raise MappingError(file, key, 'a field is an expression or {"path": expression, "optional": true}')
        text, optional = field["path"], bool(field.get("optional", False))
    else:
        text = field
    if text in SPECIAL:
        return Expr(text, optional=optional)
    problem = expression_problem(text)
    if problem is not None:
        raise MappingError(file, key, f"{_shown(text)}: {problem}")
    try:
        compiled = jmespath.compile(key_literals(text))
    except JMESPathError as exc:
        problem = str(exc).replace("\n", " ")
        raise MappingError(file, key, f"not a JMESPath expression: {_shown(text)} ({problem[:300]})") from None
    problem = tree_problem(compiled.parsed)
    if problem is not None:
        raise MappingError(file, key, f"{_shown(text)}: {problem}")
    return Expr(text, compiled, key, optional)


def parse_mapping(document: Any, file: str = "<mapping>") -> Mapping:
    """A `Mapping` from an already-read mapping document (what `load_mapping` reads); see there."""
    _schema_problem(document, file)
    records = document["records"]
    if isinstance(records, str):
        records = {"from": "json", "path": records}
    source = records["from"]
    if source == "jsonl" and "path" in records:
        raise MappingError(file, "records.path", "a JSON Lines file has one record per line: no path")
    records_path = records.get("path", "@") if source != "jsonl" else None
    if records_path is not None:
        compile_field(records_path, file, "records.path")
    fields = {key: compile_field(document[key], file, key) for key in RECORD_FIELDS if key in document}
    mode, step_fields, roles = _steps_spec(document, file)
    label_rule, label_field = _label_spec(document, file)
    hidden = {name: compile_field(text, file, f"hidden.{name}") for name, text in document.get("hidden", {}).items()}
    if "session_id" in document and "session_id" in hidden:
        raise MappingError(file, "hidden.session_id", "the key 'session_id' writes hidden.session_id: give the "
                                                      "session id once")
    filter_text = records.get("filter")
    record_filter = compile_field(filter_text, file, "records.filter") if filter_text is not None else None
    return Mapping(name=document["name"], source=source, records_path=records_path,
                   glob=_glob(records.get("glob", _DEFAULT_GLOB[source]), file), fields=fields, mode=mode,
                   step_fields=step_fields, roles=roles, label_rule=label_rule, label_field=label_field,
                   hidden=hidden, file=file, record_filter=record_filter, filter_text=filter_text)


def _glob(pattern: str, file: str) -> str:
    """`pattern` (``records.glob``), once it is a pattern relative to the data folder that stays inside it."""
    posix = pattern.replace("\\", "/")
    if posix.startswith(("/", "~")) or PureWindowsPath(pattern).drive:
        raise MappingError(file, "records.glob", f"{pattern!r} is absolute: a glob matches files inside the data "
                                                 "folder given with --data; write it relative to that folder "
                                                 "(e.g. '*.json', 'runs/**/*.json')")
    if ".." in PurePosixPath(posix).parts:
        raise MappingError(file, "records.glob", f"{pattern!r} climbs out of the data folder ('..'): a glob "
                                                 "matches files inside the folder given with --data; give that "
                                                 "folder instead")
    return pattern


def _steps_spec(document: dict[str, Any], file: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(mode, expressions, roles)`` of the one way the mapping writes steps."""
    given = [key for key in ("steps", "messages", "actions") if key in document]
    stray = [key for key in PARALLEL_FIELDS[1:] if key in document and "actions" not in document]
    if stray:
        raise MappingError(file, stray[0], "parallel lists need 'actions' too (observations[i] answers actions[i])")
    if not given:  # a record that is a task and an answer (a leaderboard submission): no steps between
        if "task" not in document and "final_answer" not in document:
            raise MappingError(file, "steps", "give 'steps', 'messages' or 'actions' (the steps of a record), or at "
                                              "least 'task' and 'final_answer'")
        return "none", {}, {}
    if len(given) > 1:
        raise MappingError(file, given[1], "give exactly one of 'steps', 'messages' or 'actions' (the steps of a "
                                           f"record); got {' and '.join(given)}")
    mode = given[0]
    if mode == "actions":
        lists = {key: compile_field(document[key], file, key) for key in PARALLEL_FIELDS if key in document}
        return "parallel", lists, {}
    spec = document[mode]
    names = STEP_FIELDS if mode == "steps" else MESSAGE_FIELDS
    exprs = {"path": compile_field(spec["path"], file, f"{mode}.path")}
    defaults = _MESSAGE_DEFAULTS if mode == "messages" else {}
    for key in names:
        text = spec.get(key, defaults.get(key))
        if text is not None:
            exprs[key] = compile_field(text, file, f"{mode}.{key}")
    if mode == "steps" and not any(key in spec for key in ("action", "tool", "observation", "thought")):
        raise MappingError(file, "steps", "a step needs at least one of 'action', 'tool', 'observation', 'thought'")
    return mode, exprs, dict(spec.get("roles", {}))


def _literal(text: str, file: str) -> Any:
    """A label value written in a rule: JSON (``true``, ``1``, ``["a", "b"]``) or a quoted literal."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)  # 'single-quoted' strings and lists of them; literals only
    except (ValueError, SyntaxError):
        raise MappingError(file, "label", f"cannot read the value {text!r}: write a JSON value or a "
                                          "'quoted' string") from None


def _label_spec(document: dict[str, Any], file: str) -> tuple[LabelSpec | None, Expr | None]:
    """The label rule and, for a value-set rule, the field it reads."""
    spec = document.get("label")
    if spec is None:
        return (ANY_POSITIVE_REWARD if "reward" in document else None), None
    if isinstance(spec, str):
        text = spec.strip()
        match = _VALUE_RULE.match(text)
        if match:
            value = _literal(match["value"], file)
            values = value if match["op"] == "in" else [value]
            if not isinstance(values, list) or not values:
                raise MappingError(file, "label", f"'in' needs a non-empty list of values, got {match['value']!r}")
            spec = {"field": match["field"], "pass": values}
        else:
            spec = {"rule": text}
    if "rule" in spec:
        if set(spec) != {"rule"}:
            raise MappingError(file, "label", "'rule' (a rule on the reward) stands alone")
        if "reward" not in document:
            raise MappingError(file, "label.rule", "a rule on the reward needs a 'reward' field in the mapping")
        try:
            return parse_label_rule(spec["rule"]), None
        except InputError as exc:
            raise MappingError(file, "label.rule", f"{exc} (e.g. 'reward >= 1', 'reward > 0')") from None
    if "field" not in spec:
        raise MappingError(file, "label.field", "a label needs 'rule' (on the reward) or 'field' with a value set")
    passing = spec.get("pass", [spec["equals"]] if "equals" in spec else None)
    if passing is None or ("equals" in spec and "pass" in spec):
        raise MappingError(file, "label.pass", "give the passing values: 'equals': v or 'pass': [v, ...]")
    fail = spec.get("fail")
    expr = compile_field(spec["field"], file, "label.field")
    return ValueSetRule(expr.text, tuple(passing), tuple(fail) if fail is not None else None), expr
