"""Sessions from MLflow: the traces of one conversation, logged with MLflow's own tracing API in a local SQLite store
(each turn a trace whose metadata ``mlflow.trace.session`` names the session), are judged as ONE trajectory with
``judge --from-mlflow ... --session-key``: one verdict per session (its id the session id), the judge (the fake
OpenAI-compatible server on 127.0.0.1) reading every turn of the conversation in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

mlflow = pytest.importorskip("mlflow", reason="the MLflow integration needs the extra: pip install -e '.[mlflow]'")

from mlflow.entities import SpanType  # noqa: E402

from rubricforge_dspy.integrations.mlflow import load_mlflow_traces  # noqa: E402
from rubricforge_dspy.judge.module import TrajectoryJudge  # noqa: E402
from rubricforge_dspy.program.store import freeze  # noqa: E402
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text  # noqa: E402
from tests.support.helpers import REPO  # noqa: E402
from tests.support.mlflow_runs import human, local_store  # noqa: E402

# (session, turn): conv-1 has two turns, conv-2 one; the turns are logged interleaved
TURNS = [("conv-1", "turn one: find me a flight to Oslo"), ("conv-2", "turn one: cancel my booking R042"),
         ("conv-1", "turn two: book the cheapest of those")]


def log_turn(session: str, question: str) -> str:
    """One turn of a chat agent as one MLflow trace of that session; returns the trace id."""

    @mlflow.trace(name="chat_turn", span_type=SpanType.AGENT)
    def turn(text: str) -> str:
        mlflow.update_current_trace(metadata={"mlflow.trace.session": session})
        with mlflow.start_span("chat", span_type=SpanType.CHAT_MODEL) as span:
            span.set_inputs({"messages": [{"role": "user", "content": text}]})
            answer = f"done: {text.split(': ', 1)[1]}"
            span.set_outputs({"choices": [{"message": {"role": "assistant", "content": answer}}]})
        return answer

    turn(question)
    return mlflow.get_last_active_trace_id()


@pytest.fixture
def store(tmp_path):
    uri = local_store(tmp_path, "sessions")
    ids = [log_turn(session, question) for session, question in TURNS]
    mlflow.flush_trace_async_logging()
    for trace_id in (ids[0], ids[2]):  # a person labeled both turns of conv-1 a success
        human(trace_id, True)
    return uri, ids


@pytest.mark.slow
def test_the_traces_of_one_mlflow_session_are_judged_as_one_trajectory(store, tmp_path):
    uri, ids = store
    traces = list(load_mlflow_traces(uri, "sessions"))
    # the loader exposes it (MLflow lists traces of one timestamp in no fixed order: compared as a multiset)
    assert sorted(t.hidden.get("session_id") for t in traces) == sorted(s for s, _ in TURNS)
    program = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), program, lm="fake-judge")
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(responder=lambda body, n: {"reason": "ok", "passed": True, "score": 0.9}) as fake:
        done = subprocess.run([sys.executable, "-m", "rubricforge_dspy", "judge", "--program", str(program),
                               "--from-mlflow", uri, "--experiment", "sessions", "--session-key",
                               "--out", str(out), "--model", fake.model, "--api-base", fake.api_base],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
        prompts = [user_text(body) for body in fake.chat_bodies]
    assert done.returncode == 0, done.stderr
    assert "3 trace(s) grouped into 2 session" in done.stderr and "the trajectory id is the session id" in done.stderr
    lines = {line["id"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert set(lines) == {"conv-1", "conv-2"}  # one verdict per session, not per trace
    assert lines["conv-1"]["n_steps"] == 4 and lines["conv-2"]["n_steps"] == 2
    assert lines["conv-1"]["label"] == 1 and lines["conv-2"]["label"] is None  # labels per session
    assert len(prompts) == 2
    [conv1] = [p for p in prompts if "Oslo" in p]
    assert conv1.index("turn one: find me a flight to Oslo") < conv1.index("done: find me a flight to Oslo") \
        < conv1.index("turn two: book the cheapest of those") < conv1.index("done: book the cheapest of those")
    assert "cancel my booking" not in conv1
