"""Render a trajectory as the text the judge reads: observable events only.

The renderer reads `Trajectory.steps` and the step counters derived from them, never `reward`,
`label` or `hidden` (gold actions, reward info, the user simulator's instruction, evaluator output).
Output is deterministic. Long trajectories are cut head-and-tail to a token budget with an explicit
elision marker, so the opening request and the final outcome always survive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rubricforge_dspy.trajectory import Step, Trajectory

CHARS_PER_TOKEN = 4  # a deliberately conservative estimate; no tokenizer dependency
DEFAULT_MAX_TOKENS = 1800
DEFAULT_MAX_STEP_CHARS = 700
ELISION = "[... {n} steps elided to fit the token budget ...]"


@dataclass(frozen=True)
class RenderConfig:
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_step_chars: int = DEFAULT_MAX_STEP_CHARS

    def __post_init__(self):
        if self.max_tokens < 64:
            raise ValueError(f"max_tokens must be >= 64, got {self.max_tokens}")
        if self.max_step_chars < 40:
            raise ValueError(f"max_step_chars must be >= 40, got {self.max_step_chars}")


def estimate_tokens(text: str) -> int:
    """Upper-bound-ish token estimate (ceil(chars / 4)), stable across machines."""
    return -(-len(text) // CHARS_PER_TOKEN)


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    keep = limit - 20
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    return f"{text[:head]} [...] {text[-tail:]}" if tail > 0 else text[:limit]


def _format_arguments(arguments) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def render_step(number: int, step: Step, max_chars: int = DEFAULT_MAX_STEP_CHARS) -> str:
    """One step as one line, e.g. ``[4] TOOL RESULT book_reservation (ERROR): ...``."""
    if step.kind == "tool_call":
        body = f"TOOL CALL {step.tool_name}({_format_arguments(step.arguments)})"
    elif step.kind == "tool_result":
        status = " (ERROR)" if step.is_error else ""
        name = f" {step.tool_name}" if step.tool_name else ""
        body = f"TOOL RESULT{name}{status}: {step.content}"
    else:
        label = {"user": "USER", "assistant": "ASSISTANT", "final_answer": "FINAL ANSWER"}[step.kind]
        body = f"{label}: {step.content}"
    return f"[{number}] {_clip(body, max_chars)}"


def render_counters(trajectory: Trajectory) -> str:
    return (
        f"steps={len(trajectory.steps)} tool_calls={trajectory.n_tool_calls} "
        f"tool_errors={trajectory.n_tool_errors} user_turns={trajectory.n_user_turns}"
    )


def render_trajectory(trajectory: Trajectory, config: RenderConfig | None = None) -> str:
    """The judge-readable text of `trajectory`: counters, numbered steps, final answer.

    When the steps exceed the budget, the first and last steps are kept (the last ones are
    favoured: that is where outcomes are) and the middle is replaced by an elision marker.
    """
    config = config or RenderConfig()
    lines = [render_step(i, step, config.max_step_chars) for i, step in enumerate(trajectory.steps, 1)]
    final = next((s for s in reversed(trajectory.steps) if s.kind == "final_answer"), None)
    header = f"COUNTERS: {render_counters(trajectory)}"
    footer = f"FINAL ANSWER: {_clip(final.content, config.max_step_chars) if final else '(none)'}"

    budget = config.max_tokens - estimate_tokens(header) - estimate_tokens(footer) - 20
    body = _head_and_tail(lines, budget)
    return "\n".join([header, "EVENTS:", *body, footer])


def _head_and_tail(lines: list[str], budget_tokens: int) -> list[str]:
    costs = [estimate_tokens(line) + 1 for line in lines]
    if sum(costs) <= budget_tokens:
        return lines
    head_budget = budget_tokens // 3
    head, used = [], 0
    for line, cost in zip(lines, costs):
        if used + cost > head_budget:
            break
        head.append(line)
        used += cost
    tail, remaining = [], budget_tokens - used
    for line, cost in zip(reversed(lines[len(head):]), reversed(costs[len(head):])):
        if cost > remaining:
            break
        tail.append(line)
        remaining -= cost
    tail.reverse()
    elided = len(lines) - len(head) - len(tail)
    return [*head, ELISION.format(n=elided), *tail] if elided else lines
