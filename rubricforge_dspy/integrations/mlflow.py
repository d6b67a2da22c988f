"""MLflow, both ways: traces and HUMAN labels in, verdicts out as assessments, a frozen judge as a scorer.

``pip install "rubricforge-dspy[mlflow]"`` (MLflow 3). Importing this module imports MLflow.

- `load_mlflow_traces`: pulls an experiment's traces page by page through `MlflowClient.search_traces`
  (constant memory) and maps each through the ``otel`` loader's MLflow span mapping
  (`data.formats.otel.to_span`, `data.formats.spans.build_trajectory`): the trajectory id is the trace
  id. The label is read from the trace's valid *feedback* assessments named ``label_name`` whose source is
  ``HUMAN``; LLM_JUDGE and CODE assessments are never labels. Each source id is a labeler (its latest valid
  feedback counts), and the trace's label is resolved among them by the rule of a labels file with a labeler
  column (`trace_label`: `data.labels.resolve_ratings`, ``--label-resolve first|majority|unanimous|adjudicated``,
  ``--label-values`` for text values; the one path `integrations.mlflow_labels.read_mlflow_labels` takes too):
  the report's ``labels`` holds every labeler's label, the traces where they disagree and those the rule left
  without a label. A trace without a label is unlabeled (counted in the `MlflowLoadReport`, still usable for
  judging and label-next). Assessments,
  expectations and tags never reach the steps: only spans are mapped. The trace's session (metadata
  ``mlflow.trace.session``) is kept as ``hidden["session_id"]``: ``--session-key`` (`data.sessions`)
  judges a session's traces as one trajectory whose id is the session id.
- `log_verdicts_to_mlflow`: one LLM_JUDGE feedback assessment per trace and program (value = passed,
  rationale = reason, metadata: score, criterion, abstained, error kind, rubric and program hashes,
  certificate summary); an abstention is logged as an assessment *error*, never as ``passed=False``.
  Re-running is idempotent; assessments of other sources (a person's label) are never touched.
- `scorer`: a frozen judge as an ``mlflow.genai`` scorer for ``mlflow.genai.evaluate(data=traces, ...)``;
  an abstention is a `Feedback` with an error and no value. The judge's own LM calls are never traced
  into the experiment (``evaluate`` turns on MLflow's DSPy autologging: the scorer runs the judge with
  MLflow's DSPy callback removed and under an unsampled span). Its default name (``rubricforge_scorer``)
  differs from the write-back's (``rubricforge``), and the write-back never touches an assessment an
  evaluation run logged.
- `tag_for_labeling`: tags the traces ``label-next`` picked (``rubricforge.label_next`` = rank) so a
  person finds them in MLflow's UI (filter ``tag.rubricforge.label_next != ''``) and labels them there;
  the next `load_mlflow_traces` reads those labels. The tags of an earlier pick in the same experiment
  are removed first, so the tags always show the latest pick only. (Labeling sessions need Databricks; the open-source
  server has none, so tags it is.)
- `bounded_http`: short timeouts and few retries for the calls made under it (the review page's label sink
  uses it): MLflow's HTTP client otherwise retries a dead server for minutes. MLflow reads its
  ``MLFLOW_HTTP_REQUEST_*`` settings from the process environment at each request, so they are set there
  only while such a call runs, and only those the user has not set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar

from rubricforge_dspy.core.errors import InputError, ServerError
from rubricforge_dspy.core.trajectory import Trajectory, TrajectoryFormatError
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.data.formats.otel import mlflow_session, to_span
from rubricforge_dspy.data.formats.spans import build_trajectory
from rubricforge_dspy.data.labels import LabelFile, LabelReading
from rubricforge_dspy.data.sessions import SESSION_ID
from rubricforge_dspy.integrations._judging import ProgramFacts, criterion_name, judge_with_facts
from rubricforge_dspy.integrations.mlflow_assessments import (  # re-exported: one path for labels
    RESOLVED_BY,
    assessment_reading,
    trace_label,
)
from rubricforge_dspy.judge.execution import judge_verdict
from rubricforge_dspy.judge.module import TrajectoryVerdictSignature

try:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType, Feedback
    from mlflow.exceptions import MlflowException
    from mlflow.genai.scorers import scorer as make_scorer
    from mlflow.tracing.client import TracingClient
    from mlflow.tracing.constant import AssessmentMetadataKey, TraceTagKey
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    raise ImportError('rubricforge_dspy.integrations.mlflow needs MLflow 3: pip install "rubricforge-dspy[mlflow]"'
                      ) from _missing

__all__ = ["MlflowLoadReport", "WriteBackReport", "load_mlflow_traces", "log_verdicts_to_mlflow", "scorer",
           "tag_for_labeling", "trace_to_trajectory", "judge_call", "trace_label", "LABEL_NEXT_TAG", "FORMAT",
           "SCORER_NAME"]

FORMAT = "mlflow"
_T = TypeVar("_T")
LABEL_NEXT_TAG = "rubricforge.label_next"
LABEL_NAME_TAG = "rubricforge.label_name"
PROGRAM_KEY = "rubricforge.program"  # assessment metadata: the program identity (`ProgramFacts.key`)
SCORER_NAME = "rubricforge_scorer"  # the scorer's default name; the write-back's default is "rubricforge"
# What DSPy's MLflow callback records as the ``signature`` attribute of the judge's Predict span.
JUDGE_SIGNATURE = TrajectoryVerdictSignature.signature
_log = logging.getLogger(__name__)


@dataclass
class MlflowLoadReport:
    """What a pull from MLflow did: traces read, labeled and unlabeled, skipped (with the reason), and
    assessments named like the label that were not labels because their source is not HUMAN."""

    experiment_id: str | None = None
    loaded: int = 0
    labeled: int = 0
    unlabeled: int = 0
    pages: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (trace id, problem)
    not_human: int = 0  # LLM_JUDGE/CODE assessments named label_name, ignored as labels
    judge_calls: list[tuple[str, str]] = field(default_factory=list)  # (trace id, why): a judge's own call
    # the HUMAN labels as a labels file with a labeler column (`trace_label`): ratings per trace (labeler = source
    # id), the rule, disagreements, the traces it left without a label; `data.stats.labeler_report` reads it
    labels: LabelFile | None = None

    def several_labelers(self) -> bool:
        """Some trace holds HUMAN labels of more than one source (their agreement can be measured)."""
        return self.labels is not None and any(len(r) > 1 for r in self.labels.ratings.values())

    def summary(self) -> str:
        text = (f"loaded {self.loaded} MLflow traces ({self.labeled} labeled, {self.unlabeled} unlabeled), "
                f"skipped {len(self.skipped)}, ignored {self.not_human} non-human assessment(s) as labels")
        if self.judge_calls:
            text += (f", left out {len(self.judge_calls)} trace(s) of a judge's own calls (not agent traces, e.g. "
                     f"{self.judge_calls[0][0]}: {self.judge_calls[0][1]})")
        if self.labels is not None and (self.several_labelers() or self.labels.disagreements):
            sources = len({who for r in self.labels.ratings.values() for who in r})
            rule = self.labels.resolve
            text += (f"; HUMAN labels from {sources} sources: {len(self.labels.disagreements)} trace(s) where they "
                     f"disagree, {len(self.labels.unresolved)} left unlabeled by --label-resolve {rule}")
            if self.labels.disagreements and rule in RESOLVED_BY:
                text += f" ({RESOLVED_BY[rule]})"
        return text


@dataclass
class WriteBackReport:
    """What `log_verdicts_to_mlflow` did per trace: logged anew, replaced (the program's earlier verdict
    differed), unchanged (already there), and how many were abstentions logged as errors."""

    logged: int = 0
    replaced: int = 0
    unchanged: int = 0
    abstentions: int = 0
    human_untouched: int = 0  # traces that also hold a HUMAN assessment of that name (left as it is)

    def summary(self) -> str:
        return (f"MLflow: {self.logged} verdict(s) logged, {self.replaced} replaced, {self.unchanged} unchanged "
                f"({self.abstentions} abstention(s) logged as errors)")


def _where(tracking_uri: str, experiment: str) -> str:
    return f"mlflow {tracking_uri} experiment {experiment!r}"


def as_server_error(tracking_uri: str, exc: Exception) -> ServerError:
    return ServerError(f"MLflow at {tracking_uri}: {type(exc).__name__}: {exc}")


def experiment_id_of(client: MlflowClient, tracking_uri: str, experiment: str) -> str:
    try:
        found = client.get_experiment_by_name(experiment)
        if found is None and str(experiment).isdigit():
            found = client.get_experiment(str(experiment))
    except MlflowException as exc:
        if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")):
            found = None
        else:
            raise as_server_error(tracking_uri, exc) from exc
    if found is None:
        raise InputError(f"{_where(tracking_uri, experiment)}: no such experiment (give its name or id; list them "
                         "with `mlflow experiments search`)")
    experiment_id: str = found.experiment_id
    return experiment_id


def _attribute(raw: Any) -> Any:
    """An MLflow span attribute as stored (JSON-encoded) decoded, or as is."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def judge_call(trace: Any) -> str | None:
    """Why `trace` is a judge's own call rather than an agent's, or None when it is not one.

    Two kinds are recognized: the trace ``mlflow.genai.evaluate`` records of a scorer's call (tag
    ``mlflow.trace.sourceScorer``, when scorer tracing is on), and a rubricforge judge's DSPy call traced by
    MLflow's DSPy autologging (a span whose ``signature`` is the judge's, ``trajectory -> reason, passed,
    score``), as ``mlflow.genai.evaluate`` recorded them before `scorer` stopped it.

    Args:
        trace: an ``mlflow.entities.Trace``.

    Returns:
        A short reason, or None.
    """
    scorer_name = (getattr(trace.info, "tags", None) or {}).get(TraceTagKey.SOURCE_SCORER_NAME)
    if scorer_name:
        return f"the trace of the mlflow.genai scorer {scorer_name!r}"
    data = getattr(trace, "data", None)
    for span in getattr(data, "spans", None) or []:
        if _attribute((getattr(span, "attributes", None) or {}).get("signature")) == JUDGE_SIGNATURE:
            return f"a rubricforge judge's DSPy call (span {span.name!r}, signature {JUDGE_SIGNATURE!r})"
    return None


def trace_to_trajectory(trace: Any, *, label: int | None = None, index: int = 0, source: str = FORMAT,
                        hidden: dict[str, Any] | None = None) -> Trajectory:
    """One MLflow `Trace` as a `Trajectory` (id = the trace id), through the ``otel`` loader's span mapping.

    Only the trace's spans are read; its assessments, expectations, tags and previews are not.

    Args:
        trace: an ``mlflow.entities.Trace`` with its spans.
        label: the 0/1 label, or None for an unlabeled trajectory.
        index: the trace's position in its source, for the `Source`.
        source: what `Source.file` records (the server and experiment).
        hidden: extra never-rendered fields.

    Raises:
        TrajectoryFormatError: a span the mapping cannot read, or a trace without an observable step.
    """
    trace_id = trace.info.trace_id
    spans = []
    try:
        for k, raw in enumerate(trace.to_dict()["data"]["spans"]):
            _, span, _ = to_span(raw, f"trace {trace_id}, span {k}")
            spans.append(span)
        # `path` is only recorded as the Source's file: the server and experiment (a URI, not a Path)
        session = mlflow_session(trace.info)
        return build_trajectory(spans, trace_id=trace_id, path=source, index=index, fmt="otel",
                                threshold=0.0, reward=None if label is None else float(label),
                                hidden={"mlflow": {"trace_id": trace_id, **(hidden or {})},
                                        **({SESSION_ID: session} if session is not None else {})})
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise TrajectoryFormatError(source, trace_id, str(exc)) from exc


def load_mlflow_traces(tracking_uri: str, experiment: str, *, filter_string: str | None = None,
                       label_name: str = "label", page_size: int = 100, on_error: str = "raise",
                       report: MlflowLoadReport | None = None,
                       reading: LabelReading | None = None) -> Iterator[Trajectory]:
    """Yield the traces of an MLflow experiment as trajectories, labeled from HUMAN feedback.

    A generator: one page of `page_size` traces is held at a time. Labeled trajectories carry
    ``label`` 0/1 (reward 1.0/0.0); unlabeled ones have ``label=None`` and are counted.

    Args:
        tracking_uri: the MLflow tracking server (``http://127.0.0.1:5000``) or store URI.
        experiment: the experiment's name (or id).
        filter_string: an MLflow trace search filter (``"tag.split = 'test'"``), or None for all traces.
        label_name: the name of the HUMAN feedback assessment that holds the label.
        page_size: traces per request.
        on_error: ``"raise"`` at the first trace that cannot be mapped, or ``"skip"`` it and list it in
            `report.skipped`. A trace that is a judge's own call (`judge_call`) is neither: it is left out
            and listed in `report.judge_calls` either way.
        report: a `MlflowLoadReport` to fill in (counts, skipped traces, judges' own calls, and ``labels``: every
            source's label, the disagreements and the traces left unlabeled by the rule).
        reading: how HUMAN feedback values become labels and which label a trace gets when its sources disagree
            (``--label-values``, ``--label-resolve``, ``--adjudicator``; `trace_label`); default: 0/1 words, the
            earliest source's label (``first``), the disagreement counted in ``report.labels``.

    Yields:
        `Trajectory` records, ids = MLflow trace ids.

    Raises:
        InputError: no such experiment, a bad `page_size`/`on_error`, a label value that is not a label (by
            `reading`); `TrajectoryFormatError` (an `InputError`) for an unmappable trace
            under ``on_error="raise"``.
        ServerError: the MLflow server cannot be reached or refuses the search (a bad filter included).
    """
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise InputError(f"page_size must be a positive integer, got {page_size!r}")
    if on_error not in ("raise", "skip"):
        raise InputError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    report = report if report is not None else MlflowLoadReport()
    reading = assessment_reading(reading)
    client = MlflowClient(tracking_uri)
    report.experiment_id = experiment_id_of(client, tracking_uri, experiment)
    source = _where(tracking_uri, experiment)
    report.labels = LabelFile(source, FORMAT, {})
    token, index = None, 0
    while True:
        try:
            page = client.search_traces(locations=[report.experiment_id], filter_string=filter_string,
                                        max_results=page_size, page_token=token, order_by=["timestamp_ms ASC"])
        except MlflowException as exc:
            if "INVALID_PARAMETER_VALUE" in str(getattr(exc, "error_code", "")):
                raise InputError(f"{source}: MLflow refused the search: {exc.message}") from exc
            raise as_server_error(tracking_uri, exc) from exc
        report.pages += 1
        for trace in page:
            why = judge_call(trace)
            if why is not None:  # a judge's own call, not an agent's: counted, never an episode
                report.judge_calls.append((trace.info.trace_id, why))
                continue
            index += 1
            trajectory = _loaded(trace, index - 1, source, label_name, reading, on_error, report)
            if trajectory is not None:
                yield trajectory
        token = page.token
        if not token:
            return


def _loaded(trace: Any, index: int, source: str, label_name: str, reading: LabelReading, on_error: str,
            report: MlflowLoadReport) -> Trajectory | None:
    """One agent trace of `load_mlflow_traces` as a trajectory labeled from its HUMAN feedback, counted in
    `report`; None when it cannot be mapped under ``on_error="skip"`` (listed in ``report.skipped``)."""
    trace_id = trace.info.trace_id
    try:
        hidden = {"experiment_id": report.experiment_id, "label_name": label_name}
        trajectory = trace_to_trajectory(trace, index=index, source=source, hidden=hidden)
    except TrajectoryFormatError as exc:
        if on_error == "raise":
            raise
        report.skipped.append((trace_id, exc.problem))
        return None
    # the labels of a loaded trace only: a skipped one's are neither counted nor listed
    labels = report.labels if report.labels is not None else LabelFile(source, FORMAT, {})
    label, not_human = trace_label(labels, trace.info, label_name, reading, f"{source}, trace {trace_id}")
    report.not_human += not_human
    if label is not None:  # as `trace_to_trajectory(label=...)` sets it: reward 1.0/0.0
        trajectory = replace(trajectory, reward=float(label), label=label)
    report.loaded += 1
    if label is None:
        report.unlabeled += 1
    else:
        report.labeled += 1
    return trajectory


def _verdict_items(verdicts: Any) -> Iterator[tuple[str, Verdict, str | None]]:
    """``(trace id, Verdict, model)`` from a mapping id -> Verdict | verdict line, or verdict lines."""
    items = verdicts.items() if isinstance(verdicts, Mapping) else ((None, v) for v in verdicts)
    for key, value in items:
        if isinstance(value, tuple) and len(value) == 2:
            key, value = value
        if isinstance(value, Verdict):
            yield str(key), value, None
            continue
        if not isinstance(value, Mapping):
            raise InputError(f"verdict for {key!r}: expected a Verdict or a verdict line, got {type(value).__name__}")
        ident = key if key is not None else value.get("id")
        if not ident:
            raise InputError(f"verdict line without an id: {dict(value)!r}")
        try:
            verdict = Verdict.from_dict(value)
        except (TypeError, ValueError) as exc:
            raise InputError(f"verdict for trace {ident!r} is not a verdict: {exc}") from exc
        yield str(ident), verdict, value.get("model")


def _metadata(verdict: Verdict, facts: ProgramFacts) -> dict[str, str]:
    """The assessment metadata (MLflow keeps strings): a value that is absent (no criterion named, no error,
    no calibrated score, a program frozen before programs were hashed whole) is left out, never written as
    the string "None"."""
    values = {"score": repr(float(verdict.score)),
              "score_calibrated": None if verdict.score_calibrated is None else repr(float(verdict.score_calibrated)),
              "pass_threshold": repr(float(facts.pass_rule.threshold)), "pass_threshold_on": facts.pass_rule.on,
              "criterion": criterion_name(verdict, facts.rubric),
              "abstained": str(verdict.abstained).lower(), "error_kind": verdict.error_kind,
              "rubric_sha256": facts.rubric_sha256, "program_sha256": facts.program_sha256,
              "certificate": facts.certificate_summary, PROGRAM_KEY: facts.key}
    return {key: str(value) for key, value in values.items() if value is not None}


def verdict_feedback(verdict: Verdict, *, name: str, facts: ProgramFacts, model: str | None = None) -> Feedback:
    """The MLflow `Feedback` of one verdict: value = passed, rationale = reason; an abstention carries an
    `AssessmentError` (code = the error kind) and no value."""
    source = AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE,
                              source_id=model or facts.model or "rubricforge")
    if verdict.abstained:
        error = AssessmentError(error_code=str(verdict.error_kind).upper(), error_message=verdict.error or "abstained")
        return Feedback(name=name, error=error, source=source, metadata=_metadata(verdict, facts))
    return Feedback(name=name, value=bool(verdict.passed), rationale=verdict.reason or None, source=source,
                    metadata=_metadata(verdict, facts))


def _same(existing: Any, new: Feedback) -> bool:
    if new.feedback is None:  # `Feedback(...)` holds a FeedbackValue (its value or its error) in MLflow 3
        raise ServerError("MLflow's Feedback holds no value (its value or its error): an MLflow version this "
                          "package does not support; install MLflow 3")
    old_error, new_error = existing.feedback.error, new.feedback.error
    if old_error is None or new_error is None:
        same_error = old_error is None and new_error is None
    else:
        same_error = (old_error.error_code, old_error.error_message) == (new_error.error_code, new_error.error_message)
    return (existing.feedback.value == new.feedback.value and (existing.rationale or None) == (new.rationale or None)
            and dict(existing.metadata or {}) == dict(new.metadata or {}) and same_error)


def log_verdicts_to_mlflow(verdicts: Any, tracking_uri: str, *, name: str, program: Any,
                           model: str | None = None, allow_unverified: bool = False) -> WriteBackReport:
    """Log each verdict as an LLM_JUDGE feedback assessment on its trace; idempotent per trace and program.

    For each trace: an assessment named `name` that this program logged before (same source type and
    ``rubricforge.program`` metadata) is kept when it says the same, else deleted and logged anew, so a
    trace holds one per program. Assessments of any other source (a person's label), and those an
    ``mlflow.genai.evaluate`` run logged (the `scorer`'s), are never touched.

    Args:
        verdicts: a mapping trace id -> `Verdict` or verdict line (``rubricforge_dspy.core.read_verdicts(path)``
            gives one), or an iterable of verdict lines (with ``id``) or ``(trace id, Verdict)`` pairs.
        tracking_uri: the MLflow tracking server.
        name: the assessment name (not a label name: a label is read from HUMAN sources only).
        program: the frozen program file (or loaded judge) that gave the verdicts; its rubric and program
            hashes and certificate summary go into each assessment's metadata.
        model: the judge model recorded as the assessment source id (default: each verdict line's
            ``model``, else the program's ``induced_with_lm``).
        allow_unverified: accept a program whose manifest cannot verify it.

    Returns:
        A `WriteBackReport`.

    Raises:
        InputError: a verdict that is not one, an unknown trace id, a bad program.
        ServerError: the MLflow server cannot be reached.
    """
    if not name or not isinstance(name, str):
        raise InputError("log_verdicts_to_mlflow: give the assessment a name")
    _, facts = judge_with_facts(program, allow_unverified=allow_unverified, check_certificate=False)
    tracing = TracingClient(tracking_uri)
    report = WriteBackReport()
    for trace_id, verdict, line_model in _verdict_items(verdicts):
        feedback = verdict_feedback(verdict, name=name, facts=facts, model=model or line_model)
        try:
            info = tracing.get_trace_info(trace_id)
        except MlflowException as exc:
            if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")):
                raise InputError(f"MLflow at {tracking_uri}: no trace {trace_id!r} (the verdict's id must be the "
                                 "trace id `load_mlflow_traces` gave)") from exc
            raise as_server_error(tracking_uri, exc) from exc
        assessments = [a for a in (info.assessments or []) if a.name == name]
        report.human_untouched += any(a.source.source_type == AssessmentSourceType.HUMAN for a in assessments)
        mine = [a for a in assessments if a.source.source_type == AssessmentSourceType.LLM_JUDGE
                and getattr(a, "feedback", None) is not None and (a.metadata or {}).get(PROGRAM_KEY) == facts.key
                and AssessmentMetadataKey.SOURCE_RUN_ID not in (a.metadata or {})]  # not an evaluation run's
        report.abstentions += verdict.abstained
        try:
            if len(mine) == 1 and _same(mine[0], feedback):
                report.unchanged += 1
                continue
            for old in mine:
                if old.assessment_id is None:  # an assessment read from the server carries its id
                    raise ServerError(f"{tracking_uri}: the MLflow server returned an assessment of trace "
                                      f"{trace_id!r} without an id; it cannot be replaced")
                tracing.delete_assessment(trace_id, old.assessment_id)
            tracing.log_assessment(trace_id, feedback)
        except MlflowException as exc:
            raise as_server_error(tracking_uri, exc) from exc
        if mine:
            report.replaced += 1
        else:
            report.logged += 1
    return report


def _untraced(call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``call(*args, **kwargs)`` without any MLflow trace of its own: ``mlflow.genai.evaluate`` turns on MLflow's
    DSPy autologging (and its LM clients'), which would record the judge's calls as new traces in the user's
    experiment, where the next pull would read them as agent traces. Removed for this call only (the
    settings of this thread; a user's traces in other threads are untouched): MLflow's DSPy callback, and
    any root span (the call runs under an unsampled span, so nothing under it is exported). Under a span
    that is recorded (``evaluate`` with scorer tracing on), the calls stay inside that scorer trace."""
    import dspy

    try:
        from mlflow.dspy.callback import MlflowCallback
    except ImportError:  # pragma: no cover - MLflow without its DSPy flavor
        callbacks = list(dspy.settings.callbacks)
    else:
        callbacks = [c for c in dspy.settings.callbacks if not isinstance(c, MlflowCallback)]
    with dspy.context(callbacks=callbacks):
        result: _T = mlflow.trace(call, name="rubricforge_judge_call", sampling_ratio_override=0.0)(*args, **kwargs)
        return result


def scorer(program: Any, lm: Any = None, *, name: str = SCORER_NAME, allow_unverified: bool = False) -> Any:
    """A frozen judge as an ``mlflow.genai`` scorer, for ``mlflow.genai.evaluate(data=traces, scorers=[...])``.

    The scorer reads only the trace's spans (the same mapping as `load_mlflow_traces`), never its
    assessments or expectations. It returns a `Feedback`: value = passed, rationale = reason, metadata as
    `log_verdicts_to_mlflow` writes; an abstention is a `Feedback` with an error and no value, which
    MLflow reports as an error, not a fail. A trace that is a judge's own call (`judge_call`) is not
    judged: its `Feedback` carries the error ``JUDGE_TRACE``.

    The judge's own calls are never traced into the experiment (see `_untraced`), so an evaluation leaves
    the experiment holding agent traces only.

    Args:
        program: the frozen program file (or a loaded judge).
        lm: the judge's `dspy.LM`.
        name: the scorer's (and each feedback's) name; by default not the write-back's
            (``rubricforge``), so the two never stand for each other.
        allow_unverified: accept a program whose manifest cannot verify it.

    Returns:
        An ``mlflow.genai.scorers.Scorer``.

    Raises:
        InputError: a missing or unverifiable program.
    """
    judge, facts = judge_with_facts(program, lm, allow_unverified=allow_unverified)

    def rubricforge_judge(trace: Any) -> Feedback:
        why = judge_call(trace)
        if why is not None:
            source = AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE,
                                      source_id=facts.model or "rubricforge")
            return Feedback(name=name, source=source, error=AssessmentError(
                error_code="JUDGE_TRACE", error_message=f"not an agent trace: {why}"))
        trajectory = trace_to_trajectory(trace)
        return verdict_feedback(_untraced(judge_verdict, judge, trajectory), name=name, facts=facts)

    return make_scorer(rubricforge_judge, name=name)


def _experiment_of(tracing: Any, trace_id: str, tracking_uri: str) -> str | None:
    try:
        info = tracing.get_trace_info(trace_id)
    except MlflowException as exc:
        if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")) or "not found" in str(exc).lower():
            raise InputError(f"MLflow at {tracking_uri}: no trace {trace_id!r} to tag") from exc
        raise as_server_error(tracking_uri, exc) from exc
    return getattr(info, "experiment_id", None)


def _clear_label_next_tags(tracing: Any, client: Any, experiment_ids: Iterable[str], keep: set[str],
                           tracking_uri: str) -> int:
    """Remove the label-next tags of every trace of these experiments outside `keep`; returns how many."""
    cleared = 0
    for experiment_id in experiment_ids:
        token = None
        while True:
            try:
                page = client.search_traces(locations=[experiment_id], max_results=100, page_token=token,
                                            filter_string=f"tag.`{LABEL_NEXT_TAG}` != ''", include_spans=False)
                for trace in page:
                    if trace.info.trace_id in keep:
                        continue
                    for key in (LABEL_NEXT_TAG, LABEL_NAME_TAG):
                        if key in (trace.info.tags or {}):
                            tracing.delete_trace_tag(trace.info.trace_id, key)
                    cleared += 1
            except MlflowException as exc:
                raise as_server_error(tracking_uri, exc) from exc
            token = page.token
            if not token:
                break
    return cleared


def tag_for_labeling(trace_ids: Iterable[Any], tracking_uri: str, *, label_name: str = "label",
                     experiment: str | None = None) -> int:
    """Tag the traces ``label-next`` picked so a person labels them in MLflow's UI.

    Each trace gets ``rubricforge.label_next`` = its rank (1 = label first) and ``rubricforge.label_name``
    = the assessment name to give the label (a HUMAN feedback, which `load_mlflow_traces` then reads).
    The label-next tags of the experiment's other traces (an earlier pick) are removed first, so the
    tags name this pick only and no two traces hold the same rank.

    Args:
        trace_ids: trace ids in rank order, or `trust.label_next.Candidate` records (from ``pick``).
        tracking_uri: the MLflow tracking server.
        label_name: the feedback name the person should use.
        experiment: the experiment (name or id) whose earlier tags to clear; default: the experiments of
            the picked traces.

    Returns:
        How many traces were tagged (how many earlier tags were cleared is logged).

    Raises:
        InputError: an unknown trace id or experiment. ServerError: the server cannot be reached.
    """
    tracing = TracingClient(tracking_uri)
    client = MlflowClient(tracking_uri)
    ids = [item.trajectory.id if hasattr(item, "trajectory") else str(item) for item in trace_ids]
    experiments = {experiment_id_of(client, tracking_uri, experiment)} if experiment is not None else {
        e for e in (_experiment_of(tracing, trace_id, tracking_uri) for trace_id in ids) if e is not None}
    cleared = _clear_label_next_tags(tracing, client, sorted(experiments), set(ids), tracking_uri)
    if cleared:
        _log.info("cleared the label-next tags of %d trace(s) of an earlier pick", cleared)
    count = 0
    for rank, trace_id in enumerate(ids, 1):
        try:
            tracing.set_trace_tags(trace_id, {LABEL_NEXT_TAG: str(rank), LABEL_NAME_TAG: label_name})
        except MlflowException as exc:
            if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")) or "not found" in str(exc).lower():
                raise InputError(f"MLflow at {tracking_uri}: no trace {trace_id!r} to tag") from exc
            raise as_server_error(tracking_uri, exc) from exc
        count += 1
    return count
