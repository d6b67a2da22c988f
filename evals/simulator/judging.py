"""What the simulated judge answers: deterministic, rubric-dependent verdicts and reflection rewrites.

Nothing here imports rubricforge_dspy: the simulator reads the chat request as any server would (the
system message holds the instruction, the last user message the rendered episode) and parses the
rendered text (``[n] TOOL RESULT name (ERROR): ...`` lines).

The simulated judge is a caricature of a small model that acts only on criteria written in its
vocabulary. Each *check* has a trigger phrase; when the instruction contains it, the check looks for its
symptom in the episode and, when found, fails it (with probability `DETECT`). Without a triggered
check the judge is credulous: it passes an episode that ends with a fluent answer (probability
`CREDULOUS_PASS`), so a generic rubric gets near-chance agreement and passes fluent failures. The
shipped seed rubric contains none of the trigger phrases, so to this simulator it is generic: that is a
property of the simulator's vocabulary, not a measurement of the seed rubric.

Reflection (GEPA's request for a ``new_instruction``): the simulator reads the current instruction and
the feedback; for the false passes it runs every check not yet in the instruction on those episodes and
adds, as a new numbered criterion, the one that fires on most of them; with only false fails it removes
the triggered criterion that fired on most of those. So induction over HTTP can improve, in steps a
validation set can confirm or reject.

Noise: every random draw is a hash of (request seed, instruction, episode text, purpose), so the same
request always gets the same answer, and a reworded rubric gets different noise.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Callable

SIMULATED = "simulated"
DETECT = 0.92  # probability that a triggered check with its symptom present fails the episode
CREDULOUS_PASS = 0.88  # pass probability of a fluent episode when no triggered check fires
HEDGED_PASS = 0.55  # ... when the final answer apologizes or refuses
NO_ANSWER_PASS = 0.35  # ... when there is no final answer
REVISED_NOTE = "(Revised by a simulated reflection LM: evals/simulator.)"

_LINE = re.compile(r"^\[(\d+)\] (USER|ASSISTANT|TOOL CALL|TOOL RESULT|FINAL ANSWER)(.*)$")
_CALL = re.compile(r"^\s*([A-Za-z_][\w.-]*)\((.*)\)\s*$", re.DOTALL)
_RESULT = re.compile(r"^(?:\s+([A-Za-z_][\w.-]*))?(\s+\(ERROR\))?:\s?(.*)$", re.DOTALL)
COMMIT = re.compile(r"^(book|cancel|update|modify|exchange|return|refund|purchase|buy|place|change|upgrade)", re.I)
CLAIM = re.compile(r"\b(booked|cancel+ed|refunded|updated|modified|exchanged|returned|purchased|placed|changed|"
                   r"processed|completed|upgraded|bought|successfully)\b", re.I)
YES = re.compile(r"\b(yes|yeah|yep|confirm|confirmed|go ahead|proceed|please do|sure|correct|ok|okay)\b", re.I)
REQUEST = re.compile(r"\b(cancel|change|book|return|exchange|modify|update|refund|buy|purchase|upgrade)\b", re.I)
HEDGE = re.compile(r"\b(sorry|unable|cannot|can't|unfortunately|not possible|apologi[sz]e)\b", re.I)
HANDOFF = re.compile(r"transfer\w* (?:you )?to a human|human agent", re.I)


@dataclass
class Event:
    number: int
    kind: str  # USER, ASSISTANT, TOOL CALL, TOOL RESULT, FINAL ANSWER
    text: str
    tool: str | None = None
    error: bool = False


@dataclass
class Episode:
    events: list[Event]
    final: str  # the FINAL ANSWER footer ("" when "(none)")

    @classmethod
    def parse(cls, text: str) -> "Episode":
        events, final = [], ""
        for line in text.splitlines():
            if line.startswith("FINAL ANSWER:"):
                final = line[len("FINAL ANSWER:"):].strip()
                final = "" if final == "(none)" else final
                continue
            match = _LINE.match(line)
            if not match:
                continue
            number, kind, rest = int(match[1]), match[2], match[3]
            event = Event(number, kind, rest.lstrip(": ").strip())
            if kind == "TOOL CALL":
                call = _CALL.match(rest)
                event.tool = call[1] if call else rest.strip().split("(")[0] or None
                event.text = call[2] if call else rest
            elif kind == "TOOL RESULT":
                result = _RESULT.match(rest)
                if result:
                    event.tool, event.error, event.text = result[1], bool(result[2]), result[3]
            events.append(event)
        return cls(events, final)

    def commit_calls(self) -> list[Event]:
        return [e for e in self.events if e.kind == "TOOL CALL" and _is_commit(e)]

    def ok_commit_results(self) -> list[Event]:
        return [e for e in self.events if e.kind == "TOOL RESULT" and not e.error and e.tool and _commit_name(e.tool)]


def _commit_name(tool: str) -> bool:
    return bool(COMMIT.match(tool))


def _is_commit(event: Event) -> bool:
    if not event.tool:
        return False
    if event.tool.lower() == "click":
        return "buy now" in event.text.lower()
    return _commit_name(event.tool)


# -- checks: (name, trigger phrase, criterion line to add, symptom finder) -----------------------------

def unresolved_tool_error(ep: Episode) -> str | None:
    for i, event in enumerate(ep.events):
        if event.kind == "TOOL RESULT" and event.error:
            later = [e for e in ep.events[i + 1:] if e.kind == "TOOL RESULT" and not e.error
                     and (event.tool is None or e.tool == event.tool)]
            if not later:
                return f"step {event.number}: {event.tool or 'a tool'} returned an ERROR that was never resolved"
    return None


def claims_success(ep: Episode) -> str | None:
    final = ep.final or next((e.text for e in reversed(ep.events) if e.kind == "ASSISTANT"), "")
    claim = CLAIM.search(final)
    if claim and not ep.ok_commit_results() and not any(
            e.kind == "TOOL CALL" and (e.tool or "").lower() == "click" and "buy now" in e.text.lower()
            for e in ep.events):
        return f"the final answer says '{claim[0]}' but no committing tool call succeeded"
    return None


def unconfirmed_action(ep: Episode) -> str | None:
    last_user = None
    for event in ep.events:
        if event.kind == "USER":
            last_user = event
        elif event.kind == "TOOL CALL" and _is_commit(event):
            if last_user is None or not YES.search(last_user.text):
                return f"step {event.number}: {event.tool} was called without the user's explicit yes"
    return None


def no_committing_call(ep: Episode) -> str | None:
    first_user = next((e for e in ep.events if e.kind == "USER"), None)
    if first_user is None or not REQUEST.search(first_user.text):
        return None
    if ep.ok_commit_results() or any(_is_commit(e) for e in ep.commit_calls() if (e.tool or "").lower() == "click"):
        return None
    return "the user asked for a change but no committing tool call succeeded"


def handed_off(ep: Episode) -> str | None:
    for event in ep.events:
        if event.kind == "TOOL CALL" and (event.tool or "").lower().startswith("transfer_to_human"):
            return f"step {event.number}: the agent handed the user off to a human"
    if HANDOFF.search(ep.final):
        return "the final answer hands the user off to a human"
    return None


@dataclass(frozen=True)
class Check:
    name: str
    trigger: str  # phrase that, in the instruction, turns the check on (case-insensitive)
    criterion: str  # the criterion line reflection adds ("{n}" is its number)
    find: Callable[[Episode], str | None]


CHECKS = (
    Check("tool_error", "unresolved tool error",
          "{n}. Unresolved tool error: fail the episode when a tool result marked ERROR is never followed by "
          "a successful result of the same tool.", unresolved_tool_error),
    Check("claims_success", "claims success",
          "{n}. Claims success without evidence: fail when the final answer claims success (booked, cancelled, "
          "refunded, updated, purchased) but no committing tool call returned a result without ERROR.",
          claims_success),
    Check("unconfirmed", "unconfirmed",
          "{n}. Unconfirmed action: fail when a committing tool call was made although the user's latest turn "
          "before it gave no explicit yes.", unconfirmed_action),
    Check("no_commit", "no committing call",
          "{n}. No committing call: fail when the user asked for a change (cancel, book, modify, return, "
          "exchange, refund) and no committing tool call succeeded.", no_committing_call),
    Check("handoff", "handed off to a human",
          "{n}. Handed off to a human: fail when the agent transferred the user to a human agent instead of "
          "resolving the request.", handed_off),
)


def recognized(instruction: str) -> list[Check]:
    lowered = instruction.lower()
    return [check for check in CHECKS if check.trigger in lowered]


def uniform(*parts) -> float:
    """A deterministic draw in [0, 1) from `parts`."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8", "replace"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def verdict(instruction: str, episode_text: str, seed: int = 0) -> dict:
    """The simulated judge's answer ``{"reason", "passed", "score"}`` for one rendered episode."""
    key = hashlib.blake2b(instruction.encode(), digest_size=8).hexdigest()
    ep = Episode.parse(episode_text)
    for check in recognized(instruction):
        evidence = check.find(ep)
        if evidence and uniform(seed, key, episode_text, check.name) < DETECT:
            score = round(0.05 + 0.3 * uniform(seed, key, episode_text, "score"), 3)
            return {"reason": f"Simulated judge: {evidence} ({check.trigger}).", "passed": False, "score": score}
    if not ep.final:
        p, why = NO_ANSWER_PASS, "the episode has no final answer"
    elif HEDGE.search(ep.final):
        p, why = HEDGED_PASS, "the final answer is hedged"
    else:
        p, why = CREDULOUS_PASS, "the final answer reads as a fluent completion"
    passed = uniform(seed, key, episode_text, "pass") < p
    draw = uniform(seed, key, episode_text, "score")
    score = round(0.55 + 0.4 * draw, 3) if passed else round(0.1 + 0.35 * draw, 3)
    return {"reason": f"Simulated judge: {why}; no recognized criterion found a failure.", "passed": passed,
            "score": score}


# -- reflection ---------------------------------------------------------------------------------------

_SECTION = re.compile(r"\[\[ ## (\w+) ## \]\]\n")
_CRITERION_LINE = re.compile(r"^\s*(\d+)[.)]\s+")
_LIMIT = re.compile(r"at most (\d+) characters")


def sections(text: str) -> dict[str, str]:
    """DSPy's ``[[ ## name ## ]]`` input sections of a user message."""
    parts = _SECTION.split(text)
    out = {}
    for i in range(1, len(parts) - 1, 2):
        body = parts[i + 1]
        body = body.split("\n\nRespond with", 1)[0] if i + 2 >= len(parts) else body
        out[parts[i]] = body.strip()
    return out


def _outcome(feedback: str) -> str:
    if feedback.startswith("WRONG (false pass)"):
        return "false_pass"
    if feedback.startswith("WRONG (false fail)"):
        return "false_fail"
    return "other"


def _examples(raw: str) -> list[tuple[str, str]]:
    """(outcome, episode text) of the reflective examples."""
    try:
        items = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        inputs = item.get("Inputs") or {}
        text = inputs.get("trajectory") if isinstance(inputs, dict) else None
        if isinstance(text, str):
            out.append((_outcome(str(item.get("Feedback", ""))), text))
    return out


def _add_criterion(instruction: str, check: Check) -> str:
    lines = instruction.splitlines()
    numbered = [i for i, line in enumerate(lines) if _CRITERION_LINE.match(line)]
    number = max((int(_CRITERION_LINE.match(lines[i])[1]) for i in numbered), default=0) + 1
    line = check.criterion.format(n=number)
    at = numbered[-1] + 1 if numbered else len(lines)
    return "\n".join(lines[:at] + [line] + lines[at:])


def _remove_criterion(instruction: str, check: Check) -> str:
    return "\n".join(line for line in instruction.splitlines()
                     if not (_CRITERION_LINE.match(line) and check.trigger in line.lower()))


def _fit(instruction: str, limit: int | None) -> str | None:
    if limit is None or len(instruction) <= limit:
        return instruction
    shorter = "\n".join(line for line in instruction.splitlines() if not line.startswith("Evaluation steps"))
    return shorter if len(shorter) <= limit else None


def reflect(user_text: str) -> str:
    """A new instruction for GEPA's reflection request (the current one when nothing applies)."""
    parts = sections(user_text)
    current = parts.get("current_instruction", "")
    limit_match = _LIMIT.search(parts.get("length_limit", ""))
    limit = int(limit_match[1]) if limit_match else None
    examples = [(outcome, Episode.parse(text)) for outcome, text in _examples(parts.get("examples_with_feedback", ""))]
    active = recognized(current)
    false_passes = [ep for outcome, ep in examples if outcome == "false_pass"]
    false_fails = [ep for outcome, ep in examples if outcome == "false_fail"]
    revised = current
    if false_passes:
        counts = [(sum(bool(check.find(ep)) for ep in false_passes), -i, check)
                  for i, check in enumerate(CHECKS) if check not in active]
        best = max(counts, default=None, key=lambda item: item[:2])
        if best is not None and best[0] > 0:
            revised = _add_criterion(current, best[2])
    elif false_fails and active:
        counts = [(sum(bool(check.find(ep)) for ep in false_fails), -i, check) for i, check in enumerate(active)]
        best = max(counts, key=lambda item: item[:2])
        if best[0] > 0:
            revised = _remove_criterion(current, best[2])
    if revised != current and REVISED_NOTE not in revised:
        revised = revised.rstrip() + "\n" + REVISED_NOTE
    return _fit(revised, limit) or current


def placeholder(schema: dict) -> dict:
    """A schema-valid answer for a request that is neither a verdict nor a reflection."""
    out = {}
    for name, spec in (schema.get("properties") or {}).items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind == "boolean":
            out[name] = False
        elif kind in ("number", "integer"):
            out[name] = 0.5 if kind == "number" else 0
        elif kind == "array":
            out[name] = []
        elif kind == "object":
            out[name] = {}
        else:
            out[name] = f"({SIMULATED} answer)"
    return out
