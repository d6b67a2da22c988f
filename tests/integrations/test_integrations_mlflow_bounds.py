"""`integrations.mlflow_http.bounded_http`: MLflow's HTTP settings are in the process environment only while a bounded
call runs (MLflow reads them there at each request), a value the user set wins, and nothing is left behind, also
when two threads overlap or when the call fails."""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("mlflow", reason="the MLflow integration needs the extra: pip install -e '.[mlflow]'")

from rubricforge_dspy.core.errors import ServerError  # noqa: E402
from rubricforge_dspy.integrations.mlflow_http import HTTP_BOUNDS, bounded_http  # noqa: E402
from rubricforge_dspy.integrations.mlflow_labels import HumanLabelSink  # noqa: E402
from tests.support.mlflow_server import free_port  # noqa: E402


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    for name in HTTP_BOUNDS:
        monkeypatch.delenv(name, raising=False)


def present() -> dict[str, str]:
    return {name: os.environ[name] for name in HTTP_BOUNDS if name in os.environ}


def test_the_bounds_hold_inside_only_and_a_users_setting_wins(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "77")
    with bounded_http():
        assert present() == {**HTTP_BOUNDS, "MLFLOW_HTTP_REQUEST_TIMEOUT": "77"}
    assert present() == {"MLFLOW_HTTP_REQUEST_TIMEOUT": "77"}


def test_overlapping_threads_keep_the_bounds_until_the_last_one_leaves():
    entered, leave_first = threading.Event(), threading.Event()

    def first():
        with bounded_http():
            entered.set()
            leave_first.wait(30)

    worker = threading.Thread(target=first)
    worker.start()
    assert entered.wait(30)
    with bounded_http():
        leave_first.set()
        worker.join(30)
        assert present() == HTTP_BOUNDS  # the first thread left; this one is still inside
    assert present() == {}


def test_a_failed_sink_call_leaves_the_environment_as_it_was():
    with pytest.raises(ServerError, match="connection refused"):
        HumanLabelSink(f"http://127.0.0.1:{free_port()}")
    assert present() == {}
