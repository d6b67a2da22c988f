"""The whole trajectory, for labeling: every step as the data loader read it, unclipped, in pages.

"What the judge read" is the render, which cuts long steps and elides whole ones to fit the judge's budget; a
person labeling may need what was cut. This view shows every step's kind, tool name, call id, error mark,
content and arguments in full. Nothing is interpreted: the template prints each piece through the page's
one filter of untrusted text (`review.security.inert`) and Jinja2's autoescape, in a ``<pre>``.

A long trajectory is cut into pages of about `PAGE_CHARS` characters (whole steps; a step longer than that
is cut into parts of `PAGE_CHARS`, each on its own page, numbered ``part k of n``), so a page stays quick
to send and to show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rubricforge_dspy.core.trajectory import Step, Trajectory

__all__ = ["PAGE_CHARS", "StepPiece", "trajectory_pages"]

PAGE_CHARS = 100_000


@dataclass(frozen=True)
class StepPiece:
    """One step, or one part of a step too long for a page.

    Attributes:
        number: the step's number (1-based, as the render numbers steps).
        kind, tool_name, call_id, is_error: the step's fields.
        text: its content and arguments (this part of them).
        part, parts: which part of the step's text this is, of how many (1 of 1 for a whole step).
    """

    number: int
    kind: str
    tool_name: str | None
    call_id: str | None
    is_error: bool
    text: str
    part: int = 1
    parts: int = 1


def _text(step: Step) -> str:
    text = step.content or ""
    if step.arguments is not None:
        arguments = step.arguments if isinstance(step.arguments, str) else json.dumps(
            step.arguments, ensure_ascii=False, indent=1, default=str)
        text = f"{text}\n[arguments]\n{arguments}" if text else f"[arguments]\n{arguments}"
    return text


def trajectory_pages(trajectory: Trajectory, page_chars: int = PAGE_CHARS) -> list[list[StepPiece]]:
    """Every step of `trajectory`, unclipped, cut into pages of about `page_chars` characters.

    Args:
        trajectory: the trajectory as loaded.
        page_chars: the characters of step text a page holds at most (a step holds at least one page part).

    Returns:
        The pages (at least one), each a list of `StepPiece`; concatenated in order, the parts of a step are
        its whole text.
    """
    pages: list[list[StepPiece]] = [[]]
    size = 0
    for number, step in enumerate(trajectory.steps, 1):
        text = _text(step)
        chunks = [text[start:start + page_chars] for start in range(0, len(text), page_chars)] or [""]
        for part, chunk in enumerate(chunks, 1):
            if pages[-1] and size + len(chunk) > page_chars:
                pages.append([])
                size = 0
            pages[-1].append(StepPiece(number, str(step.kind), step.tool_name, step.call_id, step.is_error, chunk,
                                       part, len(chunks)))
            size += len(chunk)
    return pages
