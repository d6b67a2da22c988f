"""Counts of a trajectory input (`rubricforge stats`), taken in one pass over a stream: memory holds the
per-task counters, never the trajectories.

    stats = DataStats()
    for t in iter_trajectory_counts(paths, report=report):
        stats.add(t)
    print(stats.format(report))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DataStats", "labeler_report", "format_labeler_report"]


@dataclass
class DataStats:
    """How many trajectories, labeled or not, passing, on how many tasks, domains and agents, and with
    how many tool errors. Add each trajectory (or `TrajectoryCounts`) with `add`; `to_dict` and `format`
    read the load's `LoadReport` for the skipped records and the label rule of each format."""

    trajectories: int = 0
    unlabeled: int = 0
    positives: int = 0
    tool_errors: int = 0
    reward_sum: float = 0.0  # over the ones with a reward
    rewarded: int = 0  # trajectories with a reward (a label from a value set or a labels file may come without)
    tasks: set[tuple[str, str]] = field(default_factory=set)  # (domain, task_id)
    domains: set[str] = field(default_factory=set)
    agents: set[str] = field(default_factory=set)

    def add(self, trajectory: Any) -> None:
        """Count one trajectory: anything with ``domain``, ``task_id``, ``agent``, ``n_tool_errors``,
        ``label`` and ``reward`` (a `Trajectory`, or the `TrajectoryCounts` of a counting load)."""
        self.trajectories += 1
        self.tasks.add((trajectory.domain, trajectory.task_id))
        self.domains.add(trajectory.domain)
        self.agents.add(trajectory.agent)
        self.tool_errors += trajectory.n_tool_errors
        if trajectory.label is None:
            self.unlabeled += 1
        else:
            self.positives += trajectory.label
        if trajectory.reward is not None:
            self.rewarded += 1
            self.reward_sum += trajectory.reward

    def to_dict(self, report: Any) -> dict[str, Any]:
        """The counts as one flat record, in the order `format` shows them; `report` is the load's
        `LoadReport` (``skipped``, ``label_rules``). ``mean_reward`` is over the trajectories with a reward
        (None when none has one: a mapping may label from a value set, a labels file may give labels only)."""
        return {
            "trajectories": self.trajectories,
            "unlabeled": self.unlabeled,
            "positives": self.positives,
            "tasks": len(self.tasks),
            "domains": sorted(self.domains),
            "agents": sorted(self.agents),
            "skipped": len(report.skipped),
            "mean_reward": round(self.reward_sum / self.rewarded, 4) if self.rewarded else None,
            "tool_errors": self.tool_errors,
            "label_rules": ", ".join(f"{fmt}: {rule}" for fmt, rule in report.label_rules.items()),
        }

    def format(self, report: Any) -> str:
        """One ``name: value`` line per count, names right-aligned (`to_dict`)."""
        return "\n".join(f"{key:>13}: {', '.join(value) if isinstance(value, list) else value}"
                         for key, value in self.to_dict(report).items())


def labeler_report(label_file: Any, *, confidence: float = 0.95, seed: int = 0,
                   resamples: int | None = None) -> dict[str, Any] | None:
    """Agreement between the labelers of a labels file read with a labeler column (`LabelFile.ratings`), and its
    disagreements (``[{"id", "labels": {labeler: label}, "resolved"}]``); None for a file with one row per id.

    ``agreement`` is `metrics.agreement.labeler_agreement` over the labelers' 0/1 labels (a skip value is no
    label); ``resolve`` the rule and ``unresolved`` the ids it left without a label, with why."""
    if not label_file.ratings:
        return None
    from rubricforge_dspy.metrics import LABELER_RESAMPLES, labeler_agreement

    agreement = labeler_agreement(list(label_file.ratings.values()), confidence=confidence, seed=seed,
                                  resamples=resamples or LABELER_RESAMPLES)
    disagreements = [{"id": rid, "labels": label_file.ratings[rid],
                      "resolved": label_file.entries[rid].label if rid in label_file.entries else None}
                     for rid in label_file.disagreements]
    return {"agreement": agreement, "resolve": label_file.resolve, "skipped_values": label_file.skipped_values,
            "unresolved": dict(label_file.unresolved), "disagreements": disagreements}


def format_labeler_report(report: dict[str, Any], shown: int = 20) -> list[str]:
    """`labeler_report` as lines: the agreement (`metrics.agreement.format_labeler_agreement`), the rule, then
    the disagreements (the first `shown`; ids and labeler names escaped for a terminal)."""
    from rubricforge_dspy.core.terminal import terminal_safe
    from rubricforge_dspy.metrics import format_labeler_agreement

    lines = ["labelers:", *("  " + line for line in format_labeler_agreement(report["agreement"]))]
    lines.append(f"  --label-resolve {report['resolve']}: {len(report['unresolved'])} ids left without a label; "
                 f"{report['skipped_values']} rows with a skip value")
    rows = report["disagreements"]
    lines.append(f"  {len(rows)} disagreement(s):")
    for row in rows[:shown]:
        given = ", ".join(f"{terminal_safe(str(who))}={'skip' if v is None else v}" for who, v in row["labels"].items())
        resolved = "no label" if row["resolved"] is None else f"label {row['resolved']}"
        lines.append(f"    {terminal_safe(row['id'])}: {given} -> {resolved}")
    if len(rows) > shown:
        lines.append(f"    ... and {len(rows) - shown} more (--disagreements-out FILE lists all)")
    return lines
