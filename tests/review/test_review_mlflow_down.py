"""``rubricforge review --to-mlflow`` when MLflow is not there, against a real ``mlflow server`` on 127.0.0.1: down at
start, the command exits 3 within seconds, naming the tracking URI; killed or hung while the page runs, each label is
answered at once and kept in the labels file, the send fails in the background within a bounded time, the failure
is counted and shown, and the page keeps answering."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("mlflow", reason="the MLflow sink needs the extra: pip install -e '.[mlflow]'")
pytestmark = pytest.mark.slow  # a real mlflow server per test: tens of seconds

import mlflow  # noqa: E402

from rubricforge_dspy.integrations.mlflow_labels import HumanLabelSink  # noqa: E402
from rubricforge_dspy.review import ReviewState  # noqa: E402
from tests.review.conftest import ROOT, journal_lines  # noqa: E402
from tests.support.mlflow_server import free_port, mlflow_server  # noqa: E402
from tests.support.review_mlflow import post_label, serving, traced_inputs  # noqa: E402

ANSWERED_WITHIN = 5.0  # seconds for the page to answer a label: nothing waits on MLflow (its calls take up to ~10 s)


@pytest.fixture
def served(tmp_path):
    """A real `mlflow server` with three traced agent runs, and a review of them sending labels there."""
    with mlflow_server(tmp_path) as server:
        mlflow.set_tracking_uri(server.uri)
        mlflow.set_experiment("down")
        ids, inputs = traced_inputs(tmp_path, server.uri, "down")
        sink = HumanLabelSink(server.uri, label_name="label", journal=str(inputs.labels_out))
        yield server, ids, inputs, ReviewState(inputs, on_label=sink, sink_name=f"MLflow at {server.uri}")


def timed_label(review, c, ident: str, choice: str) -> float:
    started = time.monotonic()
    post_label(review, c, ident, choice)
    return time.monotonic() - started


def test_mlflow_down_at_start_exits_3_within_15_seconds_naming_the_uri(demo_inputs):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    command = [sys.executable, "-m", "rubricforge_dspy", "review", "--data", *map(str, demo_inputs.data),
               "--verdicts", str(demo_inputs.verdicts), "--labels-out", str(demo_inputs.labels_out),
               "--to-mlflow", uri]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    assert elapsed < 15, f"took {elapsed:.1f} s"
    assert done.stderr.strip().splitlines() == [
        f"error: ServerError: MLflow at {uri} cannot be used (connection refused): start it, or give --to-mlflow "
        "the URI of a running tracking server"]
    assert done.stdout == "" and not demo_inputs.labels_out.exists()  # nothing was served


def test_mlflow_killed_while_the_page_runs_never_blocks_it(served):
    server, ids, inputs, state = served
    with serving(state) as (review, c):
        post_label(review, c, ids[0], "pass")
        assert state.wait_for_sink(timeout=120) and state.sink.sent == 1  # MLflow took the first label

        server.kill()  # the port now refuses connections
        waits = [timed_label(review, c, ident, choice) for ident, choice in ((ids[1], "fail"), (ids[2], "pass"))]
        assert max(waits) < ANSWERED_WITHIN, waits
        assert c.get("/").status_code == 200  # the page answers
        assert state.wait_for_sink(timeout=120)  # each send ended (failed) within a bounded time
        page = c.get(f"/item/{review.state.verdicts.position[ids[1]]}").text

    assert [(line["id"], line["label"]) for line in journal_lines(inputs.labels_out)] == [
        (ids[0], 1), (ids[1], 0), (ids[2], 1)]  # every label is in the file, in order
    assert (state.sink.sent, state.sink.failed, state.sink.failed_ids, state.sink.pending) == (1, 2, ids[1:], 0)
    assert "connection refused" in state.sink.last_error and server.uri in state.sink.last_error
    assert 'id="sink-error"' in page and "2 label(s) were saved in the labels file but NOT sent to" in page


def test_mlflow_hung_while_the_page_runs_never_blocks_it_and_each_send_ends(served):
    server, ids, inputs, state = served
    with serving(state) as (review, c):
        post_label(review, c, ids[0], "fail")
        assert state.wait_for_sink(timeout=120) and state.sink.sent == 1

        server.pause()  # SIGSTOP: connections are accepted, nothing answers (MLflow's default: 120 s, 7 retries)
        try:
            assert timed_label(review, c, ids[1], "pass") < ANSWERED_WITHIN
            page = c.get("/").text  # answered while the send waits for MLflow (it can only end by a timeout)
            assert 'id="sink-pending"' in page and "1 waiting to be sent" in page
            started = time.monotonic()
            assert state.wait_for_sink(timeout=120), "the send to a hung MLflow did not end"
            ended = time.monotonic() - started
        finally:
            server.resume()
        page = c.get("/").text

    assert ended < 60, f"a send to a hung MLflow took {ended:.0f} s"
    assert [line["id"] for line in journal_lines(inputs.labels_out)] == ids[:2]
    assert (state.sink.sent, state.sink.failed, state.sink.failed_ids) == (1, 1, [ids[1]])
    assert "timed out" in state.sink.last_error
    assert 'id="sink-error"' in page
