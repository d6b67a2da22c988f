"""No module imports another module's private name: a name with one leading underscore belongs to the
file that defines it. Helpers shared across files get a public name (in a private module if they are not
for users), so a change to a private helper never breaks a sibling silently."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rubricforge_dspy"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def imported_from(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module of a `from ... import` in `path` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def is_submodule(module: str, name: str) -> bool:
    """`from package import _module` imports a module (a private module of a curated package), not a name."""
    folder = ROOT.joinpath(*module.split("."))
    return (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()


def private_imports(path: Path) -> list[str]:
    """``'file:line: module.name'`` for each private name `path` imports from another module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
            continue
        source = imported_from(node, path)
        if source == module_name(path):
            continue
        for alias in node.names:
            if is_private(alias.name) and not is_submodule(source, alias.name):
                found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}: {source}.{alias.name}")
    return found


def offenders() -> list[str]:
    return [line for path in sorted(PACKAGE.rglob("*.py")) for line in private_imports(path)]


def test_the_walk_finds_private_names_absolute_and_relative(tmp_path, monkeypatch):
    pkg = tmp_path / "rubricforge_dspy" / "stage"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_impl.py").write_text("")
    (pkg / "user.py").write_text("from __future__ import annotations\nfrom . import _impl\n"
                                 "from ._impl import _helper, public, __version__\n"
                                 "from rubricforge_dspy.other import _secret as secret\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert private_imports(pkg / "user.py") == [
        "rubricforge_dspy/stage/user.py:3: rubricforge_dspy.stage._impl._helper",
        "rubricforge_dspy/stage/user.py:4: rubricforge_dspy.other._secret",
    ]


def test_no_module_imports_a_private_name_of_another():
    found = offenders()
    assert not found, "private names imported across files:\n" + "\n".join(found)
