"""No `assert` for an invariant in the library (issue 42 item 6): ``python -O`` strips asserts, so a check the
library relies on is an explicit ``if ...: raise`` of the package's errors. Checked by reading the source (AST),
over the whole package: every subpackage and top-level module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rubricforge_dspy

PACKAGE = Path(rubricforge_dspy.__file__).resolve().parent
CHECKED = sorted(p.name for p in PACKAGE.iterdir()
                 if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py")


def _asserts(path: Path) -> list[str]:
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f"{file.relative_to(PACKAGE.parent)}:{node.lineno}"
            for file in files
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file)))
            if isinstance(node, ast.Assert)]


@pytest.mark.parametrize("part", CHECKED)
def test_no_assert_statement(part: str) -> None:
    path = PACKAGE / part
    assert path.exists(), f"{path} is gone: update CHECKED"
    assert _asserts(path) == [], "an assert in the library vanishes under python -O: raise the package's error"
