"""A rubric's criteria: parse them, attribute a judge's reason to one, validate them.

A rubric is plain text whose numbered lines ``N. Name: text`` are its criteria. This module is the
one place that reads them; the report (disagreement attribution), the reward proxy (GEPA feedback
naming the failed criterion), the ablation protocol and induction's checks all use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Criterion", "parse_criteria", "without_criterion", "attribute_reason",
           "criterion_problems", "rubric_problems", "MAX_NAME_CHARS"]

MAX_NAME_CHARS = 80
_CRITERION = re.compile(rf"^\s*(\d+)[.)]\s+(?:\*\*)?([^:\n]{{1,{MAX_NAME_CHARS}}}?)(?:\*\*)?:\s*(.+)$")
_BARE = re.compile(r"^\s*(\d+)[.)]\s+(.+)$")
# An explicit reference to a criterion by number: "criterion 3", "criteria #3", "criterion no. 3".
_EXPLICIT = re.compile(r"\bcriteri(?:on|a)\s*(?:#|no\.?\s*)?(\d+)\b")
_STOP = frozenset("""about after also and any are been before but can does each every for from has have
into its made more most must not only other over same some such than that the their them then there
these this those was were what when where which while with without within""".split())


@dataclass(frozen=True)
class Criterion:
    """One numbered criterion of a rubric (``"N. Name: what to check"``): its number, name, text and line."""

    number: int
    name: str
    text: str
    line: str

    @property
    def label(self) -> str:
        """``"N. Name"``, how reports and feedback name the criterion."""
        return f"{self.number}. {self.name}"


def parse_criteria(rubric: str) -> list[Criterion]:
    """The numbered criteria of `rubric`, in order.

    A criterion is a line ``N. Name: text`` (or ``N) Name: text``, optionally with a bold name).
    A numbered line without a ``Name:`` prefix is a criterion named ``criterion N``.
    """
    criteria = []
    for line in rubric.splitlines():
        match = _CRITERION.match(line)
        if match:
            number, name, text = int(match[1]), match[2].strip(), match[3].strip()
        else:
            bare = _BARE.match(line)
            if not bare:
                continue
            number, name, text = int(bare[1]), f"criterion {bare[1]}", bare[2].strip()
        criteria.append(Criterion(number=number, name=name, text=text, line=line))
    return criteria


def without_criterion(rubric: str, criterion: int | str) -> str:
    """`rubric` with one criterion's line removed, selected by number or (case-insensitive) name.

    The remaining criteria keep their numbers, so ablation results stay attributable.
    """
    criteria = parse_criteria(rubric)
    matches = [
        c for c in criteria
        if (isinstance(criterion, int) and c.number == criterion)
        or (isinstance(criterion, str) and c.name.lower() == criterion.lower())
    ]
    if not matches:
        known = ", ".join(c.label for c in criteria) or "none"
        raise KeyError(f"no criterion {criterion!r} in rubric (criteria: {known})")
    lines = rubric.splitlines()
    lines.remove(matches[0].line)
    return "\n".join(lines)


def _stems(name: str) -> list[str]:
    words = re.findall(r"[a-z]+", name.lower())
    return sorted({w[:5] for w in words if len(w) >= 4 and w not in _STOP})


def _named(c: Criterion) -> bool:
    return not c.name.startswith("criterion ")


def attribute_reason(reason: str | int | None, criteria: str | Sequence[Criterion], *,
                     reference: bool = False) -> Criterion | None:
    """The criterion a verdict's ``reason`` points at, or None: the one attribution of a verdict to a
    rubric criterion (GEPA feedback, the report's disagreements, ``attribution.jsonl``).

    `criteria`: the rubric's criteria, or the rubric text itself (parsed with `parse_criteria`).

    With ``reference=True`` the value is a reference someone wrote down (an ``attribution.jsonl``
    entry), not a judge's prose: a number (``3``, ``"3"``, ``"3. Name"``) names criterion 3, a text
    equal to a criterion's name (case-insensitive) names that one, anything else names none.

    A reason, in order of strength:

    1. an explicit reference by number, "criterion N" / "criteria #N" / "criterion no. N" (the
       first one naming a criterion of the rubric);
    2. else the criterion whose full name occurs earliest in the reason (case-insensitive);
    3. else the criterion whose name keywords (the first five letters of its words of 4+ letters,
       stop words excluded, so "errors" matches "error") occur most often as word prefixes in the
       reason; ties go to the keyword occurring earliest, then to the lower number.
    """
    if isinstance(criteria, str):
        criteria = parse_criteria(criteria)
    text = " ".join(str(reason if reason is not None else "").lower().split())
    if not text or not criteria:
        return None
    by_number = {c.number: c for c in criteria}
    if reference:
        number = re.match(r"^(\d+)\b", text)
        if number:
            return by_number.get(int(number[1]))
        return next((c for c in criteria if c.name.lower() == text), None)
    for match in _EXPLICIT.finditer(text):
        if int(match[1]) in by_number:
            return by_number[int(match[1])]
    named = [(text.find(c.name.lower()), c.number) for c in criteria if _named(c) and c.name.lower() in text]
    if named:
        return by_number[min(named)[1]]
    best: tuple[tuple[int, int, int], Criterion] | None = None
    for c in criteria:
        positions = [m.start() for stem in (_stems(c.name) if _named(c) else [])
                     for m in [re.search(r"\b" + re.escape(stem), text)] if m]
        if positions:
            key = (-len(positions), min(positions), c.number)
            if best is None or key < best[0]:
                best = (key, c)
    return best[1] if best else None


def criterion_problems(criterion: Criterion) -> list[str]:
    """What is wrong with one criterion, as sentences (empty when it is usable): a criterion needs a
    name (so verdicts can be attributed to it) and a statement that can be checked in the text."""
    problems = []
    if not _named(criterion):
        problems.append(f"criterion {criterion.number} has no 'Name:' prefix, so reasons cannot name it")
    if len(criterion.text.split()) < 3:
        problems.append(f"criterion {criterion.number} ({criterion.name}) says too little to be checked: "
                        f"{criterion.text!r}")
    return problems


def rubric_problems(rubric: str) -> list[str]:
    """Problems of a rubric's criteria as a whole: none at all, numbers used twice, and each
    criterion's own :func:`criterion_problems`."""
    criteria = parse_criteria(rubric)
    if not criteria:
        return ["the rubric has no numbered criteria ('N. Name: text' lines)"]
    problems = []
    numbers = [c.number for c in criteria]
    for number in sorted({n for n in numbers if numbers.count(n) > 1}):
        problems.append(f"criterion number {number} is used {numbers.count(number)} times")
    for c in criteria:
        problems += criterion_problems(c)
    return problems
