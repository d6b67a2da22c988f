"""MLflow for tests (import it after `pytest.importorskip("mlflow")`): a local SQLite store, a small scripted
agent traced with MLflow's API, and a human label logged with its assessment API."""

from __future__ import annotations

import mlflow
from mlflow.entities import AssessmentSource, AssessmentSourceType, SpanType

CANARY = "CANARY-ASSESSMENT-7f3a"


def local_store(tmp_path, name: str, db: str = "local") -> str:
    """A SQLite tracking store in `tmp_path` (file `db`.db) with experiment `name` keeping its artifacts (trace
    data) in `tmp_path` too, not in ./mlruns of the working directory (MLflow's default for a local store)."""
    uri = f"sqlite:///{tmp_path / (db + '.db')}"
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(name) is None:
        mlflow.create_experiment(name, artifact_location=(tmp_path / "artifacts").as_uri())
    mlflow.set_experiment(name)
    return uri


def run_agent(task: int, fail: bool, note: str = "") -> str:
    """A small scripted agent traced with MLflow's API: an LLM call asking for a tool, the tool (raising
    when `fail`), a final answer. Returns the trace id."""

    @mlflow.trace(name="agent", span_type=SpanType.AGENT)
    def agent(question: str) -> str:
        messages = [{"role": "system", "content": "You book flights."}, {"role": "user", "content": question}]
        call = {"id": f"call_{task}", "type": "function",
                "function": {"name": "book_reservation", "arguments": f'{{"flight": "HAT{task:03d}"}}'}}
        with mlflow.start_span("chat", span_type=SpanType.CHAT_MODEL) as span:
            span.set_inputs({"messages": messages})
            span.set_outputs({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]})
        result = "Error: card declined"
        try:
            with mlflow.start_span("book_reservation", span_type=SpanType.TOOL) as span:
                span.set_inputs({"flight": f"HAT{task:03d}"})
                if fail:
                    raise RuntimeError("card declined")
                result = f"confirmation R{task:03d}"
                span.set_outputs(result)
        except RuntimeError:
            pass
        answer = f"Your flight is booked ({result})." if not fail else "Booked, all done!"
        tool_msg = {"role": "tool", "tool_call_id": call["id"], "content": result}
        with mlflow.start_span("chat", span_type=SpanType.CHAT_MODEL) as span:
            span.set_inputs({"messages": [*messages, {"role": "assistant", "content": None, "tool_calls": [call]},
                                          tool_msg]})
            span.set_outputs({"choices": [{"message": {"role": "assistant", "content": answer}}]})
        return answer

    agent(f"Task {task}: book flight HAT{task:03d} for me. {note}")
    return mlflow.get_last_active_trace_id()


def human(trace_id: str, value, name: str = "label") -> None:
    mlflow.log_feedback(trace_id=trace_id, name=name, value=value, rationale=f"{CANARY} checked by hand",
                        source=AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="alice"))
