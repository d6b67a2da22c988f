"""Serving helpers, offline: command construction, health waits, process lifecycle, missing installs."""

from __future__ import annotations

import sys
import time

import pytest

from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.serve import (
    EmbeddedServer,
    EmbeddedUnavailable,
    ServerStartError,
    embedded_launch_command,
    free_port,
    launch_server,
    open_lm,
    prefix_cache_stats,
    served_name,
    sglang_launch_command,
    sglang_router_command,
    wait_for_health,
)
from rubricforge_dspy.serve import embedded as embedded_module
from rubricforge_dspy.testing.fake_server import FakeOpenAI


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_sglang_launch_command():
    cmd = sglang_launch_command("Qwen/Qwen2.5-7B-Instruct", host="0.0.0.0", port=30001, tp=2, dp=4,
                                revision="a09a3545", seed=7, extra=["--mem-fraction-static", "0.85"], python="python")
    assert cmd[:3] == ["python", "-m", "sglang.launch_server"]
    assert flag(cmd, "--model-path") == "Qwen/Qwen2.5-7B-Instruct"
    assert flag(cmd, "--served-model-name") == "Qwen2.5-7B-Instruct@a09a3545"
    assert flag(cmd, "--revision") == "a09a3545"
    assert flag(cmd, "--schedule-policy") == "lpm"
    assert flag(cmd, "--grammar-backend") == "xgrammar"
    assert (flag(cmd, "--tp-size"), flag(cmd, "--dp-size")) == ("2", "4")
    assert flag(cmd, "--random-seed") == "7"
    assert (flag(cmd, "--host"), flag(cmd, "--port")) == ("0.0.0.0", "30001")
    assert "--enable-cache-report" in cmd
    assert cmd[-2:] == ["--mem-fraction-static", "0.85"]


def test_sglang_served_name_must_carry_a_revision():
    with pytest.raises(ValueError, match="revision"):
        sglang_launch_command("Qwen/Qwen2.5-7B-Instruct")
    cmd = sglang_launch_command("/models/qwen", served_model_name="qwen2.5-7b@2024-09-19")
    assert flag(cmd, "--served-model-name") == "qwen2.5-7b@2024-09-19" and "--revision" not in cmd
    assert served_name("org/model/", "r1") == "model@r1"
    with pytest.raises(ValueError):
        sglang_launch_command("m", revision="r", tp=0)


def test_sglang_router_command():
    cmd = sglang_router_command(["http://10.0.0.1:30000/", "http://10.0.0.2:30000"], port=8000, python="python")
    assert cmd[:3] == ["python", "-m", "sglang_router.launch_router"]
    start = cmd.index("--worker-urls")
    assert cmd[start + 1:start + 3] == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    assert flag(cmd, "--policy") == "cache_aware" and flag(cmd, "--port") == "8000"
    assert sglang_router_command("http://w:1", policy="round_robin")[-6:-4] == ["--policy", "round_robin"]
    with pytest.raises(ValueError):
        sglang_router_command([])


def test_embedded_launch_command(tmp_path):
    weights = tmp_path / "m.gguf"
    cmd = embedded_launch_command(weights, 12345, "smollm2-x", n_ctx=4096, seed=3, n_threads=1)
    assert cmd[0] == sys.executable and cmd[1].endswith("_llama_main.py")
    assert flag(cmd, "--model") == str(weights) and flag(cmd, "--model_alias") == "smollm2-x"
    assert (flag(cmd, "--host"), flag(cmd, "--port")) == ("127.0.0.1", "12345")
    assert (flag(cmd, "--n_ctx"), flag(cmd, "--seed"), flag(cmd, "--n_threads")) == ("4096", "3", "1")


def test_embedded_model_name_carries_revisions():
    name = embedded_module.embedded_model_name()
    assert name.startswith("smollm2-135m-instruct-q4_1-w") and "llamacpp" in name


def test_embedded_config_uses_llama_cpp_dialect():
    server = EmbeddedServer(port=4321)
    config = server.lm_config(LMConfig(max_tokens=99))
    assert config.api_base == "http://127.0.0.1:4321/v1" and config.model == server.model_name
    assert config.structured_output == "json_object_schema" and config.max_string_length == 300
    assert config.max_tokens == 99
    assert server.lm_config(LMConfig(max_string_length=0)).max_string_length == 0  # 0 turns the bound off


def test_missing_weights_say_run_install(monkeypatch):
    monkeypatch.setattr(embedded_module.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(embedded_module.metadata, "files", lambda name: (_ for _ in ()).throw(
        embedded_module.metadata.PackageNotFoundError(name)))
    with pytest.raises(EmbeddedUnavailable, match="install.sh"):
        embedded_module.find_weights()
    with pytest.raises(EmbeddedUnavailable, match="install.sh"):
        embedded_module.check_embedded()
    with pytest.raises(EmbeddedUnavailable, match="install.sh"):
        with open_lm(LMConfig()):
            pass


def test_resolve_lm_for_an_endpoint_starts_nothing():
    with open_lm(LMConfig(model="m@r", api_base="http://127.0.0.1:9/v1")) as lm:
        assert lm.model == "openai/m@r"


def test_prefix_cache_stats():
    log = ("Llama.generate: 670 prefix-match hit, remaining 97 prompt tokens to eval\nnoise\n"
           "Llama.generate: 600 prefix-match hit, remaining 3 prompt tokens to eval\n")
    assert prefix_cache_stats(log) == {"prefix_hits": 2, "cached_tokens": 1270, "evaluated_after_prefix": 100}


def test_wait_for_health_against_a_server():
    with FakeOpenAI() as server:
        assert wait_for_health(f"{server.api_base}/models", timeout=5) < 5
    with pytest.raises(TimeoutError):
        wait_for_health(f"http://127.0.0.1:{free_port()}/v1/models", timeout=0.6, interval=0.1)


def test_launch_server_and_stop(tmp_path):
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    server = launch_server(cmd, f"http://127.0.0.1:{port}/", timeout=30)
    try:
        assert server.running and server.startup_seconds is not None
    finally:
        code = server.stop()
    assert not server.running and code is not None


def test_launch_server_reports_early_exit_with_log():
    cmd = [sys.executable, "-c", "import sys; print('no weights here'); sys.exit(3)"]
    with pytest.raises(ServerStartError, match="no weights here"):
        launch_server(cmd, f"http://127.0.0.1:{free_port()}/health", timeout=30)


def test_launch_server_timeout_kills_the_process(monkeypatch):
    from rubricforge_dspy.serve import process as process_module

    started_processes = []
    real_popen = process_module.subprocess.Popen

    def recording_popen(*args, **kwargs):
        started_processes.append(real_popen(*args, **kwargs))
        return started_processes[-1]

    monkeypatch.setattr(process_module.subprocess, "Popen", recording_popen)
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        launch_server(cmd, f"http://127.0.0.1:{free_port()}/health", timeout=1)
    assert time.monotonic() - started < 20
    (child,) = started_processes
    assert child.poll() is not None  # stopped before the error propagated
