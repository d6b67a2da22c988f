"""What the recorded-stage tests share: a verdict file written "by another tool" (lines in the verdict-line schema,
by hand), and Python stages importable by path (module-level names of this module)."""

from __future__ import annotations

import json
from pathlib import Path

from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.data.formats import load_trajectories


def other_tool_verdicts(data: Path, out: Path, *, skip_every: int = 10, skip_at: int = 3) -> list[str]:
    """Write a pass/fail tool's verdicts on `data` (webshop, labels at reward > 0) to `out`: right on every item,
    score 1.0 or 0.0, no rubricforge fields; the items ``i % skip_every == skip_at`` have no line. Returns the
    ids left out."""
    missing = []
    with out.open("w") as handle:
        for i, t in enumerate(load_trajectories(data, label_threshold=0.0)):
            if i % skip_every == skip_at:
                missing.append(t.id)
                continue
            handle.write(json.dumps({"id": t.id, "passed": bool(t.label), "score": float(t.label),
                                     "abstained": False, "model": "other-tool"}) + "\n")
    return missing


def no_tool_error_passes(trajectory) -> Verdict:
    """A Python stage: fails an episode with a tool error (score 0.1), passes the others (score 0.9)."""
    clean = not any(step.is_error for step in trajectory.steps)
    return Verdict.from_answer(clean, 0.9 if clean else 0.1, "by tool errors")
