"""The hybrid judge: a scripted LLM that sees one failure type and features that see another; the stack
fit on validation verdicts beats both parts, freezes into the program JSON, round-trips byte for byte,
and works through load(), batch judging and as_metric()."""

from __future__ import annotations

import json

import dspy
import numpy as np
import pytest

from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.evidence.features import FEATURES
from rubricforge_dspy.judge.execution import judge_verdict
from rubricforge_dspy.judge.floor import SymptomFloor
from rubricforge_dspy.judge.hybrid import HybridJudge, Stack, fit_stack
from rubricforge_dspy.judge.loading import load_judge as load
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import read_program
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.hybrid import WRONG, dataset, episode, fitted, llm_blind_to_errors


@pytest.fixture
def lm():
    return ScriptedLM(llm_blind_to_errors, model="scripted-complementary")


def accuracy(verdicts, trajectories) -> float:
    return float(np.mean([bool(v.passed) == bool(t.label) for v, t in zip(verdicts, trajectories, strict=True)]))


def test_the_hybrid_beats_both_of_its_parts(lm, tmp_path):
    train, path, stack, llm = fitted(lm, tmp_path)
    test = dataset(40, offset=200)
    floor = SymptomFloor.fit(train)
    hybrid = load(path, check_certificate=False)
    assert isinstance(hybrid, HybridJudge)
    with dspy.context(lm=lm):
        llm_verdicts = [llm(trajectory=t) for t in test]
        hybrid_verdicts = [hybrid(trajectory=t) for t in test]
    floor_verdicts = [floor(t) for t in test]
    parts = {"llm": accuracy(llm_verdicts, test), "floor": accuracy(floor_verdicts, test)}
    assert accuracy(hybrid_verdicts, test) > max(parts.values()), parts
    # each part misses the failure type the other one sees
    wrong = [i for i, t in enumerate(test) if WRONG in t.steps[-1].content]
    errored = [i for i, t in enumerate(test) if t.n_tool_errors]
    assert all(floor_verdicts[i].passed for i in wrong) and all(llm_verdicts[i].passed for i in errored)
    assert not any(hybrid_verdicts[i].passed for i in wrong + errored)


def test_hybrid_program_round_trips_byte_identically(lm, tmp_path):
    _, path, stack, _ = fitted(lm, tmp_path)
    loaded = load(path, check_certificate=False)
    loaded.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
    assert load(tmp_path / "again.json", check_certificate=False).stack == stack
    manifest = read_program(path)["rubricforge"]
    assert Stack.from_dict(manifest["hybrid"]) == stack and manifest["hybrid"]["fit"]["n"] == 24
    # the plain LLM judge's file layout is unchanged: TrajectoryJudge().load reads the LLM part only
    assert TrajectoryJudge().load(path).rubric == loaded.rubric


def test_hybrid_through_batch_judging_matches_direct_calls(lm, tmp_path):
    from rubricforge_dspy.apply.stream import judge_stream

    _, path, _, _ = fitted(lm, tmp_path)
    hybrid = load(path, check_certificate=False)
    test = dataset(12, offset=300)
    judge_stream(hybrid, test, tmp_path / "v.jsonl", lm=lm, cache=tmp_path / "cache", progress=False)
    lines = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text().splitlines()]
    with dspy.context(lm=lm):
        direct = {t.id: hybrid(trajectory=t) for t in test}
    assert {x["id"]: (x["passed"], x["score"]) for x in lines} == {i: (v.passed, v.score) for i, v in direct.items()}
    assert lines[0]["program_sha256"] == hybrid.rubric_sha256 != hybrid.llm.rubric_sha256


def test_hybrid_as_metric_reads_the_symptoms_of_an_agent_run(lm, tmp_path):
    _, path, _, _ = fitted(lm, tmp_path)
    hybrid = load(path, check_certificate=False)
    example = dspy.Example(question="Please book flight HAT900 for me.").with_inputs("question")

    def run(observation: str, error: bool):
        trajectory = {"thought_0": "Book it.", "tool_name_0": "book_reservation",
                      "tool_args_0": {"flight": "HAT900"}, "observation_0": observation}
        return dspy.Prediction(trajectory=trajectory, answer="Your flight is booked!")

    failed = run("Error: payment method not found", True)
    assert hybrid.llm.as_metric(lm=lm)(example, failed) == 1.0  # the LLM part alone is fooled
    assert hybrid.as_metric(lm=lm)(example, run('{"reservation_id": "R1"}', False)) == 1.0
    assert hybrid.as_metric(lm=lm)(example, failed) == 0.0
    assert hybrid.as_metric(lm=lm, render_config=hybrid.render_config)(example, failed) == 0.0


def test_a_false_pass_cap_sets_the_hybrid_threshold(lm, tmp_path):
    _, _, stack, _ = fitted(lm, tmp_path, max_false_pass=0.0)
    val = dataset(24, offset=100)
    with dspy.context(lm=lm):
        verdicts = [judge_verdict(TrajectoryJudge(), t) for t in val]
    from rubricforge_dspy.evidence.features import feature_values

    passed_failures = [stack.verdict(v, feature_values(t)).passed
                       for v, t in zip(verdicts, val, strict=True) if not t.label]
    assert stack.max_false_pass == 0.0 and not any(passed_failures)


def test_an_llm_abstention_stays_an_abstention(tmp_path):
    lm = ScriptedLM(lambda messages: "not a verdict", model="broken")
    stack = Stack.from_dict(fitted(ScriptedLM(llm_blind_to_errors), tmp_path)[2].to_dict())
    hybrid = HybridJudge(TrajectoryJudge(), stack)
    with dspy.context(lm=lm):
        verdict = judge_verdict(hybrid, episode(1, "ok"))
    assert verdict.abstained and not verdict.passed and verdict.error_kind == "parse"


def test_the_hybrid_refuses_text_without_features_and_takes_them_as_a_declared_input(tmp_path):
    """Bare text is refused with an InputError saying what to pass (never scored as if it had no symptoms);
    text with features=feature_values(t) gives exactly the verdict of the Trajectory itself."""
    from rubricforge_dspy.core.errors import InputError
    from rubricforge_dspy.evidence.features import feature_values

    lm = ScriptedLM(llm_blind_to_errors)
    hybrid = HybridJudge(TrajectoryJudge(), fitted(lm, tmp_path)[2])
    with pytest.raises(InputError, match="observable features"), dspy.context(lm=lm):
        hybrid(trajectory="plain rendered text")
    t = episode(3, "error")
    with dspy.context(lm=lm):
        from_trajectory = hybrid(trajectory=t)
        from_inputs = hybrid(trajectory=hybrid.render(t), features=feature_values(t))
    assert dict(from_trajectory) == dict(from_inputs)
    assert from_trajectory.raw == {"passed": True, "score": from_trajectory.raw["score"]}  # the LLM part's answer
    assert from_trajectory.decision_changed == (from_trajectory.passed != from_trajectory.raw["passed"])


def test_fitting_the_stack_leaves_abstentions_out(lm):
    val = dataset(12)
    with dspy.context(lm=lm):
        verdicts = [judge_verdict(TrajectoryJudge(), t) for t in val]
    verdicts[0] = Verdict.abstention("timeout", "timeout")
    assert fit_stack(verdicts, val).fit["abstained_excluded"] == 1


def test_induce_hybrid_cli_freezes_certifies_and_shows_the_hybrid(tmp_path, capsys):
    from rubricforge_dspy.cli.main import main
    from rubricforge_dspy.data.formats.jsonl import to_record
    from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
    from tests.support.induction_http import is_reflection, reflection_reply

    data = tmp_path / "labeled.jsonl"
    data.write_text("".join(json.dumps(to_record(t, reward=t.reward, label=t.label)) + "\n" for t in dataset(48)))

    def responder(body, n):
        if is_reflection(body):
            return reflection_reply(body)
        return llm_blind_to_errors([{"role": "user", "content": user_text(body)}])

    out = tmp_path / "hybrid.json"
    with FakeOpenAI(responder) as fake:
        flags = ["--api-base", fake.api_base, "--model", fake.model, "--reflection-api-base", fake.api_base,
                 "--reflection-model", fake.model]
        assert main(["induce", "--data", str(data), "--out", str(out), "--hybrid", "--budget", "30",
                     "--minibatch", "2", *flags]) == 0
    assert f"hybrid: LLM score + {len(FEATURES)} symptom features" in capsys.readouterr().err
    manifest = read_program(out)["rubricforge"]
    assert manifest["hybrid"]["fit"]["n"] > 0 and manifest["floor"]["trained_on"]["n"] > 0
    certificate = manifest["certificate"]  # measured with the hybrid on the test split
    assert certificate["floor"]["source"].startswith("the symptom floor fit on the program's training split")
    assert certificate["false_pass"]["k"] < certificate["negatives"]
    assert isinstance(load(out, check_certificate=False), HybridJudge)
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "hybrid: LLM score + symptom features" in shown and "margin over the symptom floor" in shown
