"""Another platform's judge as a recorded stage: an Inspect log's scores (the shipped sample logs, read by the
package's own log reader: no inspect_ai needed) and an MLflow experiment's assessments (a real MLflow store, SQLite,
in process; skipped without the extra). Each is read once into verdict lines with the ids the loaders give the same
records, saved beside the cascade and pinned by sha256."""

from __future__ import annotations

import math

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.integrations.recorded import inspect_recorded, platform_stage
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.recorded import RecordedJudge
from tests.support.helpers import REPO

LOGS = REPO / "evals" / "data" / "inspect"


def test_an_inspect_score_is_a_recorded_stage_with_the_loader_ids(tmp_path):
    log = LOGS / "log_read_sample.eval"
    stage = platform_stage(f"inspect:{log}:match")
    (trajectory,) = load_trajectories(log)
    assert isinstance(stage, RecordedJudge) and list(stage.verdicts) == [trajectory.id]
    verdict = stage(trajectory=trajectory)
    assert verdict.passed is True and verdict.score == 1.0  # "C"
    assert inspect_recorded(str(LOGS / "log_formats.eval"), "match").verdicts.popitem()[1].passed is False  # "I"
    path = tmp_path / "c.json"
    Cascade([stage], [StageRule("inspect", 0.5, 0.4)]).save(path)
    assert load_judge(path)(trajectory=trajectory).stage == "inspect"
    with pytest.raises(InputError, match=r"no sample has a score of scorer 'nope' \(scorers in the log: match\)"):
        inspect_recorded(str(log), "nope")


def test_a_malformed_platform_stage_is_exit_2_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for spec, said in (("inspect:nolog", "inspect:<log.eval>:<scorer name>"),
                       ("mlflow:exp/label", "which MLflow server? give --mlflow-uri")):
        assert main(["cascade", "fit", "--stage", spec, "--data", str(LOGS / "log_read_sample.eval"),
                     "--alpha", "0.1", "--out", str(tmp_path / "c.json")]) == 2
        assert said in capsys.readouterr().err


def test_an_mlflow_assessment_is_a_recorded_stage(tmp_path):
    pytest.importorskip("mlflow", reason="the MLflow stage needs the extra: pip install -e '.[mlflow]'")
    import mlflow
    from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType

    from tests.support.mlflow_runs import local_store, run_agent

    uri = local_store(tmp_path, "recorded")
    ids = [run_agent(task, fail=task == 1) for task in range(4)]
    mlflow.flush_trace_async_logging()
    judge = AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE, source_id="other-judge")
    mlflow.log_feedback(trace_id=ids[0], name="verdict", value=True, source=judge, rationale="booked")
    mlflow.log_feedback(trace_id=ids[1], name="verdict", value=0.2, source=judge)  # a score: a fail
    mlflow.log_feedback(trace_id=ids[2], name="verdict", source=judge,
                        error=AssessmentError(error_code="TIMEOUT", error_message="judge timed out"))
    stage = platform_stage("mlflow:recorded/verdict", uri)  # ids[3] has no assessment of that name
    assert set(stage.verdicts) == set(ids[:3])
    trajectories = {t.id: t for t in mlflow_trajectories(uri)}
    cascade = Cascade([stage], [StageRule("verdict", 0.5, 0.3)])
    result = cascade.batch([trajectories[i] for i in ids])
    assert result.stages == ["verdict", "verdict", "escalated", "escalated"]
    assert [v.passed for v in result[:2]] == [True, False] and math.isclose(result[1].score, 0.2)
    assert stage.n_missing == 1 and stage.missing_ids == [ids[3]]
    path = tmp_path / "c.json"
    cascade.save(path)  # the assessments, read once, are frozen beside the cascade
    assert (tmp_path / "c.verdict.verdicts.jsonl").read_text().count("\n") == 3
    assert load_judge(path).batch([trajectories[ids[0]]]).stages == ["verdict"]


def mlflow_trajectories(uri):
    from rubricforge_dspy.integrations.mlflow import load_mlflow_traces

    return list(load_mlflow_traces(uri, "recorded"))
