"""No package module imports another module's `_private` name: what a module shares with its neighbours it
names publicly (a private module such as `metrics._checks` may still hold public names), so a file's
private names can change without breaking another file."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rubricforge_dspy"


def private_imports(text: str, where: str) -> list[str]:
    """``WHERE:LINE: from MODULE import NAME`` for each private name of the package `text` imports."""
    found = []
    for node in ast.walk(ast.parse(text, where)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rubricforge_dspy"):
            found += [f"{where}:{node.lineno}: from {node.module} import {alias.name}"
                      for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100  # the walk found the package
    offending = [line for path in modules
                 for line in private_imports(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert offending == []


def test_the_walk_reports_a_private_import_and_only_that():
    text = ("import os\nfrom rubricforge_dspy.apply.writer import VerdictWriter, _Writer\n"
            "def f():\n    from rubricforge_dspy.apply.ray import _drain\n    from os import _exit\n")
    assert private_imports(text, "probe.py") == ["probe.py:2: from rubricforge_dspy.apply.writer import _Writer",
                                                 "probe.py:4: from rubricforge_dspy.apply.ray import _drain"]
