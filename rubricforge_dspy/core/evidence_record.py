"""What a judge read of one episode: the verdict line's ``evidence`` record (`EvidenceRecord`, one definition;
`READ_MODES`), read back from a line (`line_evidence`), and the share of a set of verdicts judged on cut evidence
with the one rule for when two such shares differ (`evidence_shares`, `evidence_differs`: a certificate's and a
judging run's). Split from `core.verdict` (the verdict record and its line), which re-exports these names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["READ_MODES", "EvidenceRecord", "line_evidence", "EVIDENCE_SHARE_TOLERANCE", "evidence_shares",
           "shares_of", "evidence_differs"]

READ_MODES = ("budget", "segments", "explore")
"""How a judge read its episode: ``budget`` (one render fitted to a token budget, `evidence.render`),
``segments`` (windows that together cover every step), ``explore`` (a tool-using judge reading the steps it
chose)."""


@dataclass(frozen=True)
class EvidenceRecord:
    """What a judge really read of one episode: the verdict line's ``evidence`` field (one definition).

    Attributes:
        steps: the steps in the episode.
        whole: steps shown whole (every character of their text).
        clipped: steps shown, but cut (a ``[... N chars elided ...]`` marker or a JSON trim).
        elided: steps not shown at all (the render's ``[... N steps elided ...]`` markers add up to it).
        chars_cut: characters of the steps' text that the judge did not see (clipped or elided).
        complete: nothing was cut: the judge read the whole episode.
        read: the read mode (`READ_MODES`).
        steps_read: the 1-based step numbers read, when the mode records them (``explore``); None otherwise.
    """

    steps: int
    whole: int
    clipped: int
    elided: int
    chars_cut: int
    complete: bool
    read: str = "budget"
    steps_read: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        counts = (self.steps, self.whole, self.clipped, self.elided, self.chars_cut)
        if any(type(n) is not int or n < 0 for n in counts):
            raise ValueError(f"evidence counts are integers >= 0, got {counts}")
        if self.read not in READ_MODES:
            raise ValueError(f"evidence read mode must be one of {READ_MODES}, got {self.read!r}")
        if self.read != "explore" and self.whole + self.clipped + self.elided != self.steps:
            raise ValueError(f"whole + clipped + elided must equal steps, got {self.whole} + {self.clipped} + "
                             f"{self.elided} != {self.steps}")
        if self.complete != (self.clipped == 0 and self.elided == 0 and self.chars_cut == 0):
            raise ValueError("evidence is complete exactly when nothing was clipped, elided or cut")
        if self.steps_read is not None and any(type(i) is not int or not 1 <= i <= self.steps
                                               for i in self.steps_read):
            raise ValueError(f"steps_read are step numbers in [1, {self.steps}]")

    @classmethod
    def whole_episode(cls, steps: int, read: str = "budget") -> "EvidenceRecord":
        """The record of an episode read entirely."""
        return cls(steps=steps, whole=steps, clipped=0, elided=0, chars_cut=0, complete=True, read=read)

    def to_dict(self) -> dict[str, Any]:
        """The line's ``evidence`` object (``steps_read`` only when recorded)."""
        data: dict[str, Any] = {"steps": self.steps, "whole": self.whole, "clipped": self.clipped,
                                "elided": self.elided, "chars_cut": self.chars_cut, "complete": self.complete,
                                "read": self.read}
        if self.steps_read is not None:
            data["steps_read"] = list(self.steps_read)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EvidenceRecord":
        """The record of a line's ``evidence`` object (`to_dict`)."""
        steps_read = data.get("steps_read")
        return cls(steps=data["steps"], whole=data["whole"], clipped=data["clipped"], elided=data["elided"],
                   chars_cut=data["chars_cut"], complete=data["complete"], read=data.get("read", "budget"),
                   steps_read=None if steps_read is None else tuple(steps_read))

    def describe(self) -> str:
        """One line for a person, e.g. ``"read 16 of 103 steps; 87 elided"`` or ``"read all 12 steps"``."""
        if self.complete:
            return f"read all {self.steps} steps" + (f" ({self.read})" if self.read != "budget" else "")
        shown = len(set(self.steps_read)) if self.steps_read is not None else self.whole + self.clipped
        parts = [f"{n} {what}" for n, what in ((self.elided, "elided"), (self.clipped, "clipped")) if n]
        if self.chars_cut:
            parts.append(f"{self.chars_cut:,} characters cut")
        return f"read {shown} of {self.steps} steps; " + ", ".join(parts)


def line_evidence(record: Mapping[str, Any]) -> EvidenceRecord | None:
    """The evidence a verdict line records, or None for a line without it (an older line, another tool's, a
    stage that reads no text): such a line's evidence is unknown."""
    data = record.get("evidence")
    return EvidenceRecord.from_dict(data) if isinstance(data, Mapping) else None


# Two sets of verdicts read "the same evidence" when their shares judged on cut evidence differ by at most this
# much and both or neither have any: a heuristic threshold for a warning, not a test.
EVIDENCE_SHARE_TOLERANCE = 0.10


def evidence_shares(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the judge read for `records` (verdict lines' ``evidence``): how many on complete evidence, on cut
    evidence, unknown, and the share cut among those known (None when no line says). A certificate records these
    (`trust.certificate`), and a judging run's summary counts them (`apply.summary.BatchSummary`)."""
    complete = cut = unknown = 0
    for record in records:
        found = record.get("evidence")
        if not isinstance(found, Mapping):
            unknown += 1
        elif found.get("complete"):
            complete += 1
        else:
            cut += 1
    return shares_of(complete, cut, unknown)


def shares_of(complete: int, cut: int, unknown: int) -> dict[str, Any]:
    """`evidence_shares`' record from its counts."""
    known = complete + cut
    return {"complete": complete, "cut": cut, "unknown": unknown,
            "cut_share": round(cut / known, 4) if known else None}


def evidence_differs(earned: Mapping[str, Any] | None, applied: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """The cut shares (earned, applied) when verdicts read as `earned` says (`evidence_shares`: a certificate's)
    are applied to verdicts read as `applied` says, and the two differ: one set has verdicts on cut evidence and the
    other none, or their cut shares differ by more than `EVIDENCE_SHARE_TOLERANCE`. None when they match or either
    is unknown (the one rule of `trust.certificate.evidence_mismatch` and a judging run's summary)."""
    if not earned or not applied or earned.get("cut_share") is None or applied.get("cut_share") is None:
        return None
    was, now = float(earned["cut_share"]), float(applied["cut_share"])
    if (was > 0) == (now > 0) and abs(was - now) <= EVIDENCE_SHARE_TOLERANCE:
        return None
    return was, now
