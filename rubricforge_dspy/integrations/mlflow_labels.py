"""A person's labels, as they are saved, logged to MLflow as HUMAN feedback on the traces.

``rubricforge review --to-mlflow URI`` builds a `HumanLabelSink` and hands it to the review page as its
``on_label`` callback (the review layer never imports this module: the command line wires the two).
Each line the page appends to its labels journal (`data.label_journal.JournalLine`: a label, a changed
mind, a skip, an undo) becomes the trace's current HUMAN feedback of that labeler:

- pass / fail: a `Feedback` named ``label_name`` (value True/False, rationale = the note, source HUMAN
  with the labeler as source id). When the labeler already has one there, it is *overridden*
  (``overrides`` = the old assessment: MLflow keeps the old one, marked invalid), so the trace history
  shows the changed mind and exactly one valid label of that labeler remains.
- skip, or an undo back to unlabeled: the labeler's feedback of that name is *deleted* (MLflow has no
  "cleared" feedback value; a skip is no label, and `load_mlflow_traces` then reads the trace unlabeled).

`read_mlflow_labels` reads the HUMAN feedback of several people back the other way: each valid feedback's source
id is its labeler, so an experiment labeled by two people gives a `LabelFile` with ``ratings`` per trace, resolved
by the same rule as a labels file with a labeler column (`data.labels.LabelReading`: ``--label-values`` for text
values, ``--label-resolve``), whose labelers' agreement `data.stats.labeler_report` computes.

The trajectory id is the trace id (`load_mlflow_traces` and ``--from-mlflow`` give trajectories the
trace id), so a verdict file judged on ``--from-mlflow`` data names the traces. Another person's
assessments, and other sources' (LLM judges, code), are never touched; `load_mlflow_traces` reads the
labels back (``--from-mlflow ... --label-name``).

Every MLflow call of the sink runs under `integrations.mlflow_http.bounded_http` (5 s a request, one retry):
a dead or hung server costs a label seconds, not MLflow's default minutes, and a server that does not
answer at start is a `ServerError` naming the tracking URI. The review page calls the sink from a
background worker (`review.state.ReviewState`), so even those seconds never hold up the page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rubricforge_dspy.core.errors import InputError, ServerError
from rubricforge_dspy.data.labels import LabelFile, LabelReading
from rubricforge_dspy.integrations.mlflow import as_server_error, experiment_id_of
from rubricforge_dspy.integrations.mlflow_assessments import assessment_reading, is_human_feedback, trace_label
from rubricforge_dspy.integrations.mlflow_http import bounded_http

try:
    from mlflow import MlflowClient
    from mlflow.entities import AssessmentSource, AssessmentSourceType, Feedback
    from mlflow.exceptions import MlflowException
    from mlflow.tracing.client import TracingClient
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    raise ImportError('rubricforge_dspy.integrations.mlflow_labels needs MLflow 3: pip install '
                      '"rubricforge-dspy[mlflow]"') from _missing

__all__ = ["HumanLabelSink", "LabelSinkReport", "REVIEW_KEY", "read_mlflow_labels"]

REVIEW_KEY = "rubricforge.review"  # feedback metadata: logged by the review page (value: the labels file)
_log = logging.getLogger(__name__)


@dataclass
class LabelSinkReport:
    """What the sink did: feedback logged anew, overridden (a changed mind), deleted (skip / undo), unchanged."""

    logged: int = 0
    overridden: int = 0
    deleted: int = 0
    unchanged: int = 0

    def summary(self) -> str:
        return (f"MLflow: {self.logged} label(s) logged, {self.overridden} overridden, {self.deleted} cleared, "
                f"{self.unchanged} unchanged")


def _why(exc: Exception) -> str:
    """The reason of a failed MLflow request in a few words (MLflow's message holds urllib3's whole chain)."""
    text = str(exc)
    for needle, short in (("Connection refused", "connection refused"), ("timed out", "timed out"),
                          ("Name or service not known", "unknown host"), ("Max retries exceeded", "no answer")):
        if needle in text:
            return short
    return text.splitlines()[0][:200] if text else type(exc).__name__


class HumanLabelSink:
    """Log each labels-journal line as the labeler's HUMAN feedback on its trace (module docstring).

    Args:
        tracking_uri: the MLflow tracking server or store URI.
        label_name: the feedback name (the ``--label-name`` that ``--from-mlflow`` reads labels from).
        experiment: when given, checked to exist now, and every labeled trace must belong to it.
        journal: the labels file's path, recorded in each feedback's metadata.

    Raises:
        InputError: an unknown experiment, an empty label name; ServerError: MLflow cannot be reached.
    """

    def __init__(self, tracking_uri: str, *, label_name: str = "label", experiment: str | None = None,
                 journal: str | None = None):
        if not label_name or not str(label_name).strip():
            raise InputError("--label-name: give the feedback a name")
        self.tracking_uri, self.label_name, self.journal = tracking_uri, str(label_name), journal
        self.client = TracingClient(tracking_uri)
        mlflow_client = MlflowClient(tracking_uri)
        self.experiment_id = None
        try:
            with bounded_http():
                if experiment is not None:
                    self.experiment_id = experiment_id_of(mlflow_client, tracking_uri, experiment)
                else:
                    mlflow_client.search_experiments(max_results=1)  # reachable now, not at the first label
        except (MlflowException, ServerError) as exc:
            raise ServerError(f"MLflow at {tracking_uri} cannot be used ({_why(exc)}): start it, or give "
                              "--to-mlflow the URI of a running tracking server") from exc
        self.report = LabelSinkReport()

    def _info(self, trace_id: str) -> Any:
        try:
            info = self.client.get_trace_info(trace_id)
        except MlflowException as exc:
            if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")):
                raise InputError(f"MLflow at {self.tracking_uri}: no trace {trace_id!r} (label an item whose id is a "
                                 "trace id: verdicts judged on --from-mlflow data)") from exc
            raise ServerError(f"MLflow at {self.tracking_uri}: {_why(exc)}") from exc
        if self.experiment_id is not None and str(info.experiment_id) != str(self.experiment_id):
            raise InputError(f"MLflow at {self.tracking_uri}: trace {trace_id!r} is in experiment "
                             f"{info.experiment_id}, not in --experiment {self.experiment_id}")
        return info

    def __call__(self, line: Any) -> str:
        """Log `line` (a `JournalLine`: id, label, skip, note, labeler) on its trace; returns what was done
        (``"logged"``, ``"overridden"``, ``"deleted"``, ``"unchanged"``).

        Raises:
            InputError: no such trace (or not in the experiment); ServerError: MLflow failed.
        """
        with bounded_http():
            return self._log(line)

    def _log(self, line: Any) -> str:
        trace_id, labeler = str(line.id), str(line.labeler)
        info = self._info(trace_id)
        mine = sorted((a for a in (info.assessments or []) if is_human_feedback(a, self.label_name)
                       and a.source.source_id == labeler), key=lambda a: a.create_time_ms or 0)
        try:
            if line.label is None or line.skip:
                for old in mine:
                    self.client.delete_assessment(trace_id, old.assessment_id)
                done = "deleted" if mine else "unchanged"
            else:
                value, rationale = bool(line.label), (line.note or None)
                if len(mine) == 1 and mine[0].feedback.value == value and (mine[0].rationale or None) == rationale:
                    done = "unchanged"
                else:
                    for old in mine[:-1]:  # one valid label per labeler: extra ones (older) go
                        self.client.delete_assessment(trace_id, old.assessment_id)
                    source = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id=labeler)
                    metadata = {REVIEW_KEY: self.journal or "rubricforge review", "labeled_at": str(line.time)}
                    feedback = Feedback(name=self.label_name, value=value, rationale=rationale, source=source,
                                        metadata=metadata, overrides=mine[-1].assessment_id if mine else None)
                    self.client.log_assessment(trace_id, feedback)
                    done = "overridden" if mine else "logged"
        except MlflowException as exc:
            raise ServerError(f"MLflow at {self.tracking_uri}: {_why(exc)}") from exc
        setattr(self.report, done, getattr(self.report, done) + 1)
        _log.info("MLflow trace %s: label of %s %s", trace_id, labeler, done)
        return done


def read_mlflow_labels(tracking_uri: str, experiment: str, *, label_name: str = "label",
                       reading: LabelReading | None = None) -> LabelFile:
    """The HUMAN feedback named `label_name` on the traces of `experiment`, one labeler per source id, as a
    `LabelFile` keyed by trace id: ``ratings`` (each labeler's label), the label the ``reading.resolve`` rule gives
    (``entries``), the traces it leaves without one (``unresolved``) and those where the labelers disagree.

    Each trace is read by `integrations.mlflow.trace_label`, the path ``--from-mlflow`` (`load_mlflow_traces`)
    takes: only valid feedback counts (an overridden one is history); when one source has several valid ones on a
    trace, the latest counts; ``first`` is the source whose feedback came earliest. Values are read by
    ``reading.values`` when given (``{"value": ..., "labeler": ...}`` is the row: the word map reads ``value``, an
    expression may read both), else as 0/1 words (`integrations.mlflow_assessments.label_value`).

    Args:
        tracking_uri: the MLflow tracking server or store URI.
        experiment: the experiment's name or id.
        label_name: the feedback's name.
        reading: how values are read and labels resolved (default: 0/1 values, ``first``).

    Raises:
        InputError: no such experiment, a value that is not a label; ServerError: MLflow cannot be reached.
    """
    reading = assessment_reading(reading)
    client = MlflowClient(tracking_uri)
    where = f"MLflow {tracking_uri}, experiment {experiment}"
    out = LabelFile(where, "mlflow", {})
    out.resolve = reading.resolve
    with bounded_http():
        experiment_id = experiment_id_of(client, tracking_uri, experiment)
        token = None
        while True:
            try:
                page = client.search_traces(locations=[experiment_id], max_results=100, page_token=token,
                                            include_spans=False)
            except MlflowException as exc:
                raise as_server_error(tracking_uri, exc) from exc
            for trace in page:
                trace_label(out, trace.info, label_name, reading, f"{where}, trace {trace.info.trace_id}")
            token = page.token
            if not token:
                break
    return out
