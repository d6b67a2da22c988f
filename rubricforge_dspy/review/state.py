"""One open review: the verdict file, the data, the labels journal, the judge's files, and the queue.

`ReviewState.open` checks every input before the page starts (a missing or malformed file is an
`InputError` naming it), takes the labels file's lock, and starts the background pass that attributes
criteria and finds symptoms (`review.queue.Enrichment`).

The verdict file is indexed once, by byte offset (`review.index.VerdictFileIndex`): if it is rewritten
while the page runs, an offset would name another line. Its size, ``mtime_ns`` and inode are recorded at
open and checked before an item is shown and before a label is saved, and the line read must carry the
id the index holds; otherwise `VerdictFileChangedError` refuses the action (ids are never mixed).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rubricforge_dspy.core.criteria import attribute_reason
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.verdict import PassRule, line_evidence
from rubricforge_dspy.data.label_journal import JournalLine
from rubricforge_dspy.data.labels import read_label_file
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.evidence.symptoms import extract_symptoms
from rubricforge_dspy.review.agreement import LabelerView, labeler_view
from rubricforge_dspy.review.escalation import CascadeRun, read_cascade_run, stage_steps
from rubricforge_dspy.review.index import DataIndex, VerdictFileIndex, lookalike_groups
from rubricforge_dspy.review.judge_view import JudgeInfo, load_judge_info
from rubricforge_dspy.review.labels import LabelsFile
from rubricforge_dspy.review.queue import Enrichment, Queue, symptom_names
from rubricforge_dspy.review.reading import ReadingResolver
from rubricforge_dspy.review.sink import LabelSender, SinkStatus
from rubricforge_dspy.review.trajectory_view import trajectory_pages
from rubricforge_dspy.trust.label_next import AUDIT_SIZE, AuditDraw, draw_audit, read_audit, write_audit

logger = logging.getLogger(__name__)

__all__ = ["ReviewInputs", "ReviewState", "VerdictFileChangedError"]


class VerdictFileChangedError(InputError):
    """The verdict file changed since the page opened it: its items' places may name other ids now."""


def _file_identity(path: PathArg) -> tuple[int, int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns, found.st_ino


@dataclass
class ReviewInputs:
    """What a review opens (the ``rubricforge review`` flags).

    Attributes:
        data: the trajectories (files or directories, any supported format).
        verdicts: the verdict JSONL to review.
        labels_out: the labels journal the page appends to.
        labeler: the name kept on every label line.
        program: the frozen program that judged (rubric, criteria, render, operating point), optional.
        run_dir: an induction/protocol run directory (GEPA candidates, figures), optional.
        labels: an existing ``--labels`` file (for disagreements), optional.
        label_next: a `rubricforge label-next` output file (its order), optional.
        figures: more directories of report figures (``*.png``).
        render: the render the judge used when no program is given (default: the library's).
        data_format: the data's format, or "auto".
        allow_unverified_program: show a program whose manifest cannot verify it (with a warning), as
            ``--allow-unverified-program`` does elsewhere.
        audit: the record of an audit draw (`rubricforge label-next --audit` writes it); None: the page uses the
            draw recorded beside the labels file (``LABELS.audit.json``), or makes it there at start over every
            item of the verdict file (`trust.label_next.draw_audit`), before any label of this page.
        audit_size: the units (tasks, else items) the page's own draw takes; 0: no audit sample.
        audit_seed: the seed of the page's own draw (recorded with it).
    """

    data: Sequence[str | Path]
    verdicts: str | Path
    labels_out: str | Path
    labeler: str
    program: str | Path | None = None
    run_dir: str | Path | None = None
    labels: str | Path | None = None
    label_next: str | Path | None = None
    figures: Sequence[str | Path] = field(default_factory=tuple)
    render: RenderConfig | None = None
    data_format: str = "auto"
    allow_unverified_program: bool = False
    audit: str | Path | None = None
    audit_size: int = AUDIT_SIZE
    audit_seed: int = 0


def _audit_draw(inputs: ReviewInputs, verdicts: VerdictFileIndex) -> tuple[AuditDraw | None, Path | None]:
    """The audit sample the page proposes and where it is recorded (`ReviewInputs.audit`)."""
    if inputs.audit is not None:
        return read_audit(inputs.audit), Path(inputs.audit)
    if not inputs.audit_size:
        return None, None
    path = Path(f"{inputs.labels_out}.audit.json")
    if path.exists():  # drawn when this labels file was first reviewed: the same draw, whatever labels came since
        return read_audit(path), path
    draw = draw_audit(((ident, task, not (stage == "escalated" or flags & 2))
                       for ident, task, stage, flags in zip(verdicts.ids, verdicts.tasks, verdicts.stages,
                                                            verdicts.flags, strict=True)),
                      inputs.audit_size, inputs.audit_seed)
    write_audit(draw, path)
    logger.info("%s -> %s", draw.summary(), path)
    return draw, path


def _label_next_ranks(path: PathArg) -> dict[str, int]:
    ranks: dict[str, int] = {}
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError:
                raise InputError(f"{path}:{number}: not JSON; --label-next takes the file `rubricforge label-next` "
                                 "wrote") from None
            ident = record.get("id") if isinstance(record, dict) else None
            if not isinstance(ident, str):
                raise InputError(f"{path}:{number}: no id; --label-next takes the file `rubricforge label-next` wrote")
            rank = ((record.get("metadata") or {}).get("label_next") or {}).get("rank", number)
            ranks[ident] = int(rank)
    return ranks


class ReviewState:
    """An open review (module docstring); `close` releases the labels file.

    Args:
        inputs: what to review (`ReviewInputs`).
        on_label: called with each `JournalLine` the page appends (a label, a skip, an undo), after it is
            in the labels file: ``rubricforge review --to-mlflow`` passes the MLflow sink. It is called from a
            background thread (`review.sink.LabelSender`), one line at a time in the file's order, so a
            label is answered without waiting for it; a failure is counted in `sink` and shown on every
            page, and the line stays in the file. `close` sends what is still waiting.
        sink_name: what `on_label` sends to, as the page names it (``"MLflow"``).
    """

    def __init__(self, inputs: ReviewInputs, *, on_label: Callable[[JournalLine], Any] | None = None,
                 sink_name: str = "the label sink"):
        self.inputs = inputs
        self.on_label = on_label
        self.sink = SinkStatus(name=sink_name) if on_label is not None else None
        self._sender: LabelSender | None = None
        self._writing = threading.Lock()
        self.verdicts = VerdictFileIndex(inputs.verdicts)
        self._verdicts_identity = _file_identity(self.verdicts.path)  # (size, mtime_ns, inode) at open
        self.data = DataIndex(list(inputs.data), inputs.data_format)
        self.judge: JudgeInfo = load_judge_info(inputs.program, inputs.run_dir, inputs.figures,
                                                  allow_unverified=inputs.allow_unverified_program)
        manifest = self.judge.manifest
        program = None
        if inputs.program is not None:
            from rubricforge_dspy.judge.loading import load_judge

            program = load_judge(inputs.program, check_certificate=False,
                                 allow_unverified=inputs.allow_unverified_program)
        self.reading = ReadingResolver(self.verdicts.path, program, inputs.program, inputs.render)
        self.judge.notes.extend(self.reading.notes)
        self.render = self.reading.program_render or self.reading.default  # the --program's (else the default)
        self.lookalikes = lookalike_groups(self.verdicts.ids)
        threshold = (manifest.get("threshold") or {}).get("pass_threshold")
        self.rule = (PassRule("score_calibrated", float(threshold))
                     if manifest.get("calibration") is not None and threshold is not None else PassRule())
        existing = None
        if inputs.labels is not None:
            existing = {ident: entry.label for ident, entry in read_label_file(inputs.labels).entries.items()
                        if entry.label is not None}
        ranks = _label_next_ranks(inputs.label_next) if inputs.label_next is not None else None
        missing = sum(1 for ident in self.verdicts.ids if ident not in self.data)
        self.missing_data = missing
        if missing == len(self.verdicts):
            raise InputError(f"{inputs.verdicts}: none of its {missing} ids is in --data; give the data these "
                             "verdicts were judged on")
        self.labels = LabelsFile(inputs.labels_out, inputs.labeler).open()
        try:
            self.audit, self.audit_path = _audit_draw(inputs, self.verdicts)
        except BaseException:
            self.labels.close()
            raise
        self.audit_ids = frozenset(self.audit.ids) if self.audit is not None else frozenset()
        self.enrichment = Enrichment(self.verdicts, self.data, self.judge.criteria)
        self.queue = Queue(self.verdicts, self.labels, label_next=ranks, existing=existing,
                           enrichment=self.enrichment, audit=self.audit.decided if self.audit is not None else ())
        self.title = Path(inputs.verdicts).name
        self.cascade: CascadeRun | None = read_cascade_run(inputs.verdicts)
        if on_label is not None and self.sink is not None:
            self._sender = LabelSender(on_label, self.sink, str(inputs.labels_out))

    def start(self) -> "ReviewState":
        self.enrichment.start()
        return self

    def close(self) -> None:
        try:
            if self._sender is not None:
                self._sender.close()  # the labels still waiting go out first (or are counted as not sent)
        finally:
            self.enrichment.stop()
            self.labels.close()

    def wait_for_sink(self, timeout: float | None = None) -> bool:
        """Block until every line appended so far was sent to `on_label` or failed there (True), or until
        `timeout` seconds pass (False). True at once without `on_label`."""
        return self._sender.wait(timeout) if self._sender is not None else True

    def _send(self, line: JournalLine | None) -> JournalLine | None:
        if line is not None and self._sender is not None:
            self._sender.put(line)  # sent in the background, in the order of the file
        return line

    def verdicts_changed(self) -> str | None:
        """Why the verdict file is not the one the page opened (size, mtime or inode differ), or None."""
        now = _file_identity(self.verdicts.path)
        if now == self._verdicts_identity:
            return None
        return (f"{self.verdicts.path}: the verdict file changed since the page opened it ("
                + ("it is gone" if now is None else "size, modification time or inode differ")
                + "); its items may name other ids now, so nothing is shown or saved for them: stop the page and "
                "start `rubricforge review` again to review the file as it is now")

    def verdict_record(self, index: int) -> dict[str, Any]:
        """The verdict line of item `index`, read again from disk, once the file is checked unchanged.

        Raises:
            VerdictFileChangedError: the file changed since the page opened it, or the line read names
                another id than the index holds.
        """
        changed = self.verdicts_changed()
        if changed is None:
            try:
                record = self.verdicts.record(index)
            except ValueError:  # the offset fell inside another line
                record = None
            if isinstance(record, dict) and record.get("id") == self.verdicts.ids[index]:
                return record
            changed = (f"{self.verdicts.path}: the verdict file changed since the page opened it (item {index} "
                       f"is no longer {self.verdicts.ids[index]!r}); nothing is shown or saved for it: stop the "
                       "page and start `rubricforge review` again to review the file as it is now")
        raise VerdictFileChangedError(changed)

    def label(self, ident: str, choice: str, note: str = "", *, labeler: str | None = None,
              adjudication: bool = False) -> JournalLine:
        """Append a label to the labels file, then queue it for `on_label` (sent in the background, in the file's
        order; a failure there is counted).

        `labeler` names who labels (default: `ReviewInputs.labeler`); `adjudication` marks the label as resolving
        the item's disagreement between labelers (`review.agreement`).

        Raises:
            VerdictFileChangedError: the verdict file changed since the page opened it (nothing written).
            LabelNotSavedError: the labels file did not take the line (a full disk...; the file is unchanged).
        """
        with self._writing:  # one action at a time (requests run in threads): the file's order is MLflow's
            if ident in self.verdicts.position:
                self.verdict_record(self.verdicts.position[ident])
            sample = self.sample_of(ident)
            line = self.labels.label(ident, choice, note, sample=sample,
                                     audit=self.audit.digest if sample == "audit" and self.audit else None,
                                     labeler=labeler, adjudication=adjudication)
            self._send(line)
        return line

    def sample_of(self, ident: str) -> str:
        """Which sample an item's label comes from: ``"audit"`` (in the audit draw, decided or escalated: drawn at
        random before any label), ``"escalated"`` (no stage decided it), else ``"other"`` (a person chose it)."""
        if ident in self.audit_ids:
            return "audit"
        position = self.verdicts.position.get(ident)
        return "escalated" if position is not None and self.verdicts.stages[position] == "escalated" else "other"

    def audit_status(self) -> dict[str, Any] | None:
        """The audit sample as the queue page states it (None without one)."""
        if self.audit is None:
            return None
        decided = [ident for ident in self.audit.decided if ident in self.verdicts.position]
        labeled = sum(1 for ident in self.audit.ids  # a label given before the draw (another sample) counts not
                      if (line := self.labels.state(ident)) is not None and line.label is not None
                      and line.sample == "audit")
        return {"units": len(self.audit.units), "unit": self.audit.unit, "population": self.audit.population_units,
                "seed": self.audit.seed, "digest": self.audit.digest[:12], "decided": len(decided),
                "escalated": len(self.audit.escalated), "labeled": labeled, "items": len(self.audit.ids),
                "path": str(self.audit_path), "missing": len(self.audit.ids) - sum(
                    1 for ident in self.audit.ids if ident in self.verdicts.position)}

    def undo(self, labeler: str | None = None) -> JournalLine | None:
        """Undo the last action in the labels file (signed by `labeler`), then queue the restoring line for
        `on_label`."""
        with self._writing:
            return self._send(self.labels.undo(labeler))

    def labelers(self) -> LabelerView:
        """Every labeler's labels of this file, their pairwise agreement and the open disagreements, in queue
        order (`review.agreement.labeler_view`)."""
        ids = self.verdicts.ids
        states = {ident: stack for ident, stack in self.labels.history.states.items()
                  if ident in self.verdicts.position}
        return labeler_view(states, order=[ids[index] for index in self.queue.order])

    def escalation(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """An escalated line's escalating stage, each stage's confidence as far as the line records it, and the
        cascade's thresholds (`review.escalation`), or None for a line a stage decided."""
        if record.get("stage") != "escalated" and not record.get("escalated"):
            return None
        run = self.cascade
        cascade_stages = run.stages if run is not None else []
        names = [stage["name"] for stage in cascade_stages]
        by = record.get("escalated_by") if isinstance(record.get("escalated_by"), str) else None
        confidence = record.get("escalation_confidence", record.get("score_calibrated"))
        steps, complete = [], True
        for text in (record.get("reason"), record.get("error")):
            found, whole = stage_steps(text, names or None)
            if found:
                steps, complete = found, whole
                break
        parsed = {step.name: step for step in steps}
        order = names + [step.name for step in steps if step.name not in names]
        if by is not None and by not in order:
            order.append(by)
        at = order.index(by) if by is not None else None
        rows = []
        for k, name in enumerate(order):
            bounds = run.thresholds(name) if run is not None else None
            step = parsed.get(name)
            if step is not None:
                value, said = step.confidence, step.said
            elif name == by:
                value, said = confidence, "the last stage that gave a confidence: not sure, so it went to a person"
            elif at is None or k > at:
                value, said = None, "no usable confidence (no verdict, or an unparseable answer)"
            else:
                value, said = None, ("handed it on: not sure, or no usable verdict; the line does not record this "
                                     "stage's confidence")
            rows.append({"name": name, "confidence": value, "said": said, "escalating": name == by,
                         "t_pass": bounds.get("t_pass") if bounds else None,
                         "t_fail": bounds.get("t_fail") if bounds else None, "known": bounds is not None})
        notes = list(run.notes) if run is not None else [
            "no cascade run is recorded beside this verdict file (OUT.job.json of `rubricforge judge --cascade`): "
            "the cascade's stages and thresholds are not known"]
        if not steps:
            notes.append("the verdict line records the escalating stage and its confidence (escalated_by, "
                         "escalation_confidence) but not the confidences of the stages before it: they handed the item "
                         "on, so each was between its t_fail and t_pass or gave no usable verdict")
        elif not complete:
            notes.append("the line's reason is cut short: stages after the cut are not listed with a confidence")
        return {"escalated_by": by, "confidence": confidence, "stages": rows,
                "guarantee": run.guarantee if run is not None else None,
                "cascade_file": str(run.resolved or run.cascade_file) if run is not None and (
                    run.resolved or run.cascade_file) else None, "notes": notes}

    def enrichment_status(self) -> dict[str, Any]:
        e = self.enrichment
        return {"done": e.done, "total": len(self.verdicts), "finished": e.finished.is_set(), "error": e.error,
                "missing_data": self.missing_data, "unreadable": e.unreadable}

    def row(self, index: int) -> dict[str, Any]:
        """One queue row (what the index holds; nothing is read from disk)."""
        s = self.verdicts.summary(index)
        current = self.labels.state(s.id)
        return {"index": index, "id": s.id, "lookalikes": self.lookalikes.get(index, ()), "task": s.task_id,
                "stage": s.stage or "—", "passed": s.passed,
                "abstained": s.abstained, "score": s.score, "calibrated": s.score_calibrated,
                "group": self.queue.group_name(index), "known": self.queue.known_label(index),
                "review": current.state if current else "", "criterion": self.enrichment.criterion[index]}

    def item(self, index: int) -> dict[str, Any]:
        """Everything the item page shows: the verdict line, the evidence the judge read, the labels."""
        record = self.verdict_record(index)
        ident = record["id"]
        trajectory, problem = None, None
        try:
            trajectory = self.data.get(ident)
        except InputError as error:
            problem = str(error)
        if trajectory is None and problem is None:
            problem = f"no trajectory with id {ident!r} in --data: the evidence cannot be shown"
        found = attribute_reason(record.get("reason"), self.judge.criteria) if self.judge.criteria else None
        symptoms = extract_symptoms(trajectory) if trajectory is not None else None
        current = self.labels.state(ident)
        labelers = self.labelers()
        reading = self.reading.for_line(record)
        ids = self.verdicts.ids
        return {"index": index, "record": record, "id": ident, "group": self.queue.group_name(index),
                "lookalikes": [(other, ids[other]) for other in self.lookalikes.get(index, ())],
                "reading": reading, "steps": len(trajectory.steps) if trajectory is not None else None,
                "evidence": render_trajectory(trajectory, reading.render) if trajectory is not None else None,
                "read": evidence_read(record),
                "problem": problem, "explain": self.rule.explain(record), "rule": self.rule.to_dict(),
                "criterion": found.label if found else None, "symptoms": symptoms.lines() if symptoms else [],
                "symptom_names": symptom_names(symptoms) if symptoms else [],
                "stage": self.verdicts.stages[index] or None, "known": self.queue.known_label(index),
                "current": current, "labels": labelers.of(ident), "adjudicated": labelers.adjudicated.get(ident),
                "disagreement": ident in set(labelers.disagreements), "escalation": self.escalation(record)}

    def trajectory(self, index: int, page: int) -> dict[str, Any]:
        """One page of the whole trajectory of item `index` (every step, unclipped: `trajectory_pages`)."""
        record = self.verdict_record(index)
        ident = record["id"]
        try:
            trajectory = self.data.get(ident)
        except InputError as error:
            return {"index": index, "id": ident, "problem": str(error), "pages": 0, "page": 0, "pieces": []}
        if trajectory is None:
            return {"index": index, "id": ident, "problem": f"no trajectory with id {ident!r} in --data",
                    "pages": 0, "page": 0, "pieces": []}
        pages = trajectory_pages(trajectory)
        page = min(max(page, 0), len(pages) - 1)
        return {"index": index, "id": ident, "problem": None, "pages": len(pages), "page": page,
                "pieces": pages[page], "steps": len(trajectory.steps), "task": trajectory.task_id,
                "agent": trajectory.agent}

    def certificate_rows(self) -> list[tuple[str, str]]:
        certificate = self.judge.certificate or {}
        return [(str(key), json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value)
                for key, value in certificate.items()]

    def commands(self) -> list[dict[str, Any]]:
        """The commands that turn the labels into a recompiled and certified judge, with this run's real paths
        (shell-quoted): for a cascade run (its job record names the cascade file, `review.escalation`), the cascade
        refit with the run's stages and the certify of the refit cascade; for a program, induce and certify."""
        i = self.inputs
        q = shlex.quote
        labels, data = q(str(i.labels_out)), " ".join(q(str(d)) for d in i.data)
        out: list[dict[str, Any]] = []
        run = self.cascade
        if run is not None and run.stages and run.resolved is not None:
            stages = " ".join(f"--stage {q(stage['path'] or stage['name'])}" for stage in run.stages)
            g = run.guarantee or {}
            flags = "".join(f" --{flag} {q(str(g[key]))}" for flag, key in (("alpha", "alpha"), ("delta", "delta"),
                                                                             ("max-false-pass", "max_false_pass"))
                            if g.get(key) is not None)
            if " --alpha " not in flags:
                flags = " --alpha ALPHA" + flags  # the cascade records no guarantee (hand-set thresholds)
            refit = q(str(run.resolved.with_suffix("")) + ".refit.json")
            audit = self.audit_status()
            if audit is not None:
                why = (f"refit the cascade {run.resolved} with its stages: the labels of the audit sample "
                       f"({audit['labeled']} of its {audit['items']} items labeled so far, draw {audit['digest']}) "
                       "calibrate its bound; escalated and hand-picked items' labels are counted and left out of the "
                       "calibration (they train the stages). Add the original calibration data to --data to keep "
                       "its labels")
            else:
                why = (f"refit the cascade {run.resolved} with its stages: with no audit sample, only labels "
                       "exchangeable with the population calibrate (none of this page's: escalated and hand-picked "
                       "items are left out, counted); add the original calibration data to --data")
            out.append({"what": why, "command": f"rubricforge cascade fit {stages} --data {data} --labels {labels}"
                                                f"{flags} --out {refit}"})
            out.append({"what": "certify the refit cascade on labeled data (its disagreement and false-pass rate "
                                "among decided items, and its escalation rate)",
                        "command": f"rubricforge certify {refit} --data {data} --labels {labels}"})
            if i.program is None:
                return out
        program = q(str(i.program)) if i.program else "PROGRAM.json"
        new = q(str(Path(str(i.program or "program.json")).with_suffix("")) + ".relabeled.json")
        out += [
            {"what": "recompile: induce a new rubric starting from the current one, with your labels",
             "command": f"rubricforge induce --data {data} --labels {labels} --init {program} --out {new}"},
            {"what": "certify the recompiled judge on labeled data (bounds on its false-pass rate)",
             "command": f"rubricforge certify {new} --data {data} --labels {labels}"},
        ]
        if run is None or not run.stages:
            out.append({"what": "refit a cascade: only the audit sample's labels (and your original calibration "
                                "labels) calibrate its bound; escalated items' labels train the stages, not the "
                                "calibration",
                        "command": f"rubricforge cascade fit --stage STAGE... --data CALIBRATION {data} --labels "
                                   f"{labels} --alpha ALPHA --out cascade.json"})
        return out


def evidence_read(record: dict[str, Any]) -> str:
    """What the verdict line says its judge read (``evidence``), for a person: ``"read 16 of 103 steps; 87
    elided, 2 clipped, ..."`` or ``"read all 12 steps"``; a line without it says so (evidence unknown)."""
    try:
        evidence = line_evidence(record)
    except (KeyError, TypeError, ValueError):
        return "evidence unknown: the verdict line's evidence field does not add up"
    if evidence is None:
        return "evidence unknown: the verdict line does not say what the judge read"
    return evidence.describe()
