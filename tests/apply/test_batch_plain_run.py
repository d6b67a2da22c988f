"""A plain program's run through the Batch API is a run of the one job runner (issue 42 item 2: `run_batch_api` is
`run_judge_file` with `BatchCalls`): against the fake server's /v1/files + /v1/batches, it writes exactly the lines
a local run writes on the same items (ids, verdicts, evidence, and the ``tokens`` of each answer's ``usage``: a #40
gap, none before), and a run whose batch ended early resumes asking only for the rest."""

from __future__ import annotations

import hashlib
import json

import pytest

from rubricforge_dspy.apply.openai_batch import BatchJobFailed, run_batch_api, state_path
from rubricforge_dspy.apply.stream import run_judge_file
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text
from tests.support.helpers import AIRLINE

N = 10
COMPARED = ("id", "task_id", "n_steps", "passed", "score", "reason", "abstained", "error_kind", "contradiction",
            "label", "reward", "evidence", "tokens", "judge_fingerprint", "program_sha256", "model")


def responder(body, n):
    """A reply that depends on the trajectory only (not on arrival order or the back end)."""
    pick = int(hashlib.sha256(user_text(body).encode()).hexdigest(), 16) % 5
    return [{"reason": "Booked.", "passed": True, "score": 0.9},
            {"reason": "The tool returned an error.", "passed": False, "score": 0.2},
            {"reason": "Odd.", "passed": True, "score": 0.1},
            Reply(content='{"reason": "cut', finish_reason="length"),
            "garbage"][pick]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _said(path):
    return {line["id"]: {key: line.get(key) for key in COMPARED} for line in _lines(path)}


def _asked(fake) -> int:
    """The requests of every batch the fake Batch API was given."""
    return sum(batch["request_counts"]["total"] for batch in fake.batch_api.batches.values())


def test_a_plain_batch_api_run_writes_the_lines_of_a_local_run_tokens_included(tmp_path):
    local, batch = tmp_path / "local" / "v.jsonl", tmp_path / "batch" / "v.jsonl"
    with FakeOpenAI(responder) as fake:
        lm = make_lm(LMConfig(model=fake.model, api_base=fake.api_base))
        run_judge_file(None, AIRLINE, local, lm=lm, limit=N, cache=False, progress=False)
        online = fake.n_requests
        summary = run_batch_api(TrajectoryJudge(), AIRLINE, batch, lm=lm, limit=N, cache=False, progress=False,
                                poll_interval=0.05)
        assert fake.batch_api.batches_created == 1 and _asked(fake) == N == online
    assert _said(batch) == _said(local)  # the same job, the same lines: the verdicts, evidence and tokens
    lines = _lines(batch)
    assert len(lines) == N and all(line["evidence"] is not None for line in lines)
    answered = [line for line in lines if not line["abstained"]]  # a parsed answer: its usage is on the line
    assert answered and all(line["tokens"]["prompt"] > 0 and line["tokens"]["calls"] == 1 for line in answered)
    assert len({line["error_kind"] for line in lines}) >= 2  # the replies exercised several outcomes
    assert (summary.judged, summary.submitted, summary.batch_status, summary.lm_calls) == (N, N, "completed", N)
    assert summary.tokens is not None and summary.tokens["prompt_tokens"] == sum(
        line["tokens"]["prompt"] for line in lines if line.get("tokens"))
    assert not state_path(batch).exists()


def test_a_plain_batch_api_run_cut_short_resumes_asking_only_for_the_rest(tmp_path):
    out = tmp_path / "v.jsonl"
    ok = {"reason": "Booked.", "passed": True, "score": 0.9}
    with FakeOpenAI(lambda body, n: ok, batch_options={"batch_fault": "expired", "expire_after": 3}) as fake:
        lm = make_lm(LMConfig(model=fake.model, api_base=fake.api_base))
        with pytest.raises(BatchJobFailed, match="'expired'"):
            run_batch_api(TrajectoryJudge(), AIRLINE, out, lm=lm, limit=N, progress=False, poll_interval=0.05)
        first = _lines(out)
        kept = [line["id"] for line in first if not line["abstained"]]
        # the requests it never answered are recorded as abstentions for a batch error, which a re-run asks again
        assert len(first) == N and len(kept) == 3 and _asked(fake) == N and not state_path(out).exists()
        assert {line["error_kind"] for line in first if line["abstained"]} == {"other"}
        fake.batch_api.batch_fault = None
        again = run_batch_api(TrajectoryJudge(), AIRLINE, out, lm=lm, limit=N, progress=False, poll_interval=0.05)
        assert _asked(fake) == N + (N - 3)  # the second batch asked only what the first left
    ids = [line["id"] for line in _lines(out)]
    assert len(ids) == len(set(ids)) == N and set(kept) <= set(ids)
    assert (again.resumed, again.retried, again.judged, again.submitted) == (3, N - 3, N - 3, N - 3)
    assert not any(line["abstained"] for line in _lines(out))


def test_a_pending_batch_is_polled_again_not_submitted_again(tmp_path):
    """A run killed while its batch is pending left ``OUT.batch.json``: the next run polls that batch (the runner
    hands it the ids still to judge) and submits nothing."""
    out = tmp_path / "v.jsonl"
    ok = {"reason": "Booked.", "passed": True, "score": 0.9}
    with FakeOpenAI(lambda body, n: ok) as fake:
        lm = make_lm(LMConfig(model=fake.model, api_base=fake.api_base))
        run_batch_api(TrajectoryJudge(), AIRLINE, out, lm=lm, limit=N, progress=False, poll_interval=0.05)
        state = {"batch_id": next(iter(fake.batch_api.batches)), "input_file_id": "file-fake-0",
                 "judge_fingerprint": _lines(out)[0]["judge_fingerprint"],
                 "requests": {f"r{k}": line["id"] for k, line in enumerate(_lines(out))}}
        # as if killed before anything was written: the output is gone, its job file and the batch are not
        out.write_bytes(b"")
        (tmp_path / "v.jsonl.ids").unlink(missing_ok=True)
        state_path(out).write_text(json.dumps(state))
        again = run_batch_api(TrajectoryJudge(), AIRLINE, out, lm=lm, limit=N, progress=False, poll_interval=0.05,
                              cache=False)
        assert fake.batch_api.batches_created == 1 and again.resumed_batch and again.judged == N
    assert len(_lines(out)) == N and not state_path(out).exists()
