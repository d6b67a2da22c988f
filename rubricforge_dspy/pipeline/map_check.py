"""`rubricforge map check`: a mapping tried on data before any judge reads it.

Reads the data through the mapping (every record, streamed), and reports how many records matched and
loaded, the records skipped and why, the first trajectory rendered exactly as the judge reads it, the
labels it gave, and, per mapped field, in how many records it resolved to nothing; a field empty in more
than `empty_share` of the records is flagged. It lives here, above the data layer, because it renders.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.data.formats import LoadReport
from rubricforge_dspy.data.formats.mapping.reader import MapStats, iter_mapped
from rubricforge_dspy.data.formats.mapping.spec import Mapping, load_mapping
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory

_SHOWN_SKIPS = 10


@dataclass
class MapCheckReport:
    """What `check_mapping` found.

    Attributes:
        mapping: the mapping file; name: the format name it defines; data: the data path.
        records: records the mapping's ``records`` matched and read; unreadable: records or files that could
            not be parsed (also in `skipped`); loaded: trajectories built.
        skipped: ``(file, record, problem)`` of every record that could not become a trajectory.
        first_id, first_task_id, first_label, first_render: the first trajectory, rendered as the judge
            reads it (None when nothing loaded).
        labels: label -> count over the loaded trajectories (None: unlabeled).
        label_rule: the rule that made the labels (``unlabeled`` when the mapping gives none).
        fields: every mapped field; empty: field -> records in which it resolved to nothing.
        empty_share: the share above which a field is flagged.
    """

    mapping: str
    name: str
    data: str
    records: int = 0
    unreadable: int = 0
    loaded: int = 0
    skipped: list = field(default_factory=list)
    first_id: str | None = None
    first_task_id: str | None = None
    first_label: int | None = None
    first_render: str | None = None
    labels: Counter = field(default_factory=Counter)
    label_rule: str = "unlabeled"
    fields: list = field(default_factory=list)
    empty: dict = field(default_factory=dict)
    empty_share: float = 0.5

    @property
    def mostly_empty(self) -> list[tuple[str, int]]:
        """``(field, records)`` of the fields that resolved to nothing in more than `empty_share` of the records."""
        if not self.records:
            return []
        return [(name, n) for name, n in sorted(self.empty.items()) if n / self.records > self.empty_share]

    @property
    def ok(self) -> bool:
        """True when records matched, every one loaded, and no field is mostly empty."""
        return self.loaded > 0 and not self.skipped and not self.mostly_empty

    def format(self) -> str:
        """The report as text: counts, skipped records, empty fields, then the first record as the judge reads it."""
        lines = [f"mapping {self.mapping} (format {self.name!r}) on {self.data}",
                 f"records matched: {self.records}"
                 + (f" (and {self.unreadable} unreadable)" if self.unreadable else "")
                 + f"; loaded: {self.loaded}; skipped: {len(self.skipped)}",
                 f"label rule: {self.label_rule}; labels: " + (", ".join(
                     f"{'unlabeled' if k is None else k}={v}" for k, v in sorted(self.labels.items(), key=str))
                     or "none")]
        for file, record, problem in self.skipped[:_SHOWN_SKIPS]:
            lines.append(f"  skipped {file}, record {record}: {problem}")
        if len(self.skipped) > _SHOWN_SKIPS:
            lines.append(f"  ... and {len(self.skipped) - _SHOWN_SKIPS} more skipped")
        lines.append(f"fields empty (resolved to nothing) per {self.records} records:")
        for name in self.fields:
            n = self.empty.get(name, 0)
            flag = "  <- empty in more than {:.0%}".format(self.empty_share) \
                if self.records and n / self.records > self.empty_share else ""
            lines.append(f"  {name}: {n}{flag}")
        if self.first_render is None:
            lines.append("no record loaded: nothing to render")
        else:
            lines.append(f"first trajectory: id {self.first_id!r}, task {self.first_task_id!r}, "
                         f"label {self.first_label!r} (the label is not shown to the judge)")
            lines.append("--- as the judge reads it ---")
            lines.append(self.first_render)
        lines.append("OK" if self.ok else "NOT OK: " + "; ".join(self._problems()))
        return "\n".join(lines)

    def _problems(self) -> list[str]:
        problems = []
        if not self.loaded:
            problems.append("no trajectory loaded")
        if self.skipped:
            problems.append(f"{len(self.skipped)} records skipped")
        if self.mostly_empty:
            problems.append("mostly empty: " + ", ".join(name for name, _ in self.mostly_empty))
        return problems


def check_mapping(data: PathArg, mapping: Mapping | str | Path, empty_share: float = 0.5,
                  render_config: RenderConfig | None = None) -> MapCheckReport:
    """Try a mapping on data: counts, skipped records, empty fields and the first record as the judge reads it.

    Args:
        data: a data file or folder.
        mapping: a `Mapping` or a mapping file.
        empty_share: flag fields that resolved to nothing in more than this share of the records (0 to 1).
        render_config: the render's sizes (default `RenderConfig()`, what the judge reads by default).

    Returns:
        The `MapCheckReport` (``format()`` gives the text ``rubricforge map check`` prints).

    Raises:
        MappingError: the mapping file is invalid (names the key).
        TrajectoryFormatError: the data path does not exist.
        InputError: `empty_share` is not between 0 and 1.
    """
    from rubricforge_dspy.core.errors import InputError

    if not 0 <= empty_share <= 1:
        raise InputError(f"empty_share must be between 0 and 1, got {empty_share!r}")
    mapping = mapping if isinstance(mapping, Mapping) else load_mapping(mapping)
    report, stats = LoadReport(), MapStats()
    check = MapCheckReport(mapping=mapping.file, name=mapping.name, data=str(data), empty_share=empty_share,
                           label_rule=str(mapping.label_rule or "unlabeled"), fields=mapping.field_names())
    for trajectory in iter_mapped(data, mapping, on_error="skip", report=report, stats=stats):
        check.labels[trajectory.label] += 1
        if check.first_render is None:
            check.first_id, check.first_task_id, check.first_label = \
                trajectory.id, trajectory.task_id, trajectory.label
            check.first_render = render_trajectory(trajectory, render_config or RenderConfig())
    check.records, check.loaded, check.skipped = stats.records, report.loaded, list(report.skipped)
    check.unreadable = stats.unreadable
    check.empty = dict(stats.empty)
    for name in check.empty:
        if name not in check.fields:
            check.fields.append(name)
    return check
