"""Several named labelers on one labels journal: each one's labels, their agreement, the disagreements to adjudicate.

Every journal line names its labeler. The journal's replay (`data.label_journal.JournalHistory`) keeps, per id,
the stack of actions still standing (an undo pops the last one, whoever wrote it); a labeler's label of an id is
the last line of that stack written by that labeler and not an adjudication, when it is a pass or a fail (a skip is
no label). So a changed mind replaces the labeler's own label only, and two labelers never overwrite each other.

Agreement (`agreement`, computed by the package's `metrics.agreement.labeler_agreement`): per pair of labelers,
on the items both labeled, the raw agreement (the share of equal labels) and Cohen's kappa (the agreement beyond
what the two labelers' own pass rates give by chance; Cohen 1960; equal to `sklearn.metrics.cohen_kappa_score`);
over all labelers Krippendorff's nominal alpha (Krippendorff 2011) on the items labeled at least twice; each with
a 95% percentile-bootstrap interval over items (seeded). Kappa is undefined (shown as such, never 0) when both
labelers gave one and the same label to every shared item.

A **disagreement** is an item two labelers labeled differently (pass against fail). An **adjudication** is a
label line that says it resolves one (``"adjudication": true`` on the journal line, `ADJUDICATION_KEY`): the last
adjudication standing on an id is its resolved label, and the item leaves the disagreement queue. Adjudications
do not count in the agreement (they are not an independent opinion). Readers of the journal that do not know the
key read an adjudication as the id's last line, which is the resolution too (last line wins).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rubricforge_dspy.data.label_journal import JournalLine

__all__ = ["ADJUDICATION_KEY", "AdjudicationLine", "Agreement", "PairAgreement", "LabelerView", "labeler_view",
           "agreement"]

ADJUDICATION_KEY = "adjudication"  # on a journal line: this label resolves a disagreement between labelers


@dataclass(frozen=True)
class AdjudicationLine(JournalLine):
    """A journal line that resolves a disagreement between labelers (written with ``"adjudication": true``)."""

    def to_record(self) -> dict[str, Any]:
        return {**super().to_record(), ADJUDICATION_KEY: True}

    @classmethod
    def of(cls, line: JournalLine) -> "AdjudicationLine":
        """The same line, marked as an adjudication."""
        return cls(**{name: getattr(line, name) for name in JournalLine.__dataclass_fields__})


def _stat(value: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """``(value, low, high)`` of a `labeler_agreement` statistic, None where it is undefined (nan)."""
    stat, low, high = (None if not isinstance(value.get(key), float) or math.isnan(value[key]) else float(value[key])
                      for key in ("value", "low", "high"))
    return stat, low, high


@dataclass(frozen=True)
class PairAgreement:
    """Two labelers' agreement on the items both labeled, with percentile-bootstrap intervals over items.

    Attributes:
        a, b: the labelers' names.
        shared: items both labeled (pass or fail).
        agree: of those, the items they gave the same label.
        kappa: Cohen's kappa, or None when undefined (both gave one and the same label throughout).
        kappa_low, kappa_high: its interval (None when undefined).
        raw_low, raw_high: the raw agreement's interval.
    """

    a: str
    b: str
    shared: int
    agree: int
    kappa: float | None
    kappa_low: float | None = None
    kappa_high: float | None = None
    raw_low: float | None = None
    raw_high: float | None = None

    @property
    def raw(self) -> float | None:
        """The raw agreement (``agree / shared``), or None without a shared item."""
        return self.agree / self.shared if self.shared else None


@dataclass(frozen=True)
class Agreement:
    """Every pair's `PairAgreement`, and over all labelers Krippendorff's nominal alpha (with its interval) on
    the `items` labeled by at least two; `interval` says how the intervals were made."""

    pairs: list[PairAgreement]
    items: int
    alpha: float | None
    alpha_low: float | None
    alpha_high: float | None
    interval: dict[str, Any]


def agreement(labels: Mapping[str, Mapping[str, int]], seed: int = 0) -> Agreement:
    """The labelers' agreement (`metrics.agreement.labeler_agreement`: raw agreement and Cohen's kappa per pair,
    equal to `sklearn.metrics.cohen_kappa_score` on the shared items; Krippendorff's nominal alpha overall; 95%
    percentile-bootstrap intervals over items, seeded).

    Args:
        labels: labeler -> (id -> label 0/1), as `LabelerView.labels`.
        seed: the bootstrap's seed.
    """
    from rubricforge_dspy.metrics.labelers import labeler_agreement

    ids = sorted({ident for by in labels.values() for ident in by})
    ratings = [{name: by[ident] for name, by in labels.items() if ident in by} for ident in ids]
    found = labeler_agreement(ratings, seed=seed)
    pairs = []
    for pair in found["pairs"]:
        a, b = pair["a"], pair["b"]
        shared = [ident for ident in labels[a] if ident in labels[b]]
        kappa, kappa_low, kappa_high = _stat(pair["kappa"])
        _, raw_low, raw_high = _stat(pair["agreement"])
        pairs.append(PairAgreement(a, b, len(shared), sum(labels[a][i] == labels[b][i] for i in shared), kappa,
                                   kappa_low, kappa_high, raw_low, raw_high))
    alpha, alpha_low, alpha_high = _stat(found["alpha"])
    return Agreement(pairs, found["items"], alpha, alpha_low, alpha_high, found["interval"])


@dataclass(frozen=True)
class LabelerView:
    """What several labelers did on one journal (module docstring).

    Attributes:
        labels: labeler -> (id -> label 0/1), adjudications left out.
        adjudicated: id -> the label of the adjudication standing on it.
        disagreements: ids two labelers labeled differently, with no adjudication standing, in `order`.
    """

    labels: dict[str, dict[str, int]]
    adjudicated: dict[str, int]
    disagreements: list[str]

    def of(self, ident: str) -> list[tuple[str, int]]:
        """``(labeler, label)`` of every labeler who labeled `ident`, by name."""
        return [(name, self.labels[name][ident]) for name in sorted(self.labels) if ident in self.labels[name]]


def labeler_view(states: Mapping[str, Sequence[JournalLine]], order: Sequence[str] | None = None) -> LabelerView:
    """Each labeler's labels, the adjudications and the open disagreements (their agreement: `agreement`).

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
    return LabelerView(labels, adjudicated, ordered)
