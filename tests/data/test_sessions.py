"""Sessions (``--session-key``): the traces of one session become one trajectory, in start order, whose id is the
session id; labels join per session; traces of one session that disagree on the label are refused naming them.
OpenTelemetry (OpenInference ``session.id`` and GenAI ``gen_ai.conversation.id``) and Langfuse (``sessionId``)
fixtures with two sessions each, written in the test; the traces are listed out of start order on purpose."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import Step, Trajectory
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.sessions import SessionError, SessionReport, group_sessions
from tests.support.helpers import make_trajectory


def _chat_span(trace: str, turn: str, start_ns: int, session_attr: tuple[str, str] | None) -> dict:
    attrs = {"gen_ai.operation.name": "chat",
             "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text",
                                                                               "content": f"question {turn}"}]}]),
             "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text",
                                                                                    "content": f"answer {turn}"}]}])}
    if session_attr is not None:
        attrs[session_attr[0]] = session_attr[1]
    return {"traceId": trace, "spanId": "01" * 8, "name": "chat", "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(start_ns + 1000),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()], "status": {}}


# (trace id, turn text, start in ns, session attribute): session A's turn 2 is listed before its turn 1
OTEL_TRACES = [("a2" * 16, "A2", 2_000_000_000_000_000_000, ("session.id", "sess-A")),
               ("b1" * 16, "B1", 1_500_000_000_000_000_000, ("gen_ai.conversation.id", "sess-B")),
               ("a1" * 16, "A1", 1_000_000_000_000_000_000, ("session.id", "sess-A")),
               ("b2" * 16, "B2", 1_600_000_000_000_000_000, ("gen_ai.conversation.id", "sess-B")),
               ("c1" * 16, "C1", 1_700_000_000_000_000_000, None)]


@pytest.fixture
def otel_file(tmp_path):
    path = tmp_path / "traces.otlp.jsonl"
    lines = [{"resourceSpans": [{"resource": {"attributes": []},
                                 "scopeSpans": [{"spans": [_chat_span(trace, turn, start, attr)]}]}]}
             for trace, turn, start, attr in OTEL_TRACES]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _texts(record_or_trajectory) -> list[str]:
    if isinstance(record_or_trajectory, Trajectory):
        return [s.content for s in record_or_trajectory.steps]
    return [m["content"] for m in record_or_trajectory["messages"]]


def test_otel_traces_of_two_sessions_become_two_trajectories_in_start_order(otel_file, tmp_path, capsys):
    traces = load_trajectories(otel_file)
    assert {t.hidden.get("session_id") for t in traces} == {"sess-A", "sess-B", None}
    out = tmp_path / "sessions.jsonl"
    assert main(["convert", "--data", str(otel_file), "--session-key", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "4 trace(s) grouped into 2 session" in err and "the trajectory id is the session id" in err
    assert "1 trace(s) carry no session id" in err
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"sess-A", "sess-B", "c1" * 16}
    assert _texts(records["sess-A"]) == ["question A1", "answer A1", "question A2", "answer A2"]
    assert _texts(records["sess-B"]) == ["question B1", "answer B1", "question B2", "answer B2"]
    assert records["sess-A"]["task_id"] == "sess-A"
    # the last turn's answer is the session's answer; the first turn's is a turn of the conversation
    [session_a] = [t for t in load_trajectories(out) if t.id == "sess-A"]
    assert [s.kind for s in session_a.steps] == ["user", "assistant", "user", "final_answer"]


def test_render_shows_a_whole_session(otel_file, capsys):
    assert main(["render", "--data", str(otel_file), "--session-key", "--index", "0"]) == 0
    text = capsys.readouterr().out
    assert text.index("question A1") < text.index("answer A1") < text.index("question A2") < text.index("answer A2")


def test_judge_refuses_to_mlflow_with_sessions_before_reading(otel_file, tmp_path, capsys):
    pytest.importorskip("mlflow", reason="the MLflow flags need the [mlflow] extra (CI's extras pass runs this)")
    assert main(["judge", "--data", str(otel_file), "--session-key", "--to-mlflow", "sqlite:///nowhere.db",
                 "--out", str(tmp_path / "v.jsonl")]) == 2
    assert "verdict is per session" in capsys.readouterr().err


def test_without_the_flag_each_trace_is_its_own_trajectory(otel_file, tmp_path):
    out = tmp_path / "traces.jsonl"
    assert main(["convert", "--data", str(otel_file), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == len(OTEL_TRACES)


def test_labels_join_per_session_and_stats_count_sessions(otel_file, tmp_path, capsys):
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\nsess-A,1\nsess-B,0\n")
    assert main(["stats", "--data", str(otel_file), "--session-key", "--labels", str(labels), "--json"]) == 0
    counted = json.loads(capsys.readouterr().out)
    assert counted["trajectories"] == 3 and counted["positives"] == 1 and counted["unlabeled"] == 1


def _langfuse_trace(trace_id: str, session: str, turn: str, start: str, reward: float | None = None) -> dict:
    generation = {"id": f"obs-{trace_id}", "traceId": trace_id, "type": "GENERATION", "name": "llm",
                  "startTime": start, "endTime": start, "parentObservationId": None,
                  "input": [{"role": "user", "content": f"question {turn}"}],
                  "output": {"role": "assistant", "content": f"answer {turn}"}}
    trace = {"id": trace_id, "name": "turn", "sessionId": session, "timestamp": start,
             "scores": [] if reward is None else [{"name": "reward", "value": reward}]}
    return {"trace": trace, "observations": [generation]}


def test_langfuse_traces_of_two_sessions_become_two_trajectories_in_start_order(tmp_path):
    path = tmp_path / "langfuse.jsonl"
    traces = [_langfuse_trace("t-x2", "chat-x", "X2", "2025-05-01T10:05:00Z"),
              _langfuse_trace("t-y1", "chat-y", "Y1", "2025-05-01T09:00:00Z"),
              _langfuse_trace("t-x1", "chat-x", "X1", "2025-05-01T10:00:00Z"),
              _langfuse_trace("t-y2", "chat-y", "Y2", "2025-05-01T09:01:00Z")]
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))
    loaded = load_trajectories(path)
    assert [t.hidden["session_id"] for t in loaded] == ["chat-x", "chat-y", "chat-x", "chat-y"]
    report = SessionReport()
    sessions = group_sessions(loaded, report=report)
    assert [t.id for t in sessions] == ["chat-x", "chat-y"] and (report.sessions, report.traces) == (2, 4)
    by_id = {t.id: t for t in sessions}
    assert _texts(by_id["chat-x"]) == ["question X1", "answer X1", "question X2", "answer X2"]
    assert _texts(by_id["chat-y"]) == ["question Y1", "answer Y1", "question Y2", "answer Y2"]
    assert by_id["chat-x"].hidden["session"]["trace_ids"] == ["t-x1", "t-x2"]
    # another key: the trace's own attribute named by a JMESPath expression on the hidden fields
    assert [t.id for t in group_sessions(loaded, "sessionId")] == ["chat-x", "chat-y"]


def test_traces_of_one_session_that_disagree_on_the_label_are_refused_naming_them(tmp_path, capsys):
    path = tmp_path / "langfuse.jsonl"
    traces = [_langfuse_trace("t-1", "chat-z", "Z1", "2025-05-01T10:00:00Z", reward=1.0),
              _langfuse_trace("t-2", "chat-z", "Z2", "2025-05-01T10:01:00Z", reward=0.0)]
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))
    with pytest.raises(SessionError, match=r"session 'chat-z': its traces disagree on the label"):
        group_sessions(load_trajectories(path))
    assert main(["stats", "--data", str(path), "--session-key"]) == 2
    err = capsys.readouterr().err
    assert "chat-z" in err and "t-1" in err and "t-2" in err and "Traceback" not in err


def test_traces_of_one_session_that_disagree_on_the_task_are_refused():
    def trace(i: int, task: str) -> Trajectory:
        base = make_trajectory(i, success=True, task=task)
        return Trajectory(id=f"trace-{i}", task_id=task, domain=base.domain, agent=base.agent,
                          steps=(Step("user", "hi"),), reward=None, label=None, source=base.source,
                          hidden={"session_id": "s"})

    with pytest.raises(SessionError, match="disagree on the task"):
        group_sessions([trace(0, "task-1"), trace(1, "task-2")])
    [one] = group_sessions([trace(0, "task-1"), trace(1, "task-1")])
    assert one.id == "s" and one.task_id == "task-1"


@pytest.mark.usefixtures("format_registry_as_before")
def test_a_mapping_groups_by_the_session_id_it_maps_into_hidden(tmp_path, capsys):
    """A declarative mapping gives the session through ``hidden: {session_id: ..., started_at: ...}``: the same
    grouping, labels per session (each turn carries the conversation's outcome)."""
    data = tmp_path / "turns.jsonl"
    rows = [{"id": "t2", "conv": "c-1", "t": 20, "q": "second question", "a": "second answer", "ok": True},
            {"id": "u1", "conv": "c-2", "t": 5, "q": "other question", "a": "other answer", "ok": False},
            {"id": "t1", "conv": "c-1", "t": 10, "q": "first question", "a": "first answer", "ok": True}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"name": "chat_turns", "records": {"from": "jsonl"}, "id": "id", "task": "q",
                                   "final_answer": "a", "label": {"field": "ok", "pass": [True]},
                                   "hidden": {"session_id": "conv", "started_at": "t"}}))
    out = tmp_path / "sessions.jsonl"
    assert main(["convert", "--data", str(data), "--map", str(mapping), "--session-key", "--out", str(out)]) == 0
    assert "3 trace(s) grouped into 2 session" in capsys.readouterr().err
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"c-1", "c-2"} and (records["c-1"]["label"], records["c-2"]["label"]) == (1, 0)
    texts = _texts(records["c-1"])
    assert texts.index("first question") < texts.index("first answer") < texts.index("second question")
