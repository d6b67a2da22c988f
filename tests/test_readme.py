"""The README's lines run as written, on shipped data, from a copy of the repository's layout in a temporary
directory (so nothing is written into the repository).

Every ``rubricforge ...`` / ``python -m ...`` line of its bash blocks (and its ``mkdir`` / ``awk`` lines, run by the
shell) is extracted (continuation lines joined, comments dropped); each must exit 0, or with its documented code
(``gate``: 0 yes, 4 no). The README says its lines run in order; here each line is its own test, in its own work
directory, made by running first the lines it needs: its *prerequisites*, computed from the README itself (a line
needs the earlier line that first names a path under ``artifacts/readme/`` it names, or a directory above or a file
below it, and, in turn, what that line needs). So a test depends on no other test, runs in any order and on any
pytest-xdist worker (``-n auto``), and a failure names the line (and, when a prerequisite failed, that one too).

The lines that call an LM run against the package's fake OpenAI-compatible server (`FakeOpenAI`, with its fake
Batch API) on 127.0.0.1: only their ``--api-base`` / ``--model`` are rewritten (added where the line gives none, for
the reflection LM of ``induce`` too), the key variable is set, and ``induce`` gets a tiny ``--budget``. The
README's Python block runs in a subprocess with the same server standing in for OpenAI (``OPENAI_BASE_URL``:
the block's own ``dspy.LM("openai/...")`` lines unchanged) and a tiny GEPA budget."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from tests.support.induction_http import is_reflection, reflection_reply

ROOT = Path(__file__).resolve().parents[1]
# subcommands whose README lines make no LM call
NO_LM = {"stats", "floor", "render", "show", "report", "map", "convert", "-m", "-p"}
EXIT_CODES = {"gate": {0, 4}}  # documented answers other than 0 (gate: 4 is "no")
TINY_BUDGET = "40"  # GEPA metric calls of an `induce` line here (the smallest it takes; the README's is a real run's)
WRITES = PurePosixPath("artifacts/readme")  # where the README's lines write (git-ignored): what a line can need


def readme_text() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def readme_commands() -> list[str]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", readme_text(), flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("rubricforge ", "python -m ", "mkdir -p ", "awk ")):
                commands.append(line)
    return commands


COMMANDS = readme_commands()


def written_paths(command: str) -> set[PurePosixPath]:
    """The paths under ``artifacts/readme/`` a line names (a flag's value, ``--flag=value`` too, or a shell
    redirection's target): what it reads from or writes to there."""
    paths = set()
    for word in shlex.split(command):
        for value in (word, word.partition("=")[2]):
            path = PurePosixPath(value.rstrip("/")) if value else None
            if path is not None and (path == WRITES or WRITES in path.parents):
                paths.add(path)
    return paths


def _related(a: PurePosixPath, b: PurePosixPath) -> bool:
    """The same path, or one a directory above the other."""
    return a == b or a in b.parents or b in a.parents


def prerequisites(commands: list[str]) -> list[list[int]]:
    """For each line (by index), the earlier lines it needs, transitively, in README order.

    The line that first names a path under ``artifacts/readme/`` makes it; a later line naming that path, a path
    below it (a file in a directory it made) or above it (a directory holding what it made) needs that line, and
    what that line needs."""
    maker: dict[PurePosixPath, int] = {}
    needs: list[set[int]] = []
    for index, command in enumerate(commands):
        paths = written_paths(command)
        direct = {line for made, line in maker.items() if any(_related(path, made) for path in paths)}
        needs.append(direct.union(*(needs[line] for line in direct)))
        for path in paths:
            maker.setdefault(path, index)
    return [sorted(lines) for lines in needs]


PREREQUISITES = prerequisites(COMMANDS)


def test_the_readme_has_commands_and_no_missing_shipped_path():
    assert len(COMMANDS) >= 15
    for command in COMMANDS:
        for word in shlex.split(command):
            if word.startswith(("evals/", "programs/", "examples/")) or word == "artifacts/demo/":
                assert (ROOT / word).exists(), f"{command}: {word} does not exist"


def test_a_line_needs_the_lines_that_make_what_it_names():
    """The prerequisite rule on a made-up README: a file read needs its maker and the maker's own needs (the
    directory), a line naming nothing made needs nothing, a later writer of a made file does not become its maker."""
    lines = ["mkdir -p artifacts/readme",
             "rubricforge stats --data evals/x.json",
             "awk 'NR > 1' evals/x.jsonl > artifacts/readme/a.jsonl",
             "rubricforge floor --data=artifacts/readme/a.jsonl --save-floor artifacts/readme/f/floor.json",
             "rubricforge convert --data evals/y.jsonl --out artifacts/readme/a.jsonl",
             "rubricforge report --predictions artifacts/readme/f/ --out artifacts/readme/r.md"]
    assert prerequisites(lines) == [[], [], [0], [0, 2], [0, 2], [0, 2, 3]]
    assert written_paths(lines[3]) == {WRITES / "a.jsonl", WRITES / "f" / "floor.json"}


def test_every_readme_line_that_reads_a_written_file_has_prerequisites():
    """The README's lines that name a file another line writes (the cascade's split, its floor and fit, the plain
    judge's verdicts) need that line: the rule finds them in the README as it stands."""
    for index, command in enumerate(COMMANDS):
        assert all(line < index for line in PREREQUISITES[index])
        if written_paths(command) and index > 0:
            assert PREREQUISITES[index], command
    cascade = next(i for i, c in enumerate(COMMANDS) if " --cascade " in c)
    fit = next(i for i, c in enumerate(COMMANDS) if c.startswith("rubricforge cascade fit"))
    assert fit in PREREQUISITES[cascade] and set(PREREQUISITES[fit]) < set(PREREQUISITES[cascade])


def fake_answer(body: dict, n: int):
    """The fake's judge: fails an episode whose evidence shows a tool error, passes the rest; and the reflection
    LM's proposal when GEPA asks for one."""
    if is_reflection(body):
        return reflection_reply(body)
    if "tool_errors=0" not in user_text(body):
        return {"reason": "A tool call returned an error.", "passed": False, "score": 0.1}
    return {"reason": "The tool results show the task was completed.", "passed": True, "score": 0.9}


@pytest.fixture(scope="module")
def fake():
    """One fake server per worker process: it answers each request from the request alone (no state a test sees
    but the fake Batch API's own batches, each under its own id)."""
    with FakeOpenAI(fake_answer) as server:
        yield server


@pytest.fixture
def env(tmp_path, fake):
    home = tmp_path / "home"  # DSPy's and the verdict cache's homes: this test's own, nothing of the user's
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), "XDG_CONFIG_HOME": str(home / "config"),
           "DSPY_CACHEDIR": str(home / "dspy"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": fake.api_base, "OPENAI_API_BASE": fake.api_base}
    for name in [k for k in env if k.startswith("RUBRICFORGE_")]:
        env.pop(name)
    return env


@pytest.fixture
def workdir(tmp_path):
    """This test's own copy of the repository's layout: the shipped folders linked, ``artifacts/`` empty but for
    the committed runs the README reads."""
    root = tmp_path / "readme"
    root.mkdir()
    for name in ("evals", "programs", "examples", "docs"):
        (root / name).symlink_to(ROOT / name)
    (root / "artifacts").mkdir()
    for name in ("demo", "certify-airline-smollm2"):
        (root / "artifacts" / name).symlink_to(ROOT / "artifacts" / name)
    return root


def _set(words: list[str], flag: str, value: str) -> None:
    """``flag value`` in `words`: the value replaced when the line gives the flag, else both added."""
    if flag in words:
        words[words.index(flag) + 1] = value
    else:
        words += [flag, value]


def on_the_fake(words: list[str], fake: FakeOpenAI) -> list[str]:
    """A README line pointed at the fake server: its LM flags rewritten (or added), a tiny induction budget."""
    words = list(words)
    _set(words, "--api-base", fake.api_base)
    _set(words, "--model", "fake-judge@r1")
    if words[1] == "induce":
        _set(words, "--reflection-api-base", fake.api_base)
        _set(words, "--reflection-model", "fake-reflection@r1")
        _set(words, "--budget", TINY_BUDGET)
    if "--batch-api" in words:
        _set(words, "--poll-interval", "0.2")
    return words


def calls_an_lm(words: list[str]) -> bool:
    return words[1] not in NO_LM or "--program" in words


def run_line(command: str, workdir: Path, fake: FakeOpenAI, env: dict[str, str]) -> str | None:
    """Runs one README line in `workdir`: None when it exits as documented, else what went wrong (the line as run,
    its exit code and the end of its stderr)."""
    words = shlex.split(command)
    if words[0] in ("mkdir", "awk"):  # a shell line, run by the shell as written
        run = subprocess.run(["bash", "-c", command], cwd=workdir, capture_output=True, text=True, timeout=60)
        return None if run.returncode == 0 else f"{command}\nexit {run.returncode}\n{run.stderr}"
    if words[0] == "rubricforge" and calls_an_lm(words):
        words = on_the_fake(words, fake)
    argv = ([sys.executable, "-m", "rubricforge_dspy.cli", *words[1:]] if words[0] == "rubricforge"
            else [sys.executable, *words[1:]])
    run = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    if run.returncode not in EXIT_CODES.get(words[1], {0}):
        return f"{shlex.join(words)}\nexit {run.returncode}\n{run.stderr[-3000:]}"
    if "Traceback" in run.stderr:
        return f"{shlex.join(words)}\nexit {run.returncode} with a traceback\n{run.stderr[-3000:]}"
    return None


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[f"{i}:{c[:60]}" for i, c in enumerate(COMMANDS)])
def test_a_readme_line_runs_as_written(index, workdir, fake, env):
    command = COMMANDS[index]
    for line in PREREQUISITES[index]:
        failure = run_line(COMMANDS[line], workdir, fake, env)
        if failure is not None:
            pytest.fail(f"README line {line}, which README line {index} needs ({command}), failed:\n{failure}")
    failure = run_line(command, workdir, fake, env)
    if failure is not None:
        pytest.fail(f"README line {index} failed:\n{failure}")


def readme_python() -> str:
    blocks = re.findall(r"```python\n(.*?)```", readme_text(), flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_readme_python_block_runs(workdir, env):
    code = readme_python()
    assert "budget=200" in code
    code = code.replace("budget=200", f"budget={TINY_BUDGET}")  # the one change: a tiny GEPA budget
    (workdir / "artifacts" / "readme").mkdir(parents=True, exist_ok=True)
    script = workdir / "readme_block.py"
    script.write_text(code + "\nprint('verdicts', len(verdicts), 'predictions', len(predictions))\n",
                      encoding="utf-8")
    run = subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "verdicts 32 predictions 32" in run.stdout, run.stdout[-2000:]
    assert (workdir / "artifacts" / "readme" / "mine.json").is_file()


def readme_test_command() -> str:
    """The test command of the README's first bash block (``./install.sh && python3 -m pytest ...  # ...``)."""
    first = re.search(r"```bash\n(.*?)```", readme_text(), flags=re.S)[1]
    [line] = [line for line in first.splitlines() if "-m pytest" in line]
    return line.split("  #")[0].split("&&", 1)[1].strip()


def test_ci_runs_the_readme_test_command_as_written_in_two_orders(tmp_path):
    """`.ci/run` runs the README's test command word for word, twice, the tests in two orders (pytest-randomly's
    seeds, given outside the command): the first pass records its skips, the second another split's failures."""
    assert readme_test_command().startswith("python3 -m pytest ")
    stand_in = 'python3() { printf "%s|%s|%s\\n" "${PYTEST_ADDOPTS:-}" "$*" "${RUBRICFORGE_RECORD_SKIPS:-}"; }'
    script = f'set -euo pipefail; source "$1"; {stand_in}; readme_tests; readme_tests_reordered'
    # the caller's environment may ask to record skips (CI's own first pass runs this test): the second pass never does
    env = {**os.environ, "CI_SEED": "41", "CI_SKIPS": str(tmp_path / "skips"),
           "RUBRICFORGE_RECORD_SKIPS": str(tmp_path / "outer-skips")}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run(["bash", "-c", script, "ci", str(ROOT / ".ci" / "run")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    first, second = (line.split("|") for line in run.stdout.splitlines())
    command = readme_test_command().removeprefix("python3 ")
    assert first == ["--randomly-seed=41", command, str(tmp_path / "skips")]
    assert second == ["--randomly-seed=42", command, ""]


def test_readme_outputs_are_git_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", "artifacts/readme/x.json"], cwd=ROOT)
    assert ignored.returncode == 0
