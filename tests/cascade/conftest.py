"""Fixtures of the cascade tests."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tests.support.cascade import split_webshop
from tests.support.induction import scripted_lms


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    """The shipped webshop set split by task, with a floor fit on the training half (`split_webshop`)."""
    return split_webshop(tmp_path_factory.mktemp("webshop"))


@pytest.fixture
def scripted_cli(monkeypatch):
    """`rubricforge` commands whose LMs are the scripted judge and reflection LMs (as the pipeline tests')."""
    import rubricforge_dspy.cli.main as cli

    @contextmanager
    def fake_lms(args, reflection=False, reflection_max_tokens=None):
        lms = scripted_lms()
        yield lms if reflection else lms[0]

    monkeypatch.setattr(cli, "lm_from_args", fake_lms)


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
