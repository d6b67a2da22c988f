"""Scripted LMs for offline GEPA induction: judges (a whole-render judge, the long-episode readers) whose
verdicts depend on their rubric, and a reflection LM that proposes the criterion the judge needs."""

from __future__ import annotations

import re

from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text

ERROR_CRITERION = "7. Error counter: fail the episode when the tool_errors counter is above zero."


def scripted_judge(messages):
    """Naive judge: passes everything, unless its rubric has a criterion about the tool_errors counter."""
    rubric, trajectory = system_text(messages), last_user_text(messages)
    errors = int(re.search(r"tool_errors=(\d+)", trajectory).group(1))
    if "tool_errors counter" in rubric and errors > 0:
        return {"reason": "A tool call returned an error.", "passed": False, "score": 0.1}
    return {"reason": "The agent says the task is done.", "passed": True, "score": 0.9}


def reading_answers(messages):
    """A long-episode judge's LM whose verdict depends on its rubric: it fails an episode with tool errors only
    when its instruction has a criterion on the tool_errors counter (as `scripted_judge`).
    A window reader notes the counter; an explorer answers its verdict at once."""
    rubric, text = system_text(messages), last_user_text(messages)
    errors = int(re.search(r"tool_errors=(\d+)", text).group(1))
    fail = "tool_errors counter" in rubric and errors > 0
    verdict = {"reason": "a tool call returned an error" if fail else "the agent says it is done",
               "passed": not fail, "score": 0.1 if fail else 0.9}
    if "transcript" in rubric:  # the explorer's input field
        return {"action": "verdict", "argument": "", **verdict}
    if "overview" in rubric:
        return verdict
    return {"findings": f"tool_errors={errors}"}


def make_reflection_lm(seen_prompts):
    """A reflection LM that proposes the seed rubric plus a criterion on the error counter."""

    def respond(messages):
        seen_prompts.append("\n".join(m["content"] for m in messages))
        return {"new_instruction": SEED_RUBRIC.replace("\n\nScoring:", f"\n{ERROR_CRITERION}\n\nScoring:")}

    return ScriptedLM(respond, model="scripted-reflection")


def scripted_lms():
    """The scripted judge LM and reflection LM of an offline induction."""
    return ScriptedLM(scripted_judge, model="scripted-judge"), make_reflection_lm([])
