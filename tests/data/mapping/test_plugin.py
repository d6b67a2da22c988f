"""A format plugin in a throwaway package, installed in a throwaway virtual environment, is found through the
``rubricforge_dspy.formats`` entry point group and reads its file; a broken plugin is a loud error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats.plugins import (
    ENTRY_POINT_GROUP,
    PLUGIN_TIMEOUT_ENV,
    PluginError,
    discover_plugins,
    load_plugin,
)

ROOT = Path(__file__).resolve().parents[3]

PLUGIN_MODULE = '''
"""A tiny format: JSON Lines of {"q": question, "a": answer, "verdict": "pass"|"fail"}."""
import json
from pathlib import Path

from rubricforge_dspy.core.trajectory import Source, Step, Trajectory, TrajectoryFormatError


class QaFormat:
    name = "qa_demo"
    label_rule = None  # labels come from the verdict, not a reward

    def sniff(self, path):
        return Path(path).suffix == ".qa"

    def read(self, path, rule=None):
        for index, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
            try:
                row = json.loads(line)
                yield index, Trajectory(
                    id=f"qa:{index}", task_id=str(row["q"]), domain="qa", agent="demo",
                    steps=(Step("user", row["q"]), Step("final_answer", row["a"])), reward=None,
                    label={"pass": 1, "fail": 0}[row["verdict"]], source=Source(str(path), index))
            except (ValueError, KeyError) as exc:
                yield index, TrajectoryFormatError(str(path), index, f"not a qa record: {exc}")


FORMAT = QaFormat()
'''

PYPROJECT = '''
[build-system]
requires = []
build-backend = "wheel_backend"
backend-path = ["."]

[project]
name = "rf-plugin-qa-demo"
version = "0.0.1"

[project.entry-points."rubricforge_dspy.formats"]
qa_demo = "rf_plugin_qa_demo:FORMAT"
'''

# A PEP 517 backend in the package's own tree (``backend-path``): it builds the wheel from pyproject.toml with
# the standard library alone, so the install works offline with no setuptools/wheel of any version.
BACKEND = '''
import base64, hashlib, tomllib, zipfile
from pathlib import Path


def _record(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    dist = project["name"].replace("-", "_")
    info = f"{dist}-{project['version']}.dist-info"
    entry_points = "".join(f"[{group}]\\n" + "".join(f"{k} = {v}\\n" for k, v in items.items()) + "\\n"
                           for group, items in project.get("entry-points", {}).items())
    files = {
        "rf_plugin_qa_demo.py": Path("rf_plugin_qa_demo.py").read_bytes(),
        f"{info}/METADATA":
            f"Metadata-Version: 2.1\\nName: {project['name']}\\nVersion: {project['version']}\\n".encode(),
        f"{info}/WHEEL":
            b"Wheel-Version: 1.0\\nGenerator: wheel_backend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
        f"{info}/entry_points.txt": entry_points.encode(),
    }
    name = f"{dist}-{project['version']}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        record = "\\n".join([_record(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]) + "\\n"
        wheel.writestr(f"{info}/RECORD", record)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []
'''

CHILD = '''
import json, sys
from rubricforge_dspy.data.formats.plugins import discover_plugins, plugin_entries
formats = discover_plugins()
fmt = [f for f in formats if f.name == "qa_demo"][0]
entry = [p for p in plugin_entries() if p.name == "qa_demo"][0]
path = sys.argv[1]
results = list(fmt.read(path, fmt.label_rule))
from rubricforge_dspy.data.formats import detect_format, formats as registered, load_trajectories
loaded = load_trajectories(path, on_error="skip")  # detected through the registry, read by the plugin
print(json.dumps({
    "names": [f.name for f in formats], "distribution": entry.distribution, "entry_point": entry.value,
    "sniff": fmt.sniff(path),
    "read": [[i, r.id, r.label] if hasattr(r, "label") else [i, "error", r.problem] for i, r in results],
    "registry": {f.name: f.origin for f in registered()}, "detected": detect_format(path),
    "loaded": [[t.id, t.label] for t in loaded], "skipped": loaded.report.n_skipped,
}))
'''


def _venv_on_this_environment(venv: Path) -> Path:
    """A new venv that sees the packages of the environment running this test (not the base interpreter's).

    `--system-site-packages` would expose the *base* Python's site-packages: on a clean machine those lack the
    project's dependencies, and on a machine where they have them the test would pass for the wrong reason.
    Instead, the running environment's site directories are added with `site.addsitedir` (their `.pth` files,
    the editable install's among them, processed too), after the new venv's own.
    """
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    new_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              check=True, capture_output=True, text=True).stdout.strip()
    ours = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    Path(new_site, "_running_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in ours), encoding="utf-8")
    return python


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="the throwaway package's build backend reads pyproject.toml "
                                                      "with tomllib (Python 3.11+)")
def test_a_plugin_installed_in_a_venv_is_listed_and_reads_its_file(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (package / "rf_plugin_qa_demo.py").write_text(PLUGIN_MODULE, encoding="utf-8")
    (package / "wheel_backend.py").write_text(BACKEND, encoding="utf-8")
    venv = tmp_path / "venv"
    python = _venv_on_this_environment(venv)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", str(package)], check=True, capture_output=True, cwd=package)
    data = tmp_path / "answers.qa"
    data.write_text("\n".join(json.dumps(r) for r in [{"q": "2+2?", "a": "4", "verdict": "pass"},
                                                      {"q": "capital of France?", "a": "Lyon", "verdict": "fail"},
                                                      {"q": "broken"}]), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([str(python), "-c", CHILD, str(data)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert "qa_demo" in out["names"] and out["distribution"] == "rf-plugin-qa-demo 0.0.1"
    assert out["entry_point"] == "rf_plugin_qa_demo:FORMAT" and out["sniff"] is True
    assert out["read"][:2] == [[0, "qa:0", 1], [1, "qa:1", 0]]
    assert out["read"][2][:2] == [2, "error"] and "not a qa record" in out["read"][2][2]
    assert out["registry"]["qa_demo"] == "plugin (rf-plugin-qa-demo 0.0.1)" and out["registry"]["jsonl"] == "built-in"
    assert out["detected"] == "qa_demo"
    assert out["loaded"] == [["qa:0", 1], ["qa:1", 0]] and out["skipped"] == 1
    # the environment running this test did not install it: not listed here
    assert "qa_demo" not in [f.name for f in discover_plugins()]


def test_a_broken_plugin_is_an_error_naming_its_entry_point():
    missing = EntryPoint(name="ghost", value="no_such_module_xyz:FORMAT", group=ENTRY_POINT_GROUP)
    with pytest.raises(PluginError, match=r"entry point 'ghost' = 'no_such_module_xyz:FORMAT'.*cannot be loaded"):
        load_plugin(missing)
    incomplete = EntryPoint(name="half", value="json:JSONDecoder", group=ENTRY_POINT_GROUP)
    with pytest.raises(PluginError, match="has no name, sniff, read, label_rule"):
        load_plugin(incomplete)


@pytest.mark.parametrize("exit_call", ["sys:exit", "_thread:exit"])  # SystemExit(0) from the plugin's factory
def test_a_plugin_that_exits_is_a_plugin_error_and_the_process_goes_on(exit_call):
    exiting = EntryPoint(name="quitter", value=exit_call, group=ENTRY_POINT_GROUP)
    with pytest.raises(PluginError, match=r"entry point 'quitter'.*calling the factory failed: SystemExit"):
        load_plugin(exiting)


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_bad_plugin_timeout_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(PLUGIN_TIMEOUT_ENV, value)
    with pytest.raises(InputError, match=rf"{PLUGIN_TIMEOUT_ENV}='{value}': give the seconds"):
        load_plugin(EntryPoint(name="json", value="json:loads", group=ENTRY_POINT_GROUP))
