"""GEPA's checkpoint (a pickle) never runs code someone else wrote (issue #26, item 4).

A hash of ``gepa_state.bin`` recorded beside it in ``rubricforge_run.json`` protects nothing: whoever plants
the pickle rewrites the hash. The checkpoint is now tagged with an HMAC keyed by a secret in the user's
config directory (``RUBRICFORGE_CONFIG_DIR`` here, set per test), and GEPA only ever reads a private
copy of verified bytes, never the log dir (`rubricforge_dspy.induction.checkpoint`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import stat
from pathlib import Path

import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.induction.inducer import InductionConfig, induce
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.helpers import make_dataset
from tests.support.induction import make_reflection_lm, scripted_judge


class _Bomb:
    """An object whose unpickling creates a file: what a planted gepa_state.bin could do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch):
    directory = tmp_path / "config" / "rubricforge"
    monkeypatch.setenv("RUBRICFORGE_CONFIG_DIR", str(directory))
    return directory


def _induce_logged(tmp_path, judge_lm=None, budget=40):
    split = split_by_task(make_dataset(24), seed=0)
    return induce(split.train, split.val, judge_lm=judge_lm or ScriptedLM(scripted_judge, model="scripted-judge"),
                  reflection_lm=make_reflection_lm([]), config=InductionConfig(budget=budget, minibatch=3, seed=0),
                  log_dir=tmp_path / "log")


def _plant(log, pwned) -> bytes:
    """Replace the log dir's checkpoint with a pickle bomb and rewrite, beside it, whatever the run marker
    records about the state: a sha256 (what older versions checked) becomes the bomb's, an HMAC one under
    a key of the attacker's own."""
    bomb = pickle.dumps(_Bomb(pwned))
    (log / "gepa_state.bin").write_bytes(bomb)
    marker = log / "rubricforge_run.json"
    run = json.loads(marker.read_text())
    forged = {"gepa_state_sha256": hashlib.sha256(bomb).hexdigest(),
              "gepa_state_hmac": [hmac.new(b"the attacker's own key", bomb, hashlib.sha256).hexdigest()]}
    recorded = [name for name in run if name.startswith("gepa_state")]
    assert recorded  # the run recorded something about its state: the attacker rewrites it
    run.update({name: forged[name] for name in recorded})
    marker.write_text(json.dumps(run))
    return bomb


def test_a_planted_pickle_with_its_hash_edited_beside_it_never_runs(tmp_path):
    _induce_logged(tmp_path)
    log, pwned = tmp_path / "log", tmp_path / "pwned"
    _plant(log, pwned)
    with pytest.raises(InputError, match="refusing to unpickle") as refused:
        _induce_logged(tmp_path)
    assert not pwned.exists()
    assert "gepa_state.bin" in str(refused.value) and "new --log-dir" in str(refused.value)


def test_a_planted_pickle_with_its_hash_edited_is_refused_by_the_command_line(tmp_path, capsys):
    """`rubricforge induce` against an OpenAI-compatible server on 127.0.0.1 writes a checkpoint; a bomb
    planted in its place, with the marker rewritten, is refused with exit 2 and never unpickled."""
    from rubricforge_dspy.cli.main import main
    from rubricforge_dspy.testing.fake_server import FakeOpenAI
    from tests.support.induction_http import is_reflection, reflection_reply, rubric_judge
    from tests.support.records import jsonl_record, write_lines

    data, log, pwned = tmp_path / "data.jsonl", tmp_path / "log", tmp_path / "pwned"
    write_lines(data, [jsonl_record(i, reward=float(i % 2)) for i in range(24)])
    with FakeOpenAI(lambda body, n: reflection_reply(body) if is_reflection(body) else rubric_judge(body)) as server:
        args = ["induce", "--data", str(data), "--out", str(tmp_path / "out.json"), "--log-dir", str(log),
                "--budget", "30", "--api-base", server.api_base, "--model", server.model, "--timeout", "10"]
        assert main(args) == 0
        assert (log / "gepa_state.bin").exists()
        _plant(log, pwned)
        capsys.readouterr()
        assert main(args) == 2 and not pwned.exists()
    error = capsys.readouterr().err
    assert "refusing to unpickle" in error and "Traceback" not in error


def test_gepa_reads_its_state_only_from_a_private_directory_never_the_log_dir(tmp_path, monkeypatch):
    """Even a checkpoint that verifies is not read where the user (or anyone who can write the log dir)
    could swap it after the check: GEPA loads it from a 0700 directory of this process's own."""
    from gepa.core.state import GEPAState

    first = _induce_logged(tmp_path)
    log = tmp_path / "log"
    assert (log / "gepa_state.bin").exists() and (log / "candidates.json").exists()
    loaded_from = []
    original = GEPAState.load

    def recording(run_dir):
        info = os.stat(run_dir)
        loaded_from.append((run_dir, stat.S_IMODE(info.st_mode), info.st_uid))
        return original(run_dir)

    monkeypatch.setattr(GEPAState, "load", staticmethod(recording))
    again = _induce_logged(tmp_path)
    assert again.sweep == first.sweep  # resumed, not restarted
    [(run_dir, mode, uid)] = loaded_from
    assert os.path.realpath(log) not in os.path.realpath(run_dir) and mode == 0o700 and uid == os.getuid()
    assert not os.path.exists(run_dir)  # removed when the search ended


def test_the_key_lives_in_the_config_dir_created_private_and_a_loose_key_is_refused(tmp_path, config_dir):
    assert not config_dir.exists()
    _induce_logged(tmp_path)
    key = config_dir / "checkpoint.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(config_dir.stat().st_mode) == 0o700
    assert len(bytes.fromhex(key.read_text().strip())) == 32
    assert not any(p.name == "checkpoint.key" for p in (tmp_path / "log").rglob("*"))
    key.chmod(0o644)
    with pytest.raises(InputError, match="chmod 600"):
        _induce_logged(tmp_path)


def test_a_checkpoint_tagged_under_another_key_is_refused(tmp_path, monkeypatch):
    """A genuine GEPA checkpoint, but tagged by another account's key (a log dir copied from elsewhere):
    refused, since this account cannot tell it from a forged one."""
    _induce_logged(tmp_path)
    monkeypatch.setenv("RUBRICFORGE_CONFIG_DIR", str(tmp_path / "another-account"))
    with pytest.raises(InputError, match="no valid HMAC"):
        _induce_logged(tmp_path)


def test_an_interrupted_induction_resumes_from_its_tagged_checkpoint(tmp_path):
    """A run cut short mid-search (the judge LM goes away) leaves a tagged checkpoint in the log dir; the
    re-run resumes from it, and a stop file in the log dir (``gepa.stop``) still ends GEPA's search."""
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError

    calls = {"n": 0}

    def dying(messages):
        calls["n"] += 1
        if calls["n"] > 30:
            raise ConnectionError("server went away")
        return scripted_judge(messages)

    with pytest.raises(JudgeUnavailableError):
        _induce_logged(tmp_path, ScriptedLM(dying, model="scripted-judge"), budget=80)
    log = tmp_path / "log"
    assert (log / "gepa_state.bin").exists()
    assert json.loads((log / "rubricforge_run.json").read_text())["gepa_state_hmac"]
    (log / "gepa.stop").touch()
    resumed_lm = ScriptedLM(scripted_judge, model="scripted-judge")
    result = _induce_logged(tmp_path, resumed_lm, budget=80)
    assert result.sweep
    split = split_by_task(make_dataset(24), seed=0)
    assert resumed_lm.calls <= 2 * len(split.val)  # stopped at once: no new minibatch was judged


def test_a_copy_interrupted_between_the_marker_and_the_state_still_resumes(tmp_path, monkeypatch):
    """The marker lists the new tag beside the previous one before the state is replaced: a process killed
    in between leaves the previous state, which still verifies (and a state nobody tagged still does not)."""
    from rubricforge_dspy.induction import checkpoint as module

    fingerprint = {"train": "t", "val": "v"}
    first = module.GEPACheckpoint(tmp_path / "log", fingerprint)
    with first as run_dir:
        Path(run_dir, "gepa_state.bin").write_bytes(b"state A")
        first.publish()
        Path(run_dir, "gepa_state.bin").write_bytes(b"state B, a longer one")
        real_write = module._write_atomic

        def killed(target, data):
            if target.name == "gepa_state.bin":
                raise KeyboardInterrupt  # the process dies after the marker, before the state
            real_write(target, data)

        monkeypatch.setattr(module, "_write_atomic", killed)
        with pytest.raises(KeyboardInterrupt):
            first.publish()
        monkeypatch.setattr(module, "_write_atomic", real_write)
        monkeypatch.setattr(first, "publish", lambda: None)  # the dead process never copies again
    assert (tmp_path / "log" / "gepa_state.bin").read_bytes() == b"state A"
    assert len(json.loads((tmp_path / "log" / "rubricforge_run.json").read_text())["gepa_state_hmac"]) == 2
    assert module.GEPACheckpoint(tmp_path / "log", fingerprint).verified_state() == b"state A"
    (tmp_path / "log" / "gepa_state.bin").write_bytes(b"state C")
    with pytest.raises(InputError, match="no valid HMAC"):
        module.GEPACheckpoint(tmp_path / "log", fingerprint).verified_state()



def test_a_fifo_as_the_run_marker_is_refused_before_it_is_read(tmp_path, config_dir):
    """User sees: `rubricforge induce --log-dir LOG` where LOG's run marker (``rubricforge_run.json``) is a FIFO
    exits 2 with one line naming it, "not a regular file", and no LM call. Before: the marker was opened and
    read, and `induce` blocked forever on the FIFO (here: killed at the timeout, and the test fails)."""
    import subprocess
    import sys

    from rubricforge_dspy.testing.fake_server import FakeOpenAI
    from tests.support.records import jsonl_record, write_lines

    root = Path(__file__).resolve().parents[2]
    data, log = tmp_path / "data.jsonl", tmp_path / "log"
    write_lines(data, [jsonl_record(i, reward=float(i % 2)) for i in range(24)])
    log.mkdir()
    os.mkfifo(log / "rubricforge_run.json")
    with FakeOpenAI(lambda body, n: {"reason": "ok", "passed": True, "score": 0.9}) as server:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "rubricforge_dspy.cli.main", "induce", "--data", str(data), "--out",
                 str(tmp_path / "out.json"), "--log-dir", str(log), "--budget", "30", "--api-base", server.api_base,
                 "--model", server.model, "--timeout", "10"],
                env={**os.environ, "PYTHONPATH": str(root), "RUBRICFORGE_CONFIG_DIR": str(config_dir)},
                cwd=root, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("induce blocked on the FIFO rubricforge_run.json in its --log-dir")
        calls = server.n_requests
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(errors) == 1 and str(log / "rubricforge_run.json") in errors[0], errors
    assert "not a regular file" in errors[0] and calls == 0


def test_every_file_read_from_the_log_dir_must_be_regular_and_the_log_dir_a_directory(tmp_path):
    """The checkpoint beside a marker of this run, as a FIFO: refused by name as "not a regular file" (the
    marker's words); a `--log-dir` naming a FIFO or a regular file: an `InputError` naming it ("not a
    directory"), never an OSError from listing it."""
    from rubricforge_dspy.core.files import NotARegularFileError
    from rubricforge_dspy.induction.checkpoint import GEPACheckpoint

    log = tmp_path / "log"
    log.mkdir()
    (log / "rubricforge_run.json").write_text(json.dumps({"a": 1}))
    os.mkfifo(log / "gepa_state.bin")
    with pytest.raises(NotARegularFileError, match="gepa_state.bin: .*a FIFO.*not a regular file"):
        GEPACheckpoint(log, {"a": 1}, key=b"k" * 32).verified_state()
    fifo, plain = tmp_path / "fifo", tmp_path / "plain"
    os.mkfifo(fifo)
    plain.write_text("x")
    for path in (fifo, plain):
        with pytest.raises(InputError, match=f"{path}: .*not a directory"):
            GEPACheckpoint(path, {"a": 1}, key=b"k" * 32).verified_state()
