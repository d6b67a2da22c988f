"""What the load loop keeps per trajectory: `TrajectoryCounts` (a trajectory counted without its
steps), `IdSet` (the ids seen, in bounded memory) and `redact` (credentials out of kept metadata)."""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from rubricforge_dspy.core.trajectory import Source, Trajectory

_SECRET_KEY = re.compile(r"api[_-]?key|secret|password|token$|authorization", re.IGNORECASE)


def redact(value: Any) -> Any:
    """A copy of ``value`` with credentials (``api_key`` and the like) replaced by ``"<redacted>"``."""
    if isinstance(value, dict):
        return {
            k: ("<redacted>" if isinstance(k, str) and _SECRET_KEY.search(k) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value



@dataclass
class TrajectoryCounts:
    """What counting a trajectory needs of it, without its steps: ``rubricforge stats`` reads these
    (`iter_trajectory_counts`), so a generic JSONL record is checked exactly as for a `Trajectory` but no
    `Step` is built. The fields mean what the `Trajectory` fields of the same name mean; ``hidden`` holds
    only ``format`` and the label's provenance (``label_source``, ``label_rule``), never text. A plain
    dataclass, so a labels file is joined to it as to a trajectory (`dataclasses.replace`)."""

    id: str
    task_id: str
    domain: str
    agent: str
    reward: float | None
    label: int | None
    source: Source
    trial: int | None = None
    n_steps: int = 0
    n_tool_errors: int = 0
    hidden: dict[str, Any] | None = None

    @classmethod
    def of(cls, trajectory: Trajectory) -> "TrajectoryCounts":
        """The counts of a loaded trajectory (how the formats other than the generic JSONL are counted)."""
        return cls(id=trajectory.id, task_id=trajectory.task_id, domain=trajectory.domain, agent=trajectory.agent,
                   reward=trajectory.reward, label=trajectory.label, source=trajectory.source, trial=trajectory.trial,
                   n_steps=len(trajectory.steps), n_tool_errors=trajectory.n_tool_errors,
                   hidden={key: trajectory.hidden[key] for key in ("format", "label_source", "label_rule",
                                                                   "label_from_reward") if key in trajectory.hidden})


class IdSet:
    """The ids a load has seen, in 8 bytes per slot: a linear-probing table of 64-bit blake2b hashes
    (`array`), so checking a million ids for repeats takes about 16 MB instead of ~100 MB of strings.

    Ids are compared by hash: two different ids collide with probability about n^2 / 2^65 (3e-8 for a
    million ids), and a collision is reported as a repeated id (loud, never a silent drop)."""

    def __init__(self) -> None:
        self._table = array("Q", bytes(8 * 1024))
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @staticmethod
    def _hash(ident: str) -> int:
        digest = blake2b(ident.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return int.from_bytes(digest, "little") or 1  # 0 marks an empty slot

    def add(self, ident: str) -> bool:
        """Add `ident`; True when it is new, False when it was seen before."""
        key = self._hash(ident)
        table = self._table
        mask = len(table) - 1
        slot = key & mask
        while True:
            held = table[slot]
            if held == key:
                return False
            if not held:
                break
            slot = (slot + 1) & mask
        table[slot] = key
        self._n += 1
        if 2 * self._n > mask:
            self._grow()
        return True

    def __contains__(self, ident: str) -> bool:
        key = self._hash(ident)
        table = self._table
        mask = len(table) - 1
        slot = key & mask
        while table[slot]:
            if table[slot] == key:
                return True
            slot = (slot + 1) & mask
        return False

    def _grow(self) -> None:
        old = self._table
        table = array("Q", bytes(16 * len(old)))
        mask = len(table) - 1
        for key in old:
            if key:
                slot = key & mask
                while table[slot]:
                    slot = (slot + 1) & mask
                table[slot] = key
        self._table = table

