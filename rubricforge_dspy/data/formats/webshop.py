"""ReAct-on-WebShop episodes, one JSON object per line (streamed).

Line schema: ``{session, instruction, reward, score_in_final_obs, n_steps, purchased,
steps: [{action, observation}]}``. Mapping:

* the first ``reset`` step's observation holds the shopping instruction -> a ``user`` step;
* ``search[...]`` / ``click[...]`` (and any other ``verb[...]``) -> ``tool_call`` with
  ``tool_name`` = the verb and ``arguments`` = the bracket content, followed by its observation as a
  ``tool_result`` (``is_error`` when WebShop answered ``Invalid action!``);
* ``think[...]`` -> an ``assistant`` step (WebShop's ``OK.`` acknowledgement is not kept).

The final observation after ``click[Buy Now]`` is the evaluator's ``Your score (min 0.0, max 1.0): x``
line: it is removed from the observable text (score and purchase flag go to ``hidden``). The reward is
graded in [0, 1].
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import (
    FULL_REWARD,
    LabelRule,
    Source,
    Step,
    Trajectory,
    label_from_reward,
)
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._steps import as_reward, convert_each
from rubricforge_dspy.data.formats.jsonl import iter_json_lines

NAME = "webshop_react"
# The WebShop paper's success rate counts reward 1 only; rewards are graded in [0, 1].
LABEL_RULE = FULL_REWARD
DOMAIN = "webshop"
AGENT = "react-text-davinci-002"
INVALID = "Invalid action!"
_ACTION = re.compile(r"^\s*(?P<verb>[A-Za-z_]\w*)\[(?P<arg>.*?)(?P<close>\])?\s*$", re.DOTALL)
_SCORE = re.compile(r"Your score \(min [\d.]+, max [\d.]+\):\s*[-+\d.eE]+")
_INSTRUCTION = re.compile(r"Instruction:\s*(?P<text>.*?)\s*(?:\[Search\]|$)", re.DOTALL)


def sniff_line(obj: dict[str, Any]) -> bool:
    """True when a JSON line looks like a WebShop ReAct episode."""
    steps = obj.get("steps")
    return (
        isinstance(steps, list)
        and bool(steps)
        and isinstance(steps[0], dict)
        and "action" in steps[0]
        and "observation" in steps[0]
    )


def strip_score(observation: str) -> str:
    """The observation without the evaluator's ``Your score (...)`` line."""
    return _SCORE.sub("", observation).strip()


def parse_action(action: str) -> tuple[str, str]:
    """``(verb, argument)`` of ``verb[argument]``; an unterminated bracket (truncated generation) is accepted."""
    match = _ACTION.match(action)
    if not match:
        return action.strip(), ""
    return match["verb"], match["arg"]


def instruction_of(observation: str, fallback: Any) -> str:
    match = _INSTRUCTION.search(observation or "")
    if match and match["text"].strip():
        return match["text"].strip()
    return str(fallback or "").strip()


def steps_of(record: dict[str, Any]) -> list[Step]:
    """Observable steps of one episode (actions validated by the caller)."""
    steps: list[Step] = []
    n_calls = 0
    for i, item in enumerate(record["steps"]):
        action, observation = item["action"], item.get("observation") or ""
        if i == 0 and action.strip() == "reset":
            steps.append(Step(kind="user", content=instruction_of(observation, record.get("instruction"))))
            continue
        verb, arg = parse_action(action)
        if verb == "think":
            steps.append(Step(kind="assistant", content=arg))
            if observation.strip() not in ("", "OK."):
                steps.append(Step(kind="tool_result", content=strip_score(observation), tool_name="think"))
            continue
        call_id = f"call_{n_calls}"
        n_calls += 1
        steps.append(Step(kind="tool_call", tool_name=verb, arguments=arg, call_id=call_id))
        observation = strip_score(observation)
        steps.append(
            Step(
                kind="tool_result",
                content=observation,
                tool_name=verb,
                call_id=call_id,
                is_error=observation.strip() == INVALID,
            )
        )
    return steps


def convert(
    record: Any, *, path: Path, index: int, threshold: LabelRule | float, seen: set[str] | None = None
) -> Trajectory:
    """One episode as a `Trajectory`; ValueError with the problem when it cannot be."""
    if not isinstance(record, dict):
        raise ValueError(f"record must be a JSON object, got {type(record).__name__}")
    if "reward" not in record:
        raise ValueError("missing 'reward'")
    reward = as_reward(record["reward"])
    raw_steps = record.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError("empty trajectory: 'steps' must be a non-empty list")
    for i, item in enumerate(raw_steps):
        if not isinstance(item, dict) or not isinstance(item.get("action"), str):
            raise ValueError(f"step {i} must be an object with a string 'action'")
        if not isinstance(item.get("observation", ""), (str, type(None))):
            raise ValueError(f"step {i} has a non-string 'observation'")
    task_id = str(record.get("session") or f"line_{index}")
    hidden = {
        "format": NAME,
        "instruction": record.get("instruction"),
        "score_in_final_obs": record.get("score_in_final_obs"),
        "purchased": record.get("purchased"),
        "n_steps": record.get("n_steps"),
    }
    traj_id = f"{path.stem}:{task_id}"
    if seen is not None:
        traj_id = traj_id if traj_id not in seen else f"{traj_id}#{index}"
        seen.add(traj_id)
    return Trajectory(
        id=traj_id,
        task_id=task_id,
        domain=DOMAIN,
        agent=AGENT,
        steps=tuple(steps_of(record)),
        reward=reward,
        label=label_from_reward(reward, threshold),
        source=Source(str(path), index),
        hidden=hidden,
    )


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(line_index, Trajectory | TrajectoryFormatError)`` line by line (constant memory)."""
    seen: set[str] = set()
    yield from convert_each(path, iter_json_lines(path), lambda value, index: convert(
        value, path=path, index=index, threshold=threshold, seen=seen))


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=20, extensions=(".jsonl", ".json"),
    description="ReAct WebShop episodes (JSON Lines)", sniff_record=sniff_line)
