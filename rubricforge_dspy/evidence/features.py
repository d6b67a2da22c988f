"""The floor's features: observable counts of a trajectory, read from its steps only.

Every feature is computed from a *blinded* copy of the trajectory (`observable_only`): its steps and
nothing else. Id, task, agent, reward, label and ``hidden`` (gold actions, reward info, the user
simulator's instruction) are replaced by placeholders before `symptoms.extract_symptoms` or any count
runs, so no evaluator field can reach a feature, whatever a future feature reads.

The features (``FEATURES``, in this order; counts unless said otherwise):

==============================  =====================================================================
``tool_errors``                 tool results marked as errors
``tool_error_rate``             tool errors / tool calls (0 when there is no call)
``failed_lookups``              errored results of lookup calls (get_, find_, search_, list_, ...)
``failed_commits``              errored results of state-changing calls (book_, cancel_, update_, ...;
                                WebShop's ``click[Buy Now]``)
``successful_commits``          state-changing calls whose result is not an error
``unconfirmed_commits``         state changes made with no user "yes" since the last one
``unbacked_claim``              1 when the final message claims an action (booked, refunded, ...) and
                                no state-changing call succeeded, else 0
``claim_after_failed_commit``   1 when the final message claims an action after the last
                                state-changing call failed, else 0
``repeated_calls``              distinct calls (same tool, same arguments) made 3 times or more
``has_final_answer``            1 when the agent gave a final answer (or none was expected), else 0
``log_steps``                   log(1 + number of steps)
``user_turns``                  user (or user-simulator / environment) turns
``tool_calls``                  tool calls
``forged_markers``              steps whose text imitates the render's own structure (numbered step
                                lines, ``COUNTERS``, ``FINAL ANSWER``, elision notes, DSPy field
                                markers, a tool name with a line break): `render.forged_markers`
==============================  =====================================================================

A model stores the names of its inputs (`judge.floor.LogisticModel.inputs`), so a floor or hybrid fit
before a feature was added still loads and scores on the features it names.

The length-only model (``LENGTH_FEATURES``) reads ``log_steps`` and ``user_turns`` alone: on
benchmarks whose episodes end when the task succeeds, length predicts the outcome by itself.

Formats: every loader yields the same `Step` kinds, so every feature is defined for every format.
Formats without tool results (ADaPT's action-only logs) have no errors and no successful commits;
text-only ReAct logs (WebShop) count their observations once the loader marks them as tool results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Source, Trajectory
from rubricforge_dspy.evidence.symptoms import extract_symptoms, heuristic_verdict

__all__ = ["FEATURES", "LENGTH_FEATURES", "observable_only", "feature_values", "feature_matrix", "FeatureTable",
           "TableRow", "FeatureTableBuilder"]

FEATURES: tuple[str, ...] = (
    "tool_errors", "tool_error_rate", "failed_lookups", "failed_commits", "successful_commits",
    "unconfirmed_commits", "unbacked_claim", "claim_after_failed_commit", "repeated_calls",
    "has_final_answer", "log_steps", "user_turns", "tool_calls", "forged_markers",
)
LENGTH_FEATURES: tuple[str, ...] = ("log_steps", "user_turns")

_BLIND_SOURCE = Source("<observable steps>", 0)


def observable_only(trajectory: Trajectory) -> Trajectory:
    """A copy of `trajectory` holding its steps and nothing else: every other field is a placeholder."""
    return Trajectory(id="-", task_id="-", domain="-", agent="-", steps=trajectory.steps, reward=0.0, label=0,
                      source=_BLIND_SOURCE, trial=None, hidden={})


def feature_values(trajectory: Trajectory) -> dict[str, float]:
    """Every feature of `FEATURES` for one trajectory (see the module docstring), from its steps only."""
    blind = observable_only(trajectory)
    found = extract_symptoms(blind)
    calls = blind.n_tool_calls
    return {
        "tool_errors": float(len(found.tool_errors)),
        "tool_error_rate": len(found.tool_errors) / calls if calls else 0.0,
        "failed_lookups": float(len(found.failed_lookups)),
        "failed_commits": float(len(found.failed_commits)),
        "successful_commits": float(len(found.successful_commits)),
        "unconfirmed_commits": float(len(found.unconfirmed_commits)),
        "unbacked_claim": float(found.unbacked_claim is not None),
        "claim_after_failed_commit": float(found.claim_after_failed_commit),
        "repeated_calls": float(len(found.repeated_calls)),
        "has_final_answer": float(found.has_final_answer),
        "log_steps": math.log1p(len(blind.steps)),
        "user_turns": float(blind.n_user_turns),
        "tool_calls": float(calls),
        "forged_markers": float(found.forged_markers),
    }


def check_names(names: Iterable[str], where: str = "features") -> tuple[str, ...]:
    """`names` as a tuple, refusing unknown or repeated feature names."""
    names = tuple(names)
    unknown = [n for n in names if n not in FEATURES]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"{where}: feature names must be distinct names from {FEATURES}, got {list(names)}")
    return names


def feature_matrix(trajectories: Iterable[Trajectory], names: Iterable[str] = FEATURES) -> np.ndarray:
    """The ``(n, len(names))`` float matrix of `names` for `trajectories`, in order."""
    names = check_names(names)
    rows = [feature_values(t) for t in trajectories]
    return np.array([[row[n] for n in names] for row in rows], dtype=np.float64).reshape(len(rows), len(names))


@dataclass(frozen=True)
class TableRow:
    """What a verdict line (`core.verdict.verdict_line`) reads of one trajectory, kept by a `FeatureTable`:
    its identity, ground truth and step count (``steps`` is ``range(n_steps)``: only the length is kept)."""

    id: str
    task_id: str
    domain: str
    agent: str
    n_steps: int
    label: int | None
    reward: float | None

    @property
    def steps(self) -> range:
        return range(self.n_steps)


@dataclass(frozen=True)
class FeatureTable:
    """The floor's compact view of labeled data: per item its identity, label, reward, step count, every
    feature of `FEATURES` (a float row) and the Heuristic's verdict (`symptoms.heuristic_verdict`), and no
    `Trajectory` (so `rubricforge floor` holds a few hundred bytes per item, whatever the steps' size).
    Build it in one pass with `FeatureTableBuilder` or `FeatureTable.build`; `take` selects rows (a fold).

    Attributes:
        ids, task_ids, domains, agents: tuples of strings, one per item.
        labels: int64 array of 0/1 (-1 for an unlabeled item).
        rewards: float64 array (nan when there is none).
        n_steps: int64 array.
        x: the ``(n, len(FEATURES))`` float64 feature matrix, columns in `FEATURES` order.
        heuristic_passed: bool array; heuristic_score: float64 array.
    """

    ids: tuple[str, ...]
    task_ids: tuple[str, ...]
    domains: tuple[str, ...]
    agents: tuple[str, ...]
    labels: np.ndarray
    rewards: np.ndarray
    n_steps: np.ndarray
    x: np.ndarray
    heuristic_passed: np.ndarray
    heuristic_score: np.ndarray

    @classmethod
    def build(cls, trajectories: Iterable[Trajectory]) -> "FeatureTable":
        """The table of `trajectories`, read once in order (an iterator is fine)."""
        builder = FeatureTableBuilder()
        for trajectory in trajectories:
            builder.add(trajectory)
        return builder.finish()

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def groups(self) -> list[str]:
        """Each item's task, ``domain/task_id`` (the cross-validation groups)."""
        return [f"{d}/{t}" for d, t in zip(self.domains, self.task_ids, strict=True)]

    @property
    def n_tasks(self) -> int:
        return len(set(zip(self.domains, self.task_ids, strict=True)))

    def matrix(self, names: Iterable[str] = FEATURES) -> np.ndarray:
        """The ``(n, len(names))`` columns `names` (what `feature_matrix` returns for the same items)."""
        names = check_names(names)
        return np.ascontiguousarray(self.x[:, [FEATURES.index(n) for n in names]])

    def take(self, indices: Sequence[int] | np.ndarray) -> "FeatureTable":
        """The rows at `indices`, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        def pick(values: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(values[i] for i in idx)

        return FeatureTable(pick(self.ids), pick(self.task_ids), pick(self.domains), pick(self.agents),
                            self.labels[idx], self.rewards[idx], self.n_steps[idx], self.x[idx],
                            self.heuristic_passed[idx], self.heuristic_score[idx])

    def require_labels(self, needed_by: str) -> "FeatureTable":
        """This table, when every item is labeled; else `InputError` counting the unlabeled items and
        naming the first one's id (what `core.trajectory.require_labels` says of a list)."""
        missing = np.flatnonzero(self.labels < 0)
        if len(missing):
            raise InputError(f"{needed_by} needs labels, but {len(missing)} of {len(self)} trajectories have none "
                             f"(label=None; first: {self.ids[missing[0]]!r}); join labels by id (--labels FILE / "
                             "join_labels) or leave the unlabeled ones out (`labeled_only`)")
        return self

    def row(self, i: int) -> TableRow:
        label = int(self.labels[i])
        reward = float(self.rewards[i])
        return TableRow(self.ids[i], self.task_ids[i], self.domains[i], self.agents[i], int(self.n_steps[i]),
                        None if label < 0 else label, None if math.isnan(reward) else reward)

    def rows(self) -> list[TableRow]:
        return [self.row(i) for i in range(len(self))]


class FeatureTableBuilder:
    """Accumulates a `FeatureTable` one trajectory at a time (`add`), keeping only its numbers and names."""

    def __init__(self) -> None:
        self._strings: tuple[list[str], ...] = ([], [], [], [])
        self._labels: list[int] = []
        self._rewards: list[float] = []
        self._n_steps: list[int] = []
        self._rows: list[np.ndarray] = []
        self._passed: list[bool] = []
        self._scores: list[float] = []

    def add(self, trajectory: Trajectory) -> None:
        values = feature_values(trajectory)
        passed, score, _ = heuristic_verdict(trajectory)
        for column, value in zip(self._strings, (trajectory.id, trajectory.task_id, trajectory.domain,
                                                 trajectory.agent), strict=True):
            column.append(value)
        self._labels.append(-1 if trajectory.label is None else int(trajectory.label))
        self._rewards.append(float("nan") if trajectory.reward is None else float(trajectory.reward))
        self._n_steps.append(len(trajectory.steps))
        self._rows.append(np.array([values[n] for n in FEATURES], dtype=np.float64))
        self._passed.append(bool(passed))
        self._scores.append(float(score))

    def finish(self) -> FeatureTable:
        n = len(self._labels)
        x = np.array(self._rows, dtype=np.float64).reshape(n, len(FEATURES))
        ids, tasks, domains, agents = (tuple(column) for column in self._strings)
        return FeatureTable(ids, tasks, domains, agents, np.array(self._labels, dtype=np.int64),
                            np.array(self._rewards, dtype=np.float64), np.array(self._n_steps, dtype=np.int64), x,
                            np.array(self._passed, dtype=bool), np.array(self._scores, dtype=np.float64))
