"""The base install (``./install.sh``, no extras) imports every module of the package: Ray, MLflow and Inspect
are optional extras, imported only when a feature that needs one is used, which then says how to install it
(`MissingExtraError`, exit 2 on the command line).

The two integration modules are the exception, as their package documents (`rubricforge_dspy.integrations`):
each *is* its platform's integration and imports it when it is imported itself, so without the extra its
import fails with an `ImportError` that names the install. Nothing of the base install imports them.

Each check runs in a fresh interpreter in which the extras cannot be imported (``sys.modules[name] = None``:
``import`` raises `ModuleNotFoundError` and `importlib.util.find_spec` returns None, as when the package is
absent), so it holds whether or not the extras are installed here. `.ci/run` also runs the whole suite in a
virtual environment made by ``./install.sh`` alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.extras import EXTRAS, IMPORTS_ITS_EXTRA

ROOT = Path(__file__).resolve().parents[1]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


WITHOUT_EXTRAS = f"""
import sys
for name in {EXTRAS!r}:
    sys.modules[name] = None  # as if not installed
"""


def _run_without_extras(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS + code, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_every_module_imports_without_the_extras():
    run = _run_without_extras("""
import json
from tests.support.extras import EXTRAS, import_every_module, refused_for_a_missing_extra
modules, failed = import_every_module()
print(json.dumps({"imported": sorted(modules), "failed": failed,
                  "refused": sorted(n for n, e in failed.items() if refused_for_a_missing_extra(n, e)),
                  "extras_loaded": [n for n in EXTRAS if sys.modules.get(n) is not None]}))
""")
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.splitlines()[-1])
    assert found["extras_loaded"] == []
    # The only modules that do not import are the two integrations, each naming its install.
    assert sorted(found["failed"]) == found["refused"] == sorted(IMPORTS_ITS_EXTRA), found["failed"]
    assert len(found["imported"]) >= 100  # the walk found the package
    assert {"rubricforge_dspy.apply.ray", "rubricforge_dspy.cli.main", "rubricforge_dspy.cli.ray_options",
            "rubricforge_dspy.cli.integrations", "rubricforge_dspy.integrations"} <= set(found["imported"])


@pytest.mark.slow
def test_judging_on_ray_without_ray_is_a_clear_error_and_exit_2(tmp_path):
    """`apply.ray` imports without Ray; its functions raise `MissingExtraError` (an `InputError`, so
    exit 2 with one line naming the install), before anything is written."""
    out = tmp_path / "verdicts.jsonl"
    run = _run_without_extras("""
import json
from rubricforge_dspy.apply.ray import judge_dataset, sglang_processor, trajectory_dataset
from rubricforge_dspy.cli import main as cli_main
from rubricforge_dspy.testing.scripted import ScriptedLM

out, data = sys.argv[1], sys.argv[2]
raised = {}
for name, use in (("judge_dataset", lambda: judge_dataset(None, None, out=out)),
                  ("trajectory_dataset", lambda: trajectory_dataset([])),
                  ("sglang_processor", lambda: sglang_processor(None, None))):
    try:
        use()
        raised[name] = None
    except Exception as error:
        raised[name] = {"types": [c.__name__ for c in type(error).__mro__], "message": str(error)}
# The error judge_dataset raises, reaching the command line.
cli_main.cmd_stats = lambda args: judge_dataset(None, None, out=out)
print(json.dumps({"raised": raised, "exit": cli_main.main(["stats", "--data", data])}))
""", str(out), str(AIRLINE))
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.splitlines()[-1])
    for name, error in found["raised"].items():
        assert error is not None, name
        assert {"MissingExtraError", "InputError", "RubricForgeError", "ImportError"} <= set(error["types"]), name
        assert "pip install 'rubricforge-dspy[ray]'" in error["message"], error
    assert found["exit"] == 2
    assert run.stderr.strip().splitlines() == [f"error: {found['raised']['judge_dataset']['message']}"]
    assert "Traceback" not in run.stderr and not out.exists()


@pytest.mark.slow
def test_the_ray_flag_without_ray_exits_2_naming_the_install(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    run = _run_without_extras("""
from rubricforge_dspy.cli.main import main
sys.exit(main(sys.argv[1:]))
""", "judge", "--data", str(AIRLINE), "--limit", "2", "--out", str(out), "--model", "m@r",
                              "--api-base", "http://127.0.0.1:9/v1", "--ray")
    assert run.returncode == 2, run.stderr
    assert "rubricforge-dspy[ray]" in run.stderr.strip().splitlines()[-1]
    assert "Traceback" not in run.stderr and not out.exists()
