"""What to label next: rank unlabeled trajectories by how much a label would teach the judge, and write
the top k in the generic JSONL format (docs/FORMAT.md) with ``label`` and ``reward`` null, ready for a
person to fill in and to feed back to ``rubricforge induce --init``.

Signals, each in [0, 1], summed into the priority (a signal that cannot be computed is left out):

- ``closeness``: how near the main judge's score is to the pass threshold,
  ``1 - |score - t| / max(t, 1 - t)``; an abstention counts as 1 (the judge could not decide);
- ``disagreement``: when several judges' verdicts are given, ``4 p (1 - p)`` with ``p`` the share
  of judges that passed the item (1 for an even split, 0 for unanimity);
- ``criteria_split``: when verdicts of criterion ablations are given (the rubric with one criterion
  removed), the share of ablations whose verdict differs from the main judge's: the item hinges on
  those criteria, and its label says whether they are right.

Items a cascade escalated (a verdict line with ``stage: "escalated"``, `rubricforge judge --cascade`, or
error kind ``"escalated"``)
come first, whatever their priority: no stage was sure of them, a person is the cascade's last stage.
Ties are broken by closeness, then by id. Among equal priorities nothing else is assumed; to spread
labels over tasks, the first pass takes at most one trajectory per task, then fills up in rank order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import PASS_THRESHOLD
from rubricforge_dspy.data.formats.jsonl import to_record, write_records


@dataclass(frozen=True)
class Candidate:
    """A trajectory proposed for labeling, with its priority and the signals that gave it (closeness to
    the threshold, disagreement between judges, split criteria)."""

    trajectory: Trajectory
    priority: float
    signals: dict[str, float]
    split_criteria: tuple[str, ...] = ()
    votes: dict[str, bool] = field(default_factory=dict)
    escalated: bool = False


def closeness(record: Mapping[str, Any], threshold: float = PASS_THRESHOLD) -> float:
    if record.get("abstained"):
        return 1.0
    return 1.0 - abs(float(record["score"]) - threshold) / max(threshold, 1.0 - threshold)


def _passed(record: Mapping[str, Any]) -> bool:
    return bool(record["passed"]) and not record.get("abstained")


def score_item(trajectory: Trajectory, main: Mapping[str, Any] | None, judges: Mapping[str, Mapping[str, Any]],
               ablations: Mapping[str, Mapping[str, Any]], threshold: float = PASS_THRESHOLD) -> Candidate:
    """The signals of one trajectory from the verdicts that exist for it (main judge, judges, ablations)."""
    signals: dict[str, float] = {}
    if main is not None:
        signals["closeness"] = round(closeness(main, threshold), 4)
    votes = {name: _passed(r) for name, r in judges.items()}
    if len(votes) >= 2:
        share = sum(votes.values()) / len(votes)
        signals["disagreement"] = round(4 * share * (1 - share), 4)
    split: tuple[str, ...] = ()
    if main is not None and ablations:
        split = tuple(sorted(name for name, r in ablations.items() if _passed(r) != _passed(main)))
        signals["criteria_split"] = round(len(split) / len(ablations), 4)
    records = ([main] if main is not None else []) + list(judges.values())
    escalated = any(r.get("stage") == "escalated" or r.get("error_kind") == "escalated" for r in records)
    return Candidate(trajectory, round(sum(signals.values()), 4), signals, split, votes, escalated)


def rank(trajectories: Sequence[Trajectory], main: Mapping[str, Mapping[str, Any]] | None,
         judges: Mapping[str, Mapping[str, Mapping[str, Any]]],
         ablations: Mapping[str, Mapping[str, Mapping[str, Any]]],
         threshold: float = PASS_THRESHOLD) -> list[Candidate]:
    """All trajectories, most informative first. `main`, and each of `judges` / `ablations`, map a
    trajectory id to its verdict line. Items a cascade escalated lead."""
    candidates = []
    for t in trajectories:
        candidates.append(score_item(
            t, (main or {}).get(t.id),
            {name: v[t.id] for name, v in judges.items() if t.id in v},
            {name: v[t.id] for name, v in ablations.items() if t.id in v}, threshold))
    return sorted(candidates, key=lambda c: (not c.escalated, -c.priority, -c.signals.get("closeness", 0.0),
                                             c.trajectory.id))


def pick(ranked: Sequence[Candidate], k: int) -> list[Candidate]:
    """The top `k`, at most one per task first (in rank order), then the rest in rank order."""
    if k < 1:
        raise InputError(f"-k must be >= 1, got {k}")
    chosen: list[Candidate] = []
    tasks: set[tuple[str, str]] = set()
    for c in ranked:
        key = (c.trajectory.domain, c.trajectory.task_id)
        if key not in tasks and len(chosen) < k:
            chosen.append(c)
            tasks.add(key)
    rest = [c for c in ranked if c not in chosen]
    return sorted(chosen + rest[: k - len(chosen)], key=ranked.index)


def write(chosen: Sequence[Candidate], out_path: PathArg, where: str) -> int:
    """Write the chosen trajectories for labeling (generic JSONL, label and reward null); refuses to
    overwrite an existing file."""
    def records() -> Iterator[dict[str, Any]]:
        for rank_, c in enumerate(chosen, 1):
            metadata = {"label_next": {"rank": rank_, "priority": c.priority, **c.signals, "escalated": c.escalated,
                                       "split_criteria": list(c.split_criteria), "votes": c.votes,
                                       "from": where}}
            yield to_record(c.trajectory, reward=None, label=None, metadata=metadata)

    return write_records(records(), out_path)


def format_picks(chosen: Sequence[Candidate]) -> str:
    """The picks as `rubricforge label-next` lists them: rank, trajectory id, priority and its signals."""
    return "\n".join(f"{i:>3}. {c.trajectory.id}  {'escalated, ' if c.escalated else ''}priority {c.priority:.2f} "
                     f"({', '.join(f'{k} {v:.2f}' for k, v in c.signals.items())})"
                     for i, c in enumerate(chosen, 1))
