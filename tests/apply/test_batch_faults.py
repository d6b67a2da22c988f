"""Faults: timeouts, HTTP 5xx/4xx, garbage, dropped connections, a server dying mid-batch, and a
SIGKILL of the judging process. The batch always finishes (or resumes) with exactly one line per id,
nothing passes by accident, and every fault is counted by kind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text
from tests.support.batch import assert_one_line_per_id, by_text, fake_lm
from tests.support.helpers import make_dataset

REPO = Path(__file__).resolve().parents[2]
FAST = {"backoff": 0.01, "max_backoff": 0.05, "progress": False}


def flight(i: int) -> str:
    return f"HAT{i:03d}"


def assert_consistent(summary, lines) -> None:
    """Nothing passes by accident, and the summary counts what the file says."""
    for line in lines:
        if line["abstained"]:
            assert line["passed"] is False and line["score"] == 0.0
            assert line["error"] and line["error_kind"]
    kinds = Counter(line["error_kind"] for line in lines if line["abstained"])
    assert summary.abstained == kinds
    assert summary.passed == sum(line["passed"] for line in lines)


def test_timeouts_are_retried_then_kept_as_abstentions(tmp_path):
    data = make_dataset(6)
    slow = {flight(1), flight(4)}

    def responder(body, n):
        return "timeout" if any(f in user_text(body) for f in slow) else by_text(body, n)

    with FakeOpenAI(responder, hang_seconds=10.0) as fake:  # the LM's own timeout is 5 s: ours must win
        summary = judge_stream(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), timeout=1.0,
                               max_retries=1, concurrency=3, **FAST)
    lines = assert_one_line_per_id(tmp_path / "v.jsonl", [t.id for t in data])
    assert_consistent(summary, lines)
    assert summary.abstained == Counter(timeout=2) and summary.retries == 2
    for line in lines:
        if line["abstained"]:
            assert line["attempts"] == 2 and "timed out" in line["error"].lower()


def test_transient_500_recovers_on_retry(tmp_path):
    data = make_dataset(6)
    seen: Counter = Counter()
    lock = threading.Lock()

    def responder(body, n):  # every trajectory's first request fails with 500/503, the second succeeds
        text = user_text(body)
        with lock:
            seen[text] += 1
            first = seen[text] == 1
        return ("http_500" if n % 2 else "http_503") if first else by_text(body, n)

    with FakeOpenAI(responder) as fake:
        summary = judge_stream(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), max_retries=2, **FAST)
    lines = assert_one_line_per_id(tmp_path / "v.jsonl", [t.id for t in data])
    assert summary.n_abstained == 0 and summary.retries == 6 and summary.lm_calls == 12
    assert all(line["attempts"] == 2 for line in lines)
    assert summary.passed == 3


@pytest.mark.parametrize("fault, kind, attempts", [
    ("http_500", "http_5xx", 3),
    ("http_429", "rate_limit", 3),  # rate limits are retried
    ("truncated", "truncated", 1),  # an answer cut at max_tokens is an answer: not retried, never a verdict
    ("http_400", "http_4xx", 1),  # other client errors are not retried
    ("garbage", "parse", 1),      # neither are unparsable answers
    ("drop", "connection", 3),
])
def test_persistent_fault_is_counted_by_kind(tmp_path, fault, kind, attempts):
    data = make_dataset(4)

    def responder(body, n):
        return fault if flight(2) in user_text(body) else {"reason": "fine", "passed": True, "score": 1.0}

    with FakeOpenAI(responder) as fake:
        summary = judge_stream(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), max_retries=2,
                               **FAST)
    lines = assert_one_line_per_id(tmp_path / "v.jsonl", [t.id for t in data])
    assert_consistent(summary, lines)
    assert summary.abstained == Counter({kind: 1}) and summary.passed == 3
    (bad,) = [line for line in lines if line["abstained"]]
    assert bad["attempts"] == attempts and bad["passed"] is False


def test_garbage_that_says_pass_never_passes(tmp_path):
    data = make_dataset(4)
    answers = [Reply(content="passed: true, score 1.0 (definitely)"),
               Reply(content={"reason": "ok", "passed": "maybe", "score": 1.0}),
               Reply(content={"reason": "ok", "passed": True, "score": "NaN"}),
               Reply(content={"reason": "ok", "passed": True})]

    with FakeOpenAI(lambda body, n: answers[int(user_text(body).split("HAT")[1][:3])]) as fake:
        summary = judge_stream(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), **FAST)
    lines = assert_one_line_per_id(tmp_path / "v.jsonl", [t.id for t in data])
    assert_consistent(summary, lines)
    # Not JSON, a non-boolean passed, a string score, a missing field: none is a verdict.
    assert summary.passed == 0 and summary.lm_calls == 4
    assert summary.abstained == Counter(parse=2, invalid=2)


def test_server_dying_mid_batch(tmp_path):
    data = make_dataset(16)
    with FakeOpenAI(by_text, die_after=5, delay=0.02) as fake:
        summary = judge_stream(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake, timeout=2.0),
                               concurrency=2, max_retries=1, **FAST)
        served = sum(1 for r in fake.requests if r["status"] == 200 and not r["drop"])
    lines = assert_one_line_per_id(tmp_path / "v.jsonl", [t.id for t in data])
    assert_consistent(summary, lines)
    assert summary.judged == 16
    assert 0 < summary.n_abstained and set(summary.abstained) <= {"connection", "timeout"}
    assert sum(not line["abstained"] for line in lines) <= served <= 5


def test_a_judge_that_raises_still_gets_a_line(tmp_path):
    class Broken(TrajectoryJudge):
        def forward(self, trajectory):
            raise RuntimeError("contract broken")

    data = make_dataset(3)
    with FakeOpenAI(by_text) as fake:
        summary = judge_stream(Broken(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), **FAST)
    lines = assert_one_line_per_id(tmp_path / "v.jsonl", [t.id for t in data])
    assert_consistent(summary, lines)
    assert summary.abstained == Counter(other=3)


def test_mixed_faults_everything_accounted(tmp_path):
    data = make_dataset(20)
    plan = ["ok", "http_500", "garbage", "ok", "http_400", "drop", "ok", "timeout"]

    def responder(body, n):
        i = int(user_text(body).split("HAT")[1][:3])
        fault = plan[i % len(plan)]
        return by_text(body, n) if fault == "ok" else fault

    with FakeOpenAI(responder, hang_seconds=5.0) as fake:
        summary = judge_stream(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), timeout=1.0,
                               max_retries=1, concurrency=4, **FAST)
    lines = assert_one_line_per_id(tmp_path / "v.jsonl", [t.id for t in data])
    assert_consistent(summary, lines)
    expected = Counter()
    for i in range(20):
        fault = plan[i % len(plan)]
        if fault != "ok":
            expected[{"http_500": "http_5xx", "garbage": "parse", "http_400": "http_4xx", "drop": "connection",
                      "timeout": "timeout"}[fault]] += 1
    assert summary.abstained == expected
    assert summary.judged == 20 and summary.passed == sum(1 for i in range(20)
                                                          if plan[i % len(plan)] == "ok" and i % 2 == 0)


# -- SIGKILL mid-run, then re-run ------------------------------------------------------------------

RUNNER = """
import json, sys
sys.path.insert(0, {repo!r})
from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from tests.support.helpers import make_trajectory

url, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lm = make_lm(LMConfig(model="fake-judge", api_base=url + "/v1", cache=False, num_retries=0, timeout=10))
stream = (make_trajectory(i, success=i % 2 == 0) for i in range(n))
summary = judge_stream(TrajectoryJudge(), stream, out, lm=lm, concurrency=4, progress=False, fsync_every=0)
print(json.dumps(summary.to_dict()))
"""


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, deadline: float) -> int:
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            count = path.read_bytes().count(b"\n")
            if count >= n:
                return count
        time.sleep(0.01)
    pytest.fail(f"the judging subprocess wrote fewer than {n} lines (exit code {proc.poll()})")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"),
                    reason="needs signal.SIGKILL, which this platform lacks (Windows): run it on Linux or macOS")
def test_sigkill_mid_run_then_rerun_gives_exactly_one_line_per_id(tmp_path):
    n = 40
    script = tmp_path / "runner.py"
    script.write_text(RUNNER.format(repo=str(REPO)))
    out = tmp_path / "v.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with FakeOpenAI(by_text, delay=0.1) as fake:
        command = [sys.executable, str(script), fake.url, str(out), str(n)]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            _wait_for_lines(out, 8, proc, time.monotonic() + 60)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        before = out.read_bytes().count(b"\n")
        assert 8 <= before < n

        rerun = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    lines = assert_one_line_per_id(out, [f"synthetic:{i}:0" for i in range(n)])
    assert len(lines) == n
    assert summary["resumed"] == before and summary["judged"] == n - before
    assert all(not line["abstained"] for line in lines)
