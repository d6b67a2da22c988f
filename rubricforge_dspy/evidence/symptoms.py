"""Observable symptoms of failure, read from a trajectory's steps only.

These are surface facts anyone can check in the rendered text: failed tool calls, an action claimed in
the final message with no successful committing call behind it, a state change made without the user's
yes, a final message after a failed commit, repeated identical calls, no final answer, and content that
imitates the render's own structure (a forged-marker attempt: `evidence.render.forged_markers`). They feed the
induction feedback (pointing the reflection at evidence, never at the label's source) and the
non-LLM Heuristic baseline.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from rubricforge_dspy.core.trajectory import Step, Trajectory
from rubricforge_dspy.evidence.render import forged_markers

COMMIT_PREFIXES = ("book", "cancel", "update", "modify", "exchange", "return", "send", "transfer",
                   "create", "place", "buy", "purchase", "refund", "add", "remove", "change", "toggle",
                   "set", "submit")
LOOKUP_PREFIXES = ("get", "find", "search", "list", "lookup", "check", "calculate")
CLAIM_WORDS = re.compile(
    r"\b(booked|cancel(?:l)?ed|refunded|updated|modified|exchanged|returned|purchased|placed|"
    r"changed|processed|completed|confirmed|upgraded|transferred|submitted|bought)\b",
    re.IGNORECASE,
)
YES_WORDS = re.compile(r"\b(yes|yeah|yep|confirm|confirmed|go ahead|proceed|please do|sure|correct|ok|okay)\b",
                       re.IGNORECASE)


def is_commit(step: Step) -> bool:
    """A tool call that changes state (by the tool's name; WebShop's click[Buy Now] too)."""
    if step.kind != "tool_call" or not step.tool_name:
        return False
    name = step.tool_name.lower()
    if name == "click":
        return "buy now" in json.dumps(step.arguments).lower()
    return name.startswith(COMMIT_PREFIXES)


def is_lookup(step: Step) -> bool:
    if step.kind != "tool_call" or not step.tool_name:
        return False
    return step.tool_name.lower().startswith(LOOKUP_PREFIXES)


@dataclass
class Symptoms:
    """The observable failure symptoms of one trajectory (tool errors, failed lookups and commits, a success
    claim no successful commit backs, repeated calls, ...), each with the step that shows it."""

    tool_errors: list[tuple[int, str, str]] = field(default_factory=list)  # (step no., tool, snippet)
    failed_lookups: list[tuple[int, str]] = field(default_factory=list)
    failed_commits: list[tuple[int, str]] = field(default_factory=list)
    successful_commits: list[tuple[int, str]] = field(default_factory=list)
    unconfirmed_commits: list[tuple[int, str]] = field(default_factory=list)
    unbacked_claim: str | None = None  # claim word in the final answer with no successful commit
    claim_after_failed_commit: bool = False
    repeated_calls: list[tuple[str, int]] = field(default_factory=list)
    has_final_answer: bool = True
    n_steps: int = 0
    forged_marker_steps: list[int] = field(default_factory=list)  # step numbers whose text imitates the render

    @property
    def forged_markers(self) -> int:
        """Steps whose text held a forged-marker attempt (`evidence.render.forged_markers`)."""
        return len(self.forged_marker_steps)

    def lines(self) -> list[str]:
        """Human-readable evidence lines (step numbers refer to the rendered text)."""
        out = []
        for number, tool, snippet in self.tool_errors[:4]:
            out.append(f"step {number}: the call to {tool} returned an ERROR ({snippet})")
        if self.failed_commits and not self.successful_commits:
            names = ", ".join(sorted({t for _, t in self.failed_commits}))
            out.append(f"every state-changing call ({names}) failed; none succeeded")
        if self.unbacked_claim:
            out.append(f"the final message claims '{self.unbacked_claim}' but no successful state-changing "
                       "tool call appears in the record")
        if self.claim_after_failed_commit:
            out.append("the final message reports success although the last state-changing call failed")
        for number, tool in self.unconfirmed_commits[:2]:
            out.append(f"step {number}: {tool} changed state with no explicit user confirmation before it")
        for tool, times in self.repeated_calls[:2]:
            out.append(f"the same call to {tool} was repeated {times} times")
        if not self.has_final_answer:
            out.append("the agent gave no final answer")
        if self.forged_marker_steps:
            shown = ", ".join(map(str, self.forged_marker_steps[:4]))
            out.append(f"step(s) {shown}: the agent's or a tool's text imitates the record's own structure "
                       "(step lines, counters, FINAL ANSWER, field markers); it is quoted evidence, not the record")
        if not self.successful_commits and not self.unbacked_claim and self.has_final_answer:
            out.append("no state-changing tool call succeeded; check whether the user's request needed one")
        return out


def extract_symptoms(trajectory: Trajectory) -> Symptoms:
    """The `Symptoms` of `trajectory`, read from its observable steps only (never its label or hidden fields).

    Args:
        trajectory: the episode.

    Returns:
        Its `Symptoms` (GEPA's feedback and the floor's features are built from them).
    """
    steps = trajectory.steps
    found = Symptoms(n_steps=len(steps))
    calls_by_id = {s.call_id: s for s in steps if s.kind == "tool_call" and s.call_id}
    last_call: Step | None = None
    last_commit_failed = False
    user_said_yes = False
    call_counts: dict[str, int] = {}
    for number, step in enumerate(steps, 1):
        if forged_markers(step):
            found.forged_marker_steps.append(number)
        if step.kind == "user":
            user_said_yes = user_said_yes or bool(YES_WORDS.search(step.content or ""))
        elif step.kind == "tool_call":
            last_call = step
            key = f"{step.tool_name}({json.dumps(step.arguments, sort_keys=True, default=str)})"
            call_counts[key] = call_counts.get(key, 0) + 1
            tool = step.tool_name or ""  # a commit has a name (`is_commit`)
            if is_commit(step) and not user_said_yes and tool.lower() != "click":
                found.unconfirmed_commits.append((number, tool))
            if is_commit(step):
                user_said_yes = False  # each commit needs its own confirmation
        elif step.kind == "tool_result":
            call = calls_by_id.get(step.call_id) if step.call_id else last_call
            tool = step.tool_name or (call.tool_name if call else None) or "a tool"
            if step.is_error:
                found.tool_errors.append((number, tool, " ".join(step.content.split())[:80]))
                if call is not None and is_lookup(call):
                    found.failed_lookups.append((number, tool))
            if call is not None and is_commit(call):
                (found.failed_commits if step.is_error else found.successful_commits).append((number, tool))
                last_commit_failed = step.is_error
    final = next((s for s in reversed(steps) if s.kind == "final_answer"), None)
    conversational = trajectory.n_user_turns > 1
    # single-instruction environments (WebShop) end with an action, not a message: no answer is expected
    found.has_final_answer = final is not None or not conversational
    claim = CLAIM_WORDS.search(final.content) if final else None
    if claim and not found.successful_commits:
        found.unbacked_claim = claim.group(0)
    if claim and last_commit_failed:
        found.claim_after_failed_commit = True
    found.repeated_calls = sorted(((k.split("(")[0], n) for k, n in call_counts.items() if n >= 3),
                                  key=lambda x: -x[1])
    return found


def heuristic_verdict(trajectory: Trajectory) -> tuple[bool, float, str]:
    """The non-LLM Heuristic baseline.

    Rule: fail when the final message claims an unbacked action, reports success after a failed commit,
    when there is no final answer, or when more than a third of the tool calls errored; otherwise pass
    when at least one state-changing call succeeded, fail when none did. Score = 1 - error rate,
    halved when no commit succeeded.
    """
    found = extract_symptoms(trajectory)
    n_calls = max(1, trajectory.n_tool_calls)
    error_rate = len(found.tool_errors) / n_calls
    score = (1.0 - error_rate) * (1.0 if found.successful_commits else 0.5)
    if found.unbacked_claim or found.claim_after_failed_commit or not found.has_final_answer:
        return False, min(score, 0.25), "surface rule: unbacked claim, failed commit or no final answer"
    if error_rate > 1 / 3:
        return False, min(score, 0.4), "surface rule: more than a third of tool calls errored"
    if not found.successful_commits:
        return False, min(score, 0.45), "surface rule: no state-changing call succeeded"
    return True, max(score, 0.55), "surface rule: a state-changing call succeeded and no failure signal"
