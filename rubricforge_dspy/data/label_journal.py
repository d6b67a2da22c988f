"""The labels journal: an append-only JSONL of a person's labels, where a changed mind is a new line that wins.

`rubricforge review` writes it (one writer per file, one fsync per line: `rubricforge_dspy.review.labels`);
every command that reads ``--labels`` can read it. One line per action::

    {"rubricforge_labels": 1, "id": "t1", "label": 1, "skip": false, "note": "", "labeler": "ana",
     "time": "2026-11-27T20:31:04.123456+00:00", "undo": false, "sample": "audit", "audit": "3f9c..."}

- ``label``: 1 (pass), 0 (fail) or null (no label: skipped when ``skip`` is true, cleared otherwise);
- ``undo``: true on a line that restores the state the id had before its previous action (undo is a
  new line too: nothing is ever rewritten);
- ``sample``: which sample the labeled item came from (`SAMPLES`): ``"audit"`` (the seeded random audit sample
  `rubricforge label-next` / the page drew before any label, `trust.label_next.draw_audit`), ``"escalated"``
  (an item no stage of a cascade decided) or ``"other"`` (an item a person chose); absent on lines written before
  samples were recorded. ``audit`` is the digest of the audit draw an audit label belongs to;
- ``rubricforge_labels``: the format marker (version 1); any other key is kept but not read.

Only labels that are exchangeable with the population may calibrate a cascade's bound: `exchangeable_labels`
keeps the audit sample's labels (and labels from anywhere but a journal: the original calibration labels) and
leaves out, counted, the labels of escalated items (selected by the cascade itself: they train the stages),
of items a person chose, and of lines whose sample was not recorded.

The state of an id is its last line's (last wins). A line without a label (a skip, a cleared label)
joins nothing: as a generic label reader counts a blank row. `read_journal` resolves the file into the
package's `LabelFile` (the same record every ``--labels`` reader returns), and `journal_history`
replays it (the per-id states and the action order an undo pops).

Torn lines. The writer cuts a line it could not write whole back off the file, but a journal may still
hold one (a kill mid-write, or a full disk under an older writer, which then appended the next labels
right after the half line). Readers lose nothing silently: a line that is not whole JSON is a torn
line, counted (`LabelFile.torn`, `JournalHistory.torn`, the join summary) and logged as a warning;
when a whole journal line follows the torn text on the same line (the marker
``{"rubricforge_labels":`` cannot occur inside a JSON string, so it starts a line), that line is read.
A last line that is whole JSON but lacks its newline is read like any other.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import orjson

from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.data.label_records import LabelEntry, LabelFile, LabelFileError

if TYPE_CHECKING:
    from rubricforge_dspy.core.trajectory import LabelRule, Trajectory
    from rubricforge_dspy.data.formats import PathLike

__all__ = ["JOURNAL_KEY", "JOURNAL_VERSION", "SAMPLES", "JournalLine", "JournalHistory", "TornLine",
           "is_journal_record", "starts_a_journal", "iter_journal", "journal_history", "read_journal",
           "LabelSelection", "exchangeable_labels"]

logger = logging.getLogger(__name__)

JOURNAL_KEY = "rubricforge_labels"
JOURNAL_VERSION = 1
SAMPLES = ("audit", "escalated", "other")  # where a labeled item came from (module docstring)
_MARKER = re.compile(rb'\{\s*"' + JOURNAL_KEY.encode() + rb'"\s*:')  # how every journal line begins


@dataclass(frozen=True)
class JournalLine:
    """One action: the id's new state (label 1/0/None, skip, note), who and when, and whether it undid one."""

    id: str
    label: int | None
    skip: bool
    note: str
    labeler: str
    time: str
    undo: bool
    line: int
    sample: str | None = None  # "audit", "escalated", "other"; None on a line written before samples were recorded
    audit: str | None = None  # the digest of the audit draw an audit label belongs to

    @property
    def state(self) -> str:
        """``"pass"``, ``"fail"``, ``"skip"`` or ``"unlabeled"``."""
        if self.label is not None:
            return "pass" if self.label == 1 else "fail"
        return "skip" if self.skip else "unlabeled"

    def to_record(self) -> dict[str, Any]:
        """The line as written (`line` is where it was read, not part of it)."""
        record = {JOURNAL_KEY: JOURNAL_VERSION, "id": self.id, "label": self.label, "skip": self.skip,
                  "note": self.note, "labeler": self.labeler, "time": self.time, "undo": self.undo}
        if self.sample is not None:
            record["sample"] = self.sample
        if self.audit is not None:
            record["audit"] = self.audit
        return record


def is_journal_record(record: Any) -> bool:
    """True for a line of a labels journal (it carries the format marker)."""
    return isinstance(record, dict) and record.get(JOURNAL_KEY) == JOURNAL_VERSION


def starts_a_journal(first_line: bytes) -> bool:
    """True when `first_line` (a file's first line) is a labels-journal line, whole or torn (it begins as one).

    A CSV, a JSON array, a generic JSONL labels file or a SWE-bench report is not: ``--labels-out`` never
    writes into those (`review.labels.LabelsFile.open`)."""
    try:
        return is_journal_record(orjson.loads(first_line))
    except orjson.JSONDecodeError:
        return _MARKER.match(first_line.lstrip()) is not None


@dataclass(frozen=True)
class TornLine:
    """A line of the journal that is not whole JSON (a write cut short): where, and its text."""

    line: int
    text: bytes


def _line_of(record: Any, where: str, number: int) -> JournalLine:
    if not is_journal_record(record):
        raise LabelFileError(f"{where}: not a labels journal line (no \"{JOURNAL_KEY}\": {JOURNAL_VERSION}); a "
                             "journal holds only lines written by `rubricforge review`")
    ident, label = record.get("id"), record.get("label")
    if not isinstance(ident, str) or not ident:
        raise LabelFileError(f"{where}: missing id")
    if label is not None and (isinstance(label, bool) or label not in (0, 1)):
        raise LabelFileError(f"{where}: label must be 0, 1 or null, got {label!r} (id {ident})")
    texts = {key: record.get(key, "") for key in ("note", "labeler", "time")}
    for key, value in texts.items():
        if not isinstance(value, str):
            raise LabelFileError(f"{where}: {key} must be a string (id {ident})")
    skip, undo = record.get("skip", False), record.get("undo", False)
    if not isinstance(skip, bool) or not isinstance(undo, bool):
        raise LabelFileError(f"{where}: skip and undo must be true or false (id {ident})")
    if skip and label is not None:
        raise LabelFileError(f"{where}: a skipped item has no label (id {ident})")
    sample, audit = record.get("sample"), record.get("audit")
    if sample is not None and sample not in SAMPLES:
        raise LabelFileError(f"{where}: sample must be one of {', '.join(SAMPLES)} or absent, got {sample!r} "
                             f"(id {ident})")
    if audit is not None and not isinstance(audit, str):
        raise LabelFileError(f"{where}: audit must be the audit draw's digest (a string) (id {ident})")
    return JournalLine(ident, label, skip, texts["note"], texts["labeler"], texts["time"], undo, number, sample,
                       audit)


def _parse(raw: bytes) -> tuple[Any, bytes] | None:
    """``(record, torn text before it)`` for a line that is JSON whole, or whose tail after torn text is a
    journal line; None when no part of it is."""
    try:
        return orjson.loads(raw), b""
    except orjson.JSONDecodeError:
        pass
    for match in _MARKER.finditer(raw, 1):
        try:
            record = orjson.loads(raw[match.start():])
        except orjson.JSONDecodeError:
            continue
        if is_journal_record(record):
            return record, raw[:match.start()]
    return None


def iter_journal(path: PathArg, torn: list[TornLine] | None = None) -> Iterator[JournalLine]:
    """The lines of a labels journal, each checked, in file order.

    Args:
        path: the journal.
        torn: a list that receives each torn line (`TornLine`: not whole JSON, a write cut short; module
            docstring), which is then skipped; None refuses the file at the first torn line.

    Raises:
        LabelFileError: a line is not a journal line (naming the file and line), or torn when `torn` is None.
        MissingFileError, NotARegularFileError: as `core.files.regular_file`.
    """
    path = regular_file(path, "labels file")
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            parsed = _parse(raw.rstrip(b"\r\n"))
            if parsed is None or parsed[1]:
                if torn is None:
                    raise LabelFileError(f"{where}: a torn line (not whole JSON: a write was cut short there); "
                                         "`rubricforge review` on this file keeps its whole lines and reports it")
                torn.append(TornLine(number, raw if parsed is None else parsed[1]))
                if parsed is None:
                    continue
            yield _line_of(parsed[0], where, number)


def _say_torn(path: PathArg, torn: list[TornLine]) -> None:
    if torn:
        logger.warning("%s: %d torn line(s) (line %s): text a write cut short, not read; every whole label line "
                       "is read", path, len(torn), ", ".join(str(t.line) for t in torn[:10]))


@dataclass
class JournalHistory:
    """A journal replayed: each id's stack of states (the last is its state now) and the order of the
    actions an undo may still take back (ids, most recent last)."""

    states: dict[str, list[JournalLine]] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    torn: list[TornLine] = field(default_factory=list)

    def current(self, ident: str) -> JournalLine | None:
        stack = self.states.get(ident)
        return stack[-1] if stack else None

    def apply(self, line: JournalLine) -> None:
        """Replay one line: an action pushes the id's new state; an undo pops its last one."""
        if line.undo:
            stack = self.states.get(line.id) or []
            if stack:
                stack.pop()
            for position in range(len(self.actions) - 1, -1, -1):
                if self.actions[position] == line.id:
                    del self.actions[position]
                    break
            if not stack:
                self.states.pop(line.id, None)
            return
        self.states.setdefault(line.id, []).append(line)
        self.actions.append(line.id)


def journal_history(path: PathArg) -> JournalHistory:
    """Replay the journal at `path` (see `JournalHistory`); torn lines are skipped and listed in ``torn``."""
    history = JournalHistory()
    for line in iter_journal(path, history.torn):
        history.apply(line)
    _say_torn(path, history.torn)
    return history


def read_journal(path: PathArg) -> LabelFile:
    """A labels journal as the package's `LabelFile`: each id's last line wins; ids whose state is a
    skip or a cleared label are listed in ``blank`` (not joined), as a generic reader lists blank rows;
    the numbers of torn lines (module docstring) are in ``torn`` (and logged as a warning).

    Raises:
        LabelFileError: as `iter_journal`, or when no id has a label.
    """
    last: dict[str, JournalLine] = {}
    torn: list[TornLine] = []
    for line in iter_journal(path, torn):
        last[line.id] = line
    _say_torn(path, torn)
    out = LabelFile(str(path), "jsonl", {}, torn=[t.line for t in torn])
    for ident, line in last.items():
        if line.label is None:
            out.blank.append(ident)
        else:
            out.entries[ident] = LabelEntry(line.label, None, line.line)
    if not out.entries:
        raise LabelFileError(f"{path}: no labels (every id is skipped or unlabeled"
                             + (f"; {len(torn)} torn line(s) not read" if torn else "") + ")")
    return out


_LEFT_OUT = {"escalated": "escalated items (selected by the cascade itself)",
             "other": "items a person chose (not drawn at random)",
             None: "journal lines that do not record their sample (written before samples were)"}


@dataclass
class LabelSelection:
    """Which labeled trajectories may calibrate a bound (`exchangeable_labels`): ``kept`` (the original labels and
    the audit sample's), and the rest by the sample their label came from (``left_out``: ``"escalated"``,
    ``"other"``, ``"unrecorded"``), kept apart for the stages' training."""

    kept: list[Trajectory] = field(default_factory=list)
    audit: int = 0  # of kept: labels of the audit sample
    relabeled: int = 0  # of kept: items of the data with a label of their own that the journal relabeled
    left_out: dict[str, list[Trajectory]] = field(default_factory=dict)
    journal: str | None = None
    audit_draws: list[str] = field(default_factory=list)  # the digests of the audit draws the audit labels name

    @property
    def n_left_out(self) -> int:
        return sum(len(items) for items in self.left_out.values())

    def summary(self) -> str:
        """What the selection kept and left out, in words (empty when no label came from a journal)."""
        if self.journal is None:
            return ""
        text = (f"labels {self.journal}: {len(self.kept)} labeled trajectories calibrate the bound ({self.audit} of "
                f"them from the audit sample, the rest labeled outside the journal"
                + (f"; {self.relabeled} of those are items the data labeled, relabeled on the page" if self.relabeled
                   else "") + ")")
        if self.n_left_out:
            parts = [f"{len(items)} of {_LEFT_OUT[None if key == 'unrecorded' else key]}"
                     for key, items in self.left_out.items() if items]
            text += ("; left out of the bound, for the stages' training, not the calibration (not exchangeable with "
                     f"the population): {self.n_left_out} labels: " + "; ".join(parts))
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"journal": self.journal, "calibration": len(self.kept), "audit": self.audit,
                "relabeled": self.relabeled,
                "audit_draws": list(self.audit_draws),
                "left_out": {key: len(items) for key, items in self.left_out.items()}}


def exchangeable_labels(trajectories: Iterable[Trajectory], labels: PathArg | None, *,
                        data: PathLike | Iterable[PathLike] | None = None, data_format: str = "auto",
                        label_threshold: float | str | LabelRule | None = None) -> LabelSelection:
    """The labeled trajectories whose labels are exchangeable with the population, for a calibration bound.

    A label a person gave on the review page is exchangeable only when its item was drawn at random before any
    label was seen: the audit sample (``sample: "audit"``). Labels of escalated items were selected by the
    cascade (the hard ones), labels of items a person chose were selected by that person, and a line that does
    not say where its item came from cannot be told apart from those: all three are left out of the bound and
    counted (they still train the stages). Labels that did not come from the journal (the data's own, or a
    plain labels file: the original calibration labels) are kept, as before; so is an item of the data that had
    a label of its own before the journal relabeled it (it is in the calibration set whatever the cascade did
    with it: leaving the hard ones out would bias the bound the other way), counted as ``relabeled``.

    Args:
        trajectories: labeled trajectories, ``labels`` joined (`data.labels.LabelJoin` records each joined
            label's ``hidden["label_source"]``, ``FILE:LINE``).
        labels: the ``--labels`` file, or None. Anything but a labels journal keeps every trajectory.
        data, data_format, label_threshold: the data as the command read it (``--data``, ``--format``,
            ``--label-threshold``): read again without the journal, only when a journal label is to be left out,
            to find the items that had a label of their own. None: every journal label counts as the item's only
            one.

    Returns:
        `LabelSelection` (``journal`` None when `labels` is not a journal).

    Raises:
        LabelFileError: as `iter_journal`.
    """
    trajectories = list(trajectories)
    if labels is None:
        return LabelSelection(kept=trajectories)
    path = regular_file(labels, "labels file")
    with Path(path).open("rb") as handle:
        if not starts_a_journal(handle.readline(1 << 16).rstrip(b"\r\n")):
            return LabelSelection(kept=trajectories)
    last: dict[str, JournalLine] = {}
    for line in iter_journal(path, []):
        last[line.id] = line
    prefix = f"{path}:"
    selection = LabelSelection(journal=str(path), left_out={"escalated": [], "other": [], "unrecorded": []})
    draws: dict[str, None] = {}
    for trajectory in trajectories:
        source = str((trajectory.hidden or {}).get("label_source") or "")
        found = last.get(trajectory.id)
        if not source.startswith(prefix) or found is None or found.label is None:
            selection.kept.append(trajectory)  # not labeled by the journal: an original calibration label
        elif found.sample == "audit":
            selection.kept.append(trajectory)
            selection.audit += 1
            if found.audit:
                draws[found.audit] = None
        else:
            selection.left_out[found.sample or "unrecorded"].append(trajectory)
    selection.audit_draws = list(draws)
    if data is not None and selection.n_left_out:
        _keep_relabeled(selection, data, data_format, label_threshold)
    return selection


def _keep_relabeled(selection: LabelSelection, data: PathLike | Iterable[PathLike], data_format: str,
                    label_threshold: float | str | LabelRule | None) -> None:
    """Move back into ``kept`` the left-out trajectories whose data gave them a label of their own."""
    from rubricforge_dspy.data.formats import LoadReport, iter_trajectories

    wanted = {t.id for items in selection.left_out.values() for t in items}
    own = {t.id for t in iter_trajectories(data, format=data_format, label_threshold=label_threshold,
                                           on_error="skip", report=LoadReport())
           if t.id in wanted and t.label is not None}
    for key, items in selection.left_out.items():
        selection.left_out[key] = [t for t in items if t.id not in own]
        back = [t for t in items if t.id in own]
        selection.kept.extend(back)
        selection.relabeled += len(back)
