"""Guards around GEPA during induction: the judge behind the circuit breaker and a proposer that drops
unusable or memorizing candidates.

- `CircuitJudge` is the strict `TrajectoryJudge` wired to the dead-server circuit breaker
  (`rubricforge_dspy.lm.circuit.LMCircuit`: format failures are answers, not outages); when it opens,
  `CircuitOpen`, a `BaseException`, unwinds GEPA's evaluation loops (which catch `Exception`) at once and
  `induction.induce` turns it into `JudgeUnavailableError`.
- `GuardedProposer` is DSPy's instruction proposer minus candidates that memorize training episodes
  (`rubricforge_dspy.induction.memorization`); a reflection answer cut at max_tokens or unparsable proposes
  nothing and is counted in ``failures``.
"""

from __future__ import annotations

import logging
from typing import Any

import dspy
from dspy.teleprompt.gepa.instruction_proposal import InstructionProposer
from dspy.utils.exceptions import AdapterParseError

from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.induction.memorization import Memorized
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.circuit import LMCircuit
from rubricforge_dspy.lm.truncation import TruncatedCompletionError

__all__ = ["CircuitJudge", "GuardedProposer"]

logger = logging.getLogger(__name__)


class CircuitJudge(TrajectoryJudge):
    """The strict judge with the circuit breaker on LM errors (format failures are answers, not outages)."""

    circuit: LMCircuit | None = None

    def forward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        if self.circuit is None:
            return super().forward(trajectory)
        return self.circuit.call(super().forward, trajectory)


class GuardedProposer(InstructionProposer):  # type: ignore[misc]  # dspy ships no type information (no py.typed)
    """DSPy's instruction proposer, minus candidates that memorize training episodes."""

    def __init__(self, guard: Memorized, **kwargs: Any):
        super().__init__(**kwargs)
        self.guard = guard
        self.failures: list[str] = []  # reflection answers that were cut or did not parse: no proposal

    def __call__(self, candidate: dict[str, str], reflective_dataset: dict[str, list[dict[str, Any]]],
                 components_to_update: list[str]) -> dict[str, str]:
        try:
            proposed = super().__call__(candidate, reflective_dataset, components_to_update)
        except (TruncatedCompletionError, AdapterParseError) as error:
            # The reflection LM answered, but not with a rubric (cut at max_tokens, or unparsable): this
            # iteration proposes nothing. An outage (any other LM error) stops the run instead.
            self.failures.append(f"{type(error).__name__}: {str(error)[:200]}")
            logger.warning("reflection answer unusable, no candidate this iteration: %s", self.failures[-1])
            return {}
        kept: dict[str, str] = {}
        for name, text in proposed.items():
            if self.guard.check(text, where=name):
                kept[name] = text
            else:
                logger.warning("rejected a candidate rubric that memorizes training episodes: %s",
                               "; ".join(self.guard.rejected[-1]["leaks"]))
        return kept
