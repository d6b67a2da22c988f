"""MLflow round trip against a real `mlflow server` (SQLite backend) on 127.0.0.1: traces logged with
MLflow's tracing API by a small scripted agent, human labels logged with MLflow's assessment API; then
pull, induce (scripted LM), judge (fake OpenAI server), write back, label-next, and the frozen judge as
a scorer inside ``mlflow.genai.evaluate``. Leak canaries: nothing from assessments or expectations
reaches what the judge reads."""

from __future__ import annotations

import uuid

import pytest

mlflow = pytest.importorskip("mlflow", reason="the MLflow integration needs the extra: pip install -e '.[mlflow]'")

from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import AssessmentSource, AssessmentSourceType  # noqa: E402

from rubricforge_dspy.core.errors import InputError  # noqa: E402
from rubricforge_dspy.core.verdict import Verdict  # noqa: E402
from rubricforge_dspy.data.split import split_by_task  # noqa: E402
from rubricforge_dspy.evidence.render import render_trajectory  # noqa: E402
from rubricforge_dspy.induction.inducer import InductionConfig, induce  # noqa: E402
from rubricforge_dspy.integrations import mlflow as rf_mlflow  # noqa: E402
from rubricforge_dspy.integrations._judging import judge_with_facts  # noqa: E402
from rubricforge_dspy.judge.execution import judge_verdict  # noqa: E402
from rubricforge_dspy.lm.config import LMConfig  # noqa: E402
from rubricforge_dspy.lm.engine import make_lm  # noqa: E402
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text  # noqa: E402
from rubricforge_dspy.testing.scripted import ScriptedLM  # noqa: E402
from rubricforge_dspy.trust.label_next import pick, rank  # noqa: E402
from tests.support.induction import make_reflection_lm, scripted_judge  # noqa: E402
from tests.support.mlflow_runs import CANARY, human, local_store, run_agent  # noqa: E402
from tests.support.mlflow_server import mlflow_server  # noqa: E402

EXPECT_CANARY = "CANARY-EXPECTATION-91bc"
ABSTAIN = "ABSTAIN-ME"
N_LABELED, N_UNLABELED = 16, 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real MLflow tracking server with a SQLite backend, on 127.0.0.1 (`tests.support.mlflow_server`)."""
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as running:
        yield running.uri


@pytest.fixture(scope="module")
def experiment(server):
    """An experiment of N_LABELED human-labeled traces (failing ones have an erroring tool) and
    N_UNLABELED unlabeled ones (one carries an LLM_JUDGE 'label', which is not a label)."""
    mlflow.set_tracking_uri(server)
    name = f"agents-{uuid.uuid4().hex[:8]}"
    mlflow.set_experiment(name)
    labels, unlabeled, failing = {}, [], set()
    for task in range(N_LABELED + N_UNLABELED):
        fail = task % 2 == 1
        trace_id = run_agent(task, fail, note=ABSTAIN if task == N_LABELED else "")
        if fail:
            failing.add(trace_id)
        if task < N_LABELED:
            labels[trace_id] = int(not fail)
        else:
            unlabeled.append(trace_id)
    mlflow.flush_trace_async_logging()
    for trace_id, label in labels.items():
        human(trace_id, bool(label))
        mlflow.log_expectation(trace_id=trace_id, name="expected_answer", value=EXPECT_CANARY)
    mlflow.log_feedback(trace_id=unlabeled[0], name="label", value=True, rationale=CANARY,
                        source=AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE, source_id="gpt-x"))
    return {"uri": server, "name": name, "labels": labels, "unlabeled": unlabeled, "failing": failing}


def fake_judge(body, n):
    text = user_text(body)
    if ABSTAIN in text:
        return "garbage"
    if "(ERROR)" in text:
        return {"reason": "Criterion 1: the booking tool returned an error.", "passed": False, "score": 0.1}
    return {"reason": "The tool confirmed the booking.", "passed": True, "score": 0.9}


@pytest.mark.slow
def test_pull_pages_labels_from_human_feedback_only_and_leaks_nothing(experiment):
    report = rf_mlflow.MlflowLoadReport()
    got = list(rf_mlflow.load_mlflow_traces(experiment["uri"], experiment["name"], page_size=5, report=report))
    ids = [t.id for t in got]
    assert len(ids) == len(set(ids)) == N_LABELED + N_UNLABELED
    assert set(ids) == set(experiment["labels"]) | set(experiment["unlabeled"])
    assert report.pages >= 4  # 19 traces, 5 a page
    assert (report.labeled, report.unlabeled, report.not_human) == (N_LABELED, N_UNLABELED, 1)
    for t in got:
        if t.id in experiment["labels"]:
            assert t.label == experiment["labels"][t.id]
        else:
            assert t.label is None  # the LLM_JUDGE "label" on unlabeled[0] is not a label
        assert t.n_tool_calls == 1 and t.n_tool_errors == (t.id in experiment["failing"])
        text = render_trajectory(t)
        assert CANARY not in text and EXPECT_CANARY not in text and "alice" not in text
    assert "book_reservation" in render_trajectory(got[0])


@pytest.mark.slow
def test_filter_and_errors_are_loud(experiment):
    first = experiment["unlabeled"][0]
    only = list(rf_mlflow.load_mlflow_traces(experiment["uri"], experiment["name"],
                                             filter_string=f"trace.request_id = '{first}'"))
    assert [t.id for t in only] == [first]
    with pytest.raises(InputError, match="no such experiment"):
        next(rf_mlflow.load_mlflow_traces(experiment["uri"], "no-such-experiment"))
    with pytest.raises(InputError, match="page_size"):
        next(rf_mlflow.load_mlflow_traces(experiment["uri"], experiment["name"], page_size=0))


@pytest.mark.slow
def test_round_trip_induce_judge_write_back_idempotent_and_label_next(experiment, tmp_path):
    uri, labels = experiment["uri"], experiment["labels"]
    trajectories = list(rf_mlflow.load_mlflow_traces(uri, experiment["name"]))
    labeled = [t for t in trajectories if t.id in labels]
    split = split_by_task(labeled, seed=0)
    program = tmp_path / "judge.json"
    induce(split.train, split.val, judge_lm=ScriptedLM(scripted_judge, model="scripted-judge"),
           reflection_lm=make_reflection_lm([]), config=InductionConfig(budget=40, minibatch=3),
           out_path=program, lm_name="scripted-judge")

    with FakeOpenAI(responder=fake_judge) as fake:
        judge, _ = judge_with_facts(program, make_lm(LMConfig(model=fake.model, api_base=fake.api_base)))
        verdicts = {t.id: judge_verdict(judge, t) for t in trajectories}
        bodies = [str(b) for b in fake.chat_bodies]
    assert bodies and not any(CANARY in b or EXPECT_CANARY in b for b in bodies)
    assert sum(v.abstained for v in verdicts.values()) == 1
    assert all(verdicts[i].passed == bool(label) for i, label in labels.items())

    client = MlflowClient(uri)
    human_before = {i: [(a.assessment_id, a.feedback.value, a.rationale) for a in client.get_trace(i).info.assessments
                        if a.source.source_type == "HUMAN" and a.name == "label"] for i in labels}
    report = rf_mlflow.log_verdicts_to_mlflow(verdicts, uri, name="rubricforge", program=program, model=fake.model)
    assert (report.logged, report.replaced, report.unchanged, report.abstentions) == (len(verdicts), 0, 0, 1)

    def judged(trace_id):
        return [a for a in client.get_trace(trace_id).info.assessments if a.name == "rubricforge"]

    for trace_id, verdict in verdicts.items():
        [a] = judged(trace_id)
        assert a.source.source_type == "LLM_JUDGE" and a.source.source_id == fake.model
        assert a.metadata["abstained"] == str(verdict.abstained).lower()
        assert a.metadata["rubric_sha256"] == judge.manifest["rubric_sha256"]
        assert a.metadata["program_sha256"] == judge.manifest["program_sha256"]
        if verdict.abstained:
            assert a.feedback.value is None and a.feedback.error.error_code == "PARSE"
        else:
            assert a.feedback.value is verdict.passed and a.rationale == verdict.reason
            assert float(a.metadata["score"]) == verdict.score
    failing = next(i for i, label in labels.items() if label == 0)
    assert judged(failing)[0].metadata["criterion"].startswith("1.")

    again = rf_mlflow.log_verdicts_to_mlflow(verdicts, uri, name="rubricforge", program=program, model=fake.model)
    assert (again.logged, again.replaced, again.unchanged) == (0, 0, len(verdicts))
    flipped = {failing: Verdict.from_answer(True, 0.8, "changed my mind")}
    assert rf_mlflow.log_verdicts_to_mlflow(flipped, uri, name="rubricforge", program=program,
                                            model=fake.model).replaced == 1
    assert [a.feedback.value for a in judged(failing)] == [True]
    human_after = {i: [(a.assessment_id, a.feedback.value, a.rationale) for a in client.get_trace(i).info.assessments
                       if a.source.source_type == "HUMAN" and a.name == "label"] for i in labels}
    assert human_after == human_before

    # label-next: rank the unlabeled traces by the judge's verdicts, tag the top 2, a person labels them
    unlabeled = [t for t in trajectories if t.label is None]
    lines = {i: {"id": i, **verdicts[i].to_dict()} for i in verdicts}
    chosen = pick(rank(unlabeled, lines, {}, {}), 2)
    assert rf_mlflow.tag_for_labeling(chosen, uri, label_name="label") == 2
    tagged = client.search_traces(locations=[client.get_experiment_by_name(experiment["name"]).experiment_id],
                                  filter_string="tag.`rubricforge.label_next` = '1'")
    assert [t.info.trace_id for t in tagged] == [chosen[0].trajectory.id]
    mlflow.set_tracking_uri(uri)
    for c in chosen:
        human(c.trajectory.id, "pass")
    report = rf_mlflow.MlflowLoadReport()
    again_loaded = {t.id: t for t in rf_mlflow.load_mlflow_traces(uri, experiment["name"], report=report)}
    assert (report.labeled, report.unlabeled) == (N_LABELED + 2, N_UNLABELED - 2)
    assert all(again_loaded[c.trajectory.id].label == 1 for c in chosen)
    # the experiment is restored for the other tests: the labels given here are marked invalid
    for c in chosen:
        for a in client.get_trace(c.trajectory.id).info.assessments:
            if a.source.source_type == "HUMAN" and a.name == "label":
                mlflow.delete_assessment(trace_id=c.trajectory.id, assessment_id=a.assessment_id)


@pytest.mark.slow
def test_frozen_judge_as_mlflow_genai_scorer(experiment, tmp_path):
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.program.store import freeze

    program = tmp_path / "seed.json"
    freeze(TrajectoryJudge(), program, lm="fake-judge")
    client = MlflowClient(experiment["uri"])
    exp_id = client.get_experiment_by_name(experiment["name"]).experiment_id
    traces = list(client.search_traces(locations=[exp_id], max_results=100))
    mlflow.set_tracking_uri(experiment["uri"])
    mlflow.set_experiment(experiment["name"])
    with FakeOpenAI(responder=fake_judge) as fake:
        judge_scorer = rf_mlflow.scorer(program, lm=make_lm(LMConfig(model=fake.model, api_base=fake.api_base)))
        result = mlflow.genai.evaluate(data=traces, scorers=[judge_scorer])
        mlflow.flush_trace_async_logging()
        bodies = [str(b) for b in fake.chat_bodies]
    assert len(bodies) == len(traces) and not any(CANARY in b or EXPECT_CANARY in b for b in bodies)
    # the judge's own calls did not land in the experiment as traces (evaluate turns DSPy autologging on)
    assert _experiment_trace_ids(experiment["uri"], experiment["name"]) == {t.info.trace_id for t in traces}
    rows = result.result_df
    column = f"{judge_scorer.name}/value"  # the rows hold the traces' other assessments too (the write-back's)
    values = list(rows[column])
    # unlabeled tasks 16 (abstains), 17 (tool error: fail), 18 (passes)
    passes = sum(experiment["labels"].values()) + 1
    assert sum(v is None or v != v for v in values) == 1  # the abstention: an error, no value
    assert (sum(v is True for v in values), sum(v is False for v in values)) == (passes, len(traces) - passes - 1)


@pytest.mark.slow
def test_scorer_offline_with_scripted_lm(tmp_path):
    """The scorer's feedback without any server: a ScriptedLM judge and a trace built in memory."""
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.program.store import freeze
    from rubricforge_dspy.testing.scripted import last_user_text

    program = tmp_path / "seed.json"
    freeze(TrajectoryJudge(), program, lm="scripted")
    local_store(tmp_path, "offline")
    trace_id = run_agent(1, fail=True)
    mlflow.flush_trace_async_logging()
    trace = mlflow.get_trace(trace_id)
    seen = []

    def strict(messages):
        seen.append(last_user_text(messages))
        failed = "(ERROR)" in seen[-1]
        return {"reason": "a tool call failed" if failed else "ok", "passed": not failed,
                "score": 0.1 if failed else 0.9}

    feedback = rf_mlflow.scorer(program, lm=ScriptedLM(strict, model="scripted"))(trace=trace)
    assert feedback.value is False and feedback.rationale == "a tool call failed" and feedback.error is None
    assert feedback.metadata["abstained"] == "false" and feedback.source.source_type == "LLM_JUDGE"
    assert "book_reservation" in seen[0]

    broken = rf_mlflow.scorer(program, lm=ScriptedLM(lambda m: "not json at all", model="scripted"))(trace=trace)
    assert broken.value is None and broken.error is not None and broken.metadata["abstained"] == "true"


@pytest.mark.slow
def test_scorer_metadata_shows_the_raw_and_calibrated_score_and_the_pass_threshold(tmp_path):
    """A program with a pass threshold on calibrated scores fails a run the LM scored 0.9: the feedback's
    metadata showed only "score": "0.9" beside value False; it now shows what decided it."""
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.judge.operating_point import Calibration
    from rubricforge_dspy.program.store import freeze

    program = tmp_path / "capped.json"
    calibration = Calibration("platt", {"a": 1.0, "b": -0.5}, n=20)  # 0.9 -> 0.599
    freeze(TrajectoryJudge(), program, lm="scripted",
           extra={"calibration": calibration.to_dict(), "threshold": {"pass_threshold": 0.7}})
    local_store(tmp_path, "capped")
    trace_id = run_agent(1, fail=False)
    mlflow.flush_trace_async_logging()
    confident = ScriptedLM(lambda messages: {"reason": "ok", "passed": True, "score": 0.9}, model="scripted")
    feedback = rf_mlflow.scorer(program, lm=confident)(trace=mlflow.get_trace(trace_id))
    assert feedback.value is False
    assert feedback.metadata["score"] == "0.9"
    assert float(feedback.metadata["score_calibrated"]) == pytest.approx(calibration.apply(0.9))
    assert feedback.metadata["pass_threshold"] == "0.7" and feedback.metadata["pass_threshold_on"] == "score_calibrated"


@pytest.mark.slow
def test_a_bad_human_label_stops_the_load_naming_the_trace_and_a_changed_mind_counts_once(tmp_path):
    uri = local_store(tmp_path, "labels")
    unsure = run_agent(1, fail=False)
    mlflow.flush_trace_async_logging()
    human(unsure, "maybe")
    with pytest.raises(InputError, match=f"{unsure}.*'maybe' is not a 0/1 label"):
        list(rf_mlflow.load_mlflow_traces(uri, "labels"))
    local_store(tmp_path, "changed")  # a second experiment in the same store, its artifacts in tmp too
    changed = run_agent(2, fail=True)
    mlflow.flush_trace_async_logging()
    human(changed, True)
    human(changed, 0)  # the same person again, without overriding: the latest valid feedback of a source counts
    report = rf_mlflow.MlflowLoadReport()
    [trajectory] = rf_mlflow.load_mlflow_traces(uri, "changed", report=report)
    assert trajectory.label == 0 and not report.labels.disagreements  # one labeler: nothing to disagree with
    # two people who disagree are resolved by --label-resolve: tests/integrations/test_mlflow_label_resolve.py


# -- the loop does not break on its own output (issue #26, item 7) ----------------------------------------

def _strict_lm():
    def strict(messages):
        from rubricforge_dspy.testing.scripted import last_user_text

        failed = "(ERROR)" in last_user_text(messages)
        return {"reason": "a tool call failed" if failed else "ok", "passed": not failed,
                "score": 0.1 if failed else 0.9}

    return ScriptedLM(strict, model="scripted")


def _experiment_trace_ids(uri: str, name: str) -> set[str]:
    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name(name).experiment_id
    return {t.info.trace_id for t in client.search_traces(locations=[exp_id], max_results=100)}


@pytest.mark.slow
def test_scorer_leaves_no_trace_of_the_judges_own_calls_and_a_judge_trace_is_counted_not_read(tmp_path):
    """`mlflow.genai.evaluate` turns on MLflow's DSPy autologging while scorers run: the scorer's judge call
    must not land in the experiment as a new trace. A judge call traced all the same (the user's own
    autologging, or an experiment evaluated before this fix) is recognized on load and counted, never read
    as an agent trace, and never fatal."""
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.program.store import freeze

    program = tmp_path / "seed.json"
    freeze(TrajectoryJudge(), program, lm="scripted")
    uri = local_store(tmp_path, "own-output")
    agents = {run_agent(task, fail=task == 1) for task in range(2)}
    mlflow.flush_trace_async_logging()
    traces = [mlflow.get_trace(i) for i in sorted(agents)]
    mlflow.dspy.autolog()  # what evaluate's configure_autologging_for_evaluation turns on
    try:
        judge_scorer = rf_mlflow.scorer(program, lm=_strict_lm())
        feedback = [judge_scorer(trace=t) for t in traces]
        mlflow.flush_trace_async_logging()
        assert _experiment_trace_ids(uri, "own-output") == agents  # the scorer's calls left no trace
        assert sorted(f.value for f in feedback) == [False, True]
        # the same judge called bare under autologging is traced: that is the trace to recognize
        judge, _ = judge_with_facts(program, _strict_lm())
        judge_verdict(judge, rf_mlflow.trace_to_trajectory(traces[0]))
        mlflow.flush_trace_async_logging()
    finally:
        mlflow.dspy.autolog(disable=True)
    [own] = _experiment_trace_ids(uri, "own-output") - agents
    report = rf_mlflow.MlflowLoadReport()
    loaded = list(rf_mlflow.load_mlflow_traces(uri, "own-output", report=report))  # on_error="raise"
    assert {t.id for t in loaded} == agents
    assert [i for i, _ in report.judge_calls] == [own] and not report.skipped
    assert "judge" in report.judge_calls[0][1] and "left out 1 trace(s)" in report.summary()
    refused = judge_scorer(trace=mlflow.get_trace(own))  # the scorer does not judge a judge's call either
    assert refused.value is None and refused.error.error_code == "JUDGE_TRACE"


def test_assessment_metadata_never_holds_the_string_none():
    """A value that is absent (no criterion named, no error, a program without a whole-program hash) is left
    out of the assessment's metadata, not written as "None"."""
    from rubricforge_dspy.integrations._judging import ProgramFacts

    facts = ProgramFacts(where="p", rubric="Judge it.", rubric_sha256="ab" * 32, program_sha256=None,
                         certificate_summary="certificate: none", model="m")
    passed = rf_mlflow.verdict_feedback(Verdict.from_answer(True, 0.9, "fine"), name="rf", facts=facts)
    abstained = rf_mlflow.verdict_feedback(Verdict.abstention(ValueError("garbage"), "parse"), name="rf",
                                           facts=facts)
    for feedback in (passed, abstained):
        assert "None" not in feedback.metadata.values() and "program_sha256" not in feedback.metadata
        assert feedback.metadata[rf_mlflow.PROGRAM_KEY] == facts.rubric_sha256
    assert "error_kind" not in passed.metadata and "criterion" not in passed.metadata
    assert abstained.metadata["error_kind"] == "parse"


@pytest.mark.slow
def test_label_next_tags_of_an_earlier_pick_are_cleared(tmp_path):
    uri = local_store(tmp_path, "tags")
    a, b, c = (run_agent(task, fail=False) for task in range(3))
    mlflow.flush_trace_async_logging()
    assert rf_mlflow.tag_for_labeling([a, b], uri) == 2
    assert rf_mlflow.tag_for_labeling([c, a], uri, label_name="ok") == 2

    def tags(trace_id):
        found = mlflow.get_trace(trace_id).info.tags
        return found.get(rf_mlflow.LABEL_NEXT_TAG), found.get("rubricforge.label_name")

    assert [tags(c), tags(a), tags(b)] == [("1", "ok"), ("2", "ok"), (None, None)]
    assert rf_mlflow.tag_for_labeling([], uri, experiment="tags") == 0  # an empty pick clears them all
    assert [tags(i) for i in (a, b, c)] == [(None, None)] * 3


@pytest.mark.slow
def test_write_back_never_replaces_what_an_evaluation_logged(tmp_path):
    """The scorer and ``judge --to-mlflow`` used to share the name ``rubricforge``, so writing back the very
    verdicts an evaluation had logged counted them "replaced" (and deleted the evaluation's). Their
    default names differ, and even under one name the evaluation's assessments are left as they are."""
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.program.store import freeze

    program = tmp_path / "seed.json"
    freeze(TrajectoryJudge(), program, lm="scripted")
    uri = local_store(tmp_path, "names")
    ids = [run_agent(task, fail=task == 1) for task in range(2)]
    mlflow.flush_trace_async_logging()
    traces = [mlflow.get_trace(i) for i in ids]
    judge_scorer = rf_mlflow.scorer(program, lm=_strict_lm())
    assert judge_scorer.name != "rubricforge"
    mlflow.genai.evaluate(data=traces, scorers=[judge_scorer])
    mlflow.flush_trace_async_logging()
    judge, _ = judge_with_facts(program, _strict_lm())
    verdicts = {t.id: judge_verdict(judge, t) for t in (rf_mlflow.trace_to_trajectory(x) for x in traces)}

    def values(name):
        return {i: sorted(str(a.feedback.value) for a in mlflow.get_trace(i).info.assessments if a.name == name)
                for i in ids}

    evaluated = values(judge_scorer.name)
    assert evaluated == {ids[0]: ["True"], ids[1]: ["False"]}
    report = rf_mlflow.log_verdicts_to_mlflow(verdicts, uri, name="rubricforge", program=program)
    assert (report.logged, report.replaced) == (2, 0)
    same_name = rf_mlflow.log_verdicts_to_mlflow(verdicts, uri, name=judge_scorer.name, program=program)
    assert (same_name.logged, same_name.replaced, same_name.unchanged) == (2, 0, 0)
    again = rf_mlflow.log_verdicts_to_mlflow(verdicts, uri, name=judge_scorer.name, program=program)
    assert (again.logged, again.replaced, again.unchanged) == (0, 0, 2)
    assert values(judge_scorer.name) == {i: v * 2 for i, v in evaluated.items()}  # the evaluation's kept
