"""The normalized trajectory record every loader produces and every later stage consumes.

A `Trajectory` separates what the judge may see (`steps`) from what it must never see
(`reward`, `label`, `hidden`): the renderer reads `steps` and nothing else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from rubricforge_dspy.core.errors import InputError

StepKind = Literal["user", "assistant", "tool_call", "tool_result", "final_answer"]
STEP_KINDS: tuple[str, ...] = ("user", "assistant", "tool_call", "tool_result", "final_answer")

DEFAULT_LABEL_THRESHOLD = 0.0
REWARD_TOLERANCE = 1e-6  # tau-bench's and tau2's own success check: reward within 1e-6 of 1


class TrajectoryFormatError(InputError):
    """A record that cannot become a trajectory; the message names the file and record."""

    def __init__(self, file: str, record: int | str | None, problem: str):
        self.file = str(file)
        self.record = record
        self.problem = problem
        where = f"{self.file}" if record is None else f"{self.file}, record {record}"
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class Source:
    """Where a trajectory came from: the file and the record's index within it."""

    file: str
    index: int

    def __str__(self) -> str:
        return f"{self.file}#{self.index}"


@dataclass(frozen=True)
class Step:
    """One observable event of an episode.

    kind:
      - "user": a user (or user-simulator) turn. (An environment observation is a "tool_result" when the
        source says so, e.g. the generic JSONL's ``"observation": true``; unmarked, it reads as a user turn.)
      - "assistant": free text the agent said.
      - "tool_call": the agent invoked `tool_name` with `arguments`.
      - "tool_result": what the tool returned; `is_error` marks a failed call.
      - "final_answer": the agent's closing message or submitted answer: its last text with no tool call
        or observation after it (`data.formats._steps.finalize_answer`).
    """

    kind: StepKind
    content: str = ""
    tool_name: str | None = None
    arguments: Any = None
    call_id: str | None = None
    is_error: bool = False

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise ValueError(f"unknown step kind {self.kind!r}; expected one of {STEP_KINDS}")


@dataclass(frozen=True)
class Trajectory:
    """A normalized agent episode.

    `steps` is the only observable part. `reward`, `label` and `hidden` (gold actions, reward info,
    the user simulator's instruction, ...) exist for evaluation and must never reach the judge.

    ``label=None`` is THE unlabeled case (a trace, an agent log or a live run records no outcome; join
    labels with `join_labels`); its ``reward`` is None too unless the source gave one. Every consumer
    that counts labels treats None explicitly: it leaves the trajectory out and counts it, or raises an
    `InputError` naming it when labels are required; an unlabeled run is never counted as a failure.
    A labeled trajectory has ``label`` 0 or 1 and, when the source gave no reward, ``reward`` None.
    """

    id: str
    task_id: str
    domain: str
    agent: str
    steps: tuple[Step, ...]
    reward: float | None
    label: int | None
    source: Source
    trial: int | None = None
    hidden: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.label is not None and self.label not in (0, 1):
            raise ValueError(f"{self.source}: label must be 0, 1 or None (unlabeled), got {self.label!r}")
        if not self.steps:
            raise ValueError(f"{self.source}: trajectory has no steps")

    @property
    def labeled(self) -> bool:
        """Whether the trajectory has a label (0 or 1); False for the unlabeled case ``label=None``."""
        return self.label is not None

    @property
    def n_tool_calls(self) -> int:
        return sum(step.kind == "tool_call" for step in self.steps)

    @property
    def n_tool_errors(self) -> int:
        return sum(step.kind == "tool_result" and step.is_error for step in self.steps)

    @property
    def n_user_turns(self) -> int:
        return sum(step.kind == "user" for step in self.steps)


class UnlabeledError(InputError):
    """Trajectories without a label (``label=None``) given to something that needs labels; the message
    counts them and names the first one's id, file and record."""

    def __init__(self, unlabeled: "list[Trajectory]", total: int, needed_by: str):
        self.unlabeled = unlabeled
        self.total = total
        first = unlabeled[0]
        super().__init__(
            f"{needed_by} needs labels, but {len(unlabeled)} of {total} trajectories have none (label=None; "
            f"first: {first.id!r}, {first.source.file}, record {first.source.index}); join labels by id "
            "(--labels FILE / join_labels) or leave the unlabeled ones out (`labeled_only`)")


def require_labels(trajectories: Iterable[Trajectory], needed_by: str) -> list[Trajectory]:
    """The trajectories as a list, all labeled, or `UnlabeledError`.

    Args:
        trajectories: the trajectories a statistic, split, fit or induction is about to count.
        needed_by: what needs the labels, for the message (e.g. ``"the floor fit"``).

    Returns:
        The trajectories, as a list.

    Raises:
        UnlabeledError: some trajectory has ``label=None`` (the message counts them and names the first
            one's id, file and record).
    """
    items = list(trajectories)
    unlabeled = [t for t in items if t.label is None]
    if unlabeled:
        raise UnlabeledError(unlabeled, len(items), needed_by)
    return items


def labeled_only(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """The labeled trajectories (``label`` 0 or 1), in order; callers count what was left out as
    ``len(all) - len(labeled)`` and say so."""
    return [t for t in trajectories if t.label is not None]


@dataclass(frozen=True)
class LabelRule:
    """How a reward becomes a binary label: ``reward > threshold`` or, inclusive, ``reward >= threshold``.

    Inclusive comparisons allow `REWARD_TOLERANCE` (``reward >= 1`` accepts 0.9999995), as the
    benchmarks' own success checks do. Each loader states its default rule (``LABEL_RULE``); the
    CLI's ``--label-threshold`` overrides it (see `parse_label_rule`)."""

    threshold: float
    inclusive: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not math.isfinite(float(self.threshold)):
            raise InputError(f"label threshold must be a finite number, got {self.threshold!r}")

    def label(self, reward: float) -> int:
        reward = float(reward)
        if self.inclusive:
            return int(reward >= self.threshold - REWARD_TOLERANCE)
        return int(reward > self.threshold)

    def __str__(self) -> str:
        return f"reward {'>=' if self.inclusive else '>'} {self.threshold:g}"


ANY_POSITIVE_REWARD = LabelRule(DEFAULT_LABEL_THRESHOLD)  # the generic default: reward > 0
FULL_REWARD = LabelRule(1.0, inclusive=True)  # success = reward 1 (tau-bench, tau2, WebShop papers)
_RULE = re.compile(r"^\s*(?:reward\s*)?(>=|>)?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


def parse_label_rule(text: Union[str, float, "LabelRule"]) -> LabelRule:
    """A `LabelRule` from ``0.5`` / ``"0.5"`` / ``">0.5"`` (reward > 0.5) or ``">=1"`` (reward >= 1)."""
    if isinstance(text, LabelRule):
        return text
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return LabelRule(float(text))
    match = _RULE.match(str(text))
    if not match:
        raise InputError(f"label threshold {text!r}: expected a number T (label = reward > T), '>T' or '>=T'")
    return LabelRule(float(match[2]), inclusive=match[1] == ">=")


def label_from_reward(reward: float, threshold: Union[float, LabelRule, None] = DEFAULT_LABEL_THRESHOLD) -> int:
    """Binary label of a reward: a number T means ``reward > T`` (default: any positive reward); a
    `LabelRule` is applied as stated."""
    if threshold is None:
        threshold = DEFAULT_LABEL_THRESHOLD
    return parse_label_rule(threshold).label(reward)
