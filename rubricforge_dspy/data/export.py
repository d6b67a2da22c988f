"""`rubricforge convert`: write loaded trajectories as the generic JSONL (docs/FORMAT.md), so a user can
read and edit exactly what the judge will read, and load it back unchanged.

Each record holds the observable steps as chat messages (`loaders.jsonl.to_record`), the reward and
label (``null`` for an unlabeled trajectory), and the loader's hidden fields under
``metadata["hidden"]`` (never rendered; the system prompt travels as a ``system`` message). A generic
JSONL input keeps its own ``metadata`` as it was, so converting a converted file changes nothing.
Labels are written as explicit ``label`` values, so the file keeps them whatever label rule later
loads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.formats.jsonl import to_record, write_records

__all__ = ["HIDDEN_KEY", "record_of", "convert_trajectories"]

HIDDEN_KEY = "hidden"  # metadata key holding the source loader's hidden fields
_NOT_COPIED = ("system_prompt", "metadata", "label_rule", "label_source", "label_from_reward")


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def record_of(trajectory: Trajectory) -> dict[str, Any]:
    """One generic record of `trajectory`, labels and hidden fields included (see the module docstring)."""
    hidden = trajectory.hidden
    if hidden.get("format") == "jsonl":
        metadata = dict(hidden.get("metadata") or {})
    else:
        metadata = {HIDDEN_KEY: _json_safe({k: v for k, v in hidden.items() if k not in _NOT_COPIED})}
    return to_record(trajectory, reward=trajectory.reward, label=trajectory.label, metadata=metadata or None)


def convert_trajectories(trajectories: Iterable[Trajectory], out_path: PathArg) -> int:
    """Write `trajectories` to a new generic JSONL file; returns how many were written."""
    return write_records((record_of(t) for t in trajectories), out_path)
