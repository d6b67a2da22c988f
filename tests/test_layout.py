"""The shape of the test suite (tests/README.md): a folder per subpackage of the library, and no test module
importing another (what tests share lives in tests/support/ or in a conftest.py fixture)."""

from __future__ import annotations

import ast
from pathlib import Path

import rubricforge_dspy

TESTS = Path(__file__).resolve().parent
PACKAGE = Path(rubricforge_dspy.__file__).resolve().parent
NOT_MIRRORS = {"support", "fixtures"}  # shared code and data files, not tests of a subpackage


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def _imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """Every module `source` (the code of `module`) imports, at any depth, as absolute names (relative imports
    resolved), with the line of each import."""
    package = module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _is_test_module(name: str) -> bool:
    return name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")


def test_no_test_module_imports_another():
    offenders = [f"{path.relative_to(TESTS.parent)}:{line} imports {name}" for path in _python_files()
                 for line, name in _imported_modules(path.read_text(encoding="utf-8"), _module_name(path))
                 if _is_test_module(name)]
    assert offenders == [], "move what is shared to tests/support/ or a conftest.py fixture:\n" + "\n".join(offenders)


def test_the_import_walk_sees_every_form_of_import():
    """The check above is not vacuous: absolute, from-, relative and nested imports of a test module are found,
    and imports of support code are not."""
    code = ("import tests.judge.test_hybrid\nfrom tests.data import test_labels\n"
            "def f():\n    from .test_batch import x\n    from tests.support.batch import fake_lm\n")
    flagged = sorted({name for _, name in _imported_modules(code, "tests.apply.test_sample") if _is_test_module(name)})
    assert flagged == ["tests.apply.test_batch", "tests.data.test_labels", "tests.judge.test_hybrid"]


def test_every_test_folder_mirrors_a_subpackage_of_the_library():
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    stray = sorted(folders - NOT_MIRRORS - subpackages)
    assert folders - NOT_MIRRORS <= subpackages, f"test folders naming no subpackage: {stray}"
    for folder in folders - {"fixtures"}:
        assert (TESTS / folder / "__init__.py").is_file(), f"tests/{folder}/ needs an __init__.py (unique module names)"


def test_test_modules_live_in_a_subpackage_folder_or_test_the_whole_package():
    """A test module at the top of tests/ tests the package as a whole or a file outside it (install.sh,
    docs/API.md, examples/, evals/simulator/); the rest sit in the folder of the subpackage they test."""
    top = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert top == sorted(TOP_LEVEL), f"place new tests in tests/<subpackage>/ (tests/README.md); found {top}"
    assert not any((TESTS / "support").glob("test_*.py")) and not any((TESTS / "fixtures").rglob("test_*.py"))


TOP_LEVEL = {
    "test_layout.py": "this file",
    "test_import_cycles.py": "no import cycle between any two modules of the package",
    "test_public_api.py": "the curated __init__ of every package, the top level's names",
    "test_api_doc.py": "docs/API.md",
    "test_install.py": "install.sh",
    "test_readme.py": "README.md: its command lines run as written, writing nothing into the repository",
    "test_optional_extras.py": "every module imports without the extras",
    "test_agent_example.py": "evals/agent_example/",
    "test_walkthrough.py": "examples/walkthrough.py",
    "test_simulator.py": "evals/simulator/",
    "test_doc_links.py": "README.md and docs/: every relative link resolves",
    "test_doc_paths.py": "README.md and docs/: every repository path cited in backticks or links exists",
    "test_private_imports.py": "no module of the package imports another's private name",
    "test_sizes.py": "no module of the package over 600 lines, no function over 80",
    "test_dspy_compat.py": "rubricforge_dspy/_dspy_compat.py, the one module that touches DSPy's private hooks",
    "test_public_signatures.py": "every public callable of every curated __all__ is fully annotated (py.typed)",
    "test_no_assert.py": "no assert statement in the library (python -O strips them)",
}
