"""docs/API.md is the public API as the code has it, and every public name documents itself."""

import importlib
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import rubricforge_dspy

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["core", "data", "evidence", "lm", "program", "judge", "serve", "induction", "rewards", "apply", "trust",
          "report", "metrics", "pipeline"]


def _own_doc(obj) -> str:
    """The object's own docstring: not a dataclass's generated ``Name(field: type, ...)``, not inherited."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    doc = (doc or "").strip()
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""
    return doc


@pytest.mark.parametrize("package", ["rubricforge_dspy"] + [f"rubricforge_dspy.{s}" for s in STAGES])
def test_every_public_class_and_function_has_its_own_docstring(package):
    module = importlib.import_module(package)
    missing = [name for name in module.__all__
               if (inspect.isclass(obj := getattr(module, name)) or inspect.isroutine(obj)) and not _own_doc(obj)]
    assert not missing, f"{package}: public names without a docstring: {missing}"


@pytest.mark.slow
@pytest.mark.skipif(not (importlib.util.find_spec("mlflow") and importlib.util.find_spec("inspect_ai")),
                    reason="docs/API.md lists the MLflow and Inspect integrations: needs the [mlflow] and "
                           "[inspect] extras (.ci/run installs them)")
def test_api_md_is_what_the_code_exports():
    run = subprocess.run([sys.executable, "scripts/api_reference.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = (ROOT / "docs" / "API.md").read_text(encoding="utf-8")
    for name in rubricforge_dspy.__all__:
        assert f"| `{name}" in text, name
