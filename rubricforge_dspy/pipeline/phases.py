"""Where a run's time goes: wall and CPU seconds per phase (`PhaseClock`), for `run.json` and the report.

CPU is counted for the whole process tree: this process (all its threads), the children it has waited for, and
the descendants still running, such as the embedded llama.cpp server that answers the judge (read from
``/proc/<pid>/stat`` on Linux; elsewhere only this process and its waited-for children are counted, and the phase
says so with ``"cpu_scope"``).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["PhaseClock", "tree_cpu_seconds"]

_PROC = Path("/proc")


def _descendants_cpu() -> float | None:
    """CPU seconds (user + system, and their waited-for children's) of this process's running descendants, from
    /proc; None where /proc is not readable."""
    if not (_PROC / "self" / "stat").exists():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    parent_of: dict[int, int] = {}
    cpu_of: dict[int, float] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        pid = int(entry.name)
        parent_of[pid] = int(fields[1])
        cpu_of[pid] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / tick  # utime stime cutime cstime
    me, total = os.getpid(), 0.0
    for pid in cpu_of:
        ancestor, seen = parent_of.get(pid), 0
        while ancestor is not None and ancestor != me and ancestor > 1 and seen < 64:
            ancestor, seen = parent_of.get(ancestor), seen + 1
        if ancestor == me and pid != me:
            total += cpu_of[pid]
    return total


def tree_cpu_seconds() -> tuple[float, str]:
    """CPU seconds used so far by this process tree, and what was counted (``"tree"`` or ``"process"``)."""
    own = os.times()
    spent = own.user + own.system + own.children_user + own.children_system
    running = _descendants_cpu()
    return (spent + running, "tree") if running is not None else (spent, "process")


class PhaseClock:
    """Times named phases: ``with clock.phase("induce"): ...``; ``clock.phases`` is a list of
    ``{"phase", "wall_s", "cpu_s", "cpu_scope"}`` in order (a phase that raised is recorded too)."""

    def __init__(self) -> None:
        self.phases: list[dict[str, Any]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall, (cpu, scope) = time.perf_counter(), tree_cpu_seconds()
        try:
            yield
        finally:
            cpu_end, scope_end = tree_cpu_seconds()
            self.phases.append({"phase": name, "wall_s": round(time.perf_counter() - wall, 2),
                                "cpu_s": round(max(cpu_end - cpu, 0.0), 2),
                                "cpu_scope": scope if scope == scope_end else "process"})

    def totals(self) -> dict[str, float]:
        """Wall and CPU seconds summed over the phases."""
        return {"wall_s": round(sum(float(p["wall_s"]) for p in self.phases), 2),
                "cpu_s": round(sum(float(p["cpu_s"]) for p in self.phases), 2)}
