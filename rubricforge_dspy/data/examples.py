"""Trajectories as DSPy data: ``dspy.Example(trajectory=<Trajectory>, label=..., reward=...,
task_id=..., id=...).with_inputs("trajectory")``.

A DSPy user's data is a list of `dspy.Example`s: `load_examples` loads any supported format (through
`load_trajectories` and, with ``labels=``, the `join_labels` join) into them, and `to_examples` converts
trajectories already loaded. The only input field is ``trajectory`` (the whole `Trajectory` record;
the judge renders its observable steps, never its ``label``, ``reward`` or ``hidden`` fields); ``label``,
``reward``, ``task_id`` and ``id`` are the example's labels (``Example.labels()``), for metrics and
optimizers only.

An unlabeled trajectory (``label=None``) becomes an Example with ``label=None`` and ``reward=None``:
the caller decides (judging needs no label; inducing or certifying does). ``.report`` counts them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import dspy

from rubricforge_dspy.core.trajectory import LabelRule, Trajectory, require_labels
from rubricforge_dspy.data.formats import LoadReport, MappingLike, PathLike, load_trajectories
from rubricforge_dspy.data.label_checks import LabelTally
from rubricforge_dspy.data.labels import JoinReport, LabelFile, join_labels

__all__ = ["INPUT_FIELD", "Examples", "ExamplesReport", "load_examples", "to_examples"]

INPUT_FIELD = "trajectory"  # the one input field of every example (``Example.inputs()``)


@dataclass
class ExamplesReport:
    """What became of the data: the load's `LoadReport` (None for trajectories loaded elsewhere), the
    label join's `JoinReport` (None without ``labels=``), and a `LabelTally` of the examples' labels
    (``labeled``, ``unlabeled``, ``positives``, ``negatives``; ``warnings()`` for one-class labels or
    graded rewards labeled by ``reward > 0``)."""

    load: LoadReport | None = None
    join: JoinReport | None = None
    tally: LabelTally = field(default_factory=LabelTally)

    @property
    def labeled(self) -> int:
        return self.tally.labeled

    @property
    def unlabeled(self) -> int:
        return self.tally.unlabeled

    def summary(self) -> str:
        parts = [self.load.summary()] if self.load is not None else []
        if self.join is not None:
            parts.append(self.join.summary())
        parts.append(f"{self.tally.trajectories} examples: {self.tally.labeled} labeled "
                     f"({self.tally.positives} passed), {self.tally.unlabeled} unlabeled (label None)")
        return "; ".join(parts)


class Examples(list[dspy.Example]):
    """A ``list[dspy.Example]`` (give it to ``dspy.Evaluate``, an optimizer's ``trainset``, a loop) that
    also carries the `ExamplesReport` as ``.report``. Slicing gives a plain list."""

    def __init__(self, items: Iterable[dspy.Example] = (), report: ExamplesReport | None = None):
        super().__init__(items)
        self.report = report if report is not None else ExamplesReport()

    def labeled(self) -> list[dspy.Example]:
        """The examples whose ``label`` is 0 or 1, in order (``len(self) - len(...)`` were unlabeled)."""
        return [ex for ex in self if ex.label is not None]

    def __repr__(self) -> str:
        return f"Examples({len(self)}; {self.report.summary()})"


def _example(trajectory: Trajectory) -> dspy.Example:
    return dspy.Example(trajectory=trajectory, label=trajectory.label,
                        reward=None if trajectory.label is None else trajectory.reward,
                        task_id=trajectory.task_id, id=trajectory.id).with_inputs(INPUT_FIELD)


def to_examples(trajectories: Iterable[Trajectory], *, require_label: bool = False) -> Examples:
    """Trajectories already loaded, as `dspy.Example`s (module docstring).

    Args:
        trajectories: `Trajectory` records, e.g. what `load_trajectories` or `join_labels` returned (their
            ``.report`` becomes the examples' ``report.load`` / ``report.join``).
        require_label: refuse unlabeled trajectories instead of converting them with ``label=None``.

    Returns:
        `Examples`: one ``dspy.Example(trajectory=t, label=t.label, reward=t.reward, task_id=t.task_id,
        id=t.id).with_inputs("trajectory")`` per trajectory, in order, with ``.report``.

    Raises:
        TypeError: an item is not a `Trajectory` (the message gives its index).
        UnlabeledError: with ``require_label``, some trajectory has ``label=None`` (an `InputError` naming
            the first one's id, file and record).
    """
    items = list(trajectories)
    for index, item in enumerate(items):
        if not isinstance(item, Trajectory):
            raise TypeError(f"to_examples: item {index} is a {type(item).__name__}, not a Trajectory; load "
                            "files with load_examples or load_trajectories")
    if require_label:
        require_labels(items, "to_examples(require_label=True)")
    previous = getattr(trajectories, "report", None)
    report = ExamplesReport(load=previous if isinstance(previous, LoadReport) else None,
                            join=previous if isinstance(previous, JoinReport) else None)
    examples = Examples(report=report)
    for trajectory in items:
        report.tally.add(trajectory)
        examples.append(_example(trajectory))
    return examples


def load_examples(paths: PathLike | Iterable[PathLike], *, format: str | None = None,
                  labels: LabelFile | PathLike | None = None, label_rule: float | str | LabelRule | None = None,
                  on_error: str = "raise", require_label: bool = False,
                  mapping: MappingLike | None = None) -> Examples:
    """Load trajectory files of any supported format as `dspy.Example`s, labels joined.

    Args:
        paths: a file, a directory (every known-format file in it, sorted) or a list of those.
        format: a name in `FORMATS`; None (or "auto") detects each file's format from its content.
        labels: a label file joined by trajectory id (CSV ``id,label|reward``, JSONL or a SWE-bench
            ``results.json``; docs/FORMAT.md), as ``--labels`` does; None keeps the data's own labels.
        label_rule: how rewards become labels, for the data and the label file: a number T (``reward >
            T``), ``">=T"``, or a `LabelRule`; None applies each format's own rule.
        on_error: "raise" at the first bad record, or "skip" it (listed in ``report.load.skipped``).
        require_label: refuse unlabeled trajectories (after the join) instead of giving ``label=None``.
        mapping: a mapping file or `Mapping`: read `paths` through this declarative mapping (docs/MAPPING.md)
            instead of a format (not together with `format`).

    Returns:
        `Examples` (a ``list[dspy.Example]``, inputs ``("trajectory",)``) whose ``.report`` holds the
        `LoadReport`, the `JoinReport` (with ``labels``) and the label tally.

    Raises:
        TrajectoryFormatError: a missing path, a file of no known format, or (``on_error="raise"``) a bad
            record; the message names the file and record.
        LabelFileError: the label file cannot be read (naming the file and line).
        UnlabeledError: with ``require_label``, some trajectory has no label (naming the first one).
        InputError: an unknown `format`, `on_error` or `label_rule`, or both `format` and `mapping`.
        MappingError: the mapping file is invalid (the message names the key).
    """
    loaded = load_trajectories(paths, format=format or "auto", label_threshold=label_rule,
                               on_error=on_error, mapping=mapping)
    trajectories: list[Trajectory] = loaded
    load, join = loaded.report, None
    if labels is not None:
        joined = join_labels(loaded, Path(labels) if isinstance(labels, os.PathLike) else labels, label_rule)
        trajectories, join = joined, joined.report
    examples = to_examples(trajectories, require_label=require_label)
    examples.report.load, examples.report.join = load, join
    return examples
