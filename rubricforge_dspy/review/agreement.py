"""Several named labelers on one labels journal: each one's labels, their agreement, the disagreements to adjudicate.

Every journal line names its labeler. The journal's replay (`data.label_journal.JournalHistory`) keeps, per id,
the stack of actions still standing (an undo pops the last one, whoever wrote it); a labeler's label of an id is
the last line of that stack written by that labeler and not an adjudication, when it is a pass or a fail (a skip is
no label). So a changed mind replaces the labeler's own label only, and two labelers never overwrite each other.

Agreement, per pair of labelers, on the items both labeled: the raw agreement (the share of equal labels) and
Cohen's kappa (`sklearn.metrics.cohen_kappa_score`: the agreement beyond what the two labelers' own pass rates
give by chance; Cohen 1960). Kappa is undefined (shown as such, never 0) when both labelers gave one and the same
label to every shared item. The numbers describe these labelers on these items; no interval is claimed here.

A **disagreement** is an item two labelers labeled differently (pass against fail). An **adjudication** is a
label line that says it resolves one (``"adjudication": true`` on the journal line, `ADJUDICATION_KEY`): the last
adjudication standing on an id is its resolved label, and the item leaves the disagreement queue. Adjudications
do not count in the agreement (they are not an independent opinion). Readers of the journal that do not know the
key read an adjudication as the id's last line, which is the resolution too (last line wins).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from itertools import combinations
from typing import Mapping, Sequence

from rubricforge_dspy.data.label_journal import JournalLine

__all__ = ["ADJUDICATION_KEY", "AdjudicationLine", "PairAgreement", "LabelerView", "labeler_view", "pair_agreement",
           "cohen_kappa"]

ADJUDICATION_KEY = "adjudication"  # on a journal line: this label resolves a disagreement between labelers


@dataclass(frozen=True)
class AdjudicationLine(JournalLine):
    """A journal line that resolves a disagreement between labelers (written with ``"adjudication": true``)."""

    def to_record(self) -> dict:
        return {**super().to_record(), ADJUDICATION_KEY: True}

    @classmethod
    def of(cls, line: JournalLine) -> "AdjudicationLine":
        """The same line, marked as an adjudication."""
        return cls(**{name: getattr(line, name) for name in JournalLine.__dataclass_fields__})


def cohen_kappa(a: Sequence[int], b: Sequence[int]) -> float | None:
    """Cohen's kappa of two labelers' 0/1 labels of the same items (`sklearn.metrics.cohen_kappa_score`), or None
    when it is undefined (no item, or both gave one and the same label everywhere: chance agreement is 1)."""
    if not a:
        return None
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():  # an undefined kappa is NaN with a warning: reported as None instead
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        value = float(cohen_kappa_score(list(a), list(b), labels=[0, 1]))
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class PairAgreement:
    """Two labelers' agreement on the items both labeled.

    Attributes:
        a, b: the labelers' names.
        shared: items both labeled (pass or fail).
        agree: of those, the items they gave the same label.
        kappa: Cohen's kappa, or None when undefined (`cohen_kappa`).
    """

    a: str
    b: str
    shared: int
    agree: int
    kappa: float | None

    @property
    def raw(self) -> float | None:
        """The raw agreement (``agree / shared``), or None without a shared item."""
        return self.agree / self.shared if self.shared else None


def pair_agreement(labels: Mapping[str, Mapping[str, int]]) -> list[PairAgreement]:
    """Every pair of labelers' agreement (`PairAgreement`), pairs in name order.

    Args:
        labels: labeler -> (id -> label 0/1).
    """
    out = []
    for a, b in combinations(sorted(labels), 2):
        shared = sorted(set(labels[a]) & set(labels[b]))
        first, second = [labels[a][i] for i in shared], [labels[b][i] for i in shared]
        out.append(PairAgreement(a, b, len(shared), sum(x == y for x, y in zip(first, second, strict=True)),
                                 cohen_kappa(first, second)))
    return out


@dataclass(frozen=True)
class LabelerView:
    """What several labelers did on one journal (module docstring).

    Attributes:
        labels: labeler -> (id -> label 0/1), adjudications left out.
        adjudicated: id -> the label of the adjudication standing on it.
        disagreements: ids two labelers labeled differently, with no adjudication standing, in `order`.
        pairs: every pair's `PairAgreement`.
    """

    labels: dict[str, dict[str, int]]
    adjudicated: dict[str, int]
    disagreements: list[str]
    pairs: list[PairAgreement]

    def of(self, ident: str) -> list[tuple[str, int]]:
        """``(labeler, label)`` of every labeler who labeled `ident`, by name."""
        return [(name, self.labels[name][ident]) for name in sorted(self.labels) if ident in self.labels[name]]


def labeler_view(states: Mapping[str, Sequence[JournalLine]], order: Sequence[str] | None = None) -> LabelerView:
    """Each labeler's labels, the adjudications, the open disagreements and the pairwise agreement.

    Args:
        states: id -> the stack of actions still standing (`JournalHistory.states`).
        order: the ids in the order the disagreements are listed (the queue's); None: by id.
    """
    labels: dict[str, dict[str, int]] = {}
    adjudicated: dict[str, int] = {}
    for ident, stack in states.items():
        seen: dict[str, int | None] = {}
        resolution: int | None = None
        for line in stack:
            if isinstance(line, AdjudicationLine):
                resolution = line.label  # a skip standing as the last adjudication resolves nothing
            else:
                seen[line.labeler] = line.label
        if resolution is not None:
            adjudicated[ident] = resolution
        for name, label in seen.items():
            if label is not None:
                labels.setdefault(name, {})[ident] = label
    split = {ident for ident in states if ident not in adjudicated
             and len({by[ident] for by in labels.values() if ident in by}) > 1}
    ordered = [ident for ident in order if ident in split] if order is not None else sorted(split)
    if order is not None:
        ordered += sorted(split - set(ordered))
    return LabelerView(labels, adjudicated, ordered, pair_agreement(labels))
