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

Beside them, the audit sample (`draw_audit`, `AuditDraw`): a seeded uniform draw of tasks over everything
judged, made from ids and tasks only before any label and recorded (`write_audit`, `read_audit`), whose labels
are the ones a cascade refit may calibrate on (`data.label_journal.exchangeable_labels`; docs/CASCADE.md,
"Recalibration").

Items a cascade escalated (a verdict line with ``stage: "escalated"``, `rubricforge judge --cascade`, or
error kind ``"escalated"``)
come first, whatever their priority: no stage was sure of them, a person is the cascade's last stage.
Ties are broken by closeness, then by id. Among equal priorities nothing else is assumed; to spread
labels over tasks, the first pass takes at most one trajectory per task, then fills up in rank order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from rubricforge_dspy.core.cascade import ESCALATED
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
    escalated = any(r.get("stage") == ESCALATED or r.get("error_kind") == ESCALATED for r in records)
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


# -- the audit sample (issue 39, item 6) ------------------------------------------------------------

AUDIT_KEY = "rubricforge_audit"
AUDIT_VERSION = 1
AUDIT_SIZE = 50  # units (tasks, or items without tasks) drawn by default: see docs/CASCADE.md, "Recalibration"


@dataclass(frozen=True)
class AuditDraw:
    """A seeded uniform draw of units (tasks where the items name tasks, else items) of a judged population,
    made from ids and tasks only (never a label or a verdict), recorded so anyone can draw it again.

    ``ids`` are every item of the drawn units; ``decided`` those a stage decided (the audit queue a person labels
    beside the escalated queue); ``escalated`` the drawn items no stage decided (labeled anyway, as escalated
    items are: in the draw, their labels count as the audit's). ``digest`` names the draw (sha256 over the
    population digest, the seed and the drawn units); ``population`` is the sha256 of the sorted units and ids
    it was drawn from."""

    seed: int
    size: int
    unit: str  # "task" | "item"
    units: tuple[str, ...]
    ids: tuple[str, ...]
    decided: tuple[str, ...]
    escalated: tuple[str, ...]
    population: str
    population_units: int
    population_items: int
    digest: str
    drawn_at: str = ""

    def to_record(self) -> dict[str, Any]:
        return {AUDIT_KEY: AUDIT_VERSION, "seed": self.seed, "size": self.size, "unit": self.unit,
                "units": list(self.units), "ids": list(self.ids), "decided": list(self.decided),
                "escalated": list(self.escalated), "population": self.population,
                "population_units": self.population_units, "population_items": self.population_items,
                "digest": self.digest, "drawn_at": self.drawn_at}

    def summary(self) -> str:
        return (f"audit sample: {len(self.units)} of {self.population_units} {self.unit}s drawn uniformly (seed "
                f"{self.seed}, draw {self.digest[:12]}): {len(self.decided)} decided items to label beside the "
                f"escalated queue, {len(self.escalated)} escalated items in the draw")


def _unit_of(task: str, ident: str, by_task: bool) -> str:
    return task if by_task else ident


def draw_audit(items: Iterable[tuple[str, str, bool]], size: int = AUDIT_SIZE, seed: int = 0) -> AuditDraw:
    """Draw the audit sample: `size` units uniformly without replacement from every unit of the population.

    The unit is the task when every item names one (the cascade's statistical unit: a drawn task brings all its
    items), else the item. Every unit of the population can be drawn, decided or escalated: a uniform sample of
    the decided items alone would be a sample of "what the old cascade found easy", not of the population, and a
    bound fit on it would be too optimistic (docs/CASCADE.md, "Recalibration"); the escalated items of the draw
    cost nothing more (a person labels every escalated item anyway).

    Reproducible: the population is sorted first, so the draw depends on the set of (task, id) pairs and the seed
    only, never on file order, labels, scores or verdicts.

    Args:
        items: ``(id, task, decided)`` per judged item (``task`` "" when unknown).
        size: how many units to draw (all of them when the population has fewer).
        seed: the draw's seed (recorded).

    Raises:
        InputError: `size` < 1, or no item.
    """
    import hashlib

    import numpy as np

    if isinstance(size, bool) or size < 1:
        raise InputError(f"the audit sample's size must be >= 1, got {size}")
    rows = sorted((str(task), str(ident), bool(decided)) for ident, task, decided in items)
    if not rows:
        raise InputError("no judged item to draw an audit sample from")
    by_task = all(task for task, _, _ in rows)
    units = sorted({_unit_of(task, ident, by_task) for task, ident, _ in rows})
    population = hashlib.sha256("\n".join(f"{task}\t{ident}" for task, ident, _ in rows).encode()).hexdigest()
    rng = np.random.default_rng(seed)
    picked = sorted(units[i] for i in rng.choice(len(units), size=min(size, len(units)), replace=False))
    chosen = set(picked)
    drawn = [(ident, decided) for task, ident, decided in rows if _unit_of(task, ident, by_task) in chosen]
    digest = hashlib.sha256(f"{population}\n{seed}\n".encode() + "\n".join(picked).encode()).hexdigest()
    from datetime import datetime, timezone

    return AuditDraw(seed, size, "task" if by_task else "item", tuple(picked), tuple(i for i, _ in drawn),
                     tuple(i for i, d in drawn if d), tuple(i for i, d in drawn if not d), population, len(units),
                     len(rows), digest, datetime.now(timezone.utc).isoformat())


def decided(record: Mapping[str, Any]) -> bool:
    """True when a verdict line is a decision (not an escalation, not an abstention)."""
    return not (record.get("abstained") or record.get("stage") == ESCALATED or record.get("escalated") is True)


def write_audit(draw: AuditDraw, path: PathArg) -> None:
    """Write the draw's record (JSON); refuses to overwrite an existing file (a draw is made once, before labels)."""
    import orjson

    from rubricforge_dspy.core.files import writable_file

    target = writable_file(path, "audit sample")
    try:
        with open(target, "xb") as handle:
            handle.write(orjson.dumps(draw.to_record(), option=orjson.OPT_INDENT_2))
    except FileExistsError:
        raise InputError(f"{path}: an audit sample is already recorded there; a draw is made once, before any "
                         "label: keep it (give it with --audit), or choose another path") from None


def read_audit(path: PathArg) -> AuditDraw:
    """An audit draw's record as written by `write_audit`.

    Raises:
        InputError: not such a record (the file named).
    """
    import orjson

    from rubricforge_dspy.core.files import regular_file

    try:
        record = orjson.loads(regular_file(path, "audit sample").read_bytes())
    except orjson.JSONDecodeError as error:
        raise InputError(f"{path}: not JSON ({error}); give the audit file `rubricforge label-next` wrote") from None
    if not isinstance(record, dict) or record.get(AUDIT_KEY) != AUDIT_VERSION:
        raise InputError(f"{path}: not an audit sample record (no \"{AUDIT_KEY}\": {AUDIT_VERSION})")
    try:
        lists = {key: tuple(str(x) for x in record[key]) for key in ("units", "ids", "decided", "escalated")}
        return AuditDraw(int(record["seed"]), int(record["size"]), str(record["unit"]), lists["units"], lists["ids"],
                         lists["decided"], lists["escalated"], str(record["population"]),
                         int(record["population_units"]), int(record["population_items"]), str(record["digest"]),
                         str(record.get("drawn_at", "")))
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{path}: an audit sample record lacks or mistypes {error}") from None
