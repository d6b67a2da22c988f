"""GEPA (dspy.GEPA, the optimizer under `induce`) evolves the rubric of the segments and explorer judges: the
rubric is the instruction of every predictor, and a scripted reflection LM's proposal replaces it.

`induce`/`RubricInducer.compile` itself refuses them today (it takes a `TrajectoryJudge` and feeds GEPA
rendered text): docs/LONG_EPISODES.md, "Wiring", says what it needs."""

from __future__ import annotations

import dataclasses

import dspy
import pytest

from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.core.trajectory import Step
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, system_text
from tests.judge._long_episodes import long_trajectory
from tests.support.induction import ERROR_CRITERION, make_reflection_lm

pytestmark = pytest.mark.filterwarnings("ignore")


def dataset():
    """Episodes with a tool error (label 0) and without (label 1), alternating."""
    out = []
    for i in range(8):
        episode = long_trajectory(12 + i, label=i % 2)
        if i % 2:  # a success: no tool error
            episode = dataclasses.replace(episode, id=f"ok-{i}", task_id=f"t{i}", steps=tuple(
                dataclasses.replace(s, is_error=False) if s.kind == "tool_result" else s for s in episode.steps))
        else:
            episode = dataclasses.replace(episode, id=f"bad-{i}", task_id=f"t{i}", steps=(
                *episode.steps[:3], Step("tool_result", "Traceback: failed", tool_name="bash", is_error=True),
                *episode.steps[3:]))
        out.append(dspy.Example(trajectory=episode, label=episode.label).with_inputs("trajectory"))
    return out


def scripted_judge(messages):
    """Passes everything, unless its instruction holds the error criterion and the counters show an error."""
    text = "\n".join(str(m.get("content") or "") for m in messages)
    fail = ERROR_CRITERION in system_text(messages) and "tool_errors=0" not in text
    if "[[ ## excerpt ## ]]" in text:
        return {"findings": "none"}
    verdict = {"passed": not fail, "score": 0.1 if fail else 0.9, "reason": "counters [1]"}
    if "[[ ## transcript ## ]]" in text:
        return {"action": "verdict", "argument": "", **verdict}
    return verdict


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    right = bool(pred.passed) == bool(gold.label)
    return dspy.Prediction(score=float(right), feedback="right" if right else
                           f"wrong: the episode's label is {gold.label}; fail episodes whose tool_errors counter is "
                           "above zero")


@pytest.mark.parametrize("make", [lambda: SegmentsJudge(SEED_RUBRIC, render_config=RenderConfig(max_tokens=1500)),
                                  lambda: ExplorerJudge(SEED_RUBRIC, render_config=RenderConfig(max_tokens=1500))],
                         ids=["segments", "explorer"])
def test_gepa_changes_the_instruction_of_every_predictor(make, tmp_path):
    data = dataset()
    student = make()
    student.set_lm(ScriptedLM(scripted_judge, model="scripted-judge"))
    optimizer = dspy.GEPA(metric=metric, reflection_lm=make_reflection_lm([]), max_metric_calls=60,
                          reflection_minibatch_size=3, component_selector="all", use_merge=False, num_threads=1,
                          log_dir=str(tmp_path / "gepa"))
    evolved = optimizer.compile(student, trainset=data[:4], valset=data[4:])
    assert type(evolved) is type(student)
    instructions = [p.signature.instructions for p in evolved.predictors()]
    assert all(ERROR_CRITERION in text for text in instructions)  # every predictor: the rubric evolved together
    assert ERROR_CRITERION in evolved.rubric and ERROR_CRITERION not in student.rubric
    assert evolved.rubric_sha256 != student.rubric_sha256
