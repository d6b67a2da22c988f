"""The parsed command line is read, never written (issue 42 item 4): what the flags say is returned as a record
(`cli.data_options.data_spec`, a frozen `data.spec.DataSpec`) and handed on. A write into ``args``
(``args.X = ...``, ``args.X += ...``, ``setattr(args, ...)``, ``vars(args)[...] = ...``, ``args.__dict__``,
``del args.X``) anywhere in the package fails this test, naming the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rubricforge_dspy

PACKAGE = Path(rubricforge_dspy.__file__).parent
ARGS = {"args", "namespace", "ns", "parsed"}  # the names a parsed command line goes by here


def _is_args(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ARGS


def _is_args_dict(node: ast.AST) -> bool:
    """``vars(args)`` or ``args.__dict__``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars":
        return len(node.args) == 1 and _is_args(node.args[0])
    return isinstance(node, ast.Attribute) and node.attr == "__dict__" and _is_args(node.value)


def _written(target: ast.AST) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_written(element) for element in target.elts)
    if isinstance(target, ast.Starred):
        return _written(target.value)
    if isinstance(target, ast.Attribute):
        return _is_args(target.value) or _is_args_dict(target)
    if isinstance(target, ast.Subscript):
        return _is_args_dict(target.value)
    return False


def args_writes(source: str, filename: str = "<source>") -> list[int]:
    """The lines of ``source`` that write into a parsed command line."""
    lines = []
    for node in ast.walk(ast.parse(source, filename)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args \
                    and (_is_args(node.args[0]) or _is_args_dict(node.args[0])):
                lines.append(node.lineno)
            elif isinstance(func, ast.Attribute) and func.attr in ("update", "setdefault", "pop", "__setitem__",
                                                                   "__setattr__") \
                    and (_is_args_dict(func.value) or (func.attr == "__setattr__" and _is_args(func.value))):
                lines.append(node.lineno)
        lines.extend(target.lineno for target in targets if _written(target))
    return sorted(set(lines))


@pytest.mark.parametrize("source", [
    "args.format = 'jsonl'",
    "args.data, args.format = [spool], 'jsonl'",
    "rule, args.label_threshold = threshold, None",
    "args.limit += 1",
    "args.out: str = 'x'",
    "setattr(args, 'labels', path)",
    "delattr(args, 'labels')",
    "vars(args)['data'] = []",
    "vars(args).update(data=[])",
    "args.__dict__['data'] = []",
    "args.__setattr__('data', [])",
    "del args.labels",
    "for args.data in paths: pass",
    "[0 for args.data in paths]",
    "with open(p) as args.handle: pass",
])
def test_each_kind_of_write_is_found(source):
    assert args_writes(source) == [1]


@pytest.mark.parametrize("source", [
    "spec = args.format",
    "other.format = args.format",
    "x = vars(args)",
    "argparse.Namespace(**{**vars(args), 'data': d})",  # a copy, not a write (still not used in the package)
    "spec = spec.replace(format='jsonl')",
])
def test_reads_are_not_writes(source):
    assert args_writes(source) == []


def test_the_package_writes_nothing_into_args():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line in args_writes(path.read_text(encoding="utf-8"), str(path))]
    assert not found, ("the parsed command line is written here; return a record instead (cli.data_options."
                       f"data_spec, a frozen DataSpec, or the command's own options): {', '.join(found)}")
