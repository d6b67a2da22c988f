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
        if self.reward is None:  # the readers file an entry with neither label nor reward as blank
            raise InputError(f"the label entry of line {self.line} has neither a label nor a reward")
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
    # several labelers per id (a labeler column): id -> {labeler: label, None when the labeler's value was a
    # skip value such as "Unsure"}, in file order; empty for a file with one row per id
    ratings: dict[str, dict[str, int | None]] = field(default_factory=dict)
    resolve: str = "first"  # the rule that chose each id's label among its labelers (`data.labels.RESOLVE_RULES`)
    disagreements: list[str] = field(default_factory=list)  # ids whose labelers gave different labels
    unresolved: dict[str, str] = field(default_factory=dict)  # id -> why the rule gave no label (also in unlabeled)
    skipped_values: int = 0  # rows whose value the --label-values map to "skip" (no label, counted)

    def summary(self) -> str:
        text = f"{self.path} ({self.kind}): {len(self.entries)} labeled ids"
        if self.blank:
            text += f", {len(self.blank)} rows without label or reward (not joined)"
        if self.unlabeled:
            listed = len(self.unlabeled) - len(self.unresolved)
            if listed:
                text += (f", {listed} ids listed only as error/incomplete/submitted (outcome unknown, "
                         "not labeled)")
        if self.skipped_values:
            text += f", {self.skipped_values} rows with a skip value (no label)"
        if self.ratings:
            text += (f"; {len({who for r in self.ratings.values() for who in r})} labelers, "
                     f"{len(self.disagreements)} ids where they disagree, {len(self.unresolved)} left without a "
                     f"label by --label-resolve {self.resolve}")
        if self.torn:
            text += (f", {len(self.torn)} torn lines (a write cut short; line "
                     f"{', '.join(map(str, self.torn[:LISTED]))}) not read")
        return text
