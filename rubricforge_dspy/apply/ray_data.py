"""Ray Data for judging: the optional import, the dataset of trajectories, its rows and columns.

This module imports without the ``[ray]`` extra; `ray_module` raises `MissingExtraError` when Ray Data is
not installed. Used by `apply.ray` (the driver and its workers) and `apply.ray_sglang` (the in-Ray engine).
"""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable

from rubricforge_dspy.core.errors import InputError, MissingExtraError
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.judge.fingerprint import judge_fingerprint

if TYPE_CHECKING:
    import ray

__all__ = ["ray_module", "trajectory_dataset", "row_trajectory", "column", "job_line", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'rubricforge-dspy[ray]'"


def ray_module() -> ModuleType:
    """The `ray` module with Ray Data, imported on first use (the ``[ray]`` extra is optional).

    Raises:
        MissingExtraError: Ray Data is not installed.
    """
    try:
        import ray
        import ray.data  # noqa: F401 - the part of Ray this module uses
    except ImportError as missing:
        raise MissingExtraError(f"judging on Ray needs Ray Data, which is not installed: {INSTALL_HINT} "
                                f"({type(missing).__name__}: {missing})") from missing
    module: ModuleType = ray  # typed so whether Ray's stubs are installed or not (the lint runs without the extra)
    return module


def trajectory_dataset(trajectories: Iterable[Trajectory], *, rows_per_block: int = 256,
                       rows_per_chunk: int = 10_000) -> "ray.data.Dataset":
    """A Ray Dataset of `trajectories`, one row ``{"id", "trajectory"}`` per trajectory.

    The trajectories are consumed lazily, `rows_per_chunk` at a time: each chunk goes to Ray's object
    store (which spills to disk when full) before the next is read, so the driver holds one chunk.

    Args:
        trajectories: `Trajectory` records (e.g. ``data.formats.iter_trajectories(path)``).
        rows_per_block: rows per block: the unit Ray hands to a worker, and re-executes when one dies.
        rows_per_chunk: trajectories read before they are handed to Ray.

    Returns:
        The dataset.

    Raises:
        InputError: no trajectories.
        MissingExtraError: Ray Data is not installed.
    """
    ray_lib = ray_module()
    parts: list[ray.data.Dataset] = []
    iterator = iter(trajectories)
    while True:
        rows = [{"id": t.id, "trajectory": t} for t in itertools.islice(iterator, max(1, rows_per_chunk))]
        if not rows:
            break
        parts.append(ray_lib.data.from_items(rows, override_num_blocks=max(1, -(-len(rows) // max(1, rows_per_block)))))
    if not parts:
        raise InputError("no trajectories to judge")
    return parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]


def row_trajectory(row: dict[str, Any]) -> Trajectory:
    """The `Trajectory` of a dataset row, or an `InputError` saying how to build the dataset."""
    trajectory = row.get("trajectory")
    if not isinstance(trajectory, Trajectory):
        raise InputError(f"row {row.get('id')!r}: the 'trajectory' column must hold a Trajectory "
                         f"(build the dataset with trajectory_dataset), got {type(trajectory).__name__}")
    return trajectory


def column(batch: Any, name: str) -> list[Any]:  # a Ray batch: a dict of numpy arrays or lists
    """A column of a Ray batch as a list."""
    values = batch[name]
    return values.tolist() if hasattr(values, "tolist") else list(values)


def job_line(judge: Any, lm: Any) -> dict[str, Any]:
    """What each verdict line of the job says of its judge (`core.verdict.verdict_line`'s job fields)."""
    return {"judge_fingerprint": judge_fingerprint(judge, lm).sha256,
            "program_sha256": getattr(judge, "rubric_sha256", None), "model": getattr(lm, "model", None)}
