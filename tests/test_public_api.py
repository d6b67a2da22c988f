"""The public surface: every name a package's `__all__` lists resolves, `dir()` shows it, no name hides a
submodule, and the lazy packages import DSPy (or numpy) only when a name that needs it is touched."""

import importlib
import inspect
import pkgutil
import subprocess
import sys
import types

import pytest

import rubricforge_dspy

# Every stage subpackage with a curated `__init__` (lm/ is left out: its engine is being split).
STAGES = ["core", "data", "data.formats", "review", "data.formats.mapping", "evidence", "judge", "program", "induction",
          "apply", "trust", "pipeline", "report", "metrics", "serve", "cli", "testing", "rewards", "integrations"]
PACKAGES = ["rubricforge_dspy"] + [f"rubricforge_dspy.{stage}" for stage in STAGES]


def public_names(package):
    module = importlib.import_module(package)
    assert isinstance(module.__all__, list) and all(isinstance(name, str) for name in module.__all__)
    return module, module.__all__


def submodule_names(module):
    return {info.name for info in pkgutil.iter_modules(module.__path__)}


def test_every_package_of_the_library_is_listed():
    found = {info.name for info in pkgutil.walk_packages(rubricforge_dspy.__path__, "rubricforge_dspy.")
             if info.ispkg}
    unlisted = {name for name in found - set(PACKAGES) if name.split(".")[1] != "lm"}
    assert not unlisted, f"a package without a checked __all__: {sorted(unlisted)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_listed_name_resolves_and_dir_lists_it(package):
    module, names = public_names(package)
    assert len(names) == len(set(names)), f"{package}.__all__ repeats a name"
    for name in names:
        value = getattr(module, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module, not a public name"
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("rubricforge_dspy."), f"{package}.{name} comes from {value.__module__}"
    assert set(names) <= set(dir(module))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_name_hides_a_submodule(package):
    module, names = public_names(package)
    # `import rubricforge_dspy.trust.audit as m` looks up the package's attribute `audit` first.
    assert not set(names) & submodule_names(module)


@pytest.mark.parametrize("package", PACKAGES)
def test_an_unknown_name_is_an_attribute_error(package):
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


# The DSPy user's path: load examples, judge, induce, load and save, evaluate, reward (and the records and
# errors those name). Everything else stays in its stage.
TOP_LEVEL = {
    "Trajectory", "Step", "Verdict", "RubricForgeError", "InputError", "ServerError",
    "load_trajectories", "load_examples",
    "TrajectoryJudge", "TrajectoryVerdictSignature", "BaseJudge", "RenderConfig", "judge_verdict", "ajudge_verdict",
    "VerdictFormatError",
    "RubricInducer", "induce", "InductionConfig",
    "load_judge", "freeze", "UncertifiedJudgeWarning",
    "as_metric", "label_agreement", "certify_program",
    "as_reward_function", "as_verl_compute_score",
}


def test_the_top_level_is_the_library_a_dspy_user_needs():
    names = rubricforge_dspy.__all__
    assert set(names) == TOP_LEVEL and len(names) == len(TOP_LEVEL) <= 26
    assert issubclass(rubricforge_dspy.InputError, rubricforge_dspy.RubricForgeError)
    assert issubclass(rubricforge_dspy.ServerError, rubricforge_dspy.RubricForgeError)
    assert issubclass(rubricforge_dspy.VerdictFormatError, rubricforge_dspy.RubricForgeError)
    assert issubclass(rubricforge_dspy.TrajectoryJudge, rubricforge_dspy.BaseJudge)
    assert not {"load", "JudgeTrajectory"} & set(names)  # the old, confusable names are not advertised


def test_the_old_names_still_work_and_say_they_are_deprecated(tmp_path):
    """`load` (mistaken for dspy.load) and `JudgeTrajectory` (the Signature, mistaken for the Module
    TrajectoryJudge) still resolve, warning DeprecationWarning with the new name."""
    from rubricforge_dspy.judge.module import TrajectoryJudge, TrajectoryVerdictSignature
    from rubricforge_dspy.program.store import freeze

    with pytest.warns(DeprecationWarning, match="TrajectoryVerdictSignature"):
        assert rubricforge_dspy.JudgeTrajectory is TrajectoryVerdictSignature
    freeze(TrajectoryJudge(), tmp_path / "p.json")
    with pytest.warns(DeprecationWarning, match="load_judge"):
        judge = rubricforge_dspy.load(tmp_path / "p.json", check_certificate=False)
    assert isinstance(judge, TrajectoryJudge)


MOVED = sorted(rubricforge_dspy._MOVED_TO.items())


@pytest.mark.parametrize(("name", "package"), MOVED, ids=[name for name, _ in MOVED])
def test_a_name_moved_off_the_top_level_still_resolves_and_names_its_new_import(name, package):
    """User code written against the old, wide top level keeps working for a release: the same object,
    with a DeprecationWarning that says where to import it from."""
    with pytest.warns(DeprecationWarning, match=f"from {package} import {name}"):
        value = getattr(rubricforge_dspy, name)
    assert value is getattr(importlib.import_module(package), name)
    assert name not in rubricforge_dspy.__all__ and name not in dir(rubricforge_dspy)


def test_a_moved_name_imported_with_from_warns_too():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    from rubricforge_dspy import EMBEDDED\nexcept DeprecationWarning as w:\n    print(w)")
    assert "from rubricforge_dspy.core import EMBEDDED" in run_python(code)


def test_the_same_object_under_every_name():
    """A re-export is the object itself, not a copy: the top level and the stage agree."""
    from rubricforge_dspy import core, data, judge, program
    assert rubricforge_dspy.Trajectory is core.Trajectory is data.formats.Trajectory
    assert rubricforge_dspy.load_judge is judge.load_judge
    assert rubricforge_dspy.freeze is program.freeze
    assert rubricforge_dspy.load_trajectories is data.load_trajectories


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_top_level_imports_dspy_only_when_a_dspy_name_is_touched():
    code = ("import sys, rubricforge_dspy as rf\n"
            "before = 'dspy' in sys.modules\n"
            "rf.Trajectory, rf.Step, rf.Verdict, rf.load_trajectories, rf.RenderConfig\n"
            "rf.RubricForgeError, rf.InputError, rf.ServerError, rf.freeze\n"
            "light = 'dspy' in sys.modules\n"
            "rf.TrajectoryJudge\n"
            "print(before, light, 'dspy' in sys.modules)")
    assert run_python(code) == "False False True"


@pytest.mark.parametrize(("package", "light_names"), [
    ("core", ["Trajectory", "Verdict", "SEED_RUBRIC", "EMBEDDED"]),
    ("metrics", ["accuracy"]),
    ("report", ["write_report", "load_run"]),
    ("data", ["load_trajectories", "join_labels", "LabelTally", "convert_trajectories"]),
    ("evidence", ["render_trajectory", "RenderConfig", "estimate_tokens", "extract_symptoms"]),
    ("program", ["read_program", "freeze"]),
    ("judge", ["VerdictCache", "judge_fingerprint"]),
    ("trust", ["compute_certificate", "format_certificate", "gate_verdict_files"]),
    ("pipeline", []),
    ("apply", []),
    ("induction", []),
    ("cli", []),
])
def test_a_stage_and_its_light_names_do_not_import_dspy(package, light_names):
    touched = "".join(f"m.{name}; " for name in light_names)
    code = f"import sys, rubricforge_dspy.{package} as m; {touched}print('dspy' in sys.modules)"
    assert run_python(code) == "False"


def test_loading_and_rendering_do_not_import_numpy():
    code = ("import sys, rubricforge_dspy.data as d, rubricforge_dspy.evidence as e\n"
            "d.load_trajectories, d.join_labels, e.render_trajectory, e.RenderConfig\n"
            "print('numpy' in sys.modules)")
    assert run_python(code) == "False"
