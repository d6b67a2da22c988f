"""LMConfig precedence, key hygiene, and exactly what `make_lm` puts on the wire (offline: a local fake server)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import dspy
import pytest

from rubricforge_dspy.cli.lm_options import add_lm_arguments, lm_config
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import DEFAULT_API_KEY_ENV, LMConfig, bound_strings, structured_response_format
from rubricforge_dspy.lm.engine import ChatCompletionsEngine, make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI

SECRET = "sk-test-THIS-MUST-NEVER-LEAK-123"
TRAJECTORY = ("COUNTERS: steps=2\nEVENTS:\n[1] USER: Cancel ABC123.\n[2] FINAL ANSWER: Cancelled.\n"
              "FINAL ANSWER: Cancelled.")


def judge_once(config: LMConfig, trajectory: str = TRAJECTORY):
    """A verdict always recorded (the execution layer), with DSPy's own retries as configured."""
    lm = make_lm(replace(config, cache=False))
    with dspy.context(lm=lm):
        return judge_verdict(TrajectoryJudge(), trajectory, RetryPolicy(max_retries=0)), lm


# ---------------------------------------------------------------- precedence


def test_defaults_are_the_embedded_judge():
    config = LMConfig.from_env(environ={})
    assert config.is_embedded and config.model is None
    assert config.api_key_env == DEFAULT_API_KEY_ENV
    assert (config.temperature, config.seed, config.structured_output) == (0.0, 0, "json_schema")


def test_environment_then_explicit_overrides():
    env = {"RUBRICFORGE_API_BASE": "http://env:1/v1/", "RUBRICFORGE_MODEL": "env-model@r1",
           "RUBRICFORGE_MAX_TOKENS": "64", "RUBRICFORGE_STRUCTURED_OUTPUT": "json_object_schema"}
    config = LMConfig.from_env(environ=env)
    assert (config.api_base, config.model, config.max_tokens) == ("http://env:1/v1", "env-model@r1", 64)
    assert config.structured_output == "json_object_schema"
    explicit = LMConfig.from_env(environ=env, model="flag-model@r2", api_base=None)
    assert explicit.model == "flag-model@r2" and explicit.api_base == "http://env:1/v1"  # None falls through


def test_cli_flags_beat_environment():
    parser = add_lm_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--api-base", "http://flag:2/v1", "--model", "m@r", "--reflection-model", "big@r9",
                              "--reflection-api-base", "http://big:3/v1"])
    env = {"RUBRICFORGE_API_BASE": "http://env:1/v1", "RUBRICFORGE_MODEL": "env@r"}
    judge = lm_config(args, environ=env)
    reflection = lm_config(args, "reflection", environ=env)
    assert (judge.api_base, judge.model) == ("http://flag:2/v1", "m@r")
    assert (reflection.api_base, reflection.model) == ("http://big:3/v1", "big@r9")
    assert lm_config(parser.parse_args([]), environ={}).is_embedded


def test_reflection_falls_back_to_the_judge_endpoint():
    env = {"RUBRICFORGE_API_BASE": "http://judge:1/v1", "RUBRICFORGE_MODEL": "judge@r"}
    reflection = LMConfig.from_env("reflection", environ=env)
    assert (reflection.api_base, reflection.model) == ("http://judge:1/v1", "judge@r")
    assert reflection.max_tokens > LMConfig().max_tokens  # writes whole rubrics
    assert LMConfig.from_env("reflection", environ={}).is_embedded
    env["RUBRICFORGE_REFLECTION_API_BASE"] = "http://refl:2/v1"
    env["RUBRICFORGE_REFLECTION_MODEL"] = "refl@r"
    own = LMConfig.from_env("reflection", environ=env)
    assert (own.api_base, own.model) == ("http://refl:2/v1", "refl@r")
    with pytest.raises(ValueError):
        LMConfig.from_env("critic", environ={})


def test_invalid_values_are_refused():
    with pytest.raises(ValueError, match="NAME"):
        LMConfig(api_key_env=SECRET)  # a pasted key is refused, so it cannot reach a log
    with pytest.raises(ValueError):
        LMConfig(structured_output="xml")
    with pytest.raises(ValueError):
        LMConfig(max_tokens=0)
    with pytest.raises(ValueError, match="embedded"):
        make_lm(LMConfig())
    with pytest.raises(ValueError, match="model"):
        make_lm(LMConfig(api_base="http://x:1/v1"))


# ---------------------------------------------------------------- key hygiene


def test_key_never_in_describe_dumps_or_lm_state(monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    config = LMConfig(model="m@r", api_base="http://127.0.0.1:9/v1", api_key_env="MY_KEY")
    assert config.api_key == SECRET  # read from the environment on demand
    lm = make_lm(config)
    texts = [config.describe(), repr(config), json.dumps(config.to_dict()), str(config),
             json.dumps(lm.dump_state(), default=str), json.dumps(lm.engine.dump_state())]
    for text in texts:
        assert SECRET not in text
    assert "MY_KEY" in config.describe()
    assert ChatCompletionsEngine.load_state(lm.engine.dump_state()).config == config


def test_key_is_sent_only_as_bearer_header(monkeypatch):
    with FakeOpenAI() as server:
        config = LMConfig(model="m@r", api_base=server.api_base, api_key_env="MY_KEY", num_retries=0)
        judge_once(config)
        monkeypatch.setenv("MY_KEY", SECRET)
        judge_once(config, TRAJECTORY + " again")
    without, with_key = server.requests
    assert "Authorization" not in without["headers"] and "authorization" not in without["headers"]
    header = with_key["headers"].get("Authorization") or with_key["headers"].get("authorization")
    assert header == f"Bearer {SECRET}"
    assert SECRET not in json.dumps(with_key["body"])


# ---------------------------------------------------------------- the wire


def test_json_schema_dialect_request():
    with FakeOpenAI() as server:
        verdict, lm = judge_once(LMConfig(model="qwen2.5-7b-instruct@abc123", api_base=server.api_base))
    assert verdict.abstained is False and verdict.passed is True and verdict.score == pytest.approx(0.9)
    (body,) = server.chat_bodies
    assert body["model"] == "qwen2.5-7b-instruct@abc123"
    assert body["max_tokens"] == 256 and "max_completion_tokens" not in body
    assert body["temperature"] == 0.0 and body["seed"] == 0
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    assert schema["required"] == ["reason", "passed", "score"]
    assert schema["properties"]["passed"]["type"] == "boolean"
    assert schema["properties"]["score"]["type"] == "number"
    # The rubric (system) comes first and the trajectory last: every call shares the prefix.
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user"]
    assert TRAJECTORY in body["messages"][-1]["content"]
    assert lm.history[-1]["usage"]["prompt_tokens"] == server.usage["prompt_tokens"]  # usage is read from the reply


def test_json_object_schema_dialect_for_llama_cpp_server():
    with FakeOpenAI() as server:
        config = LMConfig(model="m@r", api_base=server.api_base, structured_output="json_object_schema",
                          max_string_length=300, max_tokens=100)
        verdict, _ = judge_once(config)
    assert verdict.abstained is False
    (body,) = server.chat_bodies
    fmt = body["response_format"]
    assert fmt["type"] == "json_object" and "json_schema" not in fmt
    assert fmt["schema"]["properties"]["reason"]["maxLength"] == 300
    assert "maxLength" not in fmt["schema"]["properties"]["score"]
    assert body["max_tokens"] == 100 and "max_completion_tokens" not in body


def test_plain_call_sends_no_response_format():
    with FakeOpenAI(responder=lambda body, n: "hello") as server:
        lm = make_lm(LMConfig(model="m@r", api_base=server.api_base, cache=False, max_tokens=7))
        assert lm("Say hello") == ["hello"]
    (body,) = server.chat_bodies
    assert "response_format" not in body and body["max_tokens"] == 7


def test_structured_response_format_shapes():
    canonical = {"type": "json_schema", "name": "Out", "strict": True,
                 "schema": {"type": "object",
                            "properties": {"a": {"type": "string"}, "b": {"type": "string", "enum": ["x"]}}}}
    sent = structured_response_format(canonical, "json_schema")
    assert sent == {"type": "json_schema",
                    "json_schema": {"name": "Out", "schema": canonical["schema"], "strict": True}}
    assert structured_response_format(canonical, "json_object_schema") == {"type": "json_object",
                                                                           "schema": canonical["schema"]}
    assert structured_response_format({"type": "json_object"}, "json_schema") == {"type": "json_object"}
    assert structured_response_format(None, "json_schema") is None
    bounded = bound_strings(canonical["schema"], 10)
    assert bounded["properties"]["a"]["maxLength"] == 10 and "maxLength" not in bounded["properties"]["b"]
    assert "maxLength" not in canonical["schema"]["properties"]["a"]  # a copy
    assert structured_response_format(canonical, "json_object_schema", 0)["schema"] == canonical["schema"]


# ---------------------------------------------------------------- failures


def test_server_errors_become_abstentions_after_retries():
    with FakeOpenAI(responder=lambda body, n: "http_503") as server:
        verdict, _ = judge_once(LMConfig(model="m@r", api_base=server.api_base, num_retries=1))
    assert verdict.abstained is True and verdict.passed is False and "503" in verdict.error
    assert len(server.chat_bodies) == 2  # one retry: DSPy owns retries, the engine makes one attempt


def test_bad_request_is_not_retried():
    with FakeOpenAI(responder=lambda body, n: "http_400") as server:
        verdict, _ = judge_once(LMConfig(model="m@r", api_base=server.api_base, num_retries=2))
    assert verdict.abstained is True and "400" in verdict.error
    assert len(server.chat_bodies) == 1


def test_unreachable_endpoint_is_an_abstention():
    from rubricforge_dspy.serve.process import free_port

    config = LMConfig(model="m@r", api_base=f"http://127.0.0.1:{free_port()}/v1", num_retries=0, timeout=5)
    verdict, _ = judge_once(config)
    assert verdict.abstained is True and verdict.error_kind == "connection"
    assert config.api_base in verdict.error  # the message names the endpoint


def test_unparsable_output_is_an_abstention():
    with FakeOpenAI(responder=lambda body, n: '{"reason": "cut off') as server:
        verdict, _ = judge_once(LMConfig(model="m@r", api_base=server.api_base, num_retries=0))
    assert verdict.abstained is True and verdict.passed is False


def test_engine_survives_deepcopy_and_pickle():
    import copy
    import pickle

    lm = make_lm(LMConfig(model="m@r", api_base="http://127.0.0.1:9/v1"))
    for clone in (copy.deepcopy(lm.engine), pickle.loads(pickle.dumps(lm.engine))):
        assert clone.config == lm.engine.config and clone._clients == []


def test_reflection_lm_follows_the_judge_endpoint_given_by_cli_flags():
    """`rubricforge induce --api-base X --model M` (no --reflection-*) reflects with X/M, not the embedded
    model (found by the induction-over-HTTP benchmark: it used to read only the environment)."""
    import argparse

    args = add_lm_arguments(argparse.ArgumentParser()).parse_args(
        ["--api-base", "http://gpu:30000/v1", "--model", "qwen@rev", "--timeout", "30"])
    reflection = lm_config(args, "reflection", environ={})
    assert (reflection.api_base, reflection.model, reflection.timeout) == ("http://gpu:30000/v1", "qwen@rev", 30.0)
    assert reflection.max_tokens == 4096  # the reflection default, not the judge's 256
    own = add_lm_arguments(argparse.ArgumentParser()).parse_args(
        ["--api-base", "http://gpu:30000/v1", "--model", "qwen@rev", "--reflection-api-base", "http://big:1/v1",
         "--reflection-model", "large@rev"])
    assert lm_config(own, "reflection", environ={}).api_base == "http://big:1/v1"


def test_a_commands_reflection_token_default_yields_to_the_flag_and_beats_the_environment():
    """The demo's 800-token reflection cap on the embedded model: stands in for an unset
    --reflection-max-tokens (also over RUBRICFORGE_REFLECTION_MAX_TOKENS), never over the flag."""
    from rubricforge_dspy.cli.lm_options import lm_configs

    parser = add_lm_arguments(argparse.ArgumentParser())
    env = {"RUBRICFORGE_REFLECTION_MAX_TOKENS": "2000"}
    judge, reflection = lm_configs(parser.parse_args([]), environ=env, reflection_max_tokens=800)
    assert (judge.max_tokens, reflection.max_tokens) == (256, 800)
    flagged = parser.parse_args(["--reflection-max-tokens", "1500"])
    assert lm_configs(flagged, environ=env, reflection_max_tokens=800)[1].max_tokens == 1500
    assert lm_configs(parser.parse_args([]), environ=env)[1].max_tokens == 2000
