"""A cascade stage's decision rule (`StageRule`: pass past ``t_pass``, fail below ``t_fail``, else hand on), the
confidence it reads (`stage_confidence`), and the verdicts of a cascade's batch with the stage that decided each
(`CascadeVerdicts`); what no stage decides is ``ESCALATED``. `judge.cascade` runs them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from rubricforge_dspy.core.cascade import ESCALATED
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.terminal import check_name, terminal_safe
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.judge.contract import (
    Verdicts,
)

__all__ = ["ESCALATED", "StageRule", "CascadeVerdicts", "stage_confidence"]



def stage_confidence(verdict: Verdict | Mapping[str, Any] | Any) -> float | None:
    """A stage's confidence that the trajectory passed: its calibrated score, else its score; None when it
    produced no verdict (an abstention) or contradicted itself (such a stage hands the item on)."""
    get: Callable[[str], Any] = (verdict.get if isinstance(verdict, Mapping)
                                 else (lambda name: getattr(verdict, name, None)))
    if get("abstained") or get("contradiction"):
        return None
    calibrated = get("score_calibrated")
    return float(calibrated if calibrated is not None else get("score"))


@dataclass(frozen=True)
class StageRule:
    """One stage's decision rule: pass when ``confidence >= t_pass``, fail when ``<= t_fail``, else hand on.
    ``t_pass = inf`` never passes, ``t_fail = -inf`` never fails."""

    name: str
    t_pass: float = math.inf
    t_fail: float = -math.inf

    def __post_init__(self) -> None:
        if not self.name or self.name == ESCALATED:
            raise InputError(f"a stage needs a name other than {ESCALATED!r}, got {terminal_safe(repr(self.name))}")
        check_name(self.name)
        if math.isnan(self.t_pass) or math.isnan(self.t_fail) or not self.t_fail < self.t_pass:
            raise InputError(f"stage {self.name!r}: need t_fail < t_pass, got {self.t_fail} and {self.t_pass}")

    def decide(self, confidence: float | None) -> bool | None:
        """True (pass), False (fail) or None (hand on)."""
        if confidence is None:
            return None
        if confidence >= self.t_pass:
            return True
        if confidence <= self.t_fail:
            return False
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "t_pass": self.t_pass if math.isfinite(self.t_pass) else None,
                "t_fail": self.t_fail if math.isfinite(self.t_fail) else None}


class CascadeVerdicts(Verdicts):
    """`Verdicts` of a cascade's batch, with ``stages``: per item, the deciding stage's name, ``"escalated"``,
    or the name of the stage whose LM failed; and ``stage_calls``: items each stage was run on."""

    def __init__(self, verdicts: Iterable[Verdict], stages: Sequence[str], stage_calls: Mapping[str, int]):
        super().__init__(verdicts)
        self.stages = list(stages)
        self.stage_calls = dict(stage_calls)

    @property
    def decided_by(self) -> dict[str, int]:
        """Stage name (or ``"escalated"``) -> items it decided (LM-error abstentions are not counted)."""
        counts: dict[str, int] = {}
        for verdict, stage in zip(self, self.stages, strict=True):
            if not verdict.abstained or verdict.error_kind == ESCALATED:
                counts[stage] = counts.get(stage, 0) + 1
        return counts


