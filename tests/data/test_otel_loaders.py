"""OpenTelemetry (GenAI / OpenInference spans) and Langfuse loaders, on the real and constructed samples
under evals/data/otel and evals/data/langfuse (see evals/data/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.data.formats import FORMATS, detect_format, load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.trace_poison import CANARY, CANARY_REWARD, poison_trace_file

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
OTEL, LANGFUSE = DATA / "otel", DATA / "langfuse"
FULL = RenderConfig(max_tokens=10**7, max_step_chars=10**7)


def kinds(t):
    return [s.kind for s in t.steps]


def assert_paired(t):
    """Every tool result answers the nearest earlier tool call with its call id, and every call is answered."""
    open_ids = []
    for step in t.steps:
        if step.kind == "tool_call":
            open_ids.append(step.call_id)
        elif step.kind == "tool_result":
            assert step.call_id in open_ids, f"{t.id}: result {step.call_id} answers no call"
            open_ids.remove(step.call_id)
    assert not open_ids, f"{t.id}: unanswered calls {open_ids}"


@pytest.mark.parametrize("path,fmt", [(p, "otel") for p in sorted(OTEL.glob("*.json*"))]
                         + [(p, "langfuse") for p in sorted(LANGFUSE.glob("*.json"))],
                         ids=lambda x: getattr(x, "name", x))
def test_every_sample_is_detected_and_selectable_by_name(path, fmt):
    assert fmt in FORMATS and detect_format(path) == fmt
    auto = load_trajectories(path)
    report = auto.report
    named = load_trajectories(path, format=fmt)
    assert report.n_skipped == 0 and len(auto) == len(named) > 0
    assert all(t.label is None and t.hidden["format"] == fmt for t in auto)


def test_any_agent_openai_trace_real():
    [t] = load_trajectories(OTEL / "anyagent_openai_trace.json")
    assert t.id == "4bedea77bb33b9c5f280371eae21ea97"  # the integer trace id, in hex
    assert kinds(t) == ["user", "tool_call", "tool_result", "tool_call", "tool_result", "final_answer"]
    assert [s.tool_name for s in t.steps if s.kind == "tool_call"] == ["get_current_time", "write_file"]
    assert t.steps[1].arguments == {"timezone": "America/New_York"}
    assert "2025-09-16T08:43:13" in t.steps[2].content and t.n_tool_errors == 0
    assert_paired(t)
    assert "Use the available tools" in t.hidden["system_prompt"]  # the system message is hidden, not a step
    assert "Use the available tools" not in render_trajectory(t, FULL)


def test_langfuse_openai_agents_real_pairs_by_call_id():
    [t] = load_trajectories(LANGFUSE / "openai-agents-2025-09-30.trace.json")
    assert kinds(t) == ["user", "tool_call", "tool_result", "final_answer"]
    assert t.steps[1].call_id == t.steps[2].call_id == "call_Kud0j0DxWSmLzv9W5m6qVqXn"
    assert t.steps[2].content == "The weather in Tokyo is sunny."
    assert {s["name"] for s in t.hidden["scores"]} == {"toxicity", "hallucination"}  # evaluator scores: hidden
    assert t.label is None and "toxicity" not in render_trajectory(t, FULL)


def test_langfuse_pydantic_ai_history_is_not_duplicated():
    """Each generation repeats the whole conversation; the episode holds each turn once."""
    [t] = load_trajectories(LANGFUSE / "pydantic-ai-tools-2025-12-04.trace.json")
    users = [s.content for s in t.steps if s.kind == "user"]
    assert len(users) == len(set(users)) == 3
    assert t.n_tool_calls == 4 and sum(s.kind == "tool_result" for s in t.steps) == 3
    results = {s.call_id: s.tool_name for s in t.steps if s.kind == "tool_result"}
    assert results == {"call_X0OSgjUukT5inyEQvuZQnHrk": "get_pun_suggestion",
                       "call_WxZcCvSDhGT4RJHlcU01k10x": "get_dad_joke_suggestion",
                       "call_aRaObiWKKt6GzgDkkUl3bu1Q": "get_one_liner_suggestion"}
    assert "You are a creative joke writer" in t.hidden["system_prompt"]


@pytest.mark.parametrize("name,calls,last", [
    ("google-adk-2025-08-28.trace.json", 1, "final_answer"),  # Gemini parts
    ("claude-agent-2025-12-22.trace.json", 2, "final_answer"),  # tool_use blocks
    ("langgraph-js-2025-10-30.trace.json", 1, "final_answer"),  # role = tool name
    ("vercel-aisdk-2025-11-17.trace.json", 1, "tool_result"),  # toolCallId items
])
def test_langfuse_message_dialects_pair_calls_and_results(name, calls, last):
    [t] = load_trajectories(LANGFUSE / name)
    assert t.n_tool_calls == calls and t.steps[0].kind == "user" and t.steps[-1].kind == last
    assert_paired(t)


def test_langfuse_input_message_without_a_role_is_not_the_agents(tmp_path):
    """The Claude Agent SDK trace records ``{"content": "role"}`` (no role) as the input of its later turns: that
    rendered as the agent's turn ``ASSISTANT: role``. An input message naming no role is no step; it is kept in
    hidden with its observation. An output naming none is still the model's."""
    [t] = load_trajectories(LANGFUSE / "claude-agent-2025-12-22.trace.json")
    assert [(s.kind, s.content) for s in t.steps if s.content == "role"] == []
    assert [s.kind for s in t.steps] == ["user", "assistant", "tool_call", "tool_result", "tool_call", "tool_result",
                                         "final_answer"]
    assert [m["content"] for m in t.hidden["unattributed_messages"]] == ["role"] * 3
    assert {m["name"] for m in t.hidden["unattributed_messages"]} == {"claude.assistant.turn"}
    assert "role</" not in render_trajectory(t)
    roleless = {"trace": {"id": "t1", "projectId": "p"}, "observations": [
        {"id": "g1", "type": "GENERATION", "name": "llm", "startTime": "2025-01-01T00:00:00Z",
         "input": [{"role": "user", "content": "Book HAT1."}, {"content": "CANARY-ROLELESS"}],
         "output": [{"content": "Booked."}]}]}
    path = tmp_path / "roleless.json"
    path.write_text(json.dumps(roleless))
    [u] = load_trajectories(path)
    assert [(s.kind, s.content) for s in u.steps] == [("user", "Book HAT1."), ("final_answer", "Booked.")]
    assert "CANARY-ROLELESS" not in render_trajectory(u) and u.hidden["unattributed_messages"][0]["observation"] == "g1"


@pytest.mark.parametrize("name", ["constructed_otlp.json", "constructed_otlp.jsonl"])
def test_constructed_otlp_three_dialects_and_error_status(name):
    ts = load_trajectories(OTEL / name)
    assert len(ts) == 3  # in the .jsonl, trace A's spans are split over two export requests
    openinference, genai, flattened = ts
    for t in (openinference, genai):
        assert kinds(t) == ["user", "assistant", "tool_call", "tool_result", "final_answer"]
        assert t.steps[2].call_id == t.steps[3].call_id == "1234" and not t.steps[3].is_error
    assert kinds(flattened) == ["user", "tool_call", "tool_result", "final_answer"]
    assert flattened.steps[2].is_error and flattened.n_tool_errors == 1  # execute_tool span status ERROR
    assert flattened.hidden["system_prompt"] == "You are a file assistant."
    assert flattened.hidden["resource"] == {"service.name": "weather-demo"}


def test_console_exporter_concatenated_objects():
    ts = load_trajectories(OTEL / "constructed_console_spans.json")
    assert [t.n_tool_errors for t in ts] == [0, 1] and all(t.id.startswith(("17", "08")) for t in ts)


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_mlflow_trace_json_fits_the_span_mapping(version):
    [t] = load_trajectories(OTEL / f"constructed_mlflow_{version}.json")
    assert t.id == f"tr-constructed-{version}"  # MLflow's request id, the id users join labels on
    assert t.hidden["system_prompt"] == "You answer weather questions."
    if version == "v2":
        assert kinds(t) == ["user", "tool_call", "tool_result", "final_answer"]
        assert t.steps[2].is_error and t.steps[1].call_id == t.steps[2].call_id == "call_9"
    else:  # root AGENT span's output gives the final answer when the LLM spans hold none
        assert kinds(t) == ["user", "tool_call", "final_answer"]
        assert t.steps[-1].content == "I could not reach the weather service; please try again."


def _otlp(spans, schema="https://opentelemetry.io/schemas/1.37.0"):
    return {"resourceSpans": [{"schemaUrl": schema, "resource": {"attributes": []},
                               "scopeSpans": [{"spans": spans}]}]}


def _span(trace, sid, attrs, parent="", status=None):
    return {"traceId": trace, "spanId": sid, "parentSpanId": parent, "name": "s", "startTimeUnixNano": "1",
            "endTimeUnixNano": "2", "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
            "status": status or {}}


CHAT = {"gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "hello"}]}])}


def test_newer_semconv_schema_fails_naming_file_record_and_what_to_do(tmp_path):
    path = tmp_path / "new.json"
    path.write_text(json.dumps(_otlp([_span("ab" * 16, "01" * 8, CHAT)], "https://opentelemetry.io/schemas/1.99.0")))
    with pytest.raises(TrajectoryFormatError) as err:
        load_trajectories(path, format="otel")
    assert err.value.file == str(path) and err.value.record == 0
    assert "1.99" in err.value.problem and "semconv <= 1.38" in err.value.problem


def test_unknown_openinference_kind_and_bad_line_are_skipped_and_reported(tmp_path):
    path = tmp_path / "mixed.jsonl"
    good = _otlp([_span("ab" * 16, "01" * 8, CHAT)])
    odd = _otlp([_span("cd" * 16, "02" * 8, {"openinference.span.kind": "TELEPORT"})])
    path.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(odd) + "\n")
    ts = load_trajectories(path, format="otel", on_error="skip")
    report = ts.report
    assert [t.id for t in ts] == ["ab" * 16] and kinds(ts[0]) == ["user", "final_answer"]
    assert [r for _, r, _ in report.skipped] == [1, 2]
    assert "TELEPORT" in report.skipped[1][2]


def test_reward_only_from_a_root_eval_reward_and_label_null_in_verdicts(tmp_path):
    path = tmp_path / "scored.json"
    path.write_text(json.dumps(_otlp([_span("ab" * 16, "01" * 8, {**CHAT}),
                                      {**_span("ab" * 16, "02" * 8, {}), "attributes": [
                                          {"key": "eval.reward", "value": {"doubleValue": 1.0}}]}])))
    [t] = load_trajectories(path)
    assert t.reward == 1.0 and t.label == 1
    [u] = load_trajectories(OTEL / "anyagent_openai_trace.json")
    line = verdict_line(u, Verdict.from_answer(True, 0.9, "ok"))
    assert line["label"] is None and line["reward"] is None  # unlabeled: no invented ground truth


SAMPLES = sorted(LANGFUSE.glob("*.json")) + sorted(OTEL.glob("*.json*"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_no_canary_in_hidden_fields_reaches_the_render(path, tmp_path):
    poisoned = poison_trace_file(path, detect_format(path), tmp_path / path.name)
    ts = load_trajectories(poisoned)
    assert ts
    for t in ts:
        text = render_trajectory(t, FULL)
        assert CANARY not in text and "0.73159" not in text, text[text.find(CANARY) - 80:][:200]
        assert t.reward == pytest.approx(CANARY_REWARD) and t.label is not None  # the canary really was read


def test_the_canary_would_be_seen_in_an_observable_field(tmp_path):
    """Control: the same canary in the user's question (an observable field) does reach the render."""
    text = (LANGFUSE / "openai-agents-2025-09-30.trace.json").read_text()
    assert "What's the weather in Tokyo?" in text
    path = tmp_path / "control.json"
    path.write_text(text.replace("What's the weather in Tokyo?", f"{CANARY} in Tokyo?"))
    [t] = load_trajectories(path)
    assert CANARY in render_trajectory(t, FULL)


def test_cli_stats_render_judge_on_the_samples(tmp_path, capsys):
    data = [str(OTEL), str(LANGFUSE)]
    assert main(["stats", "--data", *data, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    loaded = load_trajectories(data)
    assert len(loaded) == 18  # otel/: 1+1+3+3+2+1+1, langfuse/: 6 (evals/data/SOURCES.md)
    assert stats["trajectories"] == stats["unlabeled"] == len(loaded) and stats["positives"] == 0
    assert stats["tool_errors"] == sum(t.n_tool_errors for t in loaded) == 4
    assert stats["mean_reward"] is None and stats["skipped"] == 0
    assert main(["render", "--data", str(LANGFUSE / "openai-agents-2025-09-30.trace.json")]) == 0
    assert "TOOL CALL get_weather" in capsys.readouterr().out
    out = tmp_path / "preds.jsonl"
    with FakeOpenAI(lambda body, n: {"reason": "Answered from the tool result.", "passed": True, "score": 0.8}) as fake:
        assert main(["judge", "--data", *data, "--out", str(out), "--concurrency", "1",
                     "--api-base", fake.url + "/v1", "--model", "fake-judge-r1"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == len(loaded) and all(x["label"] is None and x["passed"] is True for x in lines)


def test_induce_refuses_unlabeled_traces_instead_of_training_on_placeholders(tmp_path, capsys):
    code = main(["induce", "--data", str(LANGFUSE), "--out", str(tmp_path / "p.json"), "--model", "unused"])
    assert code == 2 and "have no label" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def _sdk(trace, sid, attrs, parent=None, events=(), status="UNSET", start="2025-01-01T00:00:00.000001Z"):
    return {"name": "s", "context": {"trace_id": trace, "span_id": sid}, "parent_id": parent, "start_time": start,
            "end_time": start, "status": {"status_code": status}, "attributes": attrs,
            "events": [{"name": n, "attributes": a} for n, a in events]}


def test_semconv_event_style_messages_and_a_bare_tool_span_in_a_json_array(tmp_path):
    """1.27-1.35 span events (gen_ai.*.message, gen_ai.choice); an execute_tool span no message mentions."""
    trace = "0x" + "12" * 16
    chat = _sdk(trace, "0x01", {"gen_ai.operation.name": "chat"}, events=[
        ("gen_ai.system.message", {"content": "be brief"}),
        ("gen_ai.user.message", {"content": "what is 2+2?"}),
        ("gen_ai.choice", {"message": json.dumps({"role": "assistant", "content": "4"}), "index": 0})])
    tool = _sdk(trace, "0x02", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calc",
                                "gen_ai.tool.call.arguments": '{"x": "2+2"}', "gen_ai.tool.call.result": "4"},
                start="2024-12-31T23:59:59Z")
    path = tmp_path / "spans.json"
    path.write_text(json.dumps([chat, tool]))
    assert detect_format(path) == "otel"
    [t] = load_trajectories(path)
    assert t.id == "12" * 16 and t.hidden["system_prompt"] == "be brief"
    assert [(s.kind, s.content) for s in t.steps] == [
        ("tool_call", ""), ("tool_result", "4"), ("user", "what is 2+2?"), ("final_answer", "4")]
    assert t.steps[0].arguments == {"x": "2+2"} and t.steps[0].call_id == t.steps[1].call_id


def test_unmappable_gen_ai_messages_fail_naming_the_attribute(tmp_path):
    path = tmp_path / "odd.jsonl"
    bad = _sdk("0x" + "34" * 16, "0x01", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": '{"foo": 1}'})
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"odd\.jsonl, record 0: .*gen_ai\.input\.messages.*foo"):
        load_trajectories(path, format="otel")


def test_langfuse_json_lines_and_api_page_shapes(tmp_path):
    one = json.loads((LANGFUSE / "openai-agents-2025-09-30.trace.json").read_text())
    two = json.loads((LANGFUSE / "google-adk-2025-08-28.trace.json").read_text())
    lines = tmp_path / "traces.jsonl"
    lines.write_text(json.dumps(one) + "\n{broken\n" + json.dumps(two) + "\n")
    assert detect_format(lines) == "langfuse"
    ts = load_trajectories(lines, on_error="skip")
    report = ts.report
    assert len(ts) == 2 and [r for _, r, _ in report.skipped] == [1]
    page = tmp_path / "page.json"  # the traces API: full traces with inline observations
    page.write_text(json.dumps({"data": [{**one["trace"], "observations": one["observations"]}], "meta": {"page": 1}}))
    [t] = load_trajectories(page, format="langfuse")
    assert t.id == ts[0].id and [s.kind for s in t.steps] == [s.kind for s in ts[0].steps]


def test_langfuse_error_level_marks_the_tool_result(tmp_path):
    data = json.loads((LANGFUSE / "openai-agents-2025-09-30.trace.json").read_text())
    tool = next(o for o in data["observations"] if o["type"] == "TOOL")
    tool["level"], tool["statusMessage"] = "ERROR", "upstream timeout"
    path = tmp_path / "err.json"
    path.write_text(json.dumps(data))
    [t] = load_trajectories(path)
    [result] = [s for s in t.steps if s.kind == "tool_result"]
    assert result.is_error and t.n_tool_errors == 1


def test_json_lines_are_streamed_not_read_whole(tmp_path, monkeypatch):
    """OTLP JSON Lines and Langfuse JSON Lines are read line by line: reading the whole file would fail here."""
    otlp = tmp_path / "export.jsonl"
    otlp.write_bytes((OTEL / "constructed_otlp.jsonl").read_bytes())
    trace = json.loads((LANGFUSE / "openai-agents-2025-09-30.trace.json").read_text())
    lines = tmp_path / "traces.jsonl"
    lines.write_text(json.dumps(trace) + "\n")
    real_read_text, real_read_bytes = Path.read_text, Path.read_bytes

    def guarded(reader):
        def read(self, *args, **kwargs):
            if self.parent == tmp_path and self.suffix == ".jsonl":
                raise AssertionError(f"{self.name} read whole")
            return reader(self, *args, **kwargs)
        return read

    monkeypatch.setattr(Path, "read_text", guarded(real_read_text))
    monkeypatch.setattr(Path, "read_bytes", guarded(real_read_bytes))
    assert len(load_trajectories(otlp, format="otel")) == 3
    assert len(load_trajectories(lines, format="langfuse")) == 1
