"""`load_judge`: a saved judge file -> the judge it describes, ready to call.

A plain program loads as a `TrajectoryJudge`; one whose manifest holds a hybrid stack (`judge.hybrid`)
as a `HybridJudge`; a floor file (`judge.floor`, ``"kind": "rubricforge.symptom_floor"``) as a
`FloorJudge`; a cascade file (`judge.cascade`, ``"judge": {"kind": "rubricforge.cascade"}``) as a
`Cascade`, each stage loaded by `load_judge` after its sha256 is checked; a recorded stage
(``"kind": "rubricforge.recorded_judge"``) as a `RecordedJudge`, a hybrid over one
(``"rubricforge.recorded_hybrid"``) as a `HybridJudge`, both once their verdict file's sha256 is the recorded
one; a Python stage (``"rubricforge.python_stage"``) by importing what it names, only with ``allow_import``
(`judge.recorded`); a stage of any other registered kind (`judge.stage_kinds`) by its kind's ``load``. The
endpoint is never read
from the file: the LM is attached here, with ``set_lm``, or configured with `dspy.configure`. (Not
`dspy.load`, which loads DSPy's pickled whole programs and refuses these JSON files.)

`load_judge` is the one way to load a judge. `judge_from` resolves a ``program`` argument of the package's
entry points (a path, a judge, or None) through it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricforge_dspy.core.errors import InputError, RubricForgeDeprecationWarning
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.judge.cascade import is_cascade_file, read_cascade
from rubricforge_dspy.judge.contract import BaseJudge
from rubricforge_dspy.judge.explorer import EXPLORER_KIND, ExplorerJudge
from rubricforge_dspy.judge.floor import FLOOR_KIND, FloorError, FloorJudge, SymptomFloor
from rubricforge_dspy.judge.hybrid import HYBRID_KEY, RECORDED_HYBRID_KIND, HybridJudge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.recorded import PYTHON_STAGE_KIND, RECORDED_KIND, RecordedJudge, load_python_stage
from rubricforge_dspy.judge.segments import SEGMENTS_KIND, SegmentsJudge
from rubricforge_dspy.judge.stage_kinds import register_stage_kind, spec_kind, stage_kind
from rubricforge_dspy.program.store import ProgramError, read_json_document

if TYPE_CHECKING:
    import dspy

__all__ = ["load_judge", "load", "stage_from_spec"]


def _floor(data: dict[str, Any], path: Path, **_: Any) -> BaseJudge:
    try:
        return FloorJudge(SymptomFloor.from_dict(data, str(path)))
    except FloorError as error:
        raise ProgramError(f"{path}: malformed floor: {error}") from error


def _recorded_hybrid(data: dict[str, Any], path: Path, *, allow_unverified: bool = False, **_: Any) -> BaseJudge:
    try:
        return HybridJudge.from_recorded_document(data, path, allow_unverified)
    except FloorError as error:
        raise ProgramError(f"{path}: malformed hybrid stack: {error}") from error


# The package's own stage kinds (`judge.stage_kinds`); the platforms' are registered by `integrations.recorded`.
register_stage_kind(FLOOR_KIND, load=_floor, description="a symptom floor (features, no LM)")
register_stage_kind(RECORDED_KIND, suffix=".jsonl",
                    load=lambda data, path, *, allow_unverified=False, **_: RecordedJudge.from_document(
                        data, path, allow_unverified),
                    from_spec=lambda spec, **_: RecordedJudge.from_file(spec),
                    description="another tool's verdicts, recorded in a verdict JSONL")
register_stage_kind(RECORDED_HYBRID_KIND, load=_recorded_hybrid, description="a hybrid stack over a recorded stage")
register_stage_kind(PYTHON_STAGE_KIND, load=lambda data, path, *, allow_import=False, **_: load_python_stage(
    data, path, allow_import), description="a Python callable or judge, imported by name (only when allowed)")
register_stage_kind(SEGMENTS_KIND, load=lambda data, path, **_: SegmentsJudge.from_file(path),
                    description="an LLM judge reading a long episode in windows (every step read; --read segments)")
register_stage_kind(EXPLORER_KIND, load=lambda data, path, **_: ExplorerJudge.from_file(path),
                    description="an LLM judge exploring the episode with read-only tools (--read explore)")


def _stage_document(path: Path) -> dict[str, Any] | None:
    """The stage document `path` holds (a JSON document whose ``"kind"`` is a registered stage kind with a
    ``load``), or None when it is not one (a program is read by `read_program`).

    Raises:
        StageKindError: its kind is a third-party kind whose entry point was skipped.
    """
    if path.suffix != ".json":
        return None
    try:  # (a FIFO, a device, a file too large or nested too deeply: refused before it is read or parsed)
        data = read_json_document(path, "program")
    except InputError:
        return None  # read_program says what is wrong with it
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        return None
    kind = stage_kind(data["kind"])
    return data if kind is not None and kind.load is not None else None


def _stage(data: dict[str, Any], path: Path, allow_unverified: bool, allow_import: bool) -> BaseJudge:
    kind = stage_kind(data["kind"])
    if kind is None or kind.load is None:  # (`_stage_document` checked it)
        raise ProgramError(f"{path}: no stage kind {data['kind']!r} reads this file")
    stage = kind.load(data, path, allow_unverified=allow_unverified, allow_import=allow_import)
    if not isinstance(stage, BaseJudge):
        raise ProgramError(f"{path}: stage kind {kind.name!r} ({kind.origin}) gave {type(stage).__name__}, "
                           "not a judge (judge.contract.BaseJudge)")
    return stage


def stage_from_spec(spec: str, *, allow_unverified: bool = False, allow_import: bool = False,
                    **options: Any) -> BaseJudge:
    """The stage a ``--stage`` value names: a value with a registered kind's prefix (``mlflow:``, ``inspect:``;
    not an existing file) or suffix (``.jsonl``: a verdict file, a recorded stage) by that kind's
    ``from_spec``; else a saved judge (`load_judge`: a program, a floor, a stage file of any registered kind).

    Args:
        spec: the ``--stage`` value.
        allow_unverified, allow_import: as `load_judge` (also given to a kind's ``from_spec``).
        **options: given to a kind's ``from_spec`` (``mlflow_uri``).

    Raises:
        StageKindError: the value names a third-party kind that was skipped. As `load_judge` otherwise.
    """
    kind = spec_kind(spec)
    if kind is not None and kind.from_spec is not None and (kind.suffix or not Path(spec).exists()):
        stage = kind.from_spec(spec, allow_unverified=allow_unverified, allow_import=allow_import, **options)
        if not isinstance(stage, BaseJudge):
            raise ProgramError(f"--stage {spec}: stage kind {kind.name!r} ({kind.origin}) gave "
                               f"{type(stage).__name__}, not a judge (judge.contract.BaseJudge)")
        return stage
    return load_judge(spec, allow_unverified=allow_unverified, allow_import=allow_import)


def load_judge(path: PathArg, lm: dspy.BaseLM | None = None, check_certificate: bool = True,
               allow_unverified: bool = False, allow_import: bool = False) -> BaseJudge:
    """Load a saved judge, ready to call.

    Args:
        path: a frozen program (JSON, see `program.store`), a floor file (`SymptomFloor.to_json`), or a
            cascade file (`Cascade.save`).
        lm: a `dspy.LM` to attach (``judge.set_lm(lm)``); without one the judge uses the LM set later
            with ``set_lm``, or whatever `dspy.configure` sets.
        check_certificate: when the judge first runs with an LM (once per LM), warn
            `UncertifiedJudgeWarning` if the program (or the segments or explorer judge) has no certificate or
            that LM is not the one it was certified with (`program.drift.check_drift`). Loading itself never
            warns.
        allow_unverified: load a program whose manifest cannot verify it (no ``program_sha256``, or
            content that no longer matches it), or a recorded stage whose verdict file changed, warning
            `UnverifiedProgramWarning`; refused otherwise.
        allow_import: import the module a Python stage names (``module:attr``, `judge.recorded`); without it
            such a file (or a cascade holding one) is refused: loading a file never imports code unasked.

    Returns:
        A `TrajectoryJudge`; a `HybridJudge` when the program's manifest holds a hybrid stack; a
        `FloorJudge` for a floor file; a `Cascade` for a cascade file; a `RecordedJudge` (or a `HybridJudge`
        over one) for a recorded stage; the imported judge for a Python stage. All implement
        `judge.contract.BaseJudge`.

    Raises:
        ProgramError: the file is not a readable, verifiable, well-formed program (too large, malformed,
            edited after it was frozen, or without a manifest), unless `allow_unverified`; a recorded stage's
            verdict file changed; a Python stage without `allow_import`.
        VerdictLineError: a line of a recorded stage's verdict file that is not a verdict.
    """
    if is_cascade_file(path):
        return read_cascade(path, load_judge, lm=lm, check_certificate=check_certificate,
                            allow_unverified=allow_unverified, allow_import=allow_import)
    document = _stage_document(Path(path))
    if document is not None:
        stage = _stage(document, Path(path), allow_unverified, allow_import)
        if lm is not None and stage.predictors():
            stage.set_lm(lm)
        if check_certificate and isinstance(stage, (SegmentsJudge, ExplorerJudge)):  # certified as a program is
            stage.check_certificate_on_first_run(str(path))
        return stage
    judge = TrajectoryJudge()
    judge.load(path, allow_unverified=allow_unverified)
    if (judge.manifest or {}).get(HYBRID_KEY) is not None:
        try:
            judge = HybridJudge.from_judge(judge, str(path))
        except FloorError as error:
            raise ProgramError(f"{path}: malformed hybrid stack: {error}") from error
    if lm is not None:
        judge.set_lm(lm)
    if check_certificate:
        judge.check_certificate_on_first_run(str(path))
    return judge


def judge_from(program: Any, lm: Any = None, *, check_certificate: bool = True,
               allow_unverified: bool = False, allow_import: bool = False) -> BaseJudge:
    """The judge a ``program`` argument names: a path is loaded (`load_judge`, with these arguments), a judge
    is used as it is (`lm` attached when given), None is the seed judge (`TrajectoryJudge()`).

    Raises:
        ProgramError: as `load_judge`, for a path.
    """
    if isinstance(program, (str, os.PathLike)):
        return load_judge(program, lm=lm, check_certificate=check_certificate, allow_unverified=allow_unverified,
                          allow_import=allow_import)
    judge = TrajectoryJudge() if program is None else program
    if lm is not None:
        judge.set_lm(lm)
    return judge


def load(path: PathArg, lm: dspy.BaseLM | None = None, check_certificate: bool = True,
         allow_unverified: bool = False) -> BaseJudge:
    """Deprecated: `load_judge` (this name was easily mistaken for `dspy.load`). Same arguments."""
    warnings.warn("rubricforge_dspy.load is renamed load_judge (dspy.load is another function)",
                  RubricForgeDeprecationWarning, stacklevel=2)
    return load_judge(path, lm=lm, check_certificate=check_certificate, allow_unverified=allow_unverified)
