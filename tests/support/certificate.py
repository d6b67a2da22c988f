"""What the certificate tests share (tests/trust/test_certificate.py, test_certify_labelers.py): a frozen,
never-certified judge trained on tasks t0..t7, the held-out tasks t8..t23, and a lenient judge's answers."""

from __future__ import annotations

import re
from pathlib import Path

from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import data_fingerprint, data_ids, freeze
from tests.support.helpers import make_dataset


def _flight(text: str) -> int:
    return int(re.search(r"HAT(\d{3})", text).group(1))


def lenient_verdict(text: str) -> dict:
    """Passes every success (score 0.8); passes the failures of flights 3 mod 4 (score 0.7)."""
    if "payment method not found" not in text:
        return {"reason": "booked", "passed": True, "score": 0.8}
    if _flight(text) % 4 == 3:
        return {"reason": "claims booked", "passed": True, "score": 0.7}
    return {"reason": "tool error", "passed": False, "score": 0.1}


def frozen_program(directory: Path) -> tuple[Path, list[Trajectory]]:
    """A judge frozen in `directory` with its training set (tasks t0..t7) recorded as seen."""
    train = make_dataset(8)  # tasks t0..t7
    path = directory / "judge.json"
    freeze(TrajectoryJudge(), path, data_fingerprint=data_fingerprint(train), seen=data_ids(train))
    return path, train


def held_out() -> list[Trajectory]:
    return [t for t in make_dataset(24) if int(t.task_id[1:]) >= 8]  # t8..t23: 8 passed, 8 failed
