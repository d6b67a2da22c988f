"""No module of `rubricforge_dspy.apply` imports another that imports it back, counting imports inside functions
(issue #36: `apply.cascade` and `apply.cascade_job` imported each other)."""

from __future__ import annotations

import ast
from pathlib import Path

APPLY = Path(__file__).resolve().parents[2] / "rubricforge_dspy" / "apply"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("rubricforge_dspy.apply.")}


def test_no_module_of_apply_imports_one_that_imports_it_back():
    modules = {f"rubricforge_dspy.apply.{p.stem}": _imports(p) for p in APPLY.glob("*.py") if p.stem != "__init__"}
    graph = {name: {m for m in imported if m in modules and m != name} for name, imported in modules.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name == goal:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(graph[name])
        return False

    cycles = sorted((a, b) for a in graph for b in graph[a] if reaches(b, a))
    assert cycles == [], f"import cycles in rubricforge_dspy.apply: {cycles}"
