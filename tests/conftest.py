"""Suite-wide settings and fixtures: no test writes the user's real config directory; commands with scripted LMs;
the shipped webshop set split for the cascade tests."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_config_dir(tmp_path_factory):
    """GEPA checkpoint keys (`rubricforge_dspy.induction.checkpoint`) go to a temporary config directory,
    for this process and the command-line subprocesses tests start, instead of ~/.config/rubricforge."""
    directory = tmp_path_factory.mktemp("config") / "rubricforge"
    previous = os.environ.get("RUBRICFORGE_CONFIG_DIR")
    os.environ["RUBRICFORGE_CONFIG_DIR"] = str(directory)
    yield directory
    if previous is None:
        os.environ.pop("RUBRICFORGE_CONFIG_DIR", None)
    else:
        os.environ["RUBRICFORGE_CONFIG_DIR"] = previous


@pytest.fixture
def scripted_cli(monkeypatch):
    """`rubricforge` commands whose LMs are the scripted judge and reflection LMs ."""
    import rubricforge_dspy.cli.main as cli

    @contextmanager
    def fake_lms(args, reflection=False, reflection_max_tokens=None):
        from tests.support.induction import scripted_lms

        lms = scripted_lms()
        yield lms if reflection else lms[0]

    monkeypatch.setattr(cli, "lm_from_args", fake_lms)


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    """The shipped webshop set split by task, with a floor fit on the training half (`split_webshop`)."""
    from tests.support.cascade import split_webshop

    return split_webshop(tmp_path_factory.mktemp("webshop"))
