"""The house's size rules (docs/ARCHITECTURE.md): no module of the package over 600 lines, no function over
80 lines, except the CLI's argument tables (`build_parser`: one `add_argument` after another)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rubricforge_dspy"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
ARGUMENT_TABLES = {("cli/main.py", "build_parser")}


def oversized(root: Path) -> list[str]:
    """``'path: what'`` for each module over `MAX_MODULE_LINES` and function over `MAX_FUNCTION_LINES` under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source, where)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (where, node.name) not in ARGUMENT_TABLES:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{where}: {node.name} has {length} lines")
    return found


def test_the_walk_finds_a_long_module_and_a_long_function(tmp_path):
    (tmp_path / "big.py").write_text("x = 1\n" * 601)
    (tmp_path / "long.py").write_text("def f():\n" + "    pass\n" * 80)
    (tmp_path / "ok.py").write_text("def g():\n" + "    pass\n" * 79)
    assert oversized(tmp_path) == ["big.py: 601 lines", "long.py: f has 81 lines"]


def test_no_module_or_function_of_the_package_is_oversized():
    found = oversized(PACKAGE)
    assert not found, "split these (docs/ARCHITECTURE.md):\n" + "\n".join(found)
