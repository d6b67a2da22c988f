"""The review queue: which item to look at first, and the filters over it.

Order (fixed when the page starts, so items do not move under the reviewer's hands):

1. items the cascade escalated (no stage decided them: a person is the last stage), nearest the pass
   threshold first by the confidence of the stage that escalated them (the line's ``score_calibrated``), those
   without one last;
2. the decided items of the **audit sample** (`trust.label_next.draw_audit`: a seeded uniform draw made before
   any label; their labels are the ones a cascade refit may calibrate on), in file order;
3. items `rubricforge label-next` picked (its output file, by its rank);
4. disagreements with an existing label (the verdict line's own ``label``, or a ``--labels`` file):
   false passes (passed, label 0) before false fails;
5. everything else, by label-next's closeness signal (`trust.label_next.closeness`: the nearer the score
   to the threshold, the more a label teaches), then file order.

Beside them, the live group ``disagreements`` (``group=disagreements``): the items two labelers labeled
differently and no adjudication resolved yet (`review.agreement`), computed afresh at each view.

Filters: queue group (``group=audit`` is the audit queue), task (any part of its name, in any case),
deciding stage, criterion (the rubric criterion the reason points at,
`core.criteria.attribute_reason`), symptom (`evidence.symptoms`), labeled or not. Criteria and symptoms
need every reason and every trajectory read once: `Enrichment` does that in a background thread after
the page has started, and the page says how far it got.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence

from rubricforge_dspy.core.criteria import Criterion, attribute_reason
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.evidence.symptoms import Symptoms, extract_symptoms
from rubricforge_dspy.review.agreement import labeler_view
from rubricforge_dspy.review.index import DataIndex, VerdictFileIndex
from rubricforge_dspy.trust.label_next import closeness

if TYPE_CHECKING:
    from rubricforge_dspy.review.labels import LabelsFile

logger = logging.getLogger(__name__)

__all__ = ["Filters", "Queue", "Enrichment", "symptom_names", "GROUPS", "DISAGREEMENTS"]

GROUPS = ("escalated", "audit", "label-next", "false pass", "false fail", "rest")
DISAGREEMENTS = "disagreements"  # a live group: items two labelers labeled differently, not yet adjudicated


def symptom_names(symptoms: Symptoms) -> list[str]:
    """The names of the symptoms a trajectory shows (for the filter and the item page)."""
    names = []
    for name, present in (("tool_error", symptoms.tool_errors), ("failed_commit", symptoms.failed_commits),
                          ("unbacked_claim", symptoms.unbacked_claim),
                          ("claim_after_failed_commit", symptoms.claim_after_failed_commit),
                          ("unconfirmed_commit", symptoms.unconfirmed_commits),
                          ("repeated_calls", symptoms.repeated_calls),
                          ("no_final_answer", not symptoms.has_final_answer),
                          ("forged_markers", symptoms.forged_marker_steps)):
        if present:
            names.append(name)
    return names


@dataclass(frozen=True)
class Filters:
    """The queue's filters; an empty string means "any". `labeled` is ``"yes"``, ``"no"`` or ``""``."""

    group: str = ""
    task: str = ""
    stage: str = ""
    criterion: str = ""
    symptom: str = ""
    labeled: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> "Filters":
        values = {name: str(query.get(name, "") or "")[:200] for name in cls.__dataclass_fields__}
        if values["labeled"] not in ("", "yes", "no"):
            values["labeled"] = ""
        if values["group"] not in ("", *GROUPS, DISAGREEMENTS):
            values["group"] = ""
        return cls(**values)

    def query(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if getattr(self, name)}


class Enrichment:
    """Criteria and symptoms of every item, computed once in a background thread (`start`)."""

    def __init__(self, verdicts: VerdictFileIndex, data: DataIndex | None, criteria: Sequence[Criterion]):
        self.verdicts, self.data, self.criteria = verdicts, data, list(criteria)
        self.criterion: list[str] = [""] * len(verdicts)
        self.symptoms: list[tuple[str, ...] | None] = [None] * len(verdicts)
        self.done = 0
        self.unreadable = 0  # trajectories whose record could not be read (counted, shown on the queue page)
        self.error: str | None = None
        self.finished = threading.Event()
        self.idle = threading.Event()  # clear while a request is being answered: requests go first
        self.idle.set()
        self._busy = 0
        self._stopped = False
        self._busy_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def stop(self) -> None:
        """End the background pass (the review is closing)."""
        self._stopped = True
        self.idle.set()

    def hold(self) -> None:
        """A request starts: the background pass waits (it holds the GIL for whole items otherwise)."""
        with self._busy_lock:
            self._busy += 1
            self.idle.clear()

    def release(self) -> None:
        with self._busy_lock:
            self._busy -= 1
            if self._busy <= 0:
                self._busy = 0
                self.idle.set()

    def start(self) -> "Enrichment":
        self._thread = threading.Thread(target=self._run, name="review-enrichment", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for index, record in self.verdicts.iter_records():
                self.idle.wait()
                if self._stopped:
                    return
                if self.criteria and record.get("reason"):
                    found = attribute_reason(record["reason"], self.criteria)
                    self.criterion[index] = found.label if found else ""
                if self.data is not None and record["id"] in self.data:
                    try:
                        trajectory = self.data.get(record["id"])
                    except InputError:  # a malformed record: its item page says what is wrong
                        self.unreadable += 1
                    else:
                        if trajectory is None:  # the id is in the data (checked above)
                            raise InputError(f"trajectory id {record['id']!r} is in --data's index but not read back")
                        self.symptoms[index] = tuple(symptom_names(extract_symptoms(trajectory)))
                self.done = index + 1
        except Exception as error:  # shown on the page: the filters stay incomplete, and say so
            self.error = f"{type(error).__name__}: {error}"
            logger.warning("review: criteria/symptoms stopped at item %d: %s", self.done, self.error)
        finally:
            self.finished.set()


class Queue:
    """The ordered items of a verdict file and the filtered views of them (module docstring).

    Args:
        verdicts: the verdict file's index.
        labels: the open labels journal (`review.labels.LabelsFile`): what is labeled now.
        label_next: id -> rank from a `label-next` output file (1 first), if given.
        existing: id -> label (0/1) from a ``--labels`` file, if given (else the verdict lines' own).
        enrichment: criteria and symptoms, when computed.
        audit: the ids of the audit sample's decided items (`trust.label_next.AuditDraw.decided`).
    """

    def __init__(self, verdicts: VerdictFileIndex, labels: LabelsFile, *, label_next: Mapping[str, int] | None = None,
                 existing: Mapping[str, int] | None = None, enrichment: Enrichment | None = None,
                 audit: Collection[str] = ()):
        self.verdicts, self.labels, self.enrichment = verdicts, labels, enrichment
        self.audit = frozenset(audit)
        self.label_next = dict(label_next or {})
        self.existing = dict(existing or {})
        self.groups: list[int] = []
        self.order = self._order()
        self._views: OrderedDict[Filters, tuple[list[int], dict[int, int]]] = OrderedDict()
        self._tasks: dict[str, list[int]] | None = None
        self._lock = threading.Lock()

    def known_label(self, index: int) -> int | None:
        ident = self.verdicts.ids[index]
        if ident in self.existing:
            return self.existing[ident]
        label = self.verdicts.labels[index]
        return None if label < 0 else label

    def _group(self, index: int) -> int:
        if self.verdicts.stages[index] == "escalated":
            return 0
        if self.verdicts.ids[index] in self.audit:
            return 1
        if self.verdicts.ids[index] in self.label_next:
            return 2
        label = self.known_label(index)
        passed = bool(self.verdicts.flags[index] & 1)
        if label is not None and int(passed) != label:
            return 3 if passed else 4
        return 5

    def _escalation_key(self, index: int, probe: dict[str, Any]) -> float:
        """An escalated item's place in its group: nearest the threshold first, by the confidence of the stage
        that escalated it (the line's ``score_calibrated``; an escalation is an abstention, so its ``score`` says
        nothing, but a line that is not an abstention is placed by its score). An escalation no stage gave a
        confidence for comes after the others (file order)."""
        confidence = self.verdicts.calibrated[index]
        if confidence != confidence:  # NaN: none recorded
            if probe["abstained"]:
                return 1.0
            confidence = probe["score"]
        return -closeness({"abstained": False, "score": confidence})

    def _order(self) -> list[int]:
        keys = []
        v = self.verdicts
        probe: dict[str, Any] = {}  # one mapping reused for label-next's closeness (it reads "abstained" and "score")
        for index in range(len(v)):
            group = self._group(index)
            self.groups.append(group)
            probe["abstained"], probe["score"] = bool(v.flags[index] & 2), v.scores[index]
            if group == 0:
                second = self._escalation_key(index, probe)
            elif group == 1:
                second = 0.0  # the audit sample: file order (its order must not favour any verdict)
            else:
                second = self.label_next.get(v.ids[index], 0) if group == 2 else -closeness(probe)
            keys.append((group, second, index))
        keys.sort()
        return [key[2] for key in keys]

    def group_name(self, index: int) -> str:
        return GROUPS[self.groups[index]]

    def labeled(self, index: int) -> bool:
        return self.labels.state(self.verdicts.ids[index]) is not None

    def _by_task(self) -> dict[str, list[int]]:
        if self._tasks is None:
            tasks: dict[str, list[int]] = {}
            names = self.verdicts.tasks
            for index in self.order:
                tasks.setdefault(names[index], []).append(index)
            self._tasks = tasks
        return self._tasks

    def _task_items(self, wanted: str) -> list[int]:
        """The items (in queue order) whose task name holds `wanted`, in any case (``"air"`` finds
        ``"airline/12"``)."""
        by_task = self._by_task()
        wanted = wanted.casefold()
        names = [name for name in by_task if wanted in name.casefold()]
        if len(names) == 1:
            return by_task[names[0]]
        keep, tasks = set(names), self.verdicts.tasks
        return [index for index in self.order if tasks[index] in keep]

    def _filtered(self, filters: Filters) -> list[int]:
        items = self._task_items(filters.task) if filters.task else self.order
        if filters.group == DISAGREEMENTS:  # computed afresh: every label may open or resolve one
            split = set(labeler_view(self.labels.history.states).disagreements)
            items = [i for i in items if self.verdicts.ids[i] in split]
        elif filters.group:
            wanted_group = GROUPS.index(filters.group)
            items = [i for i in items if self.groups[i] == wanted_group]
        if filters.stage:
            stages, wanted = self.verdicts.stages, filters.stage
            items = [i for i in items if stages[i] == wanted]
        enrichment = self.enrichment
        if filters.criterion:
            criteria = enrichment.criterion if enrichment is not None else None
            items = [i for i in items if criteria is not None and criteria[i] == filters.criterion]
        if filters.symptom:
            symptoms = enrichment.symptoms if enrichment is not None else None
            items = [i for i in items if symptoms is not None and filters.symptom in (symptoms[i] or ())]
        if filters.labeled:
            ids, want = self.verdicts.ids, filters.labeled == "yes"
            labeled = {ident for ident, stack in self.labels.history.states.items() if stack}
            items = [i for i in items if (ids[i] in labeled) == want]
        return list(items)

    def view(self, filters: Filters) -> tuple[list[int], dict[int, int]]:
        """The filtered order and each item's position in it. Views without a `labeled` filter are cached
        (the labeled filter changes with every label, so it is computed afresh)."""
        cacheable = not filters.labeled and filters.group != DISAGREEMENTS and (
            self.enrichment is None or self.enrichment.finished.is_set() or not (filters.criterion or filters.symptom))
        with self._lock:
            if cacheable and filters in self._views:
                self._views.move_to_end(filters)
                return self._views[filters]
        items = self._filtered(filters)
        result = (items, {index: position for position, index in enumerate(items)})
        if cacheable:
            with self._lock:
                self._views[filters] = result
                while len(self._views) > 16:
                    self._views.popitem(last=False)
        return result

    def progress(self) -> dict[str, int]:
        """``labeled`` (pass or fail), ``skipped`` and ``total`` over the items of this verdict file."""
        counts = {"pass": 0, "fail": 0, "skip": 0}
        for ident, stack in self.labels.history.states.items():
            if ident in self.verdicts.position and stack[-1].state in counts:
                counts[stack[-1].state] += 1
        return {"labeled": counts["pass"] + counts["fail"], "skipped": counts["skip"], "total": len(self.verdicts),
                **counts}

    def choices(self) -> dict[str, list[str]]:
        """The values each filter can take (stages, criteria and symptoms seen so far)."""
        stages = sorted(set(self.verdicts.stages) - {""})
        criteria, symptoms = [], []
        if self.enrichment is not None:
            criteria = sorted(set(self.enrichment.criterion) - {""})
            symptoms = sorted({name for names in self.enrichment.symptoms if names for name in names})
        return {"stage": stages, "criterion": criteria, "symptom": symptoms}
