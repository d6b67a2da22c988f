"""Checks on the labels a command is about to use, said loudly (stderr and ``stats --json``).

`LabelTally` is fed trajectories one at a time (so a streamed `judge` can use it) and reports:

* labels that are all one class (agreement, false-pass rates and induction are meaningless then);
* a graded reward source (rewards strictly between 0 and 1) whose labels came from the rule
  ``reward > 0``: every partial success became a pass (WebShop: 444 of 500 instead of 179); rewards
  given by a ``--labels`` file without a label are checked the same way as a loader's;
* trajectories without any label (fine for ``judge`` and ``render``; induce/certify/gate leave
  them out, said so).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Trajectory

if TYPE_CHECKING:
    from rubricforge_dspy.data.formats._records import TrajectoryCounts

__all__ = ["LabelTally", "no_labels_error"]

ZERO_RULE = "reward > 0"


@dataclass
class LabelTally:
    """Counts of labels by class and by where they came from."""

    trajectories: int = 0
    unlabeled: int = 0
    positives: int = 0
    negatives: int = 0
    rules: Counter[str] = field(default_factory=Counter)  # rule text -> labels derived from rewards with it
    graded: int = 0  # labeled rewards strictly between 0 and 1
    graded_at_zero: int = 0  # of those, labeled by the rule reward > 0
    full_reward_at_zero: int = 0  # with reward >= 1, among the trajectories labeled by reward > 0
    at_zero: int = 0

    def add(self, trajectory: Trajectory | TrajectoryCounts) -> None:
        self.trajectories += 1
        hidden = trajectory.hidden or {}  # a plugin's counts may carry none
        if trajectory.label is None:
            self.unlabeled += 1
            return
        self.positives += trajectory.label
        self.negatives += 1 - trajectory.label
        if hidden.get("label_source") and not hidden.get("label_from_reward"):
            return  # an explicit label (record or labels file) does not depend on the rule
        rule = hidden.get("label_rule") or ZERO_RULE
        self.rules[rule] += 1
        reward = float(trajectory.label) if trajectory.reward is None else trajectory.reward
        graded = 0.0 < reward < 1.0
        self.graded += graded
        if rule == ZERO_RULE:
            self.at_zero += 1
            self.graded_at_zero += graded
            self.full_reward_at_zero += reward >= 1.0

    def watch(self, trajectories: Iterable[Trajectory]) -> Iterator[Trajectory]:
        for trajectory in trajectories:
            self.add(trajectory)
            yield trajectory

    @property
    def labeled(self) -> int:
        return self.positives + self.negatives

    def warnings(self) -> list[str]:
        out = []
        if self.trajectories and not self.labeled:
            out.append(f"none of the {self.trajectories} trajectories has a label; judging works, but induce, "
                       "certify, gate and report need labels: join them with --labels FILE")
        elif self.labeled and (not self.positives or not self.negatives):
            cls = "1 (pass)" if self.positives else "0 (fail)"
            out.append(f"all {self.labeled} labeled trajectories have label {cls}: agreement and false-pass "
                       f"rates mean nothing and induction cannot learn; check the labels or --label-threshold "
                       f"(rules used: {self._rules()})")
        if self.graded_at_zero:
            out.append(f"{self.graded_at_zero} of {self.at_zero} rewards labeled by 'reward > 0' are graded "
                       f"(strictly between 0 and 1): every partial success counts as a pass ({self.positives} "
                       f"positives; a full reward, '--label-threshold \">=1\"', gives {self.full_reward_at_zero})")
        return out

    def _rules(self) -> str:
        return ", ".join(f"{rule} ({n})" for rule, n in self.rules.most_common()) or "none: labels given"

    def to_dict(self) -> dict[str, Any]:
        return {"labeled": self.labeled, "unlabeled": self.unlabeled, "positives": self.positives,
                "negatives": self.negatives, "graded_rewards": self.graded,
                "label_rules": dict(self.rules), "warnings": self.warnings()}


def no_labels_error(command: str | None, seen: int, first: Trajectory | None) -> InputError:
    """The error of a command that needs labels when none of the `seen` trajectories has one (`first` named)."""
    return InputError(f"all {seen} trajectories have no label"
                      + (f" (first: {first.id} from {first.source.file})" if first else "")
                      + f"; {command or 'this command'} needs labels: join them by id "
                      "with --labels FILE (CSV id,label / JSONL / SWE-bench results.json), or write the data "
                      "as generic JSONL with a reward per record (docs/FORMAT.md)")
