"""The `Format` record (and the `FileSample` its sniffers read): what one trajectory format is, without the
registry that holds them (`_registry`) or the plugins that bring some (`plugins`), so both can use it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import ANY_POSITIVE_REWARD, LabelRule, Trajectory, TrajectoryFormatError
from rubricforge_dspy.data.formats._json_stream import first_json_lines, read_prefix

__all__ = ["Reader", "ReadResults", "SNIFF_LINES", "FileSample", "Format", "ABANDONED"]

ABANDONED = "rubricforge_abandoned_plugin_call"  # set on a plugin's thread that was waited for too long (`plugins`)

Reader = Callable[[Path, LabelRule], Iterator[tuple[Any, Any]]]
"""``read(path, label_rule)`` yields ``(record_index, Trajectory | TrajectoryFormatError)`` for each record."""
ReadResults = Iterator[tuple[int | str | None, Trajectory | TrajectoryFormatError]]
"""What a built-in format's ``read`` yields: ``(record_index, Trajectory | TrajectoryFormatError)``."""

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
SNIFF_LINES = 5  # JSON lines a record sniffer sees


@dataclass(frozen=True)
class FileSample:
    """What format sniffers see of a file: its path, the start of its text and its first JSON lines.

    Attributes:
        path: The file.
        head: Its first MiB as text, without a leading byte order mark or white space.
    """

    path: Path
    head: str

    @classmethod
    def of(cls, path: Path) -> "FileSample":
        """The sample of a text file (its first MiB is read once)."""
        return cls(path, read_prefix(path).lstrip("\ufeff \t\r\n"))

    @property
    def is_array(self) -> bool:
        """The text starts with ``[`` (a JSON array)."""
        return self.head.startswith("[")

    @property
    def is_object(self) -> bool:
        """The text starts with ``{`` (a JSON object, or JSON Lines)."""
        return self.head.startswith("{")

    @property
    def is_json(self) -> bool:
        """The text starts as a JSON array or object."""
        return self.is_array or self.is_object

    @cached_property
    def lines(self) -> list[dict[str, Any]]:
        """The first parseable JSON objects among the file's first lines (none unless it starts with ``{``)."""
        return first_json_lines(self.path, limit=SNIFF_LINES) if self.is_object else []


@dataclass(frozen=True)
class Format:
    """A trajectory format: everything the loaders know about it, declared once (``FORMAT = Format(...)``
    at the bottom of its module) and registered with `register_format`.

    Attributes:
        name: The name users pass as ``format=`` (lower case, digits, ``_``).
        read: ``read(path, label_rule)`` yields ``(record_index, Trajectory | TrajectoryFormatError)``;
            a bad record is yielded as an error naming the file and the record, never raised.
        sniff: ``sniff(sample)`` is True when a `FileSample` is a document of this format (None: the
            format is read only when asked for by name, or through `sniff_record`).
        sniff_record: ``sniff_record(obj)`` is True when one JSON line (a dict) is a record of this
            format: JSON Lines formats; tried before any `sniff`.
        label_rule: The rule that turns a record's reward into a label (`default_label_rule`); a mapped
            format's may be a value set on a field (``mapping.ValueSetRule``), and None means the format
            gives labels itself.
        priority: Order of sniffing, lower first (ties: registration order). Built-in formats use
            10..140; the generic JSONL is 10, since ``rubricforge convert`` writes it and its records
            carry the source's tags.
        extensions: File suffixes a directory scan opens for this format.
        binary_extensions: Suffixes of a non-text form (an Inspect ``.eval`` zip): a file with one is
            sniffed only by the formats that claim it, and is an error when none recognises it.
        description: A short phrase naming the format for messages ("an Inspect AI log ...").
        count: An optional faster reader yielding `TrajectoryCounts` instead of trajectories (the
            generic JSONL counts without building steps); by default trajectories are read and counted.
        origin: Where the format comes from (set by `register_format`): ``built-in``,
            ``plugin (<distribution>)``, ``mapping (<file>)`` or ``registered (<module>)``.
        mapping: The `Mapping` of a mapped format (None for any other): the loaders read the paths given
            through ``mapping.iter_mapped`` (a folder as the mapping's glob says, never scanned or sniffed).
    """

    name: str
    read: Reader
    sniff: Callable[[FileSample], bool] | None = None
    sniff_record: Callable[[dict[str, Any]], bool] | None = None
    label_rule: LabelRule = ANY_POSITIVE_REWARD
    priority: int = 100
    extensions: tuple[str, ...] = (".json",)
    binary_extensions: tuple[str, ...] = ()
    description: str = ""
    count: Reader | None = field(default=None, repr=False)
    origin: str = field(default="", compare=False)
    mapping: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name) or self.name == "auto":
            raise InputError(f"format name {self.name!r} must be lower case letters, digits and '_' (not 'auto')")
        for what in ("read", "sniff", "sniff_record", "count"):
            value = getattr(self, what)
            if value is not None and not callable(value):
                raise InputError(f"format {self.name!r}: {what} must be callable, got {value!r}")
        if self.read is None:
            raise InputError(f"format {self.name!r} has no read function")
        for suffix in (*self.extensions, *self.binary_extensions):
            if not (isinstance(suffix, str) and suffix.startswith(".") and len(suffix) > 1):
                raise InputError(f"format {self.name!r}: extension {suffix!r} must start with '.'")
