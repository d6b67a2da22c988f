"""Suite-wide settings: no test writes the user's real config directory."""

from __future__ import annotations

import os

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
