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
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.lm.circuit import LMCircuit
from rubricforge_dspy.lm.truncation import TruncatedCompletionError

__all__ = ["CircuitJudge", "CircuitSegmentsJudge", "CircuitExplorerJudge", "GuardedProposer", "ReadingJudge",
           "reading_copy"]

ReadingJudge = SegmentsJudge | ExplorerJudge  # the long-episode judges induction evolves (docs/LONG_EPISODES.md)

logger = logging.getLogger(__name__)


class CircuitJudge(TrajectoryJudge):
    """The strict judge with the circuit breaker on LM errors (format failures are answers, not outages)."""

    circuit: LMCircuit | None = None

    def forward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        if self.circuit is None:
            return super().forward(trajectory)
        return self.circuit.call(super().forward, trajectory)


class CircuitSegmentsJudge(SegmentsJudge):
    """The segments judge with the circuit breaker on LM errors, as `CircuitJudge`."""

    circuit: LMCircuit | None = None

    def forward(self, trajectory: Trajectory | str, read_sha256: str | None = None) -> dspy.Prediction:
        if self.circuit is None:
            return super().forward(trajectory, read_sha256)
        return self.circuit.call(super().forward, trajectory, read_sha256)


class CircuitExplorerJudge(ExplorerJudge):
    """The explorer judge with the circuit breaker on LM errors, as `CircuitJudge`."""

    circuit: LMCircuit | None = None

    def forward(self, trajectory: Trajectory | str, read_sha256: str | None = None) -> dspy.Prediction:
        if self.circuit is None:
            return super().forward(trajectory, read_sha256)
        return self.circuit.call(super().forward, trajectory, read_sha256)


def reading_copy(judge: ReadingJudge, circuit: bool = False) -> ReadingJudge:
    """A new judge reading as `judge` does (its settings, and every predictor's instruction and demos: GEPA may
    have evolved them apart), without its LM or manifest: a `SegmentsJudge` or an `ExplorerJudge`, or with
    `circuit` the `CircuitSegmentsJudge`/`CircuitExplorerJudge` GEPA evaluates."""
    copy: ReadingJudge
    if isinstance(judge, SegmentsJudge):
        make_segments = CircuitSegmentsJudge if circuit else SegmentsJudge
        copy = make_segments(judge.rubric, render_config=judge.render_config, overlap=judge.overlap,
                             adapter=judge.adapter)
    else:
        make_explorer = CircuitExplorerJudge if circuit else ExplorerJudge
        copy = make_explorer(judge.rubric, max_iters=judge.max_iters, max_prompt_tokens=judge.max_prompt_tokens,
                             render_config=judge.render_config, adapter=judge.adapter)
    for (mine_name, mine), (theirs_name, theirs) in zip(copy.named_predictors(), judge.named_predictors(),
                                                        strict=True):
        if mine_name != theirs_name:
            raise TypeError(f"predictor {mine_name!r} copied from {theirs_name!r}")  # a bug, not input
        mine.signature = theirs.signature
        mine.demos = list(theirs.demos)
    return copy


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
