"""Presets: where the judge runs decides its sizes; every command takes them and the overrides."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rubricforge_dspy.cli.main import build_parser, main
from rubricforge_dspy.cli.presets import render_from_args, resolve
from rubricforge_dspy.core.presets import EMBEDDED, LIBRARY, SERVER, preset_for
from rubricforge_dspy.evidence.render import RenderConfig, render_with_overrides
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.copies import one_attempt_lm, sized_lm
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text

AIRLINE = Path(__file__).resolve().parents[2] / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


def test_embedded_without_endpoint_server_with_one_and_flags_override(monkeypatch):
    monkeypatch.delenv("RUBRICFORGE_API_BASE", raising=False)
    assert resolve(argparse.Namespace(api_base=None)) == EMBEDDED
    assert resolve(argparse.Namespace(api_base="http://h/v1")) == SERVER
    monkeypatch.setenv("RUBRICFORGE_API_BASE", "http://h/v1")
    assert resolve(argparse.Namespace(api_base=None)).name == "server"
    custom = resolve(argparse.Namespace(api_base=None, preset="server", concurrency=256, render_tokens=16000,
                                        num_threads=None))
    assert (custom.concurrency, custom.render_tokens, custom.num_threads) == (256, 16000, SERVER.num_threads)
    assert SERVER.concurrency >= 32 and SERVER.render_tokens >= 8000 and EMBEDDED.concurrency == 1


def test_every_command_takes_concurrency_and_render_tokens():
    parser = build_parser()
    for command in (["judge", "--data", "x", "--out", "o"], ["induce", "--data", "x", "--out", "o"], ["demo"]):
        args = parser.parse_args([*command, "--concurrency", "7", "--render-tokens", "5000"])
        assert args.concurrency == 7 and args.render_tokens == 5000
    assert parser.parse_args(["induce", "--data", "x", "--out", "o", "--num-threads", "9"]).num_threads == 9
    from evals.paper import parse_args

    args = parse_args(["--concurrency", "64", "--render-tokens", "8000", "--num-threads", "32"])
    assert (args.concurrency, args.render_tokens, args.num_threads) == (64, 8000, 32)


def test_the_connection_pool_is_sized_to_the_concurrency():
    lm = make_lm(LMConfig(model="m", api_base="http://127.0.0.1:9/v1"))
    assert lm.engine.config.max_connections == 64
    assert one_attempt_lm(lm, connections=256).engine.config.max_connections == 256
    assert sized_lm(lm, connections=8).engine.config.max_connections == 64  # never shrinks
    assert lm.engine.config.max_connections == 64  # the caller's LM is untouched


def test_judge_with_the_server_preset_renders_the_whole_episode(tmp_path):
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: {"reason": "ok", "passed": True, "score": 0.9}) as fake:
        assert main(["judge", "--data", str(AIRLINE), "--limit", "3", "--out", str(out), "--api-base", fake.api_base,
                     "--model", "m"]) == 0
        server_texts = [user_text(b) for b in fake.chat_bodies]
        assert main(["judge", "--data", str(AIRLINE), "--limit", "3", "--out", str(tmp_path / "e.jsonl"),
                     "--api-base", fake.api_base, "--model", "m", "--preset", "embedded"]) == 0
        embedded_texts = [user_text(b) for b in fake.chat_bodies[3:]]
    assert sum(map(len, server_texts)) > sum(map(len, embedded_texts))
    assert not any("elided" in text for text in server_texts)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3


def test_step_chars_reaches_every_command_and_keeps_a_programs_other_size():
    parser = build_parser()
    for command in (["judge", "--data", "x", "--out", "o"], ["induce", "--data", "x", "--out", "o"], ["demo"],
                    ["render", "--data", "x"]):
        assert parser.parse_args([*command, "--step-chars", "123"]).step_chars == 123
    from evals.paper import parse_args

    assert parse_args(["--step-chars", "123"]).step_chars == 123
    args = argparse.Namespace(api_base=None, preset="embedded", render_tokens=None, step_chars=123)
    preset = resolve(args)
    assert RenderConfig.of(preset) == RenderConfig(max_tokens=EMBEDDED.render_tokens, max_step_chars=123)
    program = RenderConfig(max_tokens=5000, max_step_chars=700)
    assert render_from_args(args, preset, program) == RenderConfig(max_tokens=5000, max_step_chars=123)
    assert render_from_args(argparse.Namespace(render_tokens=None, step_chars=None), preset, program) == program
    assert render_from_args(args, preset, None) == RenderConfig.of(preset)
    assert render_with_overrides(program, max_step_chars=123) == RenderConfig(max_tokens=5000, max_step_chars=123)
    assert render_with_overrides(program) == program


def test_the_library_default_is_the_server_presets_sizes_one_request_at_a_time():
    from rubricforge_dspy.induction.inducer import InductionConfig
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.pipeline.protocol import ProtocolConfig

    assert (preset_for(None), preset_for("http://h/v1")) == (EMBEDDED, SERVER)
    assert RenderConfig() == RenderConfig.of(SERVER) == RenderConfig.of(LIBRARY)
    assert TrajectoryJudge().render_config == RenderConfig.of(SERVER)
    induction = InductionConfig()
    assert (induction.budget, induction.minibatch, induction.max_rubric_chars, induction.num_threads) == (
        SERVER.budget, SERVER.minibatch, SERVER.max_rubric_chars, 1)
    protocol = ProtocolConfig()
    assert protocol.render == RenderConfig.of(SERVER)
    assert protocol.induction == induction  # nested, not copied: every induction setting reaches `induce`
    assert protocol.demo_max_tokens == SERVER.demo_max_tokens
    assert (protocol.concurrency, protocol.induction.num_threads) == (LIBRARY.concurrency, LIBRARY.num_threads) == (1, 1)


def test_cli_help_names_the_presets_sizes():
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["judge"].format_help().split())
    assert f"embedded {EMBEDDED.render_tokens}, server {SERVER.render_tokens}" in help_text
    assert f"embedded {EMBEDDED.step_chars}, server {SERVER.step_chars}" in help_text
