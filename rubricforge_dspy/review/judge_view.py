"""The judge page's content, read from existing files only: the program, the run directory, the figures.

- the program (``--program``, `program.store.read_program`: verified like any load): its rubric, the
  criteria (`core.criteria.parse_criteria`), the operating point and the certificate in its manifest;
- the run directory (``--run-dir``, what `rubricforge induce --log-dir` / the protocol wrote): GEPA's
  candidates (``gepa/candidates.json``, or ``candidates.json``) with their validation scores (the
  ``sweep`` of ``run.json``), and the report's figures (``figures/*.png``);
- a diff between any two rubric versions (the program's and the candidates'), by `difflib`.

Figures are listed once, when the page starts; a request names a figure by its name in that list,
never by a path.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rubricforge_dspy.core.criteria import Criterion, parse_criteria
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.program.store import MANIFEST_KEY, read_program

__all__ = ["JudgeInfo", "RubricVersion", "load_judge_info", "rubric_diff"]

MAX_RUN_FILE_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class RubricVersion:
    """One rubric text to show or compare: its name, text, and validation scores when it is a candidate."""

    name: str
    text: str
    val_score: float | None = None
    val_agreement: float | None = None
    parents: tuple[Any, ...] = ()
    found_at: int | None = None


@dataclass
class JudgeInfo:
    program_path: str | None = None
    rubric: str = ""
    criteria: list[Criterion] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    versions: list[RubricVersion] = field(default_factory=list)
    figures: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def certificate(self) -> dict[str, Any] | None:
        value = self.manifest.get("certificate")
        return value if isinstance(value, dict) else None

    def operating_point(self) -> dict[str, Any]:
        return {key: self.manifest[key] for key in ("threshold", "calibration", "render", "model", "lm")
                if key in self.manifest}


def _read_json(path: Path, what: str) -> Any:
    regular_file(path, what)
    if path.stat().st_size > MAX_RUN_FILE_BYTES:
        raise InputError(f"{path}: larger than {MAX_RUN_FILE_BYTES} bytes; not a {what}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: not a readable {what} ({error})") from None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sweep(run_dir: Path, info: JudgeInfo) -> list[dict[str, Any]]:
    """The ``sweep`` rows of ``run.json``; a run file that cannot be read, is not JSON or holds the wrong types
    is a note on the judge page (the candidates are shown without their scores), never an error."""
    path = run_dir / "run.json"
    if not path.exists():
        return []
    try:
        run = _read_json(path, "run file")
    except (InputError, OSError) as error:
        info.notes.append(f"{path}: cannot be read ({error}); the candidates' validation scores are not shown")
        return []
    sweep = run.get("sweep") if isinstance(run, dict) else None
    if not isinstance(run, dict) or not isinstance(sweep, (list, type(None))):
        info.notes.append(f"{path}: not a run file (expected an object with a list \"sweep\", found "
                          f"{type(run).__name__ if not isinstance(run, dict) else 'sweep: ' + type(sweep).__name__});"
                          " the candidates' validation scores are not shown")
        return []
    listed = sweep or []
    rows = [row for row in listed if isinstance(row, dict)]
    if len(rows) != len(listed):
        info.notes.append(f"{path}: {len(listed) - len(rows)} of the {len(listed)} sweep rows are not objects; "
                          "they are left out")
    return rows


def _candidates(run_dir: Path, info: JudgeInfo) -> None:
    texts = None
    for path in (run_dir / "gepa" / "candidates.json", run_dir / "candidates.json"):
        if path.is_file():
            try:
                texts = _read_json(path, "GEPA candidates file")
            except (InputError, OSError) as error:
                info.notes.append(f"{path}: cannot be read ({error}); no candidates shown")
                return
            break
    sweep = _sweep(run_dir, info)
    if texts is None:
        info.notes.append(f"{run_dir}: no GEPA candidates.json (looked in gepa/ and the directory itself)")
        return
    if not isinstance(texts, list):
        info.notes.append(f"{run_dir}: candidates.json is not a list of candidates; no candidates shown")
        return
    rows = {row.get("candidate"): row for row in sweep}
    for number, candidate in enumerate(texts):
        text = candidate.get("judge") if isinstance(candidate, dict) else candidate
        if not isinstance(text, str):
            continue
        row = rows.get(number, {})
        parents = row.get("parents")
        found_at = row.get("discovered_at_metric_call")
        info.versions.append(RubricVersion(f"candidate {number}", text, _number(row.get("val_score")),
                                           _number(row.get("val_agreement")),
                                           tuple(parents) if isinstance(parents, list) else (),
                                           found_at if isinstance(found_at, int) and not isinstance(found_at, bool)
                                           else None))
    if not sweep:
        info.notes.append(f"{run_dir}: no sweep in run.json, so the candidates' validation scores are unknown")


def load_judge_info(program: PathArg | None = None, run_dir: PathArg | None = None,
                    figures_dirs: Iterable[PathArg] = (), *, allow_unverified: bool = False) -> JudgeInfo:
    """Everything the judge page shows (module docstring).

    Args:
        program: a frozen program file, or None.
        run_dir: an induction or protocol run directory, or None.
        figures_dirs: more directories whose ``*.png`` are shown (e.g. a report's ``figures/``).
        allow_unverified: read a program whose manifest cannot verify it, with a warning (`read_program`).

    Raises:
        ProgramError: the program cannot be read or verified.
        InputError: the run directory is not a directory (a run file that cannot be read is a note).
    """
    info = JudgeInfo()
    if program is not None:
        state = read_program(program, allow_unverified=allow_unverified)
        info.program_path = str(program)
        info.manifest = dict(state.get(MANIFEST_KEY) or {})
        info.rubric = state["judge"]["signature"]["instructions"]
        info.criteria = parse_criteria(info.rubric)
        info.versions.append(RubricVersion("program", info.rubric))
    dirs = [Path(d) for d in figures_dirs]
    if run_dir is not None:
        run_path = Path(run_dir)
        regular_file(run_path, "run directory", directory=True)
        _candidates(run_path, info)
        dirs.insert(0, run_path / "figures")
    for directory in dirs:
        if directory.is_dir():
            for path in sorted(directory.glob("*.png")):
                if path.is_file():
                    name = path.stem if path.stem not in info.figures else f"{directory.name}-{path.stem}"
                    info.figures[name] = path
    return info


def rubric_diff(a: RubricVersion, b: RubricVersion) -> list[tuple[str, str]]:
    """The unified diff of two rubric versions as ``(kind, line)``: kind ``add``, ``del``, ``hunk``,
    ``head`` or ``same``."""
    out = []
    for line in difflib.unified_diff(a.text.splitlines(), b.text.splitlines(), a.name, b.name, lineterm="", n=3):
        if line.startswith(("---", "+++")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        out.append((kind, line))
    return out
