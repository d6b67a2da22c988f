"""`serve --dry-run` prints the launch command and starts nothing (issue 41 item 7)."""

import shlex

import pytest

from rubricforge_dspy.cli.main import main


@pytest.fixture
def nothing_starts(monkeypatch, tmp_path):
    """Fake weights (no real model needed) and a launcher that fails the test if anything is started."""
    import rubricforge_dspy.serve.embedded as embedded
    import rubricforge_dspy.serve.process as process

    weights = tmp_path / "fake-model.gguf"
    weights.write_bytes(b"not a model")
    monkeypatch.setattr(embedded, "check_embedded", lambda: weights)

    def refuse(*args, **kwargs):
        raise AssertionError(f"a server was started: {args}")

    monkeypatch.setattr(embedded, "launch_server", refuse)
    monkeypatch.setattr(process, "launch_server", refuse)
    monkeypatch.setattr("subprocess.Popen", refuse)
    return weights


def test_embedded_dry_run_prints_the_command_and_exits(nothing_starts, capsys):
    assert main(["serve", "--dry-run", "--port", "45678"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    command = shlex.split(out[0])
    assert command[1].endswith("_llama_main.py") and str(nothing_starts) in command
    assert command[command.index("--port") + 1] == "45678"


def test_sglang_dry_run_prints_the_command_and_exits(nothing_starts, capsys):
    assert main(["serve", "--engine", "sglang", "--model", "org/model", "--revision", "abc123", "--dry-run"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "org/model" in shlex.split(out[0])
