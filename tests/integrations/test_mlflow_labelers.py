"""MLflow HUMAN assessments from several sources read as labels from several people (issue 41 item 2): each
source id is a labeler; the resolution rule and the agreement are those of a labels file with a labeler column.
Against a real local MLflow store (SQLite), the traces and feedback logged with MLflow's own API."""

from __future__ import annotations

import pytest

mlflow = pytest.importorskip("mlflow", reason="the MLflow integration needs the extra: pip install -e '.[mlflow]'")

from mlflow.entities import AssessmentSource, AssessmentSourceType  # noqa: E402

from rubricforge_dspy.core.errors import InputError  # noqa: E402
from rubricforge_dspy.data.labels import LabelReading  # noqa: E402
from rubricforge_dspy.data.stats import format_labeler_report, labeler_report  # noqa: E402
from rubricforge_dspy.integrations.mlflow_labels import read_mlflow_labels  # noqa: E402
from tests.support.mlflow_runs import local_store, run_agent  # noqa: E402


@pytest.fixture(autouse=True)
def _no_cost_map_download(monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def feedback(trace_id: str, who: str, value, source_type=AssessmentSourceType.HUMAN) -> None:
    mlflow.log_feedback(trace_id=trace_id, name="trajectory_success", value=value,
                        source=AssessmentSource(source_type=source_type, source_id=who))


def test_two_annotators_assessments_are_resolved_and_their_agreement_reported(tmp_path):
    uri = local_store(tmp_path, "annotated")
    traces = [run_agent(task, fail=task % 2 == 1) for task in range(6)]
    mlflow.flush_trace_async_logging()
    alice = ["Successful", "Unsuccessful", "Successful", "Unsuccessful", "Successful", "Unsure"]
    bob = ["Successful", "Unsuccessful", "Unsuccessful", "Unsuccessful", "Successful", "Successful"]
    for trace_id, a, b in zip(traces, alice, bob, strict=True):
        feedback(trace_id, "alice", a)
        feedback(trace_id, "bob", b)
    feedback(traces[2], "gpt-judge", "Successful", AssessmentSourceType.LLM_JUDGE)  # a judge is no labeler
    reading = LabelReading(values="Successful=1,Unsuccessful=0,Unsure=skip", resolve="unanimous")
    read = read_mlflow_labels(uri, "annotated", label_name="trajectory_success", reading=reading)
    assert read.ratings[traces[2]] == {"alice": 1, "bob": 0} and read.ratings[traces[5]] == {"alice": None, "bob": 1}
    assert read.disagreements == [traces[2]] and list(read.unresolved) == [traces[2]]
    assert {i: e.label for i, e in read.entries.items()} == {traces[0]: 1, traces[1]: 0, traces[3]: 0,
                                                             traces[4]: 1, traces[5]: 1}
    report = labeler_report(read)
    # 5 traces labeled by both (the sixth: alice unsure): 4 agree; alice 1 0 1 0 1, bob 1 0 0 0 1
    # p_o = 4/5, p_e = 3/5 * 2/5 + 2/5 * 3/5 = 12/25 -> kappa = (20/25 - 12/25) / (13/25) = 8/13
    assert report["agreement"]["items"] == 5 and report["agreement"]["raw_agreement"]["value"] == pytest.approx(0.8)
    assert report["agreement"]["pairs"][0]["kappa"]["value"] == pytest.approx(8 / 13)
    text = "\n".join(format_labeler_report(report))
    assert f"{traces[2]}: alice=1, bob=0 -> no label" in text
    # a changed mind: the latest valid feedback of a source counts
    feedback(traces[2], "bob", "Successful")
    again = read_mlflow_labels(uri, "annotated", label_name="trajectory_success", reading=reading)
    assert again.entries[traces[2]].label == 1 and not again.disagreements


def test_a_value_outside_the_map_names_the_trace(tmp_path):
    uri = local_store(tmp_path, "odd")
    trace_id = run_agent(0, fail=False)
    mlflow.flush_trace_async_logging()
    feedback(trace_id, "alice", "Maybe")
    with pytest.raises(InputError, match=f"trace {trace_id}.*'Maybe' is not among --label-values"):
        read_mlflow_labels(uri, "odd", label_name="trajectory_success",
                           reading=LabelReading(values="Successful=1,Unsuccessful=0"))
