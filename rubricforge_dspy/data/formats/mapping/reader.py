"""Reading data through a mapping: the reader protocol of the formats (`make_reader`) and `iter_mapped`."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import LabelRule, Trajectory, TrajectoryFormatError
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._records import IdSet
from rubricforge_dspy.data.formats._registry import format_named, register_format
from rubricforge_dspy.data.formats.mapping.build import Converter
from rubricforge_dspy.data.formats.mapping.functions import set_record
from rubricforge_dspy.data.formats.mapping.native import jmespath_false
from rubricforge_dspy.data.formats.mapping.source import file_name, iter_records
from rubricforge_dspy.data.formats.mapping.spec import LabelSpec, Mapping, load_mapping

if TYPE_CHECKING:
    from rubricforge_dspy.data.formats import LoadReport

logger = logging.getLogger(__name__)
_RECORD_ERRORS = (ValueError, TypeError, KeyError, AttributeError)


@dataclass
class MapStats:
    """What a mapped read saw: the records matched (and read), per field the records in which it resolved to
    nothing (``empty``; field names as in the mapping, ``steps.observation``, ``label``...), and the records
    or files that could not be parsed at all (``unreadable``; each is also an error in the load)."""

    records: int = 0
    empty: Counter[str] = field(default_factory=Counter)
    unreadable: int = 0  # records (or whole files) that could not even be parsed: never reached a field
    filtered: int = 0  # records left out by ``records.filter`` (read, not converted, not errors)
    audit: bool = False  # count the error flag against the output text (`flags`), keep raw label values
    flags: Counter[str] = field(default_factory=Counter)  # `Converter.flags`, with `audit`

    def empty_share(self, name: str) -> float:
        """The share of records in which field `name` resolved to nothing (0 when no record was seen)."""
        return self.empty[name] / self.records if self.records else 0.0


def _as_mapping(mapping: Mapping | str | Path) -> Mapping:
    return mapping if isinstance(mapping, Mapping) else load_mapping(mapping)


def read_mapped(path: Path, mapping: Mapping, rule: LabelSpec | None = None,
                stats: MapStats | None = None) -> Iterator[tuple[Any, Trajectory | TrajectoryFormatError]]:
    """``(record index, Trajectory | TrajectoryFormatError)`` of every record under `path`, as the shipped
    readers yield them (a bad record is an error naming the file and record, never raised here).

    Args:
        path: a data file, or a folder of them (the mapping's glob).
        mapping: the `Mapping`.
        rule: a `LabelRule` overriding the mapping's reward rule (None: the mapping's own).
        stats: filled with the records matched and the empty-field counts.
    """
    stats = stats if stats is not None else MapStats()
    converter = Converter(mapping, rule, audit=stats.audit)
    path = Path(path)
    folder = path.is_dir()
    root = path if folder else path.parent
    last: tuple[Path | None, str] = (None, "")
    keep = mapping.record_filter
    try:
        for file, index, key, default_id, value, keys in iter_records(path, mapping):
            if isinstance(value, TrajectoryFormatError):
                stats.unreadable += 1
                yield index, value
                continue
            record = index if mapping.source == "jsonl" else key
            if file is not last[0]:
                last = (file, file_name(file, root, folder))
            name = last[1]
            try:
                if keep is not None:
                    set_record(name, index, key, keys)
                    if jmespath_false(keep(value, key, name, 0, index)):
                        stats.filtered += 1
                        continue
                yield record, converter.convert(value, key, file, index, default_id, name, keys)
            except _RECORD_ERRORS as exc:  # EvaluationLimitError included: an InputError is a ValueError
                yield record, TrajectoryFormatError(str(file), record, f"{exc} (mapping {mapping.file})")
            except RecursionError:  # data nest at most MAX_STREAM_DEPTH levels; a safety net all the same
                yield record, TrajectoryFormatError(str(file), record, "nested too deeply for the mapping to read "
                                                                      f"(mapping {mapping.file})")
    finally:
        stats.records += converter.records
        stats.empty.update(converter.empty)
        stats.flags.update(converter.flags)


@dataclass(frozen=True)
class MappedFormat:
    """A mapping as a format: the fields a format record has (``name``, ``sniff``, ``read``, ``label_rule``),
    so the registry holds it beside the shipped formats and the plugins. A mapped format is chosen
    explicitly (``--map``), never detected: `sniff` is False for every file.

    Attributes:
        mapping: the `Mapping`; name, label_rule: its name and label rule.
    """

    mapping: Mapping

    @property
    def name(self) -> str:
        return self.mapping.name

    @property
    def label_rule(self) -> LabelSpec | None:
        return self.mapping.label_rule

    def sniff(self, path: PathArg) -> bool:
        """Always False: data are read through a mapping only when it is named."""
        return False

    def read(self, path: PathArg, rule: LabelSpec | None = None
             ) -> Iterator[tuple[Any, Trajectory | TrajectoryFormatError]]:
        """`read_mapped` of `path` (the formats' reader signature)."""
        return read_mapped(Path(path), self.mapping, rule)

    @classmethod
    def of(cls, mapping: Mapping | str | Path) -> "MappedFormat":
        """The format of a `Mapping` or of a mapping file."""
        return cls(_as_mapping(mapping))

    def as_format(self) -> Format:
        """The registry's `Format` record of this mapping (``origin`` ``mapping (<file>)``, never sniffed, no
        suffix for directory scans: the loaders read a mapped format's paths through `iter_mapped`)."""
        return Format(name=self.name, read=make_reader(self.mapping), sniff=None,
                      label_rule=self.label_rule,  # type: ignore[arg-type]  # Format.label_rule too narrow
                      extensions=(), description=f"a {self.name} log read through the mapping {self.mapping.file}",
                      origin=f"mapping ({self.mapping.file})", mapping=self.mapping)


def register_mapping(mapping: Mapping | str | Path) -> Format:
    """Register a mapping as a format, so every loader reads it by name (``format=<its name>``; the command
    line's ``--map``) and `formats` lists it. Registering the same mapping file again returns the record held.

    Args:
        mapping: a `Mapping` or the path of a mapping file.

    Returns:
        The registered `Format` (``origin`` ``mapping (<file>)``, ``mapping`` the `Mapping`).

    Raises:
        MappingError: the mapping file is invalid (names the key).
        InputError: another format (built-in, plugin, another mapping) has the mapping's name.
    """
    mapping = _as_mapping(mapping)
    held = format_named(mapping.name)
    if held is not None and held.mapping is not None and held.mapping == mapping:
        return held
    return register_format(MappedFormat(mapping).as_format())


def make_reader(mapping: Mapping | str | Path) -> Callable[..., ReadResults]:
    """A reader with the formats' signature ``read(path, rule=None)`` for a mapping (what the format
    registry holds for a mapping format)."""
    mapping = _as_mapping(mapping)

    def read(path: Path, rule: LabelSpec | None = None) -> ReadResults:
        return read_mapped(path, mapping, rule)

    read.__doc__ = f"Read {mapping.name} records through the mapping {mapping.file}."
    return read


def iter_mapped(path: PathArg | Iterable[PathArg], mapping: Mapping | str | Path, *,
                label_threshold: LabelRule | str | float | None = None, on_error: str = "raise",
                report: LoadReport | None = None, stats: MapStats | None = None) -> Iterator[Trajectory]:
    """The trajectories of a data file or folder read through a mapping, streamed: JSON Lines line by line,
    a JSON array (or a dict of records) element by element.

    Args:
        path: a data file, a folder of them (matched with the mapping's glob), or a list of those.
        mapping: a `Mapping` or the path of a mapping file.
        label_threshold: None for the mapping's own label rule; a reward rule (``">=1"``, ``0.5``) overrides
            it for a mapping that labels from the reward.
        on_error: ``"raise"`` the first bad record (`TrajectoryFormatError` naming the file and record), or
            ``"skip"`` it and list it in ``report.skipped``.
        report: a `LoadReport` to fill (loaded, skipped, label rules); a new one when None.
        stats: a `MapStats` to fill with the records matched and the empty-field counts.

    Yields:
        `Trajectory` records, ids unique (a repeated id is an error naming the record).

    Raises:
        TrajectoryFormatError: with ``on_error="raise"``, the first bad record.
        MappingError: the mapping file is invalid (names the key).
        InputError: an unknown `on_error`, or a reward threshold for a mapping that labels from a value set.
    """
    from rubricforge_dspy.core.trajectory import parse_label_rule
    from rubricforge_dspy.data.formats import LoadReport

    if on_error not in ("raise", "skip"):
        raise InputError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    mapping = _as_mapping(mapping)
    report = report if report is not None else LoadReport()
    stats = stats if stats is not None else MapStats()
    rule = None if label_threshold is None else parse_label_rule(label_threshold)
    seen = IdSet()

    def fail(exc: TrajectoryFormatError) -> None:
        if on_error == "raise":
            raise exc
        report.skipped.append((exc.file, exc.record, exc.problem))

    rule_text = str(rule or mapping.label_rule or "unlabeled")
    report.label_rules.setdefault(mapping.name, rule_text)
    for one in ([path] if isinstance(path, (str, os.PathLike)) else list(path)):
        for index, result in read_mapped(Path(one), mapping, rule, stats):
            if isinstance(result, TrajectoryFormatError):
                fail(result)
            elif not seen.add(result.id):
                fail(TrajectoryFormatError(result.source.file, index, f"duplicate trajectory id {result.id!r}"))
            else:
                report.loaded += 1
                object.__setattr__(result, "hidden", {**result.hidden, "label_rule": rule_text})
                yield result
    _warn_empty(mapping, stats)


def _warn_empty(mapping: Mapping, stats: MapStats) -> None:
    """Log every field that resolved to nothing in some record (`check_mapping` reports them in full)."""
    if stats.filtered:
        logger.info("mapping %s: records.filter left out %d of %d records", mapping.file, stats.filtered,
                    stats.records + stats.filtered)
    for name, count in sorted(stats.empty.items()):
        logger.warning("mapping %s: field '%s' resolved to nothing in %d of %d records", mapping.file, name, count,
                       stats.records)
