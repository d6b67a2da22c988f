"""Judging on Ray (`rubricforge_dspy.apply.ray`): the in-Ray SGLang engine's preprocess and postprocess steps
(no GPU), a worker closing its connections when a batch ends, and a real local Ray cluster against two fake
OpenAI-compatible servers: one verdict per id, a worker killed mid-run, faults recorded as abstentions, the
workers' fast path writing the lines the thread path writes."""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'rubricforge-dspy[ray]'")
pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'rubricforge-dspy[ray]'")

from rubricforge_dspy.apply.options import JobOptions  # noqa: E402
from rubricforge_dspy.apply.ray import (  # noqa: E402
    JudgeAnswer,
    JudgePrompt,
    RayCalls,
    _JudgeWorker,
    encode_inputs,
    judge_dataset,
    pool_config,
    trajectory_dataset,
)
from rubricforge_dspy.core.verdict import read_verdicts  # noqa: E402
from rubricforge_dspy.judge.module import TrajectoryJudge  # noqa: E402
from rubricforge_dspy.lm.circuit import JudgeUnavailableError  # noqa: E402
from rubricforge_dspy.lm.config import LMConfig  # noqa: E402
from rubricforge_dspy.lm.engine import make_lm  # noqa: E402
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text  # noqa: E402
from tests.support.helpers import make_dataset, make_trajectory  # noqa: E402

JOB_LINE = {"judge_fingerprint": "f" * 64, "program_sha256": "p" * 64, "model": "fake-judge"}


# -- the in-Ray SGLang engine's steps, without a GPU ---------------------------------------------------

def test_preprocess_builds_exactly_the_messages_the_http_path_sends():
    trajectory = make_trajectory(3, success=False)
    with FakeOpenAI() as fake:
        judge = TrajectoryJudge()
        judge.set_lm(make_lm(LMConfig(model=fake.model, api_base=fake.api_base, max_tokens=200)))
        judge(trajectory=trajectory)
        body = fake.chat_bodies[0]
    row = JudgePrompt(judge, max_tokens=200)({"id": trajectory.id, "trajectory": trajectory})
    assert row["messages"] == body["messages"]
    assert row["sampling_params"]["max_new_tokens"] == body["max_tokens"] == 200
    assert row["sampling_params"]["temperature"] == body["temperature"] == 0.0
    assert json.loads(row["sampling_params"]["json_schema"]) == body["response_format"]["json_schema"]["schema"]
    text = "\n".join(m["content"] for m in row["messages"])
    assert "CANARY" not in text and "payment method not found" in text  # the steps, never the hidden fields


def _answer(judge, **engine_row):
    trajectory = make_trajectory(1, success=True)
    return json.loads(JudgeAnswer(judge, max_tokens=64, job_line=JOB_LINE)(
        {"id": trajectory.id, "trajectory": trajectory, **engine_row})["line"])


def test_postprocess_turns_answers_into_verdicts_and_abstentions():
    judge = TrajectoryJudge()
    good = _answer(judge, generated_text='{"reason": "booked", "passed": true, "score": 0.9}',
                   num_generated_tokens=20)
    assert (good["passed"], good["score"], good["abstained"], good["attempts"]) == (True, 0.9, False, 1)
    assert good["judge_fingerprint"] == JOB_LINE["judge_fingerprint"] and good["label"] == 1
    garbage = _answer(judge, generated_text="I think it went fine, probably.", num_generated_tokens=9)
    assert (garbage["abstained"], garbage["passed"], garbage["error_kind"]) == (True, False, "parse")
    wrong = _answer(judge, generated_text='{"reason": "x", "passed": "maybe", "score": 0.9}', num_generated_tokens=9)
    assert (wrong["abstained"], wrong["error_kind"]) == (True, "invalid")
    # Cut at max_tokens: by the finish reason when the row has one, else by the token count; never parsed,
    # even when what was cut happens to be valid JSON.
    cut = _answer(judge, generated_text='{"reason": "The agent called book_res', num_generated_tokens=64)
    assert (cut["abstained"], cut["error_kind"]) == (True, "truncated")
    cut_json = _answer(judge, generated_text='{"reason": "ok", "passed": true, "score": 0.9}', finish_reason="length")
    assert (cut_json["abstained"], cut_json["error_kind"]) == (True, "truncated")
    contradiction = _answer(judge, generated_text='{"reason": "x", "passed": true, "score": 0.1}',
                            num_generated_tokens=9)
    assert (contradiction["passed"], contradiction["contradiction"], contradiction["abstained"]) == (False, True, False)


def test_the_sglang_steps_refuse_a_judge_that_reads_more_than_text():
    from rubricforge_dspy.core.errors import InputError

    class Wider(TrajectoryJudge):
        pass

    with pytest.raises(InputError, match="engine 'http'"):
        JudgePrompt(Wider(), max_tokens=64)


def test_a_pool_of_endpoints_is_one_job_whatever_their_order():
    config = LMConfig(model="m", api_base="http://a:1/v1")
    one, configs = pool_config(config, None)
    assert one == config and configs == [config]
    ab, _ = pool_config(config, ["http://a:1/v1", "http://b:2/v1/"])
    ba, configs = pool_config(config, ["http://b:2/v1", "http://a:1/v1"])
    assert ab == ba and [c.api_base for c in configs] == ["http://b:2/v1", "http://a:1/v1"]


class _Redelivered:
    """What the driver reads when Ray re-executes a block after a worker died: the block's verdicts again."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        yield from self.batches


def test_the_driver_collects_an_id_once_when_a_block_comes_back():
    import orjson

    from rubricforge_dspy.apply.runner import RunItem
    from rubricforge_dspy.core.verdict import Verdict

    trajectories = make_dataset(6)
    items = {t.id: RunItem(k, t) for k, t in enumerate(trajectories)}
    record = orjson.dumps({**Verdict.from_answer(True, 0.9, "ok").to_dict(), "attempts": 1})
    block = lambda chosen: {"id": chosen, "verdict": [record] * len(chosen)}  # noqa: E731
    ids = list(items)
    calls = RayCalls.__new__(RayCalls)  # its collecting only: no Ray needed
    calls.redelivered = 0
    collected, checks = [], []
    # the block holding ids[0:3] is delivered twice, and a verdict for an id not asked comes back
    got, fast = calls.collect_batches(_Redelivered([block(ids[0:3]), block(ids[3:]), block(ids[0:3]),
                                                    block(["not-asked"])]), items,
                                      lambda item, verdict: collected.append((item.trajectory.id, verdict.attempts)),
                                      lambda: checks.append(1), None)
    assert sorted(collected) == sorted((i, 1) for i in ids)  # each id once, with its attempts
    assert (got, fast, calls.redelivered, len(checks)) == (6, False, 4, 4)


# -- a worker's connections ---------------------------------------------------------------------------

class OwnForward(TrajectoryJudge):
    """Overrides a call: no fast path (`direct_call` is None), so a worker judges it from threads."""

    def forward(self, trajectory):
        return super().forward(trajectory=trajectory)


def _connections_to(port: int) -> int:
    """This process's open TCP connections to `port` (the client's side)."""
    import psutil

    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED")


def _batch(trajectories) -> dict:
    return {"id": [t.id for t in trajectories],
            "inputs": [encode_inputs(TrajectoryJudge().inputs_of(t)) for t in trajectories]}


@pytest.mark.parametrize("judge_class", [TrajectoryJudge, OwnForward], ids=["fast_path", "threads"])
def test_a_worker_closes_its_connections_when_a_batch_ends_and_when_it_fails(judge_class):
    """Ray Data never tells a worker that the job ended, and a worker's ``__del__`` may run on any thread
    or never: each batch closes the keep-alive connections it opened, whether it succeeded or raised."""
    trajectories = make_dataset(6)
    with FakeOpenAI(keep_alive=True) as server:  # keeps each connection until the client closes it
        worker = _JudgeWorker(judge_class(), [_config(server)],
                              JobOptions(concurrency=3, max_retries=0, max_consecutive_lm_errors=None))
        for _ in range(2):  # a worker judges many batches: each opens and closes its connections
            lines = worker(_batch(trajectories))
            assert len(lines["id"]) == 6 and lines["fast"] == [judge_class is TrajectoryJudge] * 6
            assert server.n_requests > 0 and _connections_to(server.port) == 0
        served = server.n_requests
    assert served == 12
    with FakeOpenAI(responder=lambda body, n: "http_500", keep_alive=True) as dead:
        worker = _JudgeWorker(judge_class(), [_config(dead)],
                              JobOptions(concurrency=3, max_retries=0, max_consecutive_lm_errors=2))
        with pytest.raises(JudgeUnavailableError, match="consecutive"):
            worker(_batch(trajectories))
        assert dead.n_requests >= 2 and _connections_to(dead.port) == 0


# -- a real local Ray cluster ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024, log_to_driver=False)
    yield
    ray.shutdown()


def _config(fake) -> LMConfig:
    return LMConfig(model=fake.model, api_base=fake.api_base, max_tokens=128)


def _ids(path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_two_servers_round_robin_one_verdict_per_id_faults_abstain(cluster, tmp_path):
    def faulty(body, n):
        episode = user_text(body)
        if "HAT003" in episode:
            return "garbage"
        if "HAT004" in episode:
            return "truncated"
        return {"reason": "The booking tool returned a reservation.", "passed": True, "score": 0.9}

    trajectories = make_dataset(30)
    out = tmp_path / "verdicts.jsonl"
    with FakeOpenAI() as a, FakeOpenAI(responder=faulty) as b:
        # HAT003 and HAT004 reach both servers only by chance: make both serve the same faults.
        a.responder = faulty
        summary = judge_dataset(trajectory_dataset(trajectories, rows_per_block=5), None, out=out,
                                lm_config=_config(a), api_bases=[a.api_base, b.api_base], workers=2,
                                concurrency=4, batch_size=5)
        served = (a.n_requests, b.n_requests)
    index = read_verdicts(out)
    assert sorted(index) == sorted(t.id for t in trajectories)  # one line per id (read_verdicts refuses repeats)
    assert summary.judged == 30 and summary.lm_calls == 30 and summary.fast_path  # one event loop per worker
    assert min(served) > 0 and sum(served) == 30  # both endpoints were used
    faults = {i: r for i, r in index.items() if r["abstained"]}
    assert sorted(r["error_kind"] for r in faults.values()) == ["parse", "truncated"]
    assert all(not r["passed"] for r in faults.values())
    assert dict(summary.abstained) == {"parse": 1, "truncated": 1} and summary.passed == 28
    # A re-run judges nothing: the anti-join finds every id written.
    with FakeOpenAI() as a2:
        again = judge_dataset(trajectory_dataset(trajectories), None, out=out, lm_config=_config(a),
                              api_bases=[a.api_base, b.api_base])
        assert a2.n_requests == 0
    assert again.judged == 0 and again.resumed == 30 and len(_ids(out)) == 30


_ASKED: collections.Counter = collections.Counter()


def _scripted(body, n):
    """The same answer for an episode whichever server is asked: faults by flight number, a 503 on every
    other ask of HAT005 (the first of each run, then an answer), scores that vary with the episode."""
    episode = user_text(body)
    index = int(episode.split("flight HAT", 1)[1][:3])
    fault = {3: "garbage", 4: "truncated", 6: "http_400"}.get(index)
    if fault:
        return fault
    if index == 5:
        _ASKED[index] += 1
        if _ASKED[index] % 2 == 1:
            return "http_503"
    if index == 7:
        return {"reason": "says passed with a failing score", "passed": True, "score": 0.1}
    passed = index % 2 == 0
    return {"reason": f"episode {index}", "passed": passed, "score": round((0.55 if passed else 0.05) + index / 50, 3)}


def _worker_logs_mention(text: str) -> list[str]:
    """The Ray worker log files of this session that contain `text`."""
    import glob

    logs = os.path.join(ray._private.worker._global_node.get_session_dir_path(), "logs")
    hits = []
    for path in glob.glob(os.path.join(logs, "worker-*")) + glob.glob(os.path.join(logs, "python-core-worker-*")):
        with open(path, errors="replace") as handle:
            if text in handle.read():
                hits.append(os.path.basename(path))
    return hits


@pytest.mark.slow
def test_the_fast_path_writes_the_lines_the_thread_path_writes(cluster, tmp_path):
    trajectories = make_dataset(16)
    runs = {}
    # Keep-alive servers: a connection a worker leaves open stays open.
    with FakeOpenAI(responder=_scripted, keep_alive=True) as a, FakeOpenAI(responder=_scripted, keep_alive=True) as b:
        for name, judge in (("fast", TrajectoryJudge()), ("threads", OwnForward())):
            out = tmp_path / f"{name}.jsonl"
            summary = judge_dataset(trajectory_dataset(trajectories, rows_per_block=4), judge, out=out,
                                    lm_config=_config(a), api_bases=[a.api_base, b.api_base], workers=2,
                                    concurrency=3, batch_size=4, backoff=0.01)
            runs[name] = (summary, read_verdicts(out))
            # The workers close their connections as their batches end (the servers see them closed).
            deadline = time.time() + 30
            while _server_connections(a.port) + _server_connections(b.port) and time.time() < deadline:
                time.sleep(0.1)
            assert _server_connections(a.port) == _server_connections(b.port) == 0, name
        served = (a.n_requests, b.n_requests)
    (fast, fast_lines), (threads, thread_lines) = runs["fast"], runs["threads"]
    assert fast.fast_path and not threads.fast_path
    assert sorted(fast_lines) == sorted(thread_lines) == sorted(t.id for t in trajectories)
    said = lambda r: (r["passed"], r["score"], r["abstained"], r.get("error_kind"), r["contradiction"],  # noqa: E731
                      r["attempts"])
    assert {i: said(r) for i, r in fast_lines.items()} == {i: said(r) for i, r in thread_lines.items()}
    kinds = sorted(r["error_kind"] for r in fast_lines.values() if r["abstained"])
    assert kinds == ["http_4xx", "parse", "truncated"], kinds
    retried = next(r for i, r in fast_lines.items() if i.startswith("synthetic:t5:"))
    assert retried["attempts"] == 2 and not retried["abstained"]  # a 503, retried on its endpoint, then answered
    assert fast.retries == threads.retries == 1 and fast.lm_calls == threads.lm_calls == 17
    assert min(served) > 0  # both endpoints, both runs
    # every line says what its judge read (the fast path's TrajectoryJudge renders with a record; the own-forward
    # judge renders its own way: unknown), and the fast path's answered lines carry the tokens the server reported
    assert all(r["evidence"]["read"] == "budget" for r in fast_lines.values())
    with_tokens = [r["tokens"] for r in fast_lines.values() if "tokens" in r]
    assert with_tokens and all(t["prompt"] > 0 and t["calls"] >= 1 for t in with_tokens)
    assert dict(fast.abstained) == dict(threads.abstained) and fast.contradictions == threads.contradictions == 1
    # No actor left a session for the garbage collector: no "Unclosed client session" from aiohttp, nor an
    # error closing it, in the logs of the actors once they have ended.
    deadline = time.time() + 60
    while _judge_workers() and time.time() < deadline:
        time.sleep(0.2)
    assert not _judge_workers(), "the Ray judge workers did not end"
    for complaint in ("Unclosed client session", "Unclosed connector", "Cannot close a running event loop"):
        assert not _worker_logs_mention(complaint), complaint


def _server_connections(port: int) -> int:
    """The connections a fake server in this process holds open with a client (the server's side)."""
    import psutil

    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.laddr and c.laddr.port == port and c.status == "ESTABLISHED")


def _judge_workers() -> list[int]:
    """The pids of the Ray actors judging now (Ray titles each worker process ``ray::<actor class>``)."""
    import psutil

    pids = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        if any("_JudgeWorker" in part for part in (process.info["cmdline"] or [])):
            pids.append(process.info["pid"])
    return pids


@pytest.mark.slow
def test_a_worker_killed_mid_run_then_a_rerun_leaves_one_verdict_per_id(cluster, tmp_path):
    trajectories = make_dataset(60)
    out = tmp_path / "verdicts.jsonl"
    killed: list[int] = []
    errors: list[BaseException] = []
    with FakeOpenAI(delay=0.25) as a, FakeOpenAI(delay=0.25) as b:
        def run():
            try:
                judge_dataset(trajectory_dataset(trajectories, rows_per_block=6), None, out=out,
                              lm_config=_config(a), api_bases=[a.api_base, b.api_base], workers=2, concurrency=3,
                              batch_size=6)
            except Exception as error:  # noqa: BLE001 - a run may fail when its worker is killed: re-run below
                errors.append(error)

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.time() + 120
        while time.time() < deadline and not killed:
            lines = len(_ids(out)) if out.exists() else 0
            pids = _judge_workers()
            if 6 <= lines < 50 and pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.1)
        thread.join(timeout=300)
        assert not thread.is_alive()
        assert killed, "no Ray judge worker was found to kill mid-run"
        first = collections.Counter(_ids(out))
        assert first and max(first.values()) == 1  # never two lines for an id, even with a block re-executed
        summary = judge_dataset(trajectory_dataset(trajectories, rows_per_block=6), None, out=out,
                                lm_config=_config(a), api_bases=[a.api_base, b.api_base], workers=2, concurrency=3)
    ids = _ids(out)
    assert sorted(ids) == sorted(t.id for t in trajectories) and len(ids) == len(set(ids))
    assert summary.resumed == len(first) and summary.judged == 60 - len(first)
    assert summary.fast_path or summary.judged == 0  # the restarted worker may have finished the first run


@pytest.mark.slow
def test_a_dead_server_stops_the_run_loudly_and_keeps_what_was_written(cluster, tmp_path):
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError

    out = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(responder=lambda body, n: "http_500") as dead:
        with pytest.raises(JudgeUnavailableError, match="consecutive calls"):
            judge_dataset(trajectory_dataset(make_dataset(12), rows_per_chunk=5, rows_per_block=4), None, out=out,
                          lm_config=_config(dead), workers=1, concurrency=1, batch_size=4, max_retries=0,
                          max_consecutive_lm_errors=3)
    assert not out.exists() or all(json.loads(line)["abstained"] for line in out.read_text().splitlines())


@pytest.mark.slow
def test_a_worker_keeps_concurrency_calls_in_flight_with_the_default_batch_size(cluster, tmp_path):
    """A batch smaller than `concurrency` caps a worker's calls in flight at the batch's size: the default
    batch (twice the concurrency, at least 32) lets `concurrency` calls run at once."""
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def slow(body, n):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return {"reason": "The booking tool returned a reservation.", "passed": True, "score": 0.9}

    trajectories = make_dataset(60)
    with FakeOpenAI(responder=slow) as server:
        summary = judge_dataset(trajectory_dataset(trajectories, rows_per_block=60), None, out=tmp_path / "v.jsonl",
                                lm_config=_config(server), workers=1, concurrency=48)
    assert summary.judged == 60 and summary.fast_path
    assert state["peak"] > 32, state  # the old default batch of 32 rows allowed at most 32
