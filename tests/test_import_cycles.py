"""No import circles between the package's modules, counting imports inside functions too.

A cycle hidden by a function-level import still ties two modules together: each needs the other to work, and
neither can be read, tested or moved alone. The import-linter contracts (pyproject.toml) order whole
subpackages; this test sees every module: it parses each one (nothing is imported), resolves every
``import``/``from ... import`` (relative ones too, and ``from package import module``) to the package's own
modules, and finds the strongly connected components of that graph (scipy's csgraph)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rubricforge_dspy"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is one of the package's modules."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (a package's ``__init__`` is the package)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
            for target in targets:
                if target.startswith(PACKAGE):
                    resolved = _resolve(target, modules)
                    if resolved and resolved != name:
                        graph[name].add(resolved)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, each sorted."""
    names = sorted(graph)
    index = {n: i for i, n in enumerate(names)}
    edges = [(index[a], index[b]) for a, targets in graph.items() for b in targets]
    if not edges:
        return []
    rows, cols = zip(*edges, strict=True)
    matrix = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(matrix, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for name, label in zip(names, labels, strict=True):
        groups.setdefault(int(label), []).append(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _edge_in(graph, group) -> list[str]:
    return [f"{a} -> {b}" for a in group for b in sorted(graph[a]) if b in group]


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    graph = import_graph()
    assert f"{PACKAGE}.cli.main" in graph and graph[f"{PACKAGE}.cli.main"], "the parser found no import at all"
    # a cycle made of a function-level import is found
    made = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(made) == [["a", "b", "c"]]


def test_no_import_cycle_between_modules():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles (each: the modules, then the imports that close it):\n" + "\n".join(
        f"  {', '.join(group)}\n    " + "\n    ".join(_edge_in(graph, group)) for group in found)
