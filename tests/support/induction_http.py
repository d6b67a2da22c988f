"""Replies of the fake OpenAI server (`rubricforge_dspy.testing.fake_server`) for an induction over HTTP: a
judge whose verdicts depend on its rubric, and the reflection LM's proposal in the format its adapter asked for."""

from __future__ import annotations

import json
import re

from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.testing.fake_server import system_text, user_text

CRITERION = "7. Error counter: fail the episode when the tool_errors counter is above zero."
IMPROVED = SEED_RUBRIC.replace("\n\nScoring:", f"\n{CRITERION}\n\nScoring:")


def is_reflection(body: dict) -> bool:
    return "new_instruction" in json.dumps(body)


def reflection_reply(body: dict, rubric: str = IMPROVED):
    """The proposer's answer in the format its adapter asked for."""
    if body.get("response_format"):
        return {"new_instruction": rubric}
    return f"[[ ## new_instruction ## ]]\n{rubric}\n\n[[ ## completed ## ]]"


def rubric_judge(body: dict) -> dict:
    """A judge whose verdict depends on its rubric: it fails errored episodes only when told to."""
    errors = int(re.search(r"tool_errors=(\d+)", user_text(body)).group(1))
    if "tool_errors counter" in system_text(body) and errors:
        return {"reason": "A tool call returned an error.", "passed": False, "score": 0.1}
    return {"reason": "The agent says the task is done.", "passed": True, "score": 0.9}
