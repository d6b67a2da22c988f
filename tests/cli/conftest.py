"""Fixtures of the command-line tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def store(tmp_path):
    """A real MLflow store (SQLite, in process) with three agent traces, two of them labeled by a person."""
    mlflow = pytest.importorskip("mlflow", reason="the MLflow flags need the extra: pip install -e '.[mlflow]'")
    from tests.support.mlflow_runs import human, local_store, run_agent

    uri = local_store(tmp_path, "cli")
    ids = [run_agent(task, fail=task == 1) for task in range(3)]
    mlflow.flush_trace_async_logging()
    human(ids[0], True)
    human(ids[1], "fail")
    return uri, ids
