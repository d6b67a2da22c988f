"""Fixtures of the pipeline tests."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tests.support.induction import scripted_lms


@pytest.fixture
def scripted_cli(monkeypatch):
    """`rubricforge` commands whose LMs are the scripted judge and reflection LMs."""
    import rubricforge_dspy.cli.main as cli

    @contextmanager
    def fake_lms(args, reflection=False, reflection_max_tokens=None):
        lms = scripted_lms()
        yield lms if reflection else lms[0]

    monkeypatch.setattr(cli, "lm_from_args", fake_lms)
