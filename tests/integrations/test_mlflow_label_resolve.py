"""``--from-mlflow`` with HUMAN labels from several sources that disagree (issue 41 item 2): the traces are read with
``--label-resolve first|majority|unanimous|adjudicated`` by the one path `read_mlflow_labels` takes
(`integrations.mlflow.trace_label`), the disagreements counted and listed, the default saying what it did. Against a
real local MLflow store (SQLite), the traces and the feedback logged with MLflow's own API."""

from __future__ import annotations

import json

import pytest

mlflow = pytest.importorskip("mlflow", reason="the MLflow integration needs the extra: pip install -e '.[mlflow]'")

from mlflow.entities import AssessmentSource, AssessmentSourceType  # noqa: E402

from rubricforge_dspy.cli.main import main  # noqa: E402
from rubricforge_dspy.data.labels import LabelReading  # noqa: E402
from rubricforge_dspy.integrations.mlflow import MlflowLoadReport, load_mlflow_traces  # noqa: E402
from rubricforge_dspy.integrations.mlflow_labels import read_mlflow_labels  # noqa: E402
from tests.support.mlflow_runs import local_store, run_agent  # noqa: E402

EXPERIMENT = "two-people"
# per trace, the sources' labels in the order they are logged (None: that source did not label it)
VOTES = [
    {"alice": True, "bob": True, "carol": True},   # all agree: 1
    {"alice": True, "bob": False},                 # a tie between two people, no adjudicator
    {"alice": False, "bob": False, "carol": True},  # two against one; carol adjudicates: 1
    {"alice": False},                              # one person: 0
]
# the label each rule gives each trace (None: no label, the trace is read unlabeled)
EXPECTED = {
    "first": [1, 1, 0, 0],  # the earliest feedback: alice's, logged first on every trace
    "majority": [1, None, 0, 0],
    "unanimous": [1, None, None, 0],
    "adjudicated": [1, None, 1, 0],  # --adjudicator carol; without her a disagreement gives no label
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Four traces of a scripted agent and their HUMAN feedback from up to three sources, plus an LLM judge's
    feedback of the same name (never a label)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        uri = local_store(tmp_path_factory.mktemp("mlflow"), EXPERIMENT)
        traces = [run_agent(task, fail=task % 2 == 1) for task in range(len(VOTES))]
        mlflow.flush_trace_async_logging()
        for trace_id, votes in zip(traces, VOTES, strict=True):
            for who, value in votes.items():
                mlflow.log_feedback(trace_id=trace_id, name="label", value=value,
                                    source=AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id=who))
        mlflow.log_feedback(trace_id=traces[1], name="label", value=True,
                            source=AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE, source_id="gpt-x"))
        yield uri, traces


def _reading(rule: str) -> LabelReading:
    return LabelReading(resolve=rule, adjudicator="carol" if rule == "adjudicated" else None)


@pytest.mark.parametrize("rule", list(EXPECTED))
def test_the_rule_decides_each_traces_label_and_every_disagreement_is_counted(store, rule):
    uri, traces = store
    report = MlflowLoadReport()
    loaded = {t.id: t.label for t in load_mlflow_traces(uri, EXPERIMENT, report=report, reading=_reading(rule))}
    assert loaded == dict(zip(traces, EXPECTED[rule], strict=True))
    labels = report.labels
    # the adjudicator is not one of the labelers (as in a labels file): under her, alice and bob agree on trace 2
    torn = [traces[1]] if rule == "adjudicated" else [traces[1], traces[2]]
    assert sorted(labels.disagreements) == sorted(torn)
    left = [t for t, label in zip(traces, EXPECTED[rule], strict=True) if label is None]
    assert sorted(labels.unresolved) == sorted(left)
    assert report.labeled == len(traces) - len(left) and report.unlabeled == len(left)
    assert report.not_human == 1  # the LLM judge's "label": no labeler, no vote
    # the adjudicator decides; she is not one of the labelers whose agreement is measured
    assert labels.ratings[traces[2]] == ({"alice": 0, "bob": 0} if rule == "adjudicated"
                                         else {"alice": 0, "bob": 0, "carol": 1})
    summary = report.summary()
    assert f"{len(torn)} trace(s) where they disagree, {len(left)} left unlabeled by --label-resolve {rule}" in summary
    # one path: read_mlflow_labels gives the same labels, ratings and disagreements
    read = read_mlflow_labels(uri, EXPERIMENT, reading=_reading(rule))
    assert {i: e.label for i, e in read.entries.items()} == {i: v for i, v in loaded.items() if v is not None}
    assert read.ratings == labels.ratings and sorted(read.disagreements) == sorted(labels.disagreements)


def test_the_default_resolves_by_the_earliest_feedback_and_says_so(store):
    uri, traces = store
    report = MlflowLoadReport()
    loaded = {t.id: t.label for t in load_mlflow_traces(uri, EXPERIMENT, report=report)}
    assert loaded == dict(zip(traces, EXPECTED["first"], strict=True))
    assert "2 trace(s) where they disagree, 0 left unlabeled by --label-resolve first (each took the label of its " \
           "earliest feedback; --label-resolve majority, unanimous or adjudicated" in report.summary()


def test_from_mlflow_takes_label_resolve_and_lists_the_disagreements(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    uri, traces = store
    out, listed = tmp_path / "traces.jsonl", tmp_path / "disagreements.jsonl"
    assert main(["convert", "--from-mlflow", uri, "--experiment", EXPERIMENT, "--label-resolve", "majority",
                 "--disagreements-out", str(listed), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "HUMAN labels from 3 sources: 2 trace(s) where they disagree, 1 left unlabeled by --label-resolve " \
           "majority (the label most sources gave; a tie gives no label)" in err
    # their agreement, as `stats --labels` reports a labels file's, and each disagreement with what the rule did
    assert "labelers:" in err and "2 disagreement(s):" in err
    assert f"{traces[1]}: alice=1, bob=0 -> no label" in err
    assert f"{traces[2]}: alice=0, bob=0, carol=1 -> label 0" in err
    rows = {row["id"]: row for row in map(json.loads, listed.read_text().splitlines())}
    assert rows == {traces[1]: {"id": traces[1], "labels": {"alice": 1, "bob": 0}, "resolved": None},
                    traces[2]: {"id": traces[2], "labels": {"alice": 0, "bob": 0, "carol": 1}, "resolved": 0}}
    # the trajectories the command read carry the rule's labels (what judge, induce, certify read)
    written = {row["id"]: row.get("label") for row in map(json.loads, out.read_text().splitlines())}
    assert written == dict(zip(traces, EXPECTED["majority"], strict=True))


def test_adjudicated_from_the_command_line_and_file_only_flags_refused(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    uri, traces = store
    out = tmp_path / "adjudicated.jsonl"
    assert main(["convert", "--from-mlflow", uri, "--experiment", EXPERIMENT, "--label-resolve", "adjudicated",
                 "--adjudicator", "carol", "--out", str(out)]) == 0
    written = {row["id"]: row.get("label") for row in map(json.loads, out.read_text().splitlines())}
    assert written == dict(zip(traces, EXPECTED["adjudicated"], strict=True))
    capsys.readouterr()
    # a labels file's column names mean nothing for assessments: refused before any trace is read (exit 2)
    assert main(["convert", "--from-mlflow", uri, "--experiment", EXPERIMENT, "--labeler-column", "who",
                 "--out", str(tmp_path / "never.jsonl")]) == 2
    assert "--labeler-column name a labels file's columns" in capsys.readouterr().err
    assert not (tmp_path / "never.jsonl").exists()


def test_stats_from_mlflow_reports_the_sources_agreement_as_for_a_labels_file(store, capsys, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    uri, traces = store
    assert main(["stats", "--from-mlflow", uri, "--experiment", EXPERIMENT, "--label-resolve", "unanimous",
                 "--json"]) == 0
    labelers = json.loads(capsys.readouterr().out)["labelers"]  # where `stats --labels FILE --json` puts a file's
    assert labelers["resolve"] == "unanimous" and sorted(labelers["unresolved"]) == sorted([traces[1], traces[2]])
    assert {row["id"]: row["resolved"] for row in labelers["disagreements"]} == {traces[1]: None, traces[2]: None}
    assert labelers["agreement"]["items"] == 3  # the traces labeled by at least two sources
    assert main(["stats", "--from-mlflow", uri, "--experiment", EXPERIMENT]) == 0
    printed = capsys.readouterr().out
    assert "labelers:" in printed and f"{traces[1]}: alice=1, bob=0 -> label 1" in printed  # first: alice's
