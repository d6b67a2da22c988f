"""Verdict files as `rubricforge judge` writes them: the paper's airline pairing of two judges (known confusion
counts) and single verdict lines."""

from __future__ import annotations

import json
from pathlib import Path


def paper_pairing():
    """62 items: 10 passed, 52 failed. Induced TP 2, FP 6, FN 8, TN 46; G-Eval TP 2, FP 9, FN 8, TN 43.
    Paired so the judges agree everywhere except 3 failed items that only G-Eval passes."""
    labels = [1] * 10 + [0] * 52
    induced = [True] * 2 + [False] * 8 + [True] * 6 + [False] * 46
    geval = [True] * 2 + [False] * 8 + [True] * 9 + [False] * 43
    return labels, induced, geval


def write_verdicts(path, labels, passed):
    with path.open("w") as handle:
        for i, (y, p) in enumerate(zip(labels, passed, strict=True)):
            handle.write(json.dumps({"id": f"airline:{i}", "task_id": str(i // 2), "label": y, "passed": p,
                                     "score": 0.9 if p else 0.1, "abstained": False}) + "\n")
    return str(path)


def verdict(i, passed, score, label, **extra):
    """A verdict line as `rubricforge judge` writes it (batch._line), minus what users cannot know."""
    return {"id": f"x{i:02d}", "passed": passed, "score": score, "reason": "r", "abstained": False,
            "error": None, "error_kind": None, "label": label, **extra}


def write(path: Path, lines) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
