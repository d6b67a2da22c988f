"""Another platform's judge as a recorded cascade stage: an MLflow assessment, an Inspect score.

Each reader reads the platform's verdicts once into verdict lines (the schema of
``core/schemas/verdict.schema.json``) and returns a `judge.recorded.RecordedJudge` over them: the same recorded
stage as a verdict JSONL, looked up by trajectory id, no LM call; saving it writes the lines beside the stage
file (frozen by sha256). The ids are the ones the package's own loaders give the same records, so the stage
finds the trajectories ``--from-mlflow`` or ``--format inspect`` load:

- `mlflow_recorded` (``--stage mlflow:<experiment>/<assessment name>``, the server from ``--mlflow-uri`` or
  ``MLFLOW_TRACKING_URI``): each trace's valid *feedback* assessment of that name, any source, the most
  recent when there are several (counted); id = the trace id. Value: a bool or 0/1 or a pass/fail word is the
  verdict (score 1.0/0.0, or the ``score`` in its metadata as RubricForge's own write-back records it); a
  number in [0, 1] is the score (passed at 0.5); an assessment *error* is an abstention (the stage hands the
  trace on). Needs the extra: ``pip install "rubricforge-dspy[mlflow]"`` (imported only here, when called).
- `inspect_recorded` (``--stage inspect:<log.eval>:<scorer>``): each sample's score of that scorer, read by the
  package's own Inspect log reader (`data.formats.inspect_ai`, the same ids: ``{file}/{task}:{sample}:{epoch}``;
  no ``inspect_ai`` needed to read a log). ``C``/``I``/``P``/``N`` and numbers as Inspect's ``value_to_float``
  (``C`` 1, ``P`` 0.5, ``I``/``N`` 0); passed at 0.5. A pass/fail value (``C``/``I``, a bool or 0/1) with a
  ``score`` in [0, 1] in the score's metadata is that verdict with that score, as for MLflow. A sample without
  that scorer has no line (handed on).

The stage decides with the platform's verdict; the score only orders its confidence within it
(`judge.recorded.recorded_confidence`). A verdict whose score contradicts it (``passed`` with a score below 0.5,
a fail at or above it: `judge.recorded.recorded_contradiction`) is handed on and counted, and reading the
verdicts warns with the share (`judge.recorded.RecordedContradictionWarning`), as for a verdict file.

A value that is neither raises `InputError` naming the trace or sample.
"""

from __future__ import annotations

import math
import os
from types import ModuleType
from typing import Any, Iterator

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.verdict import PASS_THRESHOLD
from rubricforge_dspy.judge.recorded import RecordedJudge
from rubricforge_dspy.judge.stage_kinds import register_stage_kind

__all__ = ["MLFLOW_PREFIX", "INSPECT_PREFIX", "is_platform_stage", "platform_stage", "mlflow_recorded",
           "inspect_recorded"]

MLFLOW_PREFIX = "mlflow:"
INSPECT_PREFIX = "inspect:"
_LETTERS = {"C": 1.0, "P": 0.5, "I": 0.0, "N": 0.0}  # Inspect's value_to_float defaults
_WORDS = {"true": True, "yes": True, "pass": True, "passed": True, "correct": True, "c": True, "success": True,
          "false": False, "no": False, "fail": False, "failed": False, "incorrect": False, "i": False,
          "failure": False}


def is_platform_stage(spec: str) -> bool:
    """True when a ``--stage`` value names a platform's verdicts (``mlflow:...``, ``inspect:...``)."""
    return spec.startswith((MLFLOW_PREFIX, INSPECT_PREFIX))


def platform_stage(spec: str, mlflow_uri: str | None = None) -> RecordedJudge:
    """The recorded stage a ``--stage`` value names: ``mlflow:<experiment>/<assessment name>`` or
    ``inspect:<log>:<scorer>``.

    Raises:
        InputError: a malformed value, no MLflow server named, a missing extra, bad values on the platform.
        ServerError: the MLflow server cannot be reached.
    """
    if spec.startswith(MLFLOW_PREFIX):
        experiment, _, name = spec[len(MLFLOW_PREFIX):].rpartition("/")
        if not experiment or not name:
            raise InputError(f"--stage {spec}: an MLflow stage is mlflow:<experiment>/<assessment name>")
        uri = mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            raise InputError(f"--stage {spec}: which MLflow server? give --mlflow-uri URI (or set MLFLOW_TRACKING_URI)")
        return mlflow_recorded(uri, experiment, name)
    log, _, scorer = spec[len(INSPECT_PREFIX):].rpartition(":")
    if not log or not scorer:
        raise InputError(f"--stage {spec}: an Inspect stage is inspect:<log.eval>:<scorer name>")
    return inspect_recorded(log, scorer)



def _platform_stage(spec: str, *, mlflow_uri: str | None = None, **_: Any) -> RecordedJudge:
    return platform_stage(spec, mlflow_uri)


# the platforms' stage kinds (`judge.stage_kinds`): a ``--stage mlflow:...`` / ``inspect:...`` value
register_stage_kind("rubricforge.mlflow_assessments", prefix=MLFLOW_PREFIX, from_spec=_platform_stage,
                    description="an MLflow experiment's assessments of one name, as a recorded stage")
register_stage_kind("rubricforge.inspect_scores", prefix=INSPECT_PREFIX, from_spec=_platform_stage,
                    description="an Inspect log's scores of one scorer, as a recorded stage")

def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _metadata_score(metadata: Any) -> float | None:
    """The ``score`` in [0, 1] a platform's metadata records beside a verdict (RubricForge's write-back does),
    else None."""
    if not isinstance(metadata, dict) or "score" not in metadata:
        return None
    try:
        score = float(metadata["score"])
    except (TypeError, ValueError):
        return None
    return score if math.isfinite(score) and 0.0 <= score <= 1.0 else None


def _verdict_value(value: Any, score: float | None, where: str) -> tuple[bool, float]:
    """(passed, score) of a platform's value: a bool/word is the verdict, a number in [0, 1] the score."""
    if isinstance(value, str) and value.strip().lower() in _WORDS:
        value = _WORDS[value.strip().lower()]
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1) and score is not None):
        return bool(value), score if score is not None else float(value)
    number = _number(value)
    if number is not None and 0.0 <= number <= 1.0:
        return number >= PASS_THRESHOLD, number
    raise InputError(f"{where}: value {value!r} is not a verdict: give a bool, pass/fail, yes/no, correct/incorrect, "
                     "or a score in [0, 1]")


# -- MLflow ------------------------------------------------------------------------------------------------

def _mlflow() -> ModuleType:
    try:
        from rubricforge_dspy.integrations import mlflow as integration
    except ImportError:
        raise InputError('an MLflow stage needs MLflow: install rubricforge-dspy[mlflow] '
                         '(pip install "rubricforge-dspy[mlflow]")') from None
    return integration


def _mlflow_lines(client: Any, integration: Any, uri: str, experiment_id: str, name: str, where: str,
                  counts: dict[str, Any]) -> Iterator[dict[str, Any]]:
    token = None
    while True:
        try:
            page = client.search_traces(locations=[experiment_id], max_results=100, page_token=token,
                                        order_by=["timestamp_ms ASC"])
        except integration.MlflowException as exc:
            raise integration.as_server_error(uri, exc) from exc
        for trace in page:
            found = [a for a in (getattr(trace.info, "assessments", None) or [])
                     if a.name == name and getattr(a, "feedback", None) is not None and a.valid is not False]
            if not found:
                continue
            counts["several"] += len(found) > 1
            chosen = max(found, key=lambda a: (getattr(a, "create_time_ms", 0) or 0))
            yield _mlflow_line(trace.info.trace_id, chosen, f"{where}, trace {trace.info.trace_id}")
        token = page.token
        if not token:
            return


def _mlflow_line(trace_id: str, assessment: Any, where: str) -> dict[str, Any]:
    feedback = assessment.feedback
    if getattr(feedback, "error", None) is not None:
        error = feedback.error
        return {"id": trace_id, "passed": False, "score": 0.0, "abstained": True, "error_kind": "other",
                "error": f"{getattr(error, 'error_code', 'ERROR')}: {getattr(error, 'error_message', '') or ''}"}
    metadata = getattr(assessment, "metadata", None) or {}
    passed, score = _verdict_value(feedback.value, _metadata_score(metadata), where)
    calibrated = metadata.get("score_calibrated")
    extra = {}
    try:
        if calibrated is not None and 0.0 <= float(calibrated) <= 1.0:
            extra["score_calibrated"] = float(calibrated)
    except (TypeError, ValueError):
        pass
    return {"id": trace_id, "passed": passed, "score": score, "abstained": False,
            "reason": getattr(assessment, "rationale", None), **extra}


def mlflow_recorded(tracking_uri: str, experiment: str, assessment_name: str) -> RecordedJudge:
    """The recorded stage of an MLflow experiment's assessments named `assessment_name` (module docstring).

    Raises:
        InputError: MLflow not installed, no such experiment, a value that is not a verdict.
        ServerError: the server cannot be reached or refuses the search.
    """
    integration = _mlflow()
    client = integration.MlflowClient(tracking_uri)
    experiment_id = integration.experiment_id_of(client, tracking_uri, experiment)
    where = f"mlflow {tracking_uri} experiment {experiment!r}, assessment {assessment_name!r}"
    counts = {"several": 0}
    lines = list(_mlflow_lines(client, integration, tracking_uri, experiment_id, assessment_name, where, counts))
    if not lines:
        raise InputError(f"{where}: no trace has a valid feedback assessment of that name")
    judge = RecordedJudge.from_lines(lines, where)
    judge.superseded = counts["several"]  # traces with several such assessments (the most recent was read)
    return judge


# -- Inspect -----------------------------------------------------------------------------------------------

def inspect_recorded(log: str, scorer: str) -> RecordedJudge:
    """The recorded stage of an Inspect log's scores of `scorer` (module docstring).

    Raises:
        InputError: the log cannot be read, no sample has that scorer, a value that is not a verdict.
    """
    from rubricforge_dspy.data.formats import load_trajectories

    lines: list[dict[str, Any]] = []
    seen: set[str] = set()
    for trajectory in load_trajectories(log, format="inspect"):
        scores = (trajectory.hidden or {}).get("scores") or {}
        seen.update(scores)
        score = scores.get(scorer)
        if score is None:
            continue
        where = f"{log}, sample {trajectory.id}, scorer {scorer!r}"
        value = score.get("value") if isinstance(score, dict) else score
        if isinstance(value, str) and value.strip().upper() in _LETTERS:
            value = _LETTERS[value.strip().upper()]
        metadata = score.get("metadata") if isinstance(score, dict) else None
        passed, number = _verdict_value(value, _metadata_score(metadata), where)
        reason = score.get("explanation") if isinstance(score, dict) else None
        lines.append({"id": trajectory.id, "passed": passed, "score": number, "abstained": False,
                      "reason": " ".join(str(reason).split()) if reason else None})
    if not lines:
        raise InputError(f"{log}: no sample has a score of scorer {scorer!r} (scorers in the log: "
                         f"{', '.join(sorted(seen)) or 'none'})")
    return RecordedJudge.from_lines(lines, f"inspect {log} scorer {scorer!r}")
