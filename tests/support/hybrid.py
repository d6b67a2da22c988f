"""The hybrid judge's test set-up: episodes of three kinds (ok, errored, wrong date), an LLM judge that reads the
wrong date but not the error, and a hybrid stack fit on its validation verdicts."""

from __future__ import annotations

import dataclasses

import dspy

from rubricforge_dspy.core.trajectory import Step
from rubricforge_dspy.judge.execution import judge_verdict
from rubricforge_dspy.judge.hybrid import freeze_hybrid
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.testing.scripted import last_user_text
from tests.support.helpers import make_trajectory

WRONG = "(booked on the wrong date)"


def episode(i: int, kind: str):
    """ok: a clean booking. error: the booking errored (the symptoms see it; the LLM below does not).
    wrong: a clean-looking booking of the wrong date (the LLM reads it; every feature equals an ok one)."""
    t = make_trajectory(i, success=kind != "error", task=f"{kind}{i}")
    if kind == "wrong":
        steps = (*t.steps[:-1], Step("final_answer", f"Your flight is booked! {WRONG}"))
        t = dataclasses.replace(t, steps=steps, label=0, reward=0.0)
    return t


def dataset(n: int, offset: int = 0):
    kinds = ("ok", "ok", "error", "wrong")
    return [episode(offset + i, kinds[i % 4]) for i in range(n)]


def llm_blind_to_errors(messages):
    text = last_user_text(messages)
    if "wrong date" in text:
        return {"reason": "The agent booked the wrong date.", "passed": False, "score": 0.1}
    return {"reason": "The agent says the flight is booked.", "passed": True, "score": 0.9}


def fitted(lm, tmp_path, max_false_pass=None):
    train, val = dataset(40), dataset(24, offset=100)
    llm = TrajectoryJudge()
    path = tmp_path / "judge.json"
    freeze(llm, path, lm="scripted-complementary")
    with dspy.context(lm=lm):
        val_verdicts = [judge_verdict(llm, t) for t in val]
    stack = freeze_hybrid(path, val, val_verdicts, max_false_pass)
    return train, path, stack, llm
