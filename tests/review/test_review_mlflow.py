"""``rubricforge review --to-mlflow``: labels saved through the page's HTTP endpoint (httpx, token and CSRF) on
a real uvicorn server are also logged as HUMAN feedback on the traces of a real local MLflow store (SQLite, in
process), and the package's MLflow reader reads them back as the person's labels (last action wins); a
failure to log is counted and shown on the page while the label stays in the file."""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

pytest.importorskip("mlflow", reason="the MLflow sink needs the extra: pip install -e '.[mlflow]'")
pytestmark = pytest.mark.slow  # a SQLite MLflow store and traced agent runs: several seconds

from mlflow.tracing.client import TracingClient  # noqa: E402

from rubricforge_dspy.data.label_journal import read_journal  # noqa: E402
from rubricforge_dspy.integrations.mlflow import MlflowLoadReport, load_mlflow_traces  # noqa: E402
from rubricforge_dspy.integrations.mlflow_labels import HumanLabelSink  # noqa: E402
from rubricforge_dspy.review import ReviewState  # noqa: E402
from tests.review.conftest import ROOT, journal_lines  # noqa: E402
from tests.support.mlflow_runs import local_store  # noqa: E402
from tests.support.review_mlflow import post_label, post_undo, serving, traced_inputs  # noqa: E402

EXPERIMENT = "review"


def _text(page: str) -> str:
    """A page's text: its tags (the bidi isolates around names too) removed, its entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


@pytest.fixture
def traced(tmp_path):
    """Three traced agent runs in a local store and a review of them (`traced_inputs`)."""
    uri = local_store(tmp_path, EXPERIMENT)
    ids, inputs = traced_inputs(tmp_path, uri, EXPERIMENT)
    return uri, ids, inputs


def test_labels_saved_on_the_page_are_read_back_from_mlflow_as_human_labels(traced):
    uri, ids, inputs = traced
    t0, t1, t2 = ids
    sink = HumanLabelSink(uri, label_name="label", experiment=EXPERIMENT, journal=str(inputs.labels_out))
    state = ReviewState(inputs, on_label=sink, sink_name=f"MLflow at {uri}")
    with serving(state) as (server, c):
        post_label(server, c, t0, "pass", "the confirmation number is in the tool result")
        post_label(server, c, t1, "fail")
        post_label(server, c, t1, "pass", "changed my mind")  # overrides the fail
        post_label(server, c, t2, "fail")
        post_label(server, c, t2, "skip")  # no label: the fail is cleared
        post_undo(server, c)  # takes back the skip: the fail stands again
        assert state.wait_for_sink(timeout=120)  # sent in the background, in the file's order
        page = _text(c.get("/").text)
    assert state.sink.failed == 0 and state.sink.sent == 6
    assert "6 label action(s) sent to MLflow" in page
    assert (sink.report.logged, sink.report.overridden, sink.report.deleted) == (4, 1, 1)  # t2: logged, cleared, again
    journal = {ident: entry.label for ident, entry in read_journal(inputs.labels_out).entries.items()}
    assert journal == {t0: 1, t1: 1, t2: 0}  # last line wins in the file...

    report = MlflowLoadReport()
    back = {t.id: t.label for t in load_mlflow_traces(uri, EXPERIMENT, label_name="label", report=report)}
    assert back == journal and report.labeled == 3  # ...and in MLflow, read by the package's reader

    tracing = TracingClient(uri)
    first = [a for a in tracing.get_trace_info(t0).assessments if a.name == "label"]
    assert sorted((a.source.source_id, a.feedback.value) for a in first) == [("alice", True), ("tester", True)]
    assert [a.rationale for a in first if a.source.source_id == "tester"] == [
        "the confirmation number is in the tool result"]  # the note is the rationale; alice's label untouched
    assert all(a.source.source_type == "HUMAN" for a in first)
    second = [a for a in tracing.get_trace_info(t1).assessments if a.name == "label"]
    valid = [a for a in second if a.valid is not False]
    assert [(a.feedback.value, a.rationale) for a in valid] == [(True, "changed my mind")]
    assert [a.feedback.value for a in second if a.valid is False] == [False]  # the changed mind, kept as history
    third = [a for a in tracing.get_trace_info(t2).assessments if a.name == "label"]
    assert [(a.source.source_id, a.feedback.value) for a in third] == [("tester", False)]


def test_a_label_mlflow_cannot_take_stays_in_the_file_and_the_page_says_so(traced, tmp_path):
    _, ids, inputs = traced
    other = local_store(tmp_path, "elsewhere", db="other")  # a real store that holds none of these traces
    sink = HumanLabelSink(other, label_name="label", journal=str(inputs.labels_out))
    state = ReviewState(inputs, on_label=sink, sink_name=f"MLflow at {other}")
    with serving(state) as (server, c):
        post_label(server, c, ids[0], "fail", "tool error")
        assert state.wait_for_sink(timeout=120)
        page = _text(c.get(f"/item/{server.state.verdicts.position[ids[0]]}").text)
    assert [(line["id"], line["label"]) for line in journal_lines(inputs.labels_out)] == [(ids[0], 0)]  # kept
    assert state.sink.failed == 1 and state.sink.sent == 0 and state.sink.failed_ids == [ids[0]]
    assert "NOT sent to MLflow" in page and f"no trace {ids[0]!r}" in page


def test_an_unknown_experiment_is_refused_before_the_page_starts(traced):
    from rubricforge_dspy.core.errors import InputError

    uri, _, _ = traced
    with pytest.raises(InputError, match="no such experiment"):
        HumanLabelSink(uri, experiment="no-such-experiment")


def run_review(inputs, *flags):
    """``rubricforge review`` as a process (the real command line); returns it and the URL it printed."""
    command = [sys.executable, "-c", "import sys; from rubricforge_dspy.cli.main import main; sys.exit(main())",
               "review", "--data", *map(str, inputs.data), "--verdicts", str(inputs.verdicts), "--labels-out",
               str(inputs.labels_out), "--labeler", "cli", *flags]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    line = process.stdout.readline()  # printed once the page accepts connections
    assert line.startswith("review page (Ctrl-C to stop): "), (line, process.communicate()[1])
    return process, line.split(": ", 1)[1].strip()


def label_and_stop(process, url: str, index: int, choice: str) -> tuple[int, str]:
    with httpx.Client(follow_redirects=False, timeout=60) as c:
        base = url.split("/?")[0]
        assert c.get(url).status_code == 303
        page = c.get(base + "/item/0").text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)[1]
        assert c.post(base + "/label", data={"index": str(index), "choice": choice, "csrf": csrf}).status_code == 303
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_the_command_logs_to_mlflow_and_exits_3_when_a_label_did_not_reach_it(traced, tmp_path):
    uri, ids, inputs = traced
    process, url = run_review(inputs, "--to-mlflow", uri, "--experiment", EXPERIMENT)
    code, err = label_and_stop(process, url, 1, "fail")
    assert code == 0, err
    assert "MLflow: 1 label(s) logged" in err
    assert {t.id: t.label for t in load_mlflow_traces(uri, EXPERIMENT)}[ids[1]] == 0  # read back: cli's fail

    other = local_store(tmp_path, "elsewhere", db="other")  # holds none of these traces
    process, url = run_review(inputs, "--to-mlflow", other)
    code, err = label_and_stop(process, url, 2, "pass")
    assert code == 3, err  # a label that did not reach MLflow is never a quiet exit 0
    assert "1 label action(s) are in" in err and "NOT logged to MLflow" in err and ids[2] in err
    assert journal_lines(inputs.labels_out)[-1]["id"] == ids[2]  # the label itself is in the file


def test_the_command_refuses_an_unknown_experiment_before_serving(traced):
    from rubricforge_dspy.cli.main import main

    uri, _, inputs = traced
    code = main(["review", "--data", *map(str, inputs.data), "--verdicts", str(inputs.verdicts), "--labels-out",
                 str(inputs.labels_out), "--to-mlflow", uri, "--experiment", "no-such-experiment"])
    assert code == 2 and not inputs.labels_out.exists()
