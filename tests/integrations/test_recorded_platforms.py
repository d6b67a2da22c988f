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


def test_an_inspect_score_that_contradicts_its_verdict_is_handed_on_counted_and_warned(tmp_path):
    pytest.importorskip("inspect_ai", reason="writing an Inspect log needs the extra: pip install -e '.[inspect]'")
    from inspect_ai.log import read_eval_log, write_eval_log
    from inspect_ai.scorer import Score

    from rubricforge_dspy.judge.recorded import RecordedContradictionWarning

    log = read_eval_log(str(LOGS / "log_read_sample.eval"))
    sample = log.samples[0]
    values = [("C", 0.9), ("C", 0.1), ("I", 0.8), ("I", 0.2), ("C", None), (0.3, None)]  # 2 contradictions
    log.samples = [sample.model_copy(update={"id": k + 1, "scores": {"match": Score(
        value=value, metadata=None if score is None else {"score": score})}})
        for k, (value, score) in enumerate(values)]
    path = tmp_path / "scored.eval"
    write_eval_log(log, str(path))
    with pytest.warns(RecordedContradictionWarning, match=r"^2 of 6 lines \(33%\) of inspect .* have a score that "
                                                          r"contradicts their verdict: handed on"):
        stage = platform_stage(f"inspect:{path}:match")
    trajectories = load_trajectories(path)
    assert stage.n_contradictions == 2 and len(trajectories) == 6
    for t_pass, t_fail in ((0.5, 0.4), (0.5, math.nextafter(0.5, 0)), (0.9, 0.05), (math.inf, 0.4)):
        stage.reset_counts()
        result = Cascade([stage], [StageRule("match", t_pass, t_fail)]).batch(trajectories)
        assert result.stages[1] == result.stages[2] == "escalated" and stage.n_contradicted == 2
        for verdict, where, said in zip(result, result.stages, (True, None, None, False, True, False), strict=True):
            if where == "match":
                assert verdict.passed is said  # the tool's verdict, never reversed
    assert [v.passed for v in Cascade([stage], [StageRule("match", 0.5, math.nextafter(0.5, 0))]).batch(
        [trajectories[i] for i in (0, 3, 4, 5)])] == [True, False, True, False]


def test_an_mlflow_assessment_that_contradicts_its_score_is_handed_on_counted_and_warned(tmp_path):
    pytest.importorskip("mlflow", reason="the MLflow stage needs the extra: pip install -e '.[mlflow]'")
    import mlflow
    from mlflow.entities import AssessmentSource, AssessmentSourceType

    from rubricforge_dspy.judge.recorded import RecordedContradictionWarning
    from tests.support.mlflow_runs import local_store, run_agent

    uri = local_store(tmp_path, "contradicting")
    ids = [run_agent(task, fail=task % 2 == 1) for task in range(5)]
    mlflow.flush_trace_async_logging()
    judge = AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE, source_id="other-judge")
    said = [(True, 0.9), (True, 0.1), (False, 0.8), (False, 0.3), (True, None)]  # 2 contradictions
    for trace_id, (value, score) in zip(ids, said, strict=True):
        mlflow.log_feedback(trace_id=trace_id, name="verdict", value=value, source=judge,
                            metadata=None if score is None else {"score": score})
    with pytest.warns(RecordedContradictionWarning, match=r"^2 of 5 lines \(40%\) of mlflow .* have a score that "
                                                          r"contradicts their verdict: handed on"):
        stage = platform_stage("mlflow:contradicting/verdict", uri)
    from rubricforge_dspy.integrations.mlflow import load_mlflow_traces

    trajectories = {t.id: t for t in load_mlflow_traces(uri, "contradicting")}
    items = [trajectories[i] for i in ids]
    assert stage.n_contradictions == 2 and set(stage.contradiction_ids) == set(ids[1:3])
    for t_pass, t_fail in ((0.5, 0.4), (0.5, math.nextafter(0.5, 0)), (0.95, 0.01), (0.5, -math.inf)):
        stage.reset_counts()
        result = Cascade([stage], [StageRule("verdict", t_pass, t_fail)]).batch(items)
        assert result.stages[1:3] == ["escalated", "escalated"] and stage.n_contradicted == 2
        for verdict, where, (value, _) in zip(result, result.stages, said, strict=True):
            if where == "verdict":
                assert verdict.passed is value
    result = Cascade([stage], [StageRule("verdict", 0.5, math.nextafter(0.5, 0))]).batch(items)
    assert result.stages == ["verdict", "escalated", "escalated", "verdict", "verdict"]
