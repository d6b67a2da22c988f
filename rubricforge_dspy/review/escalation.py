"""What a cascade run recorded, for the review page: an escalated item's stages and the cascade's thresholds.

A cascade verdict line that no stage decided records ``stage: "escalated"``, ``escalated_by`` (the last stage that
gave a confidence, None when none did) and ``escalation_confidence`` (that confidence, also ``score_calibrated``).
**The line records no other stage's confidence**: ``rubricforge judge --cascade`` (`apply.cascade`) writes
``escalated: no stage was sure; last: NAME confidence 0.500`` as its error; what the page can say of the stages
before the escalating one is that they handed the item on (each between its ``t_fail`` and ``t_pass``, or without
a usable verdict), and of those after it that they gave no usable confidence. A line judged one trajectory at a
time (`judge.cascade.Cascade.forward`) lists every stage in its message (``escalated: no stage decided (floor:
confidence 0.480; judge: no usable verdict)``): those confidences are read back (`stage_steps`), matching the
cascade's own stage names when known; a message cut at the verdict's length limit loses the stages after the cut
(said on the page).

The thresholds are the cascade file's (``judge.stages[*].t_pass / t_fail``, and its ``guarantee``), the file the
run's job record names (``OUT.job.json``, ``cascade_runs[-1].cascade_file``, written by ``rubricforge judge
--cascade``). The file is read as JSON only, for display: no stage is loaded (a stage may be Python code) and
its hash is not checked here (``certify`` and ``judge --cascade`` check it before they use it).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["CascadeRun", "StageStep", "read_cascade_run", "stage_steps", "ESCALATION_PREFIX"]

ESCALATION_PREFIX = "escalated: no stage decided ("
MAX_FILE_BYTES = 20 * 1024 * 1024
_CONFIDENCE = re.compile(r"confidence (-?\d+(?:\.\d+)?(?:e-?\d+)?)")


@dataclass(frozen=True)
class StageStep:
    """One stage's answer on an escalated item: its confidence (None when it gave no usable one) and what the
    reason says of it (``"confidence 0.480"``, ``"no usable verdict"``, ``"truncated answer"``...)."""

    name: str
    confidence: float | None
    said: str


@dataclass
class CascadeRun:
    """The cascade a verdict file came from, as its job record and cascade file say.

    Attributes:
        cascade_file: the cascade file the job names (as written there).
        resolved: where it was found (None: not found or not readable; `notes` says why).
        stages: ``{"name", "path" (resolved when the file was found), "t_pass", "t_fail"}`` in cascade order.
        guarantee: the cascade's certified guarantee (alpha, delta, max_false_pass, method), or None.
        data_files: the data the run judged (from the job record).
        notes: what could not be read, in words.
    """

    cascade_file: str | None = None
    resolved: Path | None = None
    stages: list[dict[str, Any]] = field(default_factory=list)
    guarantee: dict[str, Any] | None = None
    data_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def thresholds(self, name: str) -> dict[str, Any] | None:
        for stage in self.stages:
            if stage.get("name") == name:
                return stage
        return None


def _read_json(path: Path) -> Any:
    if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError("not a regular file of at most 20 MB")
    return json.loads(path.read_text(encoding="utf-8"))


def _threshold(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_cascade_run(verdicts: str | Path) -> CascadeRun | None:
    """The cascade run that wrote `verdicts` (module docstring), or None when its job record names no cascade (a
    single judge's file, another tool's, or no ``OUT.job.json``). Never raises for a bad file: the reason is a
    note on the page."""
    job_path = Path(f"{verdicts}.job.json")
    try:
        job = _read_json(job_path) if job_path.exists() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # the render's reader (`review.reading`) already says the job record is unreadable
    runs = job.get("cascade_runs") if isinstance(job, dict) else None
    if not isinstance(runs, list) or not runs or not isinstance(runs[-1], dict):
        return None
    last = runs[-1]
    run = CascadeRun(cascade_file=last.get("cascade_file") if isinstance(last.get("cascade_file"), str) else None,
                     data_files=[str(d) for d in last.get("data_files") or [] if isinstance(d, str)])
    guarantee = last.get("guarantee")
    run.guarantee = guarantee if isinstance(guarantee, dict) else None
    if run.cascade_file is None:
        run.notes.append(f"{job_path}: the run records no cascade file; the thresholds are not known")
        return run
    given = Path(run.cascade_file)
    found = next((p for p in ([given] if given.is_absolute() else [given, Path(verdicts).parent / given])
                  if p.is_file()), None)
    if found is None:
        run.notes.append(f"{run.cascade_file}: the cascade file the run names is not found (looked in the current "
                         "directory and beside the verdict file); the thresholds are not known")
        return run
    try:
        state = _read_json(found)
        stages = state["judge"]["stages"]
        if not isinstance(stages, list):
            raise ValueError("judge.stages is not a list")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        run.notes.append(f"{found}: not a readable cascade file ({type(error).__name__}: {error}); the thresholds "
                         "are not known")
        return run
    run.resolved = found
    for entry in stages:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        path = entry.get("path")
        run.stages.append({"name": entry["name"], "t_pass": _threshold(entry.get("t_pass")),
                           "t_fail": _threshold(entry.get("t_fail")),
                           "path": str(found.parent / path) if isinstance(path, str) else None})
    manifest = state.get("rubricforge") if isinstance(state, dict) else None
    if isinstance(manifest, dict) and isinstance(manifest.get("guarantee"), dict):
        run.guarantee = manifest["guarantee"]
    return run


def stage_steps(reason: str | None, names: list[str] | None = None) -> tuple[list[StageStep], bool]:
    """Each stage's answer as an escalated line's reason lists it (module docstring), and whether the list
    looks complete (False: the reason is cut short or not a cascade's escalation reason).

    Args:
        reason: the verdict line's ``reason``.
        names: the cascade's stage names, in order, when known (a name holding ``"; "`` is then read whole).
    """
    if not isinstance(reason, str) or not reason.startswith(ESCALATION_PREFIX):
        return [], False
    body = reason[len(ESCALATION_PREFIX):]
    if body.startswith("no stage was sure"):  # the batch runner's form: only the last stage, kept in fields
        return [], True
    complete = body.endswith(")")
    body = body[:-1] if complete else body
    steps: list[StageStep] = []
    rest = body
    while rest:
        name = next((n for n in sorted(names or (), key=len, reverse=True) if rest.startswith(f"{n}: ")), None)
        if name is None:
            name, sep, _ = rest.partition(": ")
            if not sep:
                return steps, False
        said_and_more = rest[len(name) + 2:]
        said, sep, rest = said_and_more.partition("; ")
        match = _CONFIDENCE.fullmatch(said)
        steps.append(StageStep(name, float(match[1]) if match else None, said))
    return steps, complete
