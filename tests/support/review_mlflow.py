"""The review page with ``--to-mlflow`` in tests (import it after `pytest.importorskip("mlflow")`): traced agent runs
in an MLflow store turned into a review's inputs, the page served for real, and labels posted over HTTP."""

from __future__ import annotations

import json
from contextlib import contextmanager

import httpx
import mlflow

from tests.support.mlflow_runs import human, run_agent


def traced_inputs(tmp_path, uri: str, experiment: str, n: int = 3):
    """`n` traced agent runs in experiment `experiment` of the store at `uri` (the current tracking URI), spooled
    to a JSONL data file (ids = trace ids, as ``--from-mlflow`` spools them), a verdict file on them, and the
    `ReviewInputs` of a review of them (labeler "tester"); alice labeled the first trace pass in MLflow.
    Returns (trace ids, inputs)."""
    from rubricforge_dspy.data.export import convert_trajectories
    from rubricforge_dspy.integrations.mlflow import load_mlflow_traces
    from rubricforge_dspy.review import ReviewInputs

    ids = [run_agent(task, fail=task == 1) for task in range(n)]
    mlflow.flush_trace_async_logging()  # traces are exported asynchronously
    human(ids[0], True)  # another person's label: never touched by the page
    data = tmp_path / "traces.jsonl"
    assert convert_trajectories(load_mlflow_traces(uri, experiment), data) == n
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": i, "passed": True, "score": 0.8, "abstained": False,
                                            "reason": "The agent says it is booked."}) + "\n" for i in ids))
    return ids, ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "labels.jsonl", labeler="tester")


@contextmanager
def serving(state, timeout: float = 60):
    """`state` served by a `ReviewServer`, and an httpx client holding its token cookie."""
    from rubricforge_dspy.review import ReviewServer

    server = ReviewServer(state)
    server.start()  # returns once uvicorn accepts connections
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", follow_redirects=False, timeout=timeout) as c:
            assert c.get(f"/?token={server.token}").status_code == 303  # sets the token cookie
            yield server, c
    finally:
        server.stop()


def post_label(server, c, ident: str, choice: str, note: str = "") -> None:
    index = server.state.verdicts.position[ident]
    answer = c.post("/label", data={"index": str(index), "choice": choice, "note": note,
                                    "csrf": server.app.state.guard.csrf})
    assert answer.status_code == 303, answer.text


def post_undo(server, c) -> None:
    assert c.post("/undo", data={"csrf": server.app.state.guard.csrf}).status_code == 303
