"""Shared fixtures of the long-episode judge tests: a synthetic long trajectory with one marker per step."""

from __future__ import annotations

import json

from rubricforge_dspy.core.trajectory import Source, Step, Trajectory

HIDDEN_MARK = "HIDDENGOLDQX"
ERROR_STEP = 40


def marker(number: int) -> str:
    return f"STEPMARK{number:03d}Z"


def long_trajectory(n: int = 100, words: int = 40, label: int = 1) -> Trajectory:
    """`n` steps (a user task, tool calls and results, a final answer), step `number` holding `marker(number)`;
    step `ERROR_STEP` is a tool error; label, reward and hidden fields hold `HIDDEN_MARK`-bearing values."""
    steps = [Step("user", f"{marker(1)} please fix the failing test in the parser module")]
    for number in range(2, n):
        filler = "the command printed some ordinary output lines " * (words // 8)
        if number % 2 == 0:
            steps.append(Step("tool_call", "", tool_name="bash", arguments={"cmd": f"echo {marker(number)}"}))
        else:
            steps.append(Step("tool_result", f"{marker(number)} {filler}", tool_name="bash",
                              is_error=number == ERROR_STEP + 1))
    steps.append(Step("final_answer", f"{marker(n)} I fixed the parser and all tests pass"))
    return Trajectory(id=f"long-{n}", task_id="t1", domain="swe", agent="a", steps=tuple(steps),
                      reward=float(label), label=label, source=Source("synthetic", 0),
                      hidden={"gold_patch": HIDDEN_MARK, "note": json.dumps({"label": HIDDEN_MARK})})


def long_record(pairs: int = 49, index: int = 0) -> dict:
    """A generic-JSONL record (OpenAI chat messages, docs/FORMAT.md) of ``2 * pairs + 2`` steps (100 by default):
    the task, `pairs` tool calls and results, a final answer; step ``n`` holds ``marker(n)``."""
    messages: list[dict] = [{"role": "user", "content": f"{marker(1)} please fix the failing test in the parser"}]
    number = 2
    for k in range(pairs):
        call = f"c{k}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"cmd": f"echo {marker(number)}"})}}]})
        messages.append({"role": "tool", "tool_call_id": call,
                         "content": f"{marker(number + 1)} " + "the command printed some ordinary output lines " * 5})
        number += 2
    messages.append({"role": "assistant", "content": f"{marker(number)} I fixed the parser and all tests pass"})
    return {"id": f"long-{index}", "task_id": f"t{index}", "messages": messages, "reward": 1.0}


def write_long_jsonl(path, items: int = 1, pairs: int = 49):
    """`items` records of `long_record` written to `path` (JSONL); returns `path`."""
    path.write_text("".join(json.dumps(long_record(pairs, i)) + "\n" for i in range(items)), encoding="utf-8")
    return path
