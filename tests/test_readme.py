"""The README's command lines run as written, on shipped data, from a copy of the repository's layout in a
temporary directory (so nothing is written into the repository): every ``rubricforge ...`` / ``python -m ...``
line of its bash blocks is extracted (continuation lines joined, comments dropped). The lines that call no LM run
here for real and must exit 0 (a plain `judge` line against a fake OpenAI-compatible server on 127.0.0.1); the
others are skipped, each saying why (they need an LM: not yet run against the
fake server)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# subcommands whose README lines make no LM call
NO_LM = {"stats", "floor", "render", "show", "report", "map", "convert", "-m", "-p"}


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("rubricforge ", "python -m ", "mkdir -p ")):
                commands.append(line)
    return commands


COMMANDS = readme_commands()


def test_the_readme_has_commands_and_no_missing_shipped_path():
    assert len(COMMANDS) >= 15
    for command in COMMANDS:
        for word in shlex.split(command):
            if word.startswith(("evals/", "programs/", "examples/")) or word == "artifacts/demo/":
                assert (ROOT / word).exists(), f"{command}: {word} does not exist"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    for name in ("evals", "programs", "examples", "docs"):
        (root / name).symlink_to(ROOT / name)
    (root / "artifacts").mkdir()
    for name in ("demo", "certify-airline-smollm2"):
        (root / "artifacts" / name).symlink_to(ROOT / "artifacts" / name)
    return root


@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_line_runs_as_written(command, workdir):
    words = shlex.split(command)
    if words[0] == "mkdir":
        (workdir / words[2]).mkdir(parents=True, exist_ok=True)
        return
    sub = words[1]
    fake = None
    if sub == "judge" and not {"--cascade", "--batch-api"} & set(words):
        from rubricforge_dspy.testing.fake_server import FakeOpenAI

        fake = FakeOpenAI().__enter__()  # a judge line: verdicts from a fake OpenAI-compatible server
        words += ["--api-base", fake.api_base, "--model", "fake-judge"]
    elif sub not in NO_LM or "--program" in words:
        pytest.skip(f"calls an LM: not run here ({command[:60]}...)")
    argv = ([sys.executable, "-m", "rubricforge_dspy.cli", *words[1:]] if words[0] == "rubricforge"
            else [sys.executable, *words[1:]])
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("RUBRICFORGE_API_BASE", None)
    try:
        run = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    finally:
        if fake is not None:
            fake.__exit__(None, None, None)
    assert run.returncode == 0, f"{command}\n{run.stderr[-2000:]}"
    assert "Traceback" not in run.stderr


def test_readme_outputs_are_git_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", "artifacts/readme/x.json"], cwd=ROOT)
    assert ignored.returncode == 0
