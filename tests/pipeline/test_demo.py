"""`rubricforge demo` writes only where it is told: offline, with scripted LMs, from inside a git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.pipeline.demo import default_out_dir


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.mark.slow
def test_demo_writes_only_into_out_and_leaves_the_repository_clean(tmp_path, monkeypatch, capsys, scripted_cli):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README.md").write_text("a project\n")
    git(repo, "add", "README.md")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.chdir(repo)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    out = tmp_path / "demo-out"

    assert main(["demo", "--out", str(out), "--tasks", "20", "--budget", "40", "--preset", "embedded"]) == 0
    printed = capsys.readouterr().out
    assert git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored") == ""
    assert f"demo output: {out}" in printed and f"report: {out / 'report.md'}" in printed
    assert (out / "report.md").is_file() and (out / "induced.json").is_file() and (out / "run.json").is_file()
    assert not (tmp_path / "xdg" / "rubricforge").exists()  # --out given: the default directory is untouched


def test_default_demo_directory_is_the_user_cache_outside_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path.parent / "xdg-cache"))
    assert default_out_dir() == tmp_path.parent / "xdg-cache" / "rubricforge" / "demo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    default = default_out_dir()
    assert default == Path.home() / ".cache" / "rubricforge" / "demo"
    assert not default.resolve().is_relative_to(Path.cwd().resolve())
    assert not default.resolve().is_relative_to(Path(__file__).resolve().parents[2])  # not in this source tree


def test_demo_help_names_the_default_directory(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "~/.cache/rubricforge/demo" in capsys.readouterr().out


@pytest.mark.slow
def test_the_demo_at_its_own_sizes_says_once_what_they_are_for_instead_of_warning(tmp_path, capsys, caplog,
                                                                                   scripted_cli):
    """The demo chose its sizes (10 tasks, budget 6), then warned about them four to six times (one-class
    validation split, "selection is mostly noise", "no calibration", "no hybrid row"), as if the newcomer
    who ran it had done something wrong. It now says once, plainly, what the sizes are for; every skipped
    step is still recorded (the manifest's notes, the report)."""
    import json
    import logging
    import warnings

    from rubricforge_dspy.core.errors import RubricForgeWarning
    from rubricforge_dspy.program.store import read_program

    no_calibration = "no calibration: the validation verdicts hold one class only"

    out = tmp_path / "demo"
    caplog.set_level(logging.INFO, logger="rubricforge_dspy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["demo", "--out", str(out), "--preset", "embedded"]) == 0  # the demo's own sizes
    err = capsys.readouterr().err
    ours = [r for r in caplog.records if r.name.startswith("rubricforge_dspy")]
    assert [r.getMessage() for r in ours if r.levelno >= logging.WARNING] == []
    assert [str(w.message) for w in caught if issubclass(w.category, RubricForgeWarning)] == []
    explained = [line for line in err.splitlines() if line.startswith("demo sizes:")]
    assert len(explained) == 1
    assert explained[0].startswith("demo sizes: 10 tasks (5 train, 1 validation, 4 test), GEPA budget 6: a quick "
                                   "run of the whole pipeline, not a measurement.")
    assert "1 validation item(s) is mostly noise" in explained[0] and "no calibration and no hybrid" in explained[0]
    # nothing is hidden: the steps the sizes skipped are logged (at INFO) and recorded where they always were
    demoted = [r.getMessage() for r in ours if r.levelno == logging.INFO]
    assert any("selection is mostly noise" in m for m in demoted) and no_calibration in demoted
    assert no_calibration in read_program(out / "induced.json")["rubricforge"]["induction"]["notes"]
    run = json.loads((out / "run.json").read_text())
    assert any(note.startswith("no hybrid row") for note in run["floor_notes"])
    assert run["notes"].startswith(explained[0])
    assert explained[0] in (out / "report.md").read_text()


def test_sizes_that_leave_nothing_out_need_no_explanation():
    from rubricforge_dspy.induction import InductionConfig
    from rubricforge_dspy.pipeline.demo import sizes_note
    from rubricforge_dspy.pipeline.protocol import ProtocolConfig
    from tests.support.helpers import make_dataset

    assert sizes_note(make_dataset(80), ProtocolConfig(induction=InductionConfig(budget=200))) == ""
    assert sizes_note(make_dataset(20), ProtocolConfig(induction=InductionConfig(budget=40))).startswith("demo sizes: 20 tasks")


def test_size_warnings_still_warn_for_a_caller_that_has_not_explained_its_sizes(caplog):
    import logging

    from rubricforge_dspy.core.sizes import sizes_explained
    from rubricforge_dspy.data.split import split_by_task
    from rubricforge_dspy.induction.search import InductionConfig, check_induction_data
    from tests.support.helpers import make_dataset

    split = split_by_task(make_dataset(24), seed=0)  # 6 validation items
    caplog.set_level(logging.INFO, logger="rubricforge_dspy")
    check_induction_data(split.train, split.val, InductionConfig(budget=60))
    with sizes_explained("demo sizes: small on purpose"):
        check_induction_data(split.train, split.val, InductionConfig(budget=60))
    noise = [r.levelno for r in caplog.records if "selection is mostly noise" in r.getMessage()]
    assert noise == [logging.WARNING, logging.INFO]
