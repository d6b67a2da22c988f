"""Check a whole input before any money is spent on it, in one streaming pass.

`scan_input` reads every record of the input (files, directories or lists of them) through
`iter_trajectories`, keeping only ids, so a malformed record, a repeated id or an empty input is
found in seconds, before the first LM call of `rubricforge judge` (today's alternative: finding it
when the judge reaches it, after paying for every verdict before it). `require_trajectories` is the
one wording of "this input holds no trajectory" for every command that reads trajectories.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule, Trajectory
from rubricforge_dspy.data.formats import LoadReport, PathLike, iter_trajectories

__all__ = ["EmptyInputError", "InputScan", "scan_input", "require_trajectories"]


class EmptyInputError(InputError):
    """The input holds no trajectory (an empty file, a directory without trajectory files, or every
    record skipped); the message names the input. The command line exits 2."""


@dataclass
class InputScan:
    """What `scan_input` found: how many trajectories, and with a limit which label ids lie beyond it."""

    trajectories: int = 0
    selected: int = 0  # trajectories within the limit (all of them without one)
    beyond_limit_labeled: set[str] = field(default_factory=set)  # ids past the limit that the label file names
    report: LoadReport = field(default_factory=LoadReport)


def _names(paths: PathLike | Iterable[PathLike]) -> str:
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return ", ".join(str(p) for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def require_trajectories(count: int, paths: PathLike | Iterable[PathLike], report: LoadReport | None = None) -> None:
    """Raise `EmptyInputError` naming `paths` when `count` is 0 (with what was skipped or ignored).

    Args:
        count: trajectories loaded from `paths`.
        paths: the input file(s) or directory(ies), as given.
        report: the load's `LoadReport`, to say how many records were skipped and files ignored.

    Raises:
        EmptyInputError: `count` is 0.
    """
    if count:
        return
    why = []
    if report is not None and report.skipped:
        why.append(f"{len(report.skipped)} record(s) skipped as malformed (first: {report.skipped[0][0]}, "
                   f"record {report.skipped[0][1]}: {report.skipped[0][2]})")
    if report is not None and report.ignored_files:
        why.append(f"{len(report.ignored_files)} file(s) ignored (e.g. {report.ignored_files[0][0]}: "
                   f"{report.ignored_files[0][1]})")
    raise EmptyInputError(f"{_names(paths)}: no trajectories found" + (f" ({'; '.join(why)})" if why else "")
                          + "; check --data and --format (docs/FORMAT.md lists the formats read)")


def scan_input(paths: PathLike | Iterable[PathLike], *, format: str = "auto",
               label_threshold: float | str | LabelRule | None = None, on_error: str = "raise",
               limit: int | None = None, label_ids: Iterable[str] | None = None,
               report: LoadReport | None = None,
               each: Callable[[Trajectory], None] | None = None) -> InputScan:
    """Read the whole input once, keeping no trajectory: every record must parse and convert, ids unique.

    With `each`, this one pass is also the pass that uses the trajectories: `rubricforge judge` renders and
    spills each one here (`apply.stream.run_judge_file`), so the input is parsed once, yet every check is
    done before the first LM call.

    Args:
        paths: a file, a directory or a list of them (as `iter_trajectories` takes).
        format: the input format, or "auto".
        label_threshold: the label rule (as `iter_trajectories`).
        on_error: "raise" stops at the first bad record; "skip" counts it in ``report``.
        limit: the run considers only the first `limit` distinct ids.
        label_ids: the ids of a label file; those of trajectories past `limit` are collected so the
            join report does not call them unmatched.
        report: the `LoadReport` to fill (default: a new one, ``scan.report``).
        each: called with each trajectory within `limit`, in input order.

    Returns:
        The `InputScan`.

    Raises:
        TrajectoryFormatError: with ``on_error="raise"``, the first malformed record or repeated id
            (naming the file and record).
        EmptyInputError: no trajectory at all.
    """
    scan = InputScan() if report is None else InputScan(report=report)
    wanted = set(label_ids) if label_ids is not None else set()
    for trajectory in iter_trajectories(paths, format=format, label_threshold=label_threshold, on_error=on_error,
                                        report=scan.report):
        scan.trajectories += 1
        if limit is None or scan.selected < limit:
            scan.selected += 1
            if each is not None:
                each(trajectory)
        elif trajectory.id in wanted:
            scan.beyond_limit_labeled.add(trajectory.id)
    require_trajectories(scan.trajectories, paths, scan.report)
    return scan
