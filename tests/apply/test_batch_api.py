"""`rubricforge judge --batch-api` against the fake server's /v1/files + /v1/batches, via the CLI.

Each test states the user-visible outcome in its docstring."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"
N = 10  # enough items that the hashed replies cover several outcomes (a render change reshuffles them)
COMPARED = ("passed", "score", "reason", "abstained", "error_kind", "contradiction")


def responder(body, n):
    """A reply that depends on the trajectory only (not on arrival order): passes, fails, a
    contradiction, a cut answer, garbage and an HTTP 400."""
    pick = int(hashlib.sha256(user_text(body).encode()).hexdigest(), 16) % 6
    return [{"reason": "Booked.", "passed": True, "score": 0.9},
            {"reason": "The tool returned an error.", "passed": False, "score": 0.2},
            {"reason": "Odd.", "passed": True, "score": 0.1},
            Reply(content='{"reason": "cut', finish_reason="length"),
            "garbage", "http_400"][pick]


def run_cli(args, **kwargs):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.Popen([sys.executable, "-m", "rubricforge_dspy.cli.main", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def batch_args(fake, out):
    return ["judge", "--batch-api", "--data", str(AIRLINE), "--limit", str(N), "--out", str(out),
            "--api-base", fake.api_base, "--model", "m@r", "--poll-interval", "0.1"]


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.mark.slow
def test_batch_api_verdicts_and_requests_are_those_of_online_judging(tmp_path):
    """User sees: `judge --batch-api` writes the same verdicts (truncated, unparsable, contradictory and
    HTTP-error answers included, with the same error kinds) as online `judge`, from the same requests."""
    online_out, batch_out = tmp_path / "online" / "v.jsonl", tmp_path / "batch" / "v.jsonl"
    with FakeOpenAI(responder) as fake:
        assert main(["judge", "--data", str(AIRLINE), "--limit", str(N), "--out", str(online_out),
                     "--api-base", fake.api_base, "--model", "m@r", "--concurrency", "2"]) == 0
        online_bodies = {json.dumps(b, sort_keys=True) for b in fake.chat_bodies}
        online_bytes = {r["raw"] for r in fake.requests}
    with FakeOpenAI(responder) as fake:
        process = run_cli(batch_args(fake, batch_out))
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert fake.batch_api.batches_created == 1 and "completed" in err
    submitted = [json.loads(x) for x in (tmp_path / "batch" / "v.jsonl.batch_input.jsonl").read_text().splitlines()]
    assert {json.dumps(s["body"], sort_keys=True) for s in submitted} == online_bodies
    # The same bytes, not only the same JSON: each input line ends with its body, as the online path posts it.
    raw_lines = (tmp_path / "batch" / "v.jsonl.batch_input.jsonl").read_bytes().splitlines()
    assert {line[line.index(b'"body":') + len(b'"body":'):-1] for line in raw_lines} == online_bytes
    assert all(s["method"] == "POST" and s["url"] == "/v1/chat/completions" for s in submitted)
    online = {v["id"]: v for v in lines(online_out)}
    batch = {v["id"]: v for v in lines(batch_out)}
    assert len(batch) == len(lines(batch_out)) == N and set(batch) == set(online)
    for key, verdict in online.items():
        assert {f: batch[key][f] for f in COMPARED} == {f: verdict[f] for f in COMPARED}, key
    kinds = {v["error_kind"] for v in online.values()}
    assert len(kinds) >= 3  # the scripted replies really exercised several outcomes
    # what the judge read is on every line, the same from the Batch API as online (issue 40: every LM stage's line)
    assert all(v.get("evidence") is not None for v in batch.values())
    assert {key: v["evidence"] for key, v in batch.items()} == {key: v["evidence"] for key, v in online.items()}
    jobs = [json.loads((tmp_path / d / "v.jsonl.job.json").read_text()) for d in ("online", "batch")]
    for job in jobs:  # the two fake servers listen on different ports; all else is the same job
        job["judge_parts"]["lm"].pop("api_base")
    assert jobs[0]["judge_parts"] == jobs[1]["judge_parts"]
    assert jobs[0]["data_fingerprint"] == jobs[1]["data_fingerprint"]
    assert not (tmp_path / "batch" / "v.jsonl.batch.json").exists()  # finished: no pending batch left


@pytest.mark.slow
def test_per_request_errors_become_counted_abstentions(tmp_path):
    """User sees: error-file entries are abstained verdicts (error_kind other), counted in the summary."""
    out = tmp_path / "v.jsonl"
    ok = {"reason": "Booked.", "passed": True, "score": 0.9}
    with FakeOpenAI(lambda body, n: ok, batch_options={"line_errors": {"r1", "r4"}}) as fake:
        process = run_cli(batch_args(fake, out))
        _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    verdicts = lines(out)
    abstained = [v for v in verdicts if v["abstained"]]
    assert len(verdicts) == N and len(abstained) == 2
    assert {v["error_kind"] for v in abstained} == {"other"} and all(not v["passed"] for v in abstained)
    assert "2 per-request errors" in err and "other=2" in err


@pytest.mark.slow
def test_a_failed_or_expired_batch_is_loud(tmp_path):
    """User sees: a batch that fails as a whole exits 3 naming its status; an expired one keeps the
    answered requests, exits 3, and the re-run submits only the rest."""
    ok = {"reason": "Booked.", "passed": True, "score": 0.9}
    with FakeOpenAI(lambda body, n: ok, batch_options={"batch_fault": "failed"}) as fake:
        process = run_cli(batch_args(fake, tmp_path / "a.jsonl"))
        _, err = process.communicate(timeout=120)
    assert process.returncode == 3 and "'failed'" in err and "fake whole-batch failure" in err
    out = tmp_path / "b.jsonl"
    with FakeOpenAI(lambda body, n: ok, batch_options={"batch_fault": "expired", "expire_after": 3}) as fake:
        process = run_cli(batch_args(fake, out))
        _, err = process.communicate(timeout=120)
        assert process.returncode == 3 and "'expired'" in err
        fake.batch_api.batch_fault = None
        process = run_cli(batch_args(fake, out))
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert fake.batch_api.batches_created == 2
    verdicts = lines(out)
    assert len({v["id"] for v in verdicts}) == len(verdicts) == N and not any(v["abstained"] for v in verdicts)


@pytest.mark.slow
def test_resume_after_kill_9_polls_the_same_batch(tmp_path):
    """User sees: kill -9 while the batch is in progress, re-run the same command: no second batch is
    created and every verdict lands exactly once."""
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(responder, batch_options={"line_delay": 0.25}) as fake:
        process = run_cli(batch_args(fake, out), start_new_session=True)
        state = tmp_path / "v.jsonl.batch.json"
        deadline = time.monotonic() + 60
        while not state.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        assert state.exists(), process.communicate()[1]
        batch_id = json.loads(state.read_text())["batch_id"]
        assert fake.batch_api.batches[batch_id]["status"] in ("validating", "in_progress")
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)
        assert process.returncode == -signal.SIGKILL
        assert fake.batch_api.batches[batch_id]["status"] != "completed"
        again = run_cli(batch_args(fake, out))
        _, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert fake.batch_api.batches_created == 1 and "resumed" in err
    verdicts = lines(out)
    assert len(verdicts) == N and len({v["id"] for v in verdicts}) == N


@pytest.mark.slow
def test_batch_api_joins_labels_like_online_judging(tmp_path):
    """User sees: `judge --batch-api --labels FILE` writes the joined labels into the verdict lines and
    reports the label ids that matched no trajectory, as online `judge --labels` does."""
    from rubricforge_dspy.data.formats import load_trajectories

    ids = [t.id for t in load_trajectories(AIRLINE)[:N]]
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\n" + "".join(f"{i},{k % 2}\n" for k, i in enumerate(ids)) + "no-such-id,1\n")
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: {"reason": "Booked.", "passed": True, "score": 0.9}) as fake:
        process = run_cli([*batch_args(fake, out), "--labels", str(labels)])
        _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    got = {v["id"]: v["label"] for v in lines(out)}
    assert got == {i: k % 2 for k, i in enumerate(ids)}
    assert "0 trajectories without a label" in err
    assert "1 label ids without a trajectory" in err and "no-such-id" in err
