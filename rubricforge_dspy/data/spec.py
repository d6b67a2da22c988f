"""The data a command or a job reads, as one frozen record: `DataSpec`.

A `DataSpec` says where the trajectories are (``paths``), how they are read (a format name, or a mapping file
registered as one), which label rule turns rewards into labels, which labels file is joined (with its key
expression, the rule for its rewards and how its values are read), how many items are read at most, what a
malformed record does (``on_error``) and, when the traces of one session are judged as one trajectory, the
session key. The command line builds one from its data flags (`rubricforge_dspy.cli.data_options.data_spec`)
and hands it on; a library entry point takes it instead of a dozen separate parameters. It is never changed
in place: `DataSpec.replace` returns a new record (a spool of MLflow traces or of sessions is a new spec
whose ``paths`` name the spool).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule, parse_label_rule

if TYPE_CHECKING:
    from rubricforge_dspy.data.labels import LabelReading, LabelsPath

__all__ = ["DataSpec", "DataSpecError", "ON_ERROR"]

OnError = Literal["raise", "skip"]
ON_ERROR: tuple[OnError, ...] = ("raise", "skip")


class DataSpecError(InputError):
    """A `DataSpec` whose fields contradict each other or are out of range (exit 2 on the command line)."""


def _paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None) -> tuple[str, ...]:
    if paths is None:
        return ()
    if isinstance(paths, (str, os.PathLike)):
        return (os.fspath(paths),)
    return tuple(os.fspath(path) for path in paths)


@dataclass(frozen=True)
class DataSpec:
    """Where trajectories are read from and how (frozen; built once, then handed on).

    Attributes:
        paths: the trajectory files or directories, in order (``--data``); empty when a command was given
            none (it reads another source, or says what is missing).
        format: a registered format's name, or ``"auto"`` to detect it per file (``--format``); with a mapping,
            the mapping's registered name.
        mapping: the mapping file the data are read with (``--map``; docs/MAPPING.md), or None.
        label_rule: how a reward in the data becomes a label (``--label-threshold``); None: each format's own.
        labels: a labels file joined by id (``--labels``), or None.
        labels_key: the JMESPath expression giving each labels record's id (``--labels-key``); None: its ``id``.
        labels_rule: the rule for the labels file's rewards when the data carry none (a mapping without a
            reward and ``--label-threshold``); None: the data's rule.
        label_reading: how the labels file's values are read (text values, several labelers, the resolution
            rule: `data.labels.LabelReading`), or None for 0/1-like labels, one row per id.
        limit: read at most this many items (``--limit``), or None for all.
        on_error: ``"raise"`` stops at the first malformed record, ``"skip"`` skips and counts it
            (``--skip-bad``).
        session_key: group the traces of one session into one trajectory by this key (``--session-key``;
            `data.sessions`), or None.

    Raises:
        DataSpecError: an unknown ``on_error``, a negative ``limit``, an empty format or session key, or label
            options (key, rule, reading) without a labels file.
    """

    paths: tuple[str, ...] = ()
    format: str = "auto"
    mapping: str | None = None
    label_rule: LabelRule | None = None
    labels: str | None = None
    labels_key: str | None = None
    labels_rule: LabelRule | None = None
    label_reading: LabelReading | None = None
    limit: int | None = None
    on_error: OnError = "raise"
    session_key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "paths", _paths(self.paths))
        for name in ("label_rule", "labels_rule"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, LabelRule):
                try:
                    object.__setattr__(self, name, parse_label_rule(value))
                except ValueError as exc:
                    raise DataSpecError(f"DataSpec.{name}: {exc}") from None
        if self.labels is not None:
            object.__setattr__(self, "labels", os.fspath(self.labels))
        if self.on_error not in ON_ERROR:
            raise DataSpecError(f"DataSpec.on_error must be one of {', '.join(ON_ERROR)}, got {self.on_error!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 0):
            raise DataSpecError(f"DataSpec.limit must be a whole number >= 0 or None, got {self.limit!r}")
        if not isinstance(self.format, str) or not self.format:
            raise DataSpecError(f"DataSpec.format must be a format name or 'auto', got {self.format!r}")
        if self.session_key is not None and not self.session_key:
            raise DataSpecError("DataSpec.session_key must be a key expression or None, not empty")
        if not self.labels:
            given = [name for name in ("labels_key", "labels_rule", "label_reading") if getattr(self, name) is not None]
            if given:
                raise DataSpecError(f"DataSpec.{', '.join(given)} say how to read a labels file, but labels is "
                                    "None: give the labels file")

    @property
    def labels_path(self) -> LabelsPath | None:
        """The labels file as a `data.labels.LabelsPath` carrying its key, rule and reading (None without one)."""
        if not self.labels:
            return None
        from rubricforge_dspy.data.labels import LabelsPath

        return LabelsPath(self.labels, self.labels_key, self.labels_rule, self.label_reading)

    def read_options(self) -> dict[str, Any]:
        """The keyword arguments of `data.formats.iter_trajectories` this spec stands for (``format``,
        ``label_threshold``, ``on_error``)."""
        return {"format": self.format, "label_threshold": self.label_rule, "on_error": self.on_error}

    def replace(self, **changes: Any) -> DataSpec:
        """A copy with ``changes`` (validated again); this record is never changed."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready values (label rules as their text, e.g. ``">=1"``), for a run's record."""
        return {"paths": list(self.paths), "format": self.format, "mapping": self.mapping,
                "label_rule": None if self.label_rule is None else str(self.label_rule),
                "labels": self.labels, "labels_key": self.labels_key,
                "labels_rule": None if self.labels_rule is None else str(self.labels_rule),
                "label_reading": None if self.label_reading is None else dataclasses.asdict(self.label_reading),
                "limit": self.limit, "on_error": self.on_error, "session_key": self.session_key}
