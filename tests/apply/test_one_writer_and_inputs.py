"""Issue 19, items 3, 5 and 7 (input part): one writer per output file, exit 3 when no verdict was
produced, and the whole input checked before the first LM call; issue 33, item 2: one writer per FILE
(a hard link or a rename cannot give two runs one file). Each test states what the user sees."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rubricforge_dspy.apply.job import OutputLockedError, job_path, lock_path, output_lock, read_done
from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats import detect_format, load_trajectories
from rubricforge_dspy.judge.cascade import StageRule
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text
from tests.support.batch import assert_one_line_per_id, fake_lm, verdict_of
from tests.support.cascade import REWARD_ABOVE_0, save_cascade
from tests.support.helpers import make_dataset

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"
MINI_SWE = ROOT / "evals" / "data" / "mini_swe"
OK = {"reason": "ok", "passed": True, "score": 0.9}


def popen(args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.Popen([sys.executable, "-m", "rubricforge_dspy.cli.main", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)


def ids_of(path):
    return [json.loads(line)["id"] for line in Path(path).read_text().splitlines()]


def generic(i, reward=1.0, **extra):
    return {"id": f"t{i}", "task_id": f"task{i}", "reward": reward,
            "messages": [{"role": "user", "content": f"book flight {i}"},
                         {"role": "assistant", "content": f"booked {i}"}], **extra}


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# -- one writer per output file -------------------------------------------------------------------

def _wait_for(condition, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("second_model", ["m@r", "other@r"])
def test_two_concurrent_judges_on_one_out_the_second_exits_2_at_once(tmp_path, second_model):
    """User sees: two `rubricforge judge` on one --out started together: the second exits 2 at once naming
    the file and the first one's pid (also with another --model); the file holds one line per id, of one judge."""
    out = tmp_path / "v.jsonl"
    n = 12
    base = ["judge", "--data", str(AIRLINE), "--limit", str(n), "--out", str(out), "--concurrency", "1",
            "--no-cache"]
    release = threading.Event()

    def held(body, k):  # the first run's second request waits until the second run has ended: they overlap
        if k >= 1:        # however slowly either process starts on a loaded machine
            release.wait(120)
        return OK

    with FakeOpenAI(held) as fake:
        first = popen([*base, "--api-base", fake.api_base, "--model", "m@r"])
        assert _wait_for(lambda: fake.n_requests >= 1), first.communicate(timeout=60)
        started = time.monotonic()
        second = popen([*base, "--api-base", fake.api_base, "--model", second_model])
        try:
            _, err2 = second.communicate(timeout=120)
        finally:
            refused_after = time.monotonic() - started
            still_running = first.poll() is None
            release.set()
        _, err1 = first.communicate(timeout=120)
    assert second.returncode == 2, err2
    assert still_running, "the second run was not refused while the first was running"
    assert f"pid {first.pid}" in err2 and str(out) in err2, err2
    assert refused_after < 60
    assert first.returncode == 0, err1
    written = ids_of(out)
    assert len(written) == n and len(set(written)) == n
    assert {json.loads(line)["model"] for line in out.read_text().splitlines()} == {"openai/m@r"}
    assert not lock_path(out).exists()  # released by the run that held it


@pytest.mark.slow
def test_a_lock_left_by_a_killed_run_does_not_block_the_rerun(tmp_path):
    """User sees: `rubricforge judge` killed with SIGKILL mid-run, then re-run: the re-run is not refused,
    resumes, and the file ends with one line per id."""
    out = tmp_path / "v.jsonl"
    n = 10
    argv = ["judge", "--data", str(AIRLINE), "--limit", str(n), "--out", str(out), "--concurrency", "1",
            "--model", "m@r"]
    with FakeOpenAI(lambda body, k: OK, delay=0.3) as fake:
        run = popen([*argv, "--api-base", fake.api_base])
        assert _wait_for(lambda: out.exists() and out.stat().st_size > 0), run.communicate(timeout=60)
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=60)
        assert lock_path(out).exists()  # left behind by the killed process, but unlocked by the kernel
        again = popen([*argv, "--api-base", fake.api_base])
        _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    written = ids_of(out)
    assert len(written) == n and len(set(written)) == n


@pytest.mark.slow
def test_the_batch_api_and_the_library_take_the_same_lock(tmp_path):
    """User sees: while one process writes OUT, `judge_stream`/`run_judge_file` and `run_batch_api` on the
    same OUT raise OutputLockedError (exit 2) naming the file and the holder's pid, before any request."""
    from rubricforge_dspy.apply.openai_batch import run_batch_api
    from rubricforge_dspy.apply.stream import run_judge_file
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm

    out = tmp_path / "v.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from rubricforge_dspy.apply.job import output_lock\n"
        "with output_lock(sys.argv[2]):\n print('held', flush=True); time.sleep(60)"), str(ROOT), str(out)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with FakeOpenAI(lambda body, k: OK) as fake:
            lm = make_lm(LMConfig(model=fake.model, api_base=fake.api_base))
            with pytest.raises(OutputLockedError, match=f"pid {holder.pid}"):
                run_judge_file(None, AIRLINE, out, limit=2, lm=lm, progress=False)
            judge = TrajectoryJudge()
            judge.set_lm(lm)
            with pytest.raises(OutputLockedError, match=str(out)):
                run_batch_api(judge, AIRLINE, out, lm=lm, limit=2, progress=False, poll_interval=0.1)
            assert fake.n_requests == 0 and out.read_bytes() == b""  # made by the holder's lock; nothing written
    finally:
        holder.kill()
        holder.wait()
    with output_lock(out):  # the kernel released the killed holder's lock
        with output_lock(out):  # re-entrant within one process
            pass


# -- one writer per FILE: a hard link or a rename gives no second writer -----------------------------

def _hold(out):
    """A process holding `output_lock(out)` until killed, once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from rubricforge_dspy.apply.job import output_lock\n"
        "with output_lock(sys.argv[2]):\n print('held', flush=True); time.sleep(120)"), str(ROOT), str(out)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("name", ["link", "original"])
def test_judge_refuses_a_hard_linked_out_at_once(tmp_path, capsys, name):
    """User sees: `judge --out` naming a verdict file that has a second name (a hard link) exits 2 at once,
    by either name, saying so and what to do; nothing is asked, the file is unchanged. (Today's two runs on
    the two names both exit 0 and every item is paid twice.)"""
    out, link = tmp_path / "v.jsonl", tmp_path / "alias.jsonl"
    argv = ["judge", "--data", str(AIRLINE), "--concurrency", "1", "--model", "m@r", "--no-cache"]
    with FakeOpenAI(lambda body, k: OK) as fake:
        assert main([*argv, "--limit", "3", "--out", str(out), "--api-base", fake.api_base]) == 0
        before = out.read_bytes()
        os.link(out, link)
        given = link if name == "link" else out
        capsys.readouterr()
        assert main([*argv, "--limit", "6", "--out", str(given), "--api-base", fake.api_base]) == 2
        assert fake.n_requests == 3  # the first run's only
    err = capsys.readouterr().err
    assert f"{given}: the output has 2 names (hard links)" in err and "Traceback" not in err, err
    assert out.read_bytes() == before and not lock_path(given).exists()


def test_judge_cascade_refuses_a_hard_linked_out_at_once(halves, tmp_path, capsys):
    """User sees: `judge --cascade --out L` where L is a hard link of another run's verdict file exits 2 at
    once: no stage runs, no request, neither the file nor a labeling queue is written."""
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out, link = tmp_path / "v.jsonl", tmp_path / "alias.jsonl"
    out.write_bytes(b"")
    os.link(out, link)
    with FakeOpenAI(lambda body, n: OK) as fake:
        assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--limit", "20", "--out", str(link), "--api-base", fake.url + "/v1",
                     "--model", "fake-judge"]) == 2
        assert fake.n_requests == 0
    err = capsys.readouterr().err
    assert f"{link}: the output has 2 names (hard links)" in err, err
    assert out.read_bytes() == b"" and not Path(f"{link}.escalated.jsonl").exists()
    assert not job_path(link).exists()


@pytest.mark.parametrize("existed", [True, False])
def test_a_file_renamed_while_written_keeps_one_writer(tmp_path, existed):
    """User sees: a verdict file being written is given a new name (hard-linked, then the old name removed:
    a rename) after its run checked it; a second run on the new name is refused (exit 2) naming the holder's
    pid, although no name of the file has a second link and the new name's lock file is free."""
    out, renamed = tmp_path / "v.jsonl", tmp_path / "renamed.jsonl"
    if existed:
        out.write_text(json.dumps({"id": "t0"}) + "\n")
    holder = _hold(out)
    try:
        os.link(out, renamed)
        os.unlink(out)
        with pytest.raises(OutputLockedError, match=f"{renamed}.*another name.*pid {holder.pid}"):
            with output_lock(renamed):
                pass
    finally:
        holder.kill()
        holder.wait()
    with output_lock(renamed):  # the holder is gone: the file is free again
        pass


def test_judge_on_a_renamed_file_being_written_exits_2_before_any_request(tmp_path, capsys):
    """User sees: the same, from the command line: `judge --out NEW` exits 2 at once, nothing asked."""
    out, renamed = tmp_path / "v.jsonl", tmp_path / "renamed.jsonl"
    holder = _hold(out)
    try:
        os.link(out, renamed)
        os.unlink(out)
        with FakeOpenAI(lambda body, k: OK) as fake:
            assert main(["judge", "--data", str(AIRLINE), "--limit", "2", "--out", str(renamed), "--model", "m@r",
                         "--api-base", fake.api_base, "--no-cache"]) == 2
            assert fake.n_requests == 0
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert f"{renamed} is being written by another process" in err and f"pid {holder.pid}" in err, err
    assert renamed.read_bytes() == b""


def test_the_file_lock_moves_with_the_rewrite_of_a_resume(tmp_path):
    """User sees: a resume that drops an LM-error line rewrites OUT (a new file renamed into place); the run
    writes on into the new file, and the new file is the one held: reached under another name, it is refused."""
    data = make_dataset(6)
    out = tmp_path / "v.jsonl"
    seen = []

    def responder(body, n):
        seen.append(n)
        return Reply(status=500) if len(seen) == 3 else verdict_of(user_text(body))

    with FakeOpenAI(responder) as fake:
        assert judge_stream(TrajectoryJudge(), data, out, lm=fake_lm(fake), progress=False, concurrency=1,
                            max_retries=0).n_abstained == 1
        copy, renamed = tmp_path / "copy.jsonl", tmp_path / "renamed.jsonl"
        shutil.copy(out, copy)
        inode = copy.stat().st_ino
        with output_lock(copy):
            assert read_done(copy).retried == 1 and copy.stat().st_ino != inode  # rewritten by rename
            os.link(copy, renamed)
            os.unlink(copy)
            with pytest.raises(OutputLockedError, match=f"{renamed} is being written .* under another name"):
                with output_lock(renamed):
                    pass
        again = judge_stream(TrajectoryJudge(), data, out, lm=fake_lm(fake), progress=False, concurrency=1)
    assert (again.resumed, again.judged, again.n_abstained) == (5, 1, 0)
    assert_one_line_per_id(out, [t.id for t in data])


def test_a_file_swapped_in_under_a_held_name_is_not_written(tmp_path):
    """User sees: while a run holds OUT, another file is renamed onto the name OUT; the run's writer refuses it
    (InputError, exit 2) before any request, and the swapped-in file keeps its bytes."""
    out, other = tmp_path / "v.jsonl", tmp_path / "other.jsonl"
    other.write_bytes(b"")
    with FakeOpenAI(lambda body, k: OK) as fake:
        with output_lock(out):
            os.replace(other, out)
            with pytest.raises(InputError, match=f"{out}: the output was replaced by another file"):
                judge_stream(TrajectoryJudge(), make_dataset(3), out, lm=fake_lm(fake), progress=False)
        assert fake.n_requests == 0
    assert out.read_bytes() == b""


def test_a_hard_linked_job_file_is_never_written_through(tmp_path):
    """User sees: ``OUT.job.json`` sharing its inode with a file of the user's (a hard link): the run records
    its job in a new file; the user's file keeps its bytes."""
    out = tmp_path / "v.jsonl"
    mine = tmp_path / "mine.json"
    mine.write_text('{"note": "my notes, not a job"}')
    os.link(mine, job_path(out))
    with FakeOpenAI(lambda body, k: OK) as fake:
        assert main(["judge", "--data", str(AIRLINE), "--limit", "2", "--out", str(out), "--model", "m@r",
                     "--api-base", fake.api_base, "--no-cache"]) == 0
    assert mine.read_text() == '{"note": "my notes, not a job"}'
    assert json.loads(job_path(out).read_text())["judge_fingerprint"]
    assert len(ids_of(out)) == 2


# -- exit 3 when no verdict was produced ---------------------------------------------------------

def test_a_server_that_only_truncates_exits_3_with_the_counts(tmp_path, capsys):
    """User sees: against a server that only ever answers cut JSON, `judge` exits 3 saying no verdict was
    produced, with the abstentions by kind; a re-run with everything done already is exit 0 ("nothing to do")."""
    out = tmp_path / "v.jsonl"
    argv = ["judge", "--data", str(AIRLINE), "--limit", "5", "--out", str(out), "--concurrency", "2",
            "--model", "m@r", "--no-cache"]
    with FakeOpenAI(lambda body, k: "truncated") as fake:
        assert main([*argv, "--api-base", fake.api_base]) == 3
        err = capsys.readouterr().err
        assert "no verdict was produced" in err and "truncated=5" in err
        assert main([*argv, "--api-base", fake.api_base]) == 0  # truncated answers are answers: all done
        assert "nothing to do" in capsys.readouterr().err
    assert len(ids_of(out)) == 5


def test_the_batch_api_exits_3_when_every_answer_is_truncated(tmp_path, capsys):
    """User sees: `judge --batch-api` whose batch answers only cut JSON exits 3 with the counts by kind."""
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, k: "truncated") as fake:
        code = main(["judge", "--batch-api", "--data", str(AIRLINE), "--limit", "4", "--out", str(out),
                     "--api-base", fake.api_base, "--model", "m@r", "--poll-interval", "0.1", "--no-cache"])
    assert code == 3
    err = capsys.readouterr().err
    assert "no verdict was produced" in err and "truncated=4" in err


# -- inputs checked before money is spent -------------------------------------------------------

@pytest.mark.parametrize("bad", ['{"id": "t99", "messages": "not a list", "reward": 1}', "{not json",
                                 json.dumps(generic(0))])  # the last one: an id seen before
def test_judge_finds_a_bad_last_record_before_the_first_lm_call(tmp_path, capsys, bad):
    """User sees: `judge` on a file whose LAST record is malformed (or repeats an id) exits 2 naming the
    file and record without a single request to the LM; --skip-bad judges the rest and counts the skip."""
    data = write_jsonl(tmp_path / "d.jsonl", [generic(i) for i in range(6)] + [bad])
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, k: OK) as fake:
        argv = ["judge", "--data", str(data), "--api-base", fake.api_base, "--model", "m@r", "--concurrency", "1"]
        assert main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert fake.n_requests == 0
        assert str(data) in err and "record 6" in err, err
        assert not out.exists() or not out.read_text()
        assert main([*argv, "--out", str(tmp_path / "skip.jsonl"), "--skip-bad"]) == 0
        assert fake.n_requests == 6
    assert "1 record(s) skipped" in capsys.readouterr().err
    assert len(ids_of(tmp_path / "skip.jsonl")) == 6


@pytest.mark.parametrize("command", ["stats", "convert", "judge", "induce", "render"])
@pytest.mark.parametrize("kind", ["empty file", "empty directory"])
def test_an_empty_input_is_named_and_exits_2(tmp_path, capsys, command, kind):
    """User sees: every command given a file with no trajectory (or a directory with none) exits 2 with a
    message naming it, instead of exit 0 and 0 trajectories."""
    if kind == "empty file":
        data = tmp_path / "empty.jsonl"
        data.write_text("\n")
    else:
        data = tmp_path / "nothing"
        data.mkdir()
        (data / "notes.txt").write_text("no trajectories here")
    argv = [command, "--data", str(data)]
    if command in ("convert", "judge", "induce"):
        argv += ["--out", str(tmp_path / ("out.json" if command == "induce" else "out.jsonl"))]
    if command in ("judge", "induce"):
        argv += ["--api-base", "http://127.0.0.1:9/v1", "--model", "m@r"]  # never reached
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no trajectories found" in err and str(data) in err, err


def test_graded_rewards_from_a_labels_file_warn_like_the_loaders(tmp_path, capsys):
    """User sees: rewards between 0 and 1 arriving through --labels (no label column) are thresholded by
    'reward > 0' with the same WARNING the loaders give for graded rewards."""
    data = write_jsonl(tmp_path / "d.jsonl", [generic(i, reward=None) for i in range(6)])
    labels = write_jsonl(tmp_path / "labels.jsonl", [{"id": f"t{i}", "reward": r}
                                                       for i, r in enumerate([0.0, 0.3, 0.5, 1.0, 0.0, 0.7])])
    assert main(["stats", "--data", str(data), "--labels", str(labels), "--json"]) == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    assert stats["positives"] == 4
    assert any("graded" in w and "3 of 6" in w for w in stats["warnings"]), stats["warnings"]
    assert "WARNING" in captured.err and "graded" in captured.err
    # an explicit label column stays explicit: no warning
    explicit = write_jsonl(tmp_path / "explicit.jsonl", [{"id": f"t{i}", "label": i % 2, "reward": 0.5}
                                                         for i in range(6)])
    assert main(["stats", "--data", str(data), "--labels", str(explicit), "--json"]) == 0
    assert not any("graded" in w for w in json.loads(capsys.readouterr().out)["warnings"])


def test_limit_applies_to_the_label_join_report(tmp_path, capsys):
    """User sees: `judge --limit 3 --labels L` (10 trajectories, 10 labels) reports 3 labels joined, no label
    id without a trajectory, and the 7 labels past the limit as not used."""
    data = write_jsonl(tmp_path / "d.jsonl", [generic(i, reward=None) for i in range(10)])
    labels = write_jsonl(tmp_path / "labels.jsonl", [{"id": f"t{i}", "label": i % 2} for i in range(10)]
                         + [{"id": "ghost", "label": 1}])
    with FakeOpenAI(lambda body, k: OK) as fake:
        assert main(["judge", "--data", str(data), "--labels", str(labels), "--limit", "3", "--out",
                     str(tmp_path / "v.jsonl"), "--api-base", fake.api_base, "--model", "m@r",
                     "--concurrency", "1"]) == 0
        assert fake.n_requests == 3
    err = capsys.readouterr().err
    assert "3 of 11 labels joined" in err, err
    assert "0 trajectories without a label" in err
    assert "1 label ids without a trajectory (e.g. ghost)" in err
    assert "7 labels of trajectories past --limit not used" in err


def _mini_swe_file(directory: Path, instance: str) -> str:
    """A mini-SWE-agent file as `DefaultAgent.save` writes it today (info first, format tag last)."""
    messages = json.loads((MINI_SWE / "local.traj.json").read_text())
    path = directory / f"{instance}.traj.json"
    path.write_text(json.dumps({"info": {"mini_version": "1.14.2", "instance_id": instance, "exit_status": "Submitted",
                                         "submission": "diff --git a/x b/x"},
                                "messages": messages, "trajectory_format": "mini-swe-agent-1.1"}, indent=2))
    return str(path)


@pytest.mark.parametrize("n_files", [1, 2])
def test_convert_of_mini_swe_agent_reads_back_as_generic_jsonl(tmp_path, capsys, n_files):
    """User sees: `convert` of mini-SWE-agent files (one or several) writes a file that every command reads
    back as the generic JSONL it is, with the same trajectories (not misread as mini-SWE-agent, not refused)."""
    inputs = [_mini_swe_file(tmp_path, f"repo__issue-{i}") for i in range(n_files)]
    assert [detect_format(p) for p in inputs] == ["mini_swe"] * n_files
    out = tmp_path / "converted.jsonl"
    assert main(["convert", "--data", *inputs, "--out", str(out)]) == 0
    capsys.readouterr()
    assert detect_format(out) == "jsonl"
    original = load_trajectories(inputs)
    again = load_trajectories(out)
    assert [t.id for t in again] == [t.id for t in original]
    assert [[(s.kind, s.content) for s in t.steps] for t in again] == \
        [[(s.kind, s.content) for s in t.steps] for t in original]
    assert main(["stats", "--data", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trajectories"] == n_files


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_below_one_is_refused_not_a_quiet_exit_0(tmp_path, capsys, limit):
    """`--limit 0` used to judge nothing and exit 0 without a word; it is bad input (exit 2)."""
    out = tmp_path / "v.jsonl"
    code = main(["judge", "--data", str(AIRLINE), "--limit", limit, "--out", str(out),
                 "--api-base", "http://127.0.0.1:9/v1", "--model", "m@r"])
    assert code == 2
    assert "--limit must be at least 1" in capsys.readouterr().err
    assert not out.exists()


def test_a_replaced_side_file_never_writes_through_a_link_planted_at_its_temporary(tmp_path):
    """`replace_file` (the job file, the done index, the Batch API's state): a symlink or hard link planted at
    ``TARGET.tmp`` or at ``TARGET`` is replaced, and the file it pointed to keeps its bytes."""
    from rubricforge_dspy.apply.job import replace_file

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "state.json"
    (tmp_path / "state.json.tmp").symlink_to(victim)
    replace_file(target, b'{"a": 1}')
    assert target.read_bytes() == b'{"a": 1}' and victim.read_text() == "keep me"
    target.unlink()
    os.link(victim, target)  # the target itself another name of someone's file
    replace_file(target, b"new")
    assert target.read_bytes() == b"new" and victim.read_text() == "keep me"
