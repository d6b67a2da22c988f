"""Issue 26, items 2, 3 and 6: exit codes (2 for input and environment, 3 for the judge, 4 for "no",
1 for bugs only), one writer per file (not per path), and paths that are not regular files. Each test
states what the user sees."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import NotARegularFileError, regular_file
from rubricforge_dspy.testing.fake_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"
PROGRAM = ROOT / "programs" / "airline-smollm2-135m.json"
OK = {"reason": "ok", "passed": True, "score": 0.9}
DEEP = 200_000


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def run(args, timeout=300, limit_memory=False):
    """`rubricforge ARGS` in a child process (a hang or an out-of-memory kill cannot take the tests down)."""
    def cap():  # 3 GiB of address space: an unbounded parser fails with MemoryError instead of the machine
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run([sys.executable, "-m", "rubricforge_dspy.cli.main", *args], env=env(), text=True,
                          capture_output=True, timeout=timeout, cwd=ROOT, preexec_fn=cap if limit_memory else None)


def popen(args):
    return subprocess.Popen([sys.executable, "-m", "rubricforge_dspy.cli.main", *args], env=env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)


def record(i, reward=1.0, **extra):
    return {"id": f"t{i}", "task_id": f"task{i}", "reward": reward,
            "messages": [{"role": "user", "content": f"book flight {i}"},
                         {"role": "assistant", "content": f"booked {i}"}], **extra}


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def one_clean_line(stderr: str) -> str:
    """The error line of a run that must fail with one clear line and no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


# -- item 2: exit codes ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("layout", ["jsonl", "json document"])
def test_a_record_nested_200000_levels_deep_exits_2_naming_it_before_any_lm_call(tmp_path, layout):
    """User sees: `judge` on a record nested 200,000 levels deep (a JSONL line, or an element of a JSON
    array document, which the streaming reader handed to ijson, whose memory grows with the square of
    the depth) exits 2 with one line naming the file, and no LM call. Before: a RecursionError traceback
    and exit 1 (JSONL), or the process killed for memory (the document)."""
    if layout == "jsonl":
        deep = json.dumps(record(1))[:-1] + f', "x": {nested(DEEP)}}}'
        data = write_jsonl(tmp_path / "deep.jsonl", [record(0), deep])
    else:
        data = tmp_path / "deep.json"
        data.write_text("[" + json.dumps(record(0)) + ", " + json.dumps(record(1))[:-1] + f', "x": {nested(DEEP)}}}]')
    with FakeOpenAI(lambda body, n: OK) as fake:
        done = run(["judge", "--data", str(data), "--out", str(tmp_path / "v.jsonl"), "--api-base", fake.api_base,
                    "--model", "m@r", "--format", "jsonl"], limit_memory=True)
        assert fake.n_requests == 0
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_clean_line(done.stderr)
    assert str(data) in line and "nested too deeply" in line


def test_the_streaming_depth_guard_agrees_with_the_real_depth_wherever_the_bytes_are_cut(monkeypatch):
    """The guard in front of ijson (`_json_stream.NestingDepth`) follows strings and escapes split between reads: on
    random JSON (brackets, quotes and backslashes inside strings) cut at random points, it stops exactly
    when arrays and objects nest deeper than the limit."""
    import random

    from rubricforge_dspy.data.formats import _json_stream

    rng = random.Random(7)
    texts = ['a"b', "\\", 'x\\"[', "]]]", "{{", '\\\\"', '"\n[', "", 'é\n\t/"', '\u00bf\\"', "/\\/]"]

    def value(depth):
        roll = rng.random()
        if depth > 10 or roll < 0.3:
            return rng.choice([*texts, 1, None])
        if roll < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["k", '"[', "\\"]) + str(i): value(depth + 1) for i in range(rng.randint(0, 3))}

    def depth_of(v):
        kids = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if kids is None else 1 + max(map(depth_of, kids), default=0)

    for _ in range(2000):
        v = value(0)
        data = json.dumps(v, ensure_ascii=rng.random() < 0.5).encode()
        limit = rng.randint(0, 8)
        monkeypatch.setattr(_json_stream, "MAX_STREAM_DEPTH", limit)
        guard, within, at = _json_stream.NestingDepth(), True, 0
        while at < len(data) and within:
            step = rng.randint(1, 9)
            within = guard.feed(data[at:at + step])
            at += step
        assert within == (depth_of(v) <= limit), (data, limit)


def test_a_record_nested_600_levels_deep_still_loads_read_whole(tmp_path):
    """A JSON document nested deeper than the streaming guard allows, but within what `json` reads, is
    read whole instead of streamed: the same record, nothing refused."""
    from rubricforge_dspy.data.formats import load_trajectories

    data = tmp_path / "mid.json"
    data.write_text("[" + json.dumps(record(0))[:-1] + ', "metadata": {"x": ' + nested(600) + "}}]")
    loaded = load_trajectories(data)
    assert [t.id for t in loaded] == ["t0"] and not loaded.report.skipped


def test_every_reader_refuses_a_deeply_nested_file_with_exit_2(tmp_path, capsys):
    """User sees: a labels file or a verdict file nested 200,000 levels deep is bad input (exit 2, the file
    named), like a trajectory file: never a RecursionError traceback and exit 1."""
    data = write_jsonl(tmp_path / "d.jsonl", [record(0), record(1, reward=0.0)])
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "t0", "label": 1, "x": ' + nested(DEEP) + "}\n")
    assert main(["stats", "--data", str(data), "--labels", str(labels)]) == 2
    err = capsys.readouterr().err
    assert str(labels) in err and "nested too deeply" in err and "Traceback" not in err
    verdicts = tmp_path / "deep_verdicts.jsonl"
    verdicts.write_text('{"id": "t0", "x": ' + nested(DEEP) + "}\n")
    assert main(["gate", "--candidate-verdicts", str(verdicts), "--baseline-verdicts", str(verdicts)]) == 2
    err = capsys.readouterr().err
    assert f"{verdicts}:1" in err and "Traceback" not in err


@contextlib.contextmanager
def read_only(path: Path):
    """`path` made unwritable for this process: chmod for a user, the immutable attribute for root (which
    ignores file modes); skips when neither is available."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("running as root on a file system without the immutable attribute: nothing is read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_existing_out_exits_2_before_any_lm_call(tmp_path):
    """User sees: `judge --out V` where V exists and cannot be written exits 2 with one line naming V and
    what to do, before any LM call, and V is unchanged. Before: the LM calls were made, then a
    PermissionError traceback and exit 1."""
    out = write_jsonl(tmp_path / "v.jsonl", [])
    with read_only(out), FakeOpenAI(lambda body, n: OK) as fake:
        done = run(["judge", "--data", str(AIRLINE), "--limit", "3", "--out", str(out), "--api-base", fake.api_base,
                    "--model", "m@r", "--no-cache"])
        assert fake.n_requests == 0
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_clean_line(done.stderr)
    assert str(out) in line and "cannot write the output" in line
    assert out.read_text() == ""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["judge", "convert", "induce"])
def test_an_out_whose_parent_is_a_regular_file_exits_2(tmp_path, command):
    """User sees: an --out under a regular file (`notes.txt/v.jsonl`) exits 2 with one line naming the path,
    no LM call (`induce` says so before its search, not after it). Before: a FileExistsError /
    NotADirectoryError traceback and exit 1 (for `induce`, once the whole search was paid for)."""
    parent = tmp_path / "notes.txt"
    parent.write_text("not a directory\n")
    out = parent / ("p.json" if command == "induce" else "v.jsonl")
    with FakeOpenAI(lambda body, n: OK) as fake:
        lm = ["--api-base", fake.api_base, "--model", "m@r"]
        extra = {"judge": ["--limit", "2", "--no-cache", *lm], "convert": ["--format", "tau_bench"],
                 "induce": ["--budget", "40", "--log-dir", str(tmp_path / "log"), *lm]}[command]
        done = run([command, "--data", str(AIRLINE), "--out", str(out), *extra])
        assert fake.n_requests == 0
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_clean_line(done.stderr)
    assert str(parent) in line
    assert parent.read_text() == "not a directory\n"


@contextlib.contextmanager
def tiny_disk(tmp_path: Path):
    """A 256 KiB tmpfs at `tmp_path/disk` (root can mount one; skips otherwise)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root: a full disk cannot be made without one")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte with one file; returns it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 4096, 1):
            try:
                while True:
                    os.write(fd, b"x" * size)
            except OSError as error:
                assert error.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_a_full_disk_exits_2_naming_the_file_and_a_rerun_after_freeing_space_resumes(tmp_path):
    """User sees: the disk holding --out fills up while `judge` runs: exit 2 with one line naming the file
    and saying to free space and re-run; every verdict written before is kept, and the same command after
    freeing space judges only the rest (one line per id). A disk already full: exit 2, no LM call.
    Before: an OSError traceback and exit 1."""
    data = write_jsonl(tmp_path / "d.jsonl", [record(i, reward=float(i % 2)) for i in range(120)])
    with tiny_disk(tmp_path) as disk:
        out = disk / "v.jsonl"
        filled = threading.Event()

        def respond(body, n):
            if n == 40:  # the 41st call: the disk fills while the run writes its verdicts
                fill(disk)
                filled.set()
            return OK

        argv = ["judge", "--data", str(data), "--out", str(out), "--model", "m@r", "--concurrency", "1",
                "--no-cache"]
        with FakeOpenAI(respond) as fake:
            done = run([*argv, "--api-base", fake.api_base])
            assert filled.is_set()
            assert done.returncode == 2, done.stderr[-3000:]
            line = one_clean_line(done.stderr)
            assert str(out) in line and "No space left on device" in line and "free space" in line
            kept = [json.loads(raw)["id"] for raw in out.read_bytes().split(b"\n")[:-1]]  # a cut last line aside
            assert 40 <= len(kept) < 120 and len(set(kept)) == len(kept)  # (a page's slack takes a few more)
            (disk / "filler").unlink()
            before = fake.n_requests
            again = run([*argv, "--api-base", fake.api_base])  # the same command, the same endpoint
            asked = fake.n_requests - before
        assert again.returncode == 0, again.stderr[-3000:]
        ids = [json.loads(raw)["id"] for raw in out.read_text().splitlines()]
        assert sorted(ids) == sorted(f"t{i}" for i in range(120)) and asked == 120 - len(kept)

        for leftover in disk.iterdir():
            if leftover.is_file():
                leftover.unlink()
        fill(disk)
        with FakeOpenAI(lambda body, n: OK) as fake:
            full = run([*argv, "--api-base", fake.api_base])
            assert fake.n_requests == 0
        assert full.returncode == 2, full.stderr[-3000:]
        assert "No space left on device" in one_clean_line(full.stderr)


@pytest.mark.slow
def test_induce_against_a_dead_endpoint_prints_one_line_and_exits_3(tmp_path):
    """User sees: `induce` against a closed port exits 3 with one error line, the last one, naming the
    endpoint: not ~41 KB of DSPy's per-call tracebacks (each with a whole rendered trajectory). With -v
    they are shown."""
    from rubricforge_dspy.serve.process import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"

    def argv(name):
        return ["induce", "--data", str(AIRLINE), "--out", str(tmp_path / f"{name}.json"), "--api-base", url,
                "--model", "m@r", "--budget", "40", "--log-dir", str(tmp_path / name)]

    done = run(argv("p"))
    assert done.returncode == 3, done.stderr[-3000:]
    line = one_clean_line(done.stderr)
    assert line.startswith("error: JudgeUnavailableError") and url in line
    assert done.stderr.rstrip().splitlines()[-1] == line
    assert len(done.stderr) < 4000, done.stderr[-3000:]
    assert not (tmp_path / "p.json").exists()
    verbose = run(["-v", *argv("verbose")])
    assert verbose.returncode == 3 and "Traceback" in verbose.stderr


def test_the_gate_says_no_with_exit_4_never_the_bug_code(tmp_path, capsys):
    """User sees: `gate` refusing a candidate exits 4 (documented in its help), so a CI step can tell the
    gate's "no" from a crash (exit 1, a bug). Before: exit 1 for both."""
    from tests.support.verdicts import paper_pairing, write_verdicts

    labels, induced, geval = paper_pairing()
    good = write_verdicts(tmp_path / "induced.jsonl", labels, induced)
    worse = write_verdicts(tmp_path / "geval.jsonl", labels, geval)
    assert main(["gate", "--candidate-verdicts", worse, "--baseline-verdicts", good]) == 4
    assert "**FAIL" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    assert "exit 0 yes, 4 no" in " ".join(capsys.readouterr().out.split())


# -- item 3: one writer per file, not per path ---------------------------------------------------------

def _wait_for(condition, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("link", ["the file", "its directory"])
def test_two_judges_through_a_symlink_and_its_target_the_second_exits_2_at_once(tmp_path, link):
    """User sees: one `judge` writes real/v.jsonl; a second started on a symlink to that file, or on the
    same file through a symlinked directory, exits 2 at once (a symlinked --out is refused; the lock is
    the real file's), and the file ends with one line per id. Before: through the file's symlink both ran
    (176 lines for 100 ids); the directory case guards the lock's real path."""
    real = tmp_path / "real"
    real.mkdir()
    out = real / "v.jsonl"
    if link == "the file":
        other = tmp_path / "link.jsonl"
        other.symlink_to(out)
    else:
        (tmp_path / "linked").symlink_to(real, target_is_directory=True)
        other = tmp_path / "linked" / "v.jsonl"
    n = 12
    base = ["judge", "--data", str(AIRLINE), "--limit", str(n), "--concurrency", "1", "--no-cache", "--model", "m@r"]
    release = threading.Event()

    def held(body, k):  # the first run's second request waits until the second run has ended
        if k >= 1:
            release.wait(120)
        return OK

    with FakeOpenAI(held) as fake:
        first = popen([*base, "--out", str(out), "--api-base", fake.api_base])
        assert _wait_for(lambda: fake.n_requests >= 1), first.communicate(timeout=60)
        try:
            second = popen([*base, "--out", str(other), "--api-base", fake.api_base])
            _, err2 = second.communicate(timeout=120)
            still_running = first.poll() is None
        finally:
            release.set()
        _, err1 = first.communicate(timeout=120)
    assert second.returncode == 2 and still_running, err2
    line = one_clean_line(err2)
    assert ("symlink" in line) if link == "the file" else (f"pid {first.pid}" in line)
    assert first.returncode == 0, err1
    ids = [json.loads(raw)["id"] for raw in out.read_text().splitlines()]
    assert len(ids) == n and len(set(ids)) == n


@pytest.mark.slow
def test_an_out_that_is_a_fifo_or_a_directory_is_refused_at_once(tmp_path):
    """User sees: an --out that is a FIFO (or a directory) exits 2 at once naming it, no LM call. Before:
    the run blocked forever opening the FIFO."""
    fifo = tmp_path / "v.jsonl"
    os.mkfifo(fifo)
    with FakeOpenAI(lambda body, n: OK) as fake:
        for out in (fifo, tmp_path):
            done = run(["judge", "--data", str(AIRLINE), "--limit", "2", "--out", str(out), "--api-base",
                        fake.api_base, "--model", "m@r", "--no-cache"], timeout=120)
            assert done.returncode == 2, done.stderr[-3000:]
            assert str(out) in one_clean_line(done.stderr) and "not a regular file" in done.stderr
        assert fake.n_requests == 0


# -- item 6: files that are not files ---------------------------------------------------------------

@contextlib.contextmanager
def unblocked(fifo: Path):
    """While the block runs, a watchdog opens `fifo` for writing whenever a reader waits on it (and closes
    it at once), so a reader that opened it sees an empty file instead of hanging the tests."""
    stop = threading.Event()

    def watch():
        while not stop.wait(0.2):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO while nobody reads
            except OSError:
                pass

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _readers(tmp_path):
    """Every reader of a user's path, each called on a FIFO (named as that reader expects)."""
    from rubricforge_dspy.core.verdict import read_verdicts
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.data.labels import read_label_file
    from rubricforge_dspy.judge.floor import FloorJudge
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.program.store import read_program

    return {
        "program (load_judge)": ("program.json", load_judge),
        "program (read_program)": ("other.json", read_program),
        "floor file": ("floor.json", lambda p: FloorJudge.__new__(FloorJudge).load(p)),
        "labels file": ("labels.csv", read_label_file),
        "verdict file": ("verdicts.jsonl", read_verdicts),
        "data file": ("data.jsonl", load_trajectories),
        "data file, format given": ("given.jsonl", lambda p: load_trajectories(p, format="jsonl")),
    }


@pytest.mark.parametrize("reader", list(_readers(Path("."))))
def test_every_reader_refuses_a_fifo_without_opening_it(tmp_path, reader):
    """User sees: a FIFO given as a program, floor, labels, verdict or data file is refused at once with
    `NotARegularFileError` (a data file: the loader's record error, with the same words; exit 2) naming it.
    Before: `load_judge` and `show` blocked forever (here the watchdog unblocks them, and they fail
    otherwise or not at all)."""
    name, read = _readers(tmp_path)[reader]
    fifo = tmp_path / name
    os.mkfifo(fifo)
    with unblocked(fifo), pytest.raises(InputError, match="FIFO") as refusal:  # data: a record error naming it
        read(fifo)
    assert str(fifo) in str(refusal.value)


def test_a_fifo_in_a_data_directory_is_refused_not_skipped(tmp_path):
    """User sees: a data directory holding a FIFO named like a data file is refused naming it (counted as
    a skipped record with --skip-bad), never silently dropped nor opened."""
    from rubricforge_dspy.core.trajectory import TrajectoryFormatError
    from rubricforge_dspy.data.formats import LoadReport, load_trajectories

    write_jsonl(tmp_path / "a.jsonl", [record(0)])
    os.mkfifo(tmp_path / "b.jsonl")
    with unblocked(tmp_path / "b.jsonl"):
        with pytest.raises(TrajectoryFormatError, match="FIFO"):
            load_trajectories(tmp_path)
        loaded = load_trajectories(tmp_path, on_error="skip")
    assert [t.id for t in loaded] == ["t0"]
    assert loaded.report.skipped == [(str(tmp_path / "b.jsonl"), None, loaded.report.skipped[0][2])]
    assert "FIFO" in loaded.report.skipped[0][2]
    assert isinstance(loaded.report, LoadReport)


@pytest.mark.parametrize("command", ["show", "judge --program"])
def test_a_fifo_program_is_refused_by_the_cli_within_seconds(tmp_path, command):
    """User sees: `rubricforge show FIFO.json` and `judge --program FIFO.json` exit 2 with one line naming
    the file, at once. Before: they hung forever (here a timeout fails the test)."""
    fifo = tmp_path / "program.json"
    os.mkfifo(fifo)
    argv = ["show", str(fifo)] if command == "show" else \
        ["judge", "--data", str(AIRLINE), "--limit", "1", "--out", str(tmp_path / "v.jsonl"), "--program", str(fifo),
         "--api-base", "http://127.0.0.1:9/v1", "--model", "m@r"]
    done = run(argv, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_clean_line(done.stderr)
    assert str(fifo) in line and "FIFO" in line


def test_a_device_is_refused_like_a_fifo(tmp_path):
    """User sees: /dev/null given as a labels file, or behind a program's name, is refused naming what it
    is (before: read as an empty file); /dev/zero, which never ends, is refused by the same check."""
    from rubricforge_dspy.data.labels import read_label_file
    from rubricforge_dspy.judge.loading import load_judge

    with pytest.raises(NotARegularFileError, match="character device"):
        read_label_file("/dev/null")
    (tmp_path / "null.json").symlink_to("/dev/null")
    with pytest.raises(NotARegularFileError, match="character device"):
        load_judge(tmp_path / "null.json")
    with pytest.raises(NotARegularFileError, match="character device"):
        regular_file("/dev/zero", "data file", directory=True)


def test_a_symlink_to_a_program_is_followed_as_docs_security_says(tmp_path):
    """User sees: a symlink to a program loads the program it points to (docs/SECURITY.md, section 6: what
    is verified is the content, wherever the link points); a symlink to a FIFO is refused like the FIFO."""
    from rubricforge_dspy.judge.loading import load_judge

    link = tmp_path / "link.json"
    link.symlink_to(PROGRAM)
    assert load_judge(link).rubric == load_judge(PROGRAM).rubric
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "to_pipe.json").symlink_to(tmp_path / "pipe.json")
    with unblocked(tmp_path / "pipe.json"), pytest.raises(NotARegularFileError):
        load_judge(tmp_path / "to_pipe.json")
    assert "symlink" in (ROOT / "docs" / "SECURITY.md").read_text().lower()


def test_an_api_key_env_naming_an_unset_variable_is_refused_before_any_call(tmp_path, capsys, monkeypatch):
    """User sees: `--api-key-env NAME` with NAME unset exits 2 naming NAME, no request made (before: the
    run went out with no key and no warning); with NAME set, the key is sent."""
    monkeypatch.delenv("RUBRICFORGE_TEST_UNSET_KEY", raising=False)
    argv = ["judge", "--data", str(AIRLINE), "--limit", "1", "--out", str(tmp_path / "v.jsonl"), "--model", "m@r",
            "--no-cache", "--api-key-env", "RUBRICFORGE_TEST_UNSET_KEY"]
    with FakeOpenAI(lambda body, n: OK) as fake:
        assert main([*argv, "--api-base", fake.api_base]) == 2
        assert fake.n_requests == 0
        err = capsys.readouterr().err
        assert "RUBRICFORGE_TEST_UNSET_KEY" in err and "not set" in err
        monkeypatch.setenv("RUBRICFORGE_TEST_UNSET_KEY", "sk-test-1234")
        assert main([*argv, "--api-base", fake.api_base]) == 0
        headers = {k.lower(): v for k, v in fake.requests[0]["headers"].items()}
        assert headers.get("authorization") == "Bearer sk-test-1234"
