"""`induce` on the long-episode judges (segments, explorer), offline: GEPA evolves every predictor's instruction,
no operating point is fit, the frozen judge loads with `load_judge` and keeps reading as it did."""

from __future__ import annotations

import dspy
import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.induction.inducer import InductionConfig, induce
from rubricforge_dspy.judge.execution import judge_verdict
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.helpers import make_dataset
from tests.support.induction import ERROR_CRITERION, make_reflection_lm, reading_answers

RENDER = RenderConfig(max_tokens=600)


@pytest.mark.parametrize("make", [lambda: SegmentsJudge(render_config=RENDER, overlap=2),
                                  lambda: ExplorerJudge(max_iters=4, render_config=RENDER)],
                         ids=["segments", "explorer"])
def test_induce_evolves_a_reading_judge_and_freezes_one_that_loads(make, tmp_path):
    split = split_by_task(make_dataset(24), seed=0)
    seed = make()
    out = tmp_path / "reader.json"
    judge_lm = ScriptedLM(reading_answers, model="scripted-judge")
    result = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=make_reflection_lm([]),
                    config=InductionConfig(budget=80, minibatch=3, seed=0), init=seed, out_path=out,
                    lm_name="scripted-judge")
    judge = result.judge
    assert type(judge) is type(seed) and result.beat_seed
    assert judge.reading_settings() == seed.reading_settings() and judge.render_config == RENDER
    # every predictor got the proposal (a segments judge's window reader and verdict both carry the rubric)
    assert all(ERROR_CRITERION in p.signature.instructions for p in judge.predictors())
    assert judge.rubric != SEED_RUBRIC and judge.rubric_sha256 != seed.rubric_sha256
    assert "calibration" not in result.operating_point and any("no operating point" in n for n in result.notes)
    assert result.val_metrics["val_agreement"] > result.sweep[0]["val_agreement"]

    loaded = load_judge(out)
    assert type(loaded) is type(seed) and loaded.rubric_sha256 == judge.rubric_sha256
    manifest = loaded.manifest
    assert manifest["read"] == seed.read_mode and manifest["reading"] == seed.reading_settings()
    assert manifest["induction"]["budget"] == 80 and manifest["induced_with_lm"] == "scripted-judge"
    assert manifest["rubric_sha256"] == judge.rubric_sha256
    errored = next(t for t in split.test if t.n_tool_errors > 0)
    with dspy.context(lm=judge_lm):
        assert judge_verdict(loaded, errored).passed is False  # the evolved criterion, read from the frozen file
        assert judge_verdict(seed, errored).passed is True


def test_a_false_pass_cap_is_refused_for_a_reading_judge_before_any_call():
    split = split_by_task(make_dataset(24), seed=0)
    judge_lm = ScriptedLM(reading_answers, model="scripted-judge")
    with pytest.raises(InputError, match="no operating point|does not have yet"):
        induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=make_reflection_lm([]),
               config=InductionConfig(budget=80, minibatch=3, max_false_pass=0.1),
               init=SegmentsJudge(render_config=RENDER))
    assert judge_lm.calls == 0
