"""Faults injected by a real HTTP server on 127.0.0.1 (the project's fake), and what the user sees.

Each test states the user-visible outcome in its docstring."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.induction.inducer import InductionConfig, induce
from rubricforge_dspy.lm.circuit import JudgeUnavailableError
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.serve.process import free_port
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text
from tests.support.helpers import make_dataset
from tests.support.induction_http import is_reflection, reflection_reply, rubric_judge

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


def lm_for(fake: FakeOpenAI, **overrides):
    return make_lm(LMConfig(model=fake.model, api_base=fake.api_base, **{"num_retries": 0, "timeout": 5, **overrides}))


def test_unparsable_verdicts_reach_the_reflection_lm_as_format_failures(tmp_path):
    """User sees: an induction against a server that answers garbage to some judge calls still runs; the
    reflection LM is shown those calls as format failures (with the raw answer), so it can fix the rubric."""
    split = split_by_task(make_dataset(24), seed=0)
    garbage = "Sure! The agent did fine, I would say passed."

    def responder(body, n):
        if is_reflection(body):
            return reflection_reply(body)
        if "HAT0" in user_text(body) and int(re.search(r"HAT0(\d\d)", user_text(body)).group(1)) % 3 == 0:
            return garbage
        return rubric_judge(body)

    with FakeOpenAI(responder) as fake:
        result = induce(split.train, split.val, judge_lm=lm_for(fake), reflection_lm=lm_for(fake, max_tokens=2000),
                        config=InductionConfig(budget=60, minibatch=4, seed=0), out_path=tmp_path / "p.json")
        reflections = [json.dumps(b) for b in fake.chat_bodies if is_reflection(b)]
    assert reflections, "GEPA never asked the reflection LM"
    shown = [r for r in reflections if "parse" in r.lower() and garbage[:20] in r]
    assert shown, "no reflection prompt showed the unparsable answer as a format failure"
    assert result.lm_errors == 0 and (tmp_path / "p.json").exists()


def run_cli(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rubricforge_dspy.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.slow
def test_induce_against_a_closed_port_exits_nonzero_within_a_minute_naming_the_url(tmp_path):
    """User sees: `rubricforge induce --api-base <dead URL>` stops within a minute with exit code 3 and
    "error: JudgeUnavailableError: judge LM ... @ http://127.0.0.1:<port>/v1 failed 3 consecutive calls";
    no program is written."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    out = tmp_path / "p.json"
    started = time.monotonic()
    done = run_cli(["induce", "--data", str(AIRLINE), "--sample-tasks", "20", "--budget", "40", "--out", str(out),
                    "--log-dir", str(tmp_path / "log"), "--api-base", url, "--model", "m@r", "--timeout", "5"])
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr[-2000:]
    assert elapsed < 60
    assert url in done.stderr and "JudgeUnavailableError" in done.stderr and "consecutive" in done.stderr
    assert not out.exists()


def test_induce_against_a_server_answering_500_stops_and_the_log_dir_resumes(tmp_path):
    """User sees: a server that dies (HTTP 500 on every call) stops the induction with the endpoint and the
    HTTP status named; re-running with the same --log-dir once the server is back completes the run."""
    split = split_by_task(make_dataset(24), seed=0)
    config = InductionConfig(budget=50, minibatch=3, seed=0)
    log_dir, out = tmp_path / "log", tmp_path / "p.json"
    with FakeOpenAI(lambda body, n: "http_500") as dead:
        with pytest.raises(JudgeUnavailableError, match=re.escape(dead.api_base) + ".*HTTP 500"):
            induce(split.train, split.val, judge_lm=lm_for(dead), reflection_lm=lm_for(dead), config=config,
                   log_dir=log_dir, out_path=out)
    assert not out.exists() and (log_dir / "rubricforge_run.json").exists()

    def healthy(body, n):
        return reflection_reply(body) if is_reflection(body) else rubric_judge(body)

    with FakeOpenAI(healthy) as back:
        result = induce(split.train, split.val, judge_lm=lm_for(back), reflection_lm=lm_for(back), config=config,
                        log_dir=log_dir, out_path=out)
    assert out.exists() and result.beat_seed


def test_server_killed_mid_induction_stops_it(tmp_path):
    """User sees: the judge server dies after 10 requests; the run stops with a connection error naming the
    endpoint instead of spending its budget on zero scores."""
    split = split_by_task(make_dataset(24), seed=0)

    def responder(body, n):
        return reflection_reply(body) if is_reflection(body) else rubric_judge(body)

    with FakeOpenAI(responder, die_after=10) as fake:
        with pytest.raises(JudgeUnavailableError, match=re.escape(fake.api_base)):
            induce(split.train, split.val, judge_lm=lm_for(fake), reflection_lm=lm_for(fake),
                   config=InductionConfig(budget=60, minibatch=3), out_path=tmp_path / "p.json")
        assert fake.n_requests <= 10 + 3
    assert not (tmp_path / "p.json").exists()


def test_judge_records_a_length_truncated_answer_as_abstained(tmp_path, capsys):
    """User sees: `rubricforge judge` against a server that cuts answers at max_tokens writes
    "abstained": true, "error_kind": "truncated" for them, and the summary counts them."""
    out = tmp_path / "v.jsonl"
    complete = {"reason": "Booked.", "passed": True, "score": 0.9}

    def responder(body, n):
        # A cut answer that json_repair would happily turn into a pass.
        return Reply(content=json.dumps(complete)[:-1], finish_reason="length") if n % 2 else complete

    with FakeOpenAI(responder) as fake:
        assert main(["judge", "--data", str(AIRLINE), "--limit", "4", "--out", str(out), "--concurrency", "1",
                     "--api-base", fake.api_base, "--model", "m@r"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    truncated = [line for line in lines if line["abstained"]]
    assert len(truncated) == 2 and {line["error_kind"] for line in truncated} == {"truncated"}
    assert all(line["passed"] is False for line in truncated)
    assert "truncated=2" in capsys.readouterr().err


def test_no_cache_means_no_cache_even_with_the_same_model_name(tmp_path):
    """User sees: after judging against one server, the same command with --no-cache against a second server
    (same model name) that truncates every answer returns the second server's outcome, not the first's."""
    argv = ["judge", "--data", str(AIRLINE), "--limit", "3", "--concurrency", "1", "--model", "same-name"]
    with FakeOpenAI(lambda body, n: {"reason": "ok", "passed": True, "score": 0.9}) as first:
        assert main([*argv, "--out", str(tmp_path / "a.jsonl"), "--api-base", first.api_base]) == 0
    with FakeOpenAI(lambda body, n: "truncated") as second:
        assert main([*argv, "--out", str(tmp_path / "b.jsonl"), "--api-base", second.api_base, "--no-cache"]) == 3
        assert second.n_requests == 3
    lines = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [line["error_kind"] for line in lines] == ["truncated"] * 3
    # With the cache on, a different endpoint is a different fingerprint: still no stale verdicts.
    with FakeOpenAI(lambda body, n: "truncated") as third:
        assert main([*argv, "--out", str(tmp_path / "a2.jsonl"), "--api-base", third.api_base]) == 3  # no verdict
        assert third.n_requests == 3


@pytest.mark.parametrize("fault, kind", [("http_500", "http_5xx"), ("timeout", "timeout"), ("garbage", "parse"),
                                         ("drop", "connection"), ("html_200", "not_json")])
def test_judge_records_each_fault_by_kind(tmp_path, fault, kind, capsys):
    """User sees: every failed call is a line with abstained true and its error kind; when no call produced
    a verdict, whatever the kind (an unparsable answer too), the command exits 3 saying so."""
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: fault, hang_seconds=3) as fake:
        code = main(["judge", "--data", str(AIRLINE), "--limit", "2", "--out", str(out), "--concurrency", "2",
                     "--api-base", fake.api_base, "--model", "m@r", "--timeout", "0.5"])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 and all(line["abstained"] and line["error_kind"] == kind for line in lines)
    assert code == 3
    assert "every judge call failed" in capsys.readouterr().err


def test_an_html_page_answered_with_200_is_not_json_not_retried_and_opens_the_circuit(tmp_path, capsys):
    """User sees: a judge server (or a proxy in front of it) that answers every call with an HTML page and
    HTTP 200 is named as such: lines of kind ``not_json`` (not ``http_5xx``), each asked once (the same URL
    gives the same page: not retried), and after --max-consecutive-errors of them the run stops with exit 3,
    naming the URL; a resumed run asks them again."""
    import dspy

    from rubricforge_dspy.judge.execution import judge_verdict
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.lm.errors import LM_ERROR_KINDS, error_kind, is_outage, is_transient

    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: "html_200") as fake:
        code = main(["judge", "--data", str(AIRLINE), "--limit", "12", "--out", str(out), "--concurrency", "1",
                     "--max-consecutive-errors", "3", "--api-base", fake.api_base, "--model", "m@r"])
        asked = fake.n_requests
        judge = TrajectoryJudge()
        for lm in (lm_for(fake), dspy.LM(f"openai/{fake.model}", api_base=fake.api_base, api_key="x", cache=False,
                                          num_retries=0)):  # the package's engine and DSPy's own
            judge.set_lm(lm)
            with pytest.raises(Exception) as raised:
                judge(trajectory="1. user: book it")
            assert error_kind(raised.value) == "not_json"
            assert not is_transient(raised.value) and is_outage(raised.value)
            assert judge_verdict(judge, "1. user: book it").attempts == 1
    assert code == 3
    err = capsys.readouterr().err
    assert "JudgeUnavailableError" in err and fake.api_base in err and "not JSON" in err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3 == asked and all(line["error_kind"] == "not_json" for line in lines)
    assert "not_json" in LM_ERROR_KINDS  # resumed: asked again


@pytest.mark.slow
def test_judge_against_a_dead_server_stops_and_resumes_what_failed(tmp_path, capsys):
    """User sees: `rubricforge judge` against a closed port stops after --max-consecutive-errors failures
    with exit 3, naming the URL; re-running against a live server asks again for every failed item."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    out = tmp_path / "v.jsonl"
    argv = ["judge", "--data", str(AIRLINE), "--limit", "12", "--out", str(out), "--model", "m@r",
            "--concurrency", "1", "--max-consecutive-errors", "3"]
    assert main([*argv, "--api-base", url]) == 3
    err = capsys.readouterr().err
    assert "JudgeUnavailableError" in err and url in err and "re-run" in err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert 3 <= len(lines) < 12 and all(line["error_kind"] == "connection" for line in lines)
    with FakeOpenAI(lambda body, n: {"reason": "ok", "passed": True, "score": 0.9}) as live:
        assert main([*argv, "--api-base", live.api_base]) == 0
        assert live.n_requests == 12  # the failed ones were asked again
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 12 and not any(line["abstained"] for line in lines)


def test_a_plain_litellm_dspy_lm_cut_at_max_tokens_is_truncated_not_a_verdict():
    """A user's own `dspy.LM` (LiteLLM, not `make_lm`) only logs DSPy's truncation warning; the strict
    judge still refuses the answer, even when the cut happened to leave complete JSON."""
    import dspy
    import pytest

    from rubricforge_dspy.judge.execution import judge_verdict
    from rubricforge_dspy.judge.module import TrajectoryJudge, VerdictFormatError
    from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply

    complete = json.dumps({"reason": "The booking call errored.", "passed": False, "score": 0.1})
    with FakeOpenAI(lambda body, n: Reply(content=complete, finish_reason="length")) as fake:
        lm = dspy.LM(f"openai/{fake.model}", api_base=fake.api_base, api_key="x", cache=False,
                     num_retries=0, max_tokens=64)
        judge = TrajectoryJudge()
        judge.set_lm(lm)
        with pytest.raises(VerdictFormatError) as caught:
            judge(trajectory="1. user: book it\n2. assistant: booked!")
        assert caught.value.kind == "truncated"
        verdict = judge_verdict(judge, "1. user: book it\n2. assistant: booked!")
        assert verdict.abstained and verdict.error_kind == "truncated" and verdict.passed is False
    with FakeOpenAI(lambda body, n: Reply(content=complete)) as fake:  # the same answer, not cut: a verdict
        lm = dspy.LM(f"openai/{fake.model}", api_base=fake.api_base, api_key="x", cache=False, num_retries=0)
        judge.set_lm(lm)
        assert judge(trajectory="1. user: book it").passed is False
