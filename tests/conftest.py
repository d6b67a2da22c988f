"""Suite-wide settings and fixtures: no test writes the user's real config directory; commands with scripted LMs;
the shipped webshop set split for the cascade tests; the skipped tests recorded for CI's second pass.

``RUBRICFORGE_RECORD_SKIPS=FILE`` appends the node id of every skipped test (and of every test module skipped as a
whole) to ``FILE``, one per line, from whichever process ran it (pytest-xdist's workers too). `.ci/run` runs the
README's test command with it, installs the extras, and then runs exactly the recorded tests again: the ones that
needed an extra (or anything else the first pass lacked) run once more, the rest not twice."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest

_SKIPS = os.environ.get("RUBRICFORGE_RECORD_SKIPS")


def _record_skip(nodeid: str) -> None:
    if _SKIPS:
        with open(_SKIPS, "a", encoding="utf-8") as handle:  # one short line per write: appends do not interleave
            handle.write(nodeid + "\n")


def pytest_collectreport(report):
    if report.skipped:
        _record_skip(report.nodeid)


def pytest_runtest_logreport(report):
    if report.skipped and report.when in ("setup", "call"):
        _record_skip(report.nodeid)


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
def format_registry_as_before():
    """A command given ``--map`` registers its mapping as a format in this process (as it does in its own):
    afterwards the formats the test added are unregistered, so later tests see only the ones they expect."""
    from rubricforge_dspy.data.formats import format_names, unregister_format

    before = set(format_names())
    yield
    for name in set(format_names()) - before:
        unregister_format(name)


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
