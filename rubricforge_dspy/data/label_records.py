"""The records of a read labels file (`LabelFile`, one `LabelEntry` per id) and its error, shared by the readers of
every labels format (`data.labels`: CSV, JSONL, SWE-bench results; `data.label_journal`: the review page's
journal), so that neither reader imports the other's module back."""

from __future__ import annotations

from dataclasses import dataclass, field

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule

__all__ = ["LabelEntry", "LabelFile", "LabelFileError", "LISTED"]

LISTED = 10  # ids shown per list in messages


class LabelFileError(InputError):
    """A label file that cannot be read; the message names the file, the line and what to do."""


@dataclass(frozen=True)
class LabelEntry:
    """One id's label and/or reward, and where it was read (``line``: 1-based line, or the list name)."""

    label: int | None
    reward: float | None
    line: int | str

    def resolve(self, rule: LabelRule) -> tuple[int, float | None]:
        """``(label, reward)``: the label as given, else the reward under ``rule``."""
        if self.label is not None:
            return self.label, self.reward
        assert self.reward is not None, "the readers file an entry with neither label nor reward as blank"
        return rule.label(self.reward), self.reward


@dataclass
class LabelFile:
    """A read label file: ``entries`` by id, plus ids listed without a usable outcome."""

    path: str
    kind: str  # "csv" | "jsonl" | "swebench"
    entries: dict[str, LabelEntry]
    blank: list[str] = field(default_factory=list)  # rows with neither label nor reward
    unlabeled: dict[str, str] = field(default_factory=dict)  # SWE-bench ids with no outcome -> the list named
    torn: list[int] = field(default_factory=list)  # a labels journal's torn lines (a write cut short), not read

    def summary(self) -> str:
        text = f"{self.path} ({self.kind}): {len(self.entries)} labeled ids"
        if self.blank:
            text += f", {len(self.blank)} rows without label or reward (not joined)"
        if self.unlabeled:
            text += (f", {len(self.unlabeled)} ids listed only as error/incomplete/submitted (outcome unknown, "
                     "not labeled)")
        if self.torn:
            text += (f", {len(self.torn)} torn lines (a write cut short; line "
                     f"{', '.join(map(str, self.torn[:LISTED]))}) not read")
        return text
