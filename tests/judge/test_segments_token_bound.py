"""`SegmentsJudge.token_bound`: the worst case of every window call and the final call of one item, so that a run's
token budget (`--token-budget` with `--read segments`) reserves what the item may really spend. Checked against a
scripted LM that reports the worst usage a byte-level tokenizer could (`tests.support.budget.WorstCaseLM`): every
byte sent a prompt token, every answer at ``max_tokens``."""

from __future__ import annotations

import dataclasses

import dspy
import pytest

from rubricforge_dspy.apply.budget import prompt_bound
from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.core.errors import BudgetExhausted
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.testing.scripted import system_text
from tests.judge._long_episodes import long_trajectory
from tests.support.budget import WorstCaseLM

MAX_TOKENS = 200
RENDER = RenderConfig(max_tokens=900)


def respond_with(findings: str):
    def respond(messages):
        if "overview" in system_text(messages):
            return {"passed": False, "score": 0.2, "reason": "step [41] failed"}
        return {"findings": findings}
    return respond


def worst_spend(lm: WorstCaseLM, since: int = 0) -> int:
    """What `lm`'s requests after the first `since` reported: their bytes plus a whole answer each."""
    sent = lm.prompt_bytes[since:]
    return sum(sent) + MAX_TOKENS * len(sent)


# plain notes; notes that are long runs of non-words (one estimated token a letter); multi-byte text
@pytest.mark.parametrize("findings", ["none", "QZXJ-" * 400, "é" * 3000 + " [41]"])
def test_the_bound_covers_every_call_of_one_item(findings):
    judge = SegmentsJudge(render_config=RENDER)
    lm = WorstCaseLM(respond_with(findings), max_tokens=MAX_TOKENS)
    episode = long_trajectory(100, words=160)
    with dspy.context(lm=lm):
        judge(trajectory=episode)
    calls = len(lm.prompt_bytes)
    assert calls == judge.estimated_calls(episode) > 10  # many windows, then the verdict
    inputs = judge.inputs_of(episode)
    bound = judge.token_bound(inputs, MAX_TOKENS)
    assert worst_spend(lm) <= bound
    # the old fallback (one prompt's bound per predictor) is below what the item really sends
    assert prompt_bound(judge, inputs) + MAX_TOKENS < worst_spend(lm)


def test_a_segments_run_never_spends_more_than_its_cap(tmp_path):
    data = [dataclasses.replace(long_trajectory(100, words=160), id=f"long-{i}", task_id=f"t{i}") for i in range(4)]
    judge = SegmentsJudge(render_config=RENDER)
    probe = WorstCaseLM(respond_with("QZXJ-" * 400), max_tokens=MAX_TOKENS)
    with dspy.context(lm=probe):
        judge(trajectory=data[0])
    spends = worst_spend(probe)  # what one item really spends (every item is the same size)
    old = prompt_bound(judge, judge.inputs_of(data[0])) + MAX_TOKENS
    assert old < spends
    for k, cap in enumerate((old + 1, spends - 1, spends + 5, 2 * spends + 7, 3 * spends + 100)):
        lm = WorstCaseLM(respond_with("QZXJ-" * 400), max_tokens=MAX_TOKENS)
        out = tmp_path / f"v{k}.jsonl"
        with pytest.raises(BudgetExhausted) as stopped:
            judge_stream(judge, data, out, lm=lm, concurrency=2, max_retries=0, progress=False, token_budget=cap)
        budget = stopped.value.summary.token_budget
        assert worst_spend(lm) == budget["spent"] <= cap, cap
        assert budget["overruns"] == 0
        # an item is judged exactly when its worst case fits what is left
        assert budget["calls"] == cap // judge.token_bound(judge.inputs_of(data[0]), MAX_TOKENS)
