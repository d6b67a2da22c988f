"""The memorization guard: a rubric must state criteria, not remember training episodes.

A reflection LM shown training episodes sometimes copies them into the rubric ("Reservation ID
ZFA04Y from JFK to SEA"). Such a rubric does not generalize, and it leaks the training set into a
frozen program. `Memorized` collects the *specific* tokens of the training trajectories' rendered
text and flags a candidate rubric that uses any of them while the seed rubric does not.

Specific tokens (`specific_tokens`):
- identifiers: words of 5+ characters mixing letters and digits (``ZFA04Y``, ``#W2378156``,
  ``sophia_silva_7557``), and e-mail addresses;
- codes: all-capital words of 3+ letters (``JFK``, ``SEA``), minus the renderer's own words
  (`rubricforge_dspy.evidence.render.RENDER_WORDS`: ``RESULT``, ``CALL``, ``COUNTERS``, ...) and a few
  generic acronyms (`GENERIC_CODES`);
- amounts: numbers with a decimal part or a currency sign (``$1,234.50``, ``68.49``);
- dates: ISO dates and "Month DD" forms (``2024-05-15``, ``May 15``);
- names: two consecutive capitalized words that occur in a training episode (``Sophia Silva``).
Numbers without a decimal part or currency (criterion numbers, counts) are never flagged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from rubricforge_dspy.evidence.render import RENDER_WORDS

_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
           "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
_PATTERNS = (
    ("identifier", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")),
    ("identifier", re.compile(r"#?\b(?=[A-Za-z0-9_]*\d)(?=[A-Za-z0-9_]*[A-Za-z])[A-Za-z0-9_]{5,}\b")),
    ("code", re.compile(r"\b[A-Z]{3,}\b")),
    ("amount", re.compile(r"[$€£]\s?\d[\d,]*(?:\.\d+)?|\b\d[\d,]*\.\d+\b")),
    ("date", re.compile(rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b(?:{_MONTHS})\s+\d{{1,2}}\b")),
    ("name", re.compile(r"\b[A-Z][a-z]+\s[A-Z][a-z]+\b")),
)
# Acronyms of the trade that name no episode (not the renderer's: those come from `RENDER_WORDS`).
GENERIC_CODES = frozenset({"AGENT", "JSON", "OK", "API", "URL", "HTTP", "SQL"})
# Words the renderer itself writes into every episode (one definition, evidence.render); a rubric may name them.
RENDER_MARKERS = frozenset({word for word in RENDER_WORDS if word.isupper()}) | GENERIC_CODES


def specific_tokens(text: str) -> set[tuple[str, str]]:
    """(kind, token) pairs of `text` that identify a particular episode (see the module docstring)."""
    found = set()
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            token = match.group(0).strip()
            if kind == "code" and token in RENDER_MARKERS:
                continue
            found.add((kind, token))
    return found


@dataclass
class Memorized:
    """Checks candidate rubrics against the training episodes' specific tokens.

    `allowed` texts (the seed rubric, the reflection prompt) may contain such tokens without harm:
    tokens they contain are never flagged. `rejected` records each rejected candidate."""

    training_texts: Iterable[str]
    allowed: Iterable[str] = ()
    rejected: list[dict] = field(default_factory=list)

    def __post_init__(self):
        allowed_text = "\n".join(self.allowed)
        allowed = {token for _, token in specific_tokens(allowed_text)}
        training = set()
        for text in self.training_texts:
            training |= specific_tokens(text)
        self._training = {token: kind for kind, token in training if token not in allowed}

    def leaks(self, rubric: str) -> list[tuple[str, str]]:
        """The training-specific tokens `rubric` contains, as sorted (kind, token) pairs."""
        return sorted((kind, token) for kind, token in specific_tokens(rubric)
                      if self._training.get(token) is not None)

    def check(self, rubric: str, where: str = "") -> bool:
        """True if `rubric` is clean; otherwise records the rejection and returns False."""
        leaks = self.leaks(rubric)
        if leaks:
            self.rejected.append({"where": where, "leaks": [f"{kind}: {token}" for kind, token in leaks[:10]],
                                  "n_leaks": len(leaks)})
        return not leaks
