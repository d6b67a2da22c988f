"""Any judge as a cascade stage: recorded verdicts (another tool's, looked up by id) and Python judges (any
`BaseJudge`, or a callable returning a `Verdict`, saved by its import path).

**A recorded stage** (`RecordedJudge`) is a verdict file: lines of the verdict-line schema
(``core/schemas/verdict.schema.json``: ``id``, ``passed``, ``score``, ``abstained``, optional
``score_calibrated``...), written by ``rubricforge judge`` or by any other tool, or read once from an MLflow
assessment or an Inspect score (`integrations.recorded`). It looks a trajectory up by its id and makes no LM
call. It hands the item on (in a cascade: the next stage, or a person) when the id has no line (counted:
``n_missing``, ``missing_ids``) or when the line is an abstention (its error kept in the message). Every line
is checked when the file is read: a line that is not a verdict stops the read with its file and line
(`VerdictLineError`, exit 2), before any work.

**The tool's verdict is kept as it was given.** The stage decides with the line's ``passed``; the line's score
(``score_calibrated``, else ``score``) only orders the stage's confidence *within* that verdict
(`recorded_confidence`): a pass line's confidence lies in [0.5, 1], a fail line's in [0, 0.5), non-decreasing
in the score, and equal to the score wherever the score agrees with the verdict (every ordinary line). A
cascade's threshold pairs all straddle 0.5 (``t_fail < 0.5 <= t_pass``, `metrics.risk_control.stage_pairs`),
so a threshold can hand a recorded verdict on but never turn a pass into a fail or back.

**A line whose score contradicts its verdict** (`recorded_contradiction`: the line says so, ``contradiction``
true, or it has no calibrated score and its ``passed`` is not ``score >= PASS_THRESHOLD``: `core.verdict`'s
one contradiction rule, `Verdict.from_answer`) is neither a pass nor a fail of the tool: the stage hands it on
(to the next stage, or a person), counts it (``n_contradictions``, ``contradiction_ids`` over the lines;
``n_contradicted`` over the lookups), and reading the verdicts warns with the share
(`RecordedContradictionWarning`, `contradiction_note`): ``145 of 924 lines (16%) of <source> have a score
that contradicts their verdict: handed on``. A line with a calibrated score may come from a tool whose pass
threshold is on that score (RubricForge's false-pass cap): its ``passed`` stands, and only its own
``contradiction`` flag makes it a contradiction.

Its ``confidence_levels`` (the values its confidence can take, which shape the cascade's grid,
`trust.cascade.stage_levels`) are a property of the tool that wrote the file, inferred from the file through
the same mapping: ``(0.0, 1.0)`` when every decided line's confidence is 0 or 1 (a pass/fail tool), None
(continuous: the fixed grid) otherwise. A tool whose scores take a few known values (a 1-5 scale) should say
so: ``RecordedJudge.from_file(path, confidence_levels=(0, .25, .5, .75, 1))``.

**Cost.** A recorded stage makes no LM call in this process (``predictors()`` is empty), yet its verdicts are
what a user pays another tool for: ``cost_per_item`` is 1.0, one judge verdict per item it is asked about,
like an LM stage (`trust.cascade.stage_cost`: among equally good cascades the free floor decides first).

Storage (``save``; `judge.loading.load_judge` reads it back): a small JSON naming the verdict file by a
path relative to the JSON's folder and its sha256; loading refuses a verdict file whose sha256 differs
(`ProgramError`, exit 2, naming it)::

    {"kind": "rubricforge.recorded_judge", "version": 1, "source": "where the verdicts came from",
     "verdicts": {"path": "../verdicts.jsonl", "sha256": "..."}, "confidence_levels": [0.0, 1.0] | null,
     "lines": n}

The verdicts are referenced, not copied in: the file is the user's record of the other tool's work (often
large), and the reference keeps "this is not the file the cascade was fitted with" visible. Verdicts read
from a platform (MLflow, Inspect) have no file: ``save`` writes them once as a verdict JSONL beside the JSON
(``<stem>.verdicts.jsonl``) and references that.

**A Python stage** (`CallableJudge`, `as_stage`): any `BaseJudge` is a stage as it is; a callable
``fn(trajectory) -> Verdict`` (or a mapping with ``passed`` and ``score``) is wrapped in `CallableJudge`. A
cascade holding one saves it by the object's import path (``module:attr``, found with `import_path_of`)::

    {"kind": "rubricforge.python_stage", "version": 1, "import": "package.module:NAME",
     "confidence_levels": [...] | null}

Loading it imports code the file names, so `load_python_stage` refuses unless asked (``allow_import=True``,
``--allow-import-stage``); docs/SECURITY.md. An object with no import path (a lambda, a function defined
inside another, anything in ``__main__``) cannot be saved: `import_path_of` says why.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import dspy
import orjson

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict, VerdictLineError, check_line, read_lines
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.judge.contract import BaseJudge, JudgeT, trajectory_input, verdict_prediction
from rubricforge_dspy.judge.fingerprint import digest
from rubricforge_dspy.judge.recorded_lines import (
    HANDED_ON,
    RecordedContradictionWarning,
    checked_levels,
    confidence_levels_of,
    duplicate_id_error,
    file_sha256,
    recorded_confidence,
    recorded_contradiction,
    recorded_verdict,
)
from rubricforge_dspy.program.store import OVERRIDE_HINT, ProgramError, UnverifiedProgramWarning

__all__ = ["RECORDED_KIND", "PYTHON_STAGE_KIND", "HANDED_ON", "RecordedJudge", "CallableJudge", "as_stage",
           "import_path_of", "resolve_import", "load_python_stage", "save_python_stage", "recorded_verdict",
           "recorded_confidence", "recorded_contradiction", "RecordedContradictionWarning", "file_sha256"]
# HANDED_ON, recorded_verdict, recorded_confidence, recorded_contradiction, RecordedContradictionWarning and
# file_sha256 are defined in judge.recorded_lines (the verdict lines' rules) and re-exported here.

RECORDED_KIND = "rubricforge.recorded_judge"
PYTHON_STAGE_KIND = "rubricforge.python_stage"
VERSION = 1
_COUNT_LOCK = threading.Lock()  # module-level: a lock on the module would not survive dspy's deepcopy


class _TrajectoryStage(BaseJudge):
    """A stage that reads the `Trajectory` itself (its id, its steps), not a rendered text: its input is the
    trajectory; `render` is the default render, for a person reading what it judged."""

    def render(self, trajectory: Trajectory | str, config: RenderConfig | None = None) -> str:
        trajectory = trajectory_input(trajectory)
        return render_trajectory(trajectory, config or RenderConfig()) if isinstance(trajectory, Trajectory) \
            else trajectory

    def inputs_of(self, trajectory: Trajectory) -> dict[str, Any]:
        """``{"trajectory": trajectory}``: the stage reads the trajectory (no text is rendered for it)."""
        return {"trajectory": trajectory}


class RecordedJudge(_TrajectoryStage):
    """Recorded verdicts as a judge: looks a trajectory up by id, no LM call (see the module docstring).

    Args:
        verdicts: trajectory id -> `Verdict` (as `recorded_verdict` reads a line).
        source: where they came from (a file, an MLflow assessment, an Inspect score), for messages.
        path: the verdict file they were read from (None: from a platform; ``save`` writes them out).
        sha256: that file's sha256 (computed when omitted).
        confidence_levels: the values its confidence can take; ``"auto"`` infers them from the file.
        lines: the id -> verdict line records, kept when the verdicts came from a platform (what ``save``
            writes; None for a file, which is referenced as it is).
    """

    def __init__(self, verdicts: Mapping[str, Verdict], source: str, *, path: PathArg | None = None,
                 sha256: str | None = None, confidence_levels: Sequence[float] | str | None = "auto",
                 lines: Mapping[str, dict[str, Any]] | None = None):
        super().__init__()
        self.verdicts = dict(verdicts)
        self.source = source
        self.path = None if path is None else Path(path)
        self.sha256 = sha256 if sha256 is not None or self.path is None else file_sha256(self.path)
        self.lines = None if lines is None else dict(lines)
        self.confidence_levels = confidence_levels_of(self.verdicts.values()) if confidence_levels == "auto" \
            else checked_levels(confidence_levels, source)
        self.manifest = None
        self.stage_name = "recorded"
        self.contradiction_ids = sorted(ident for ident, v in self.verdicts.items() if v.contradiction)
        self.n_contradictions = len(self.contradiction_ids)
        self.reset_counts()

    def _warn_contradictions(self) -> "RecordedJudge":
        """Warn (`RecordedContradictionWarning`, at the reader's caller) when some lines contradict themselves."""
        note = self.contradiction_note()
        if note is not None:
            warnings.warn(note, RecordedContradictionWarning, stacklevel=3)
        return self

    cost_per_item: float = 1.0
    """What one item costs (`trust.cascade.stage_cost`, the fit's tie-break): 1.0, one judge verdict. The
    stage makes no LM call in this process, but its verdicts are another tool's judge calls, paid for once per
    item and again for every new item; so, like an LM stage, among equally good cascades the free floor
    decides first."""

    def contradiction_note(self) -> str | None:
        """``"k of n lines (p%) of <source> have a score that contradicts their verdict: handed on"``, or None
        when no line does (n counts the lines with a verdict, abstentions left out)."""
        if not self.n_contradictions:
            return None
        produced = sum(not v.abstained for v in self.verdicts.values())
        return (f"{self.n_contradictions} of {produced} lines ({self.n_contradictions / produced:.0%}) of "
                f"{self.source} have a score that contradicts their verdict: handed on (the first: "
                f"{self.contradiction_ids[0]!r})")

    # -- construction
    @classmethod
    def from_file(cls, path: PathArg, *, confidence_levels: Sequence[float] | str | None = "auto",
                  sha256: str | None = None) -> "RecordedJudge":
        """Read a verdict JSONL as a stream (`core.verdict.read_lines`: every line checked, ids unique); warns
        (`RecordedContradictionWarning`) with the share of lines whose score contradicts their verdict.

        Only the compact `Verdict` of each id is kept (its reason cut at `REASON_MAX_CHARS`), never the file's
        lines: the memory grows with the number of ids, not with the size of the file (a line's other fields
        are read and dropped).

        Raises:
            VerdictLineError: a line that is not a verdict, or a repeated id (file and line named).
            InputError: a missing file, a FIFO or a device.
        """
        where = regular_file(path, "verdict file")
        verdicts: dict[str, Verdict] = {}
        for number, line in read_lines(where):
            ident = line["id"]
            if ident in verdicts:
                raise duplicate_id_error(where, number, ident)
            verdicts[ident] = recorded_verdict(line, f"{where}:{number}")
        return cls(verdicts, str(path), path=path, sha256=sha256,
                   confidence_levels=confidence_levels)._warn_contradictions()

    @classmethod
    def from_lines(cls, lines: Iterable[Mapping[str, Any]], source: str, *,
                   confidence_levels: Sequence[float] | str | None = "auto") -> "RecordedJudge":
        """Verdict lines read from a platform (`integrations.recorded`): each checked, ids unique; ``save``
        writes them beside the stage file. Warns like `from_file` when some lines contradict themselves."""
        kept: dict[str, dict[str, Any]] = {}
        for number, line in enumerate(lines, 1):
            where = f"{source}: record {number}"
            check_line(dict(line), where)
            if line["id"] in kept:
                raise VerdictLineError(f"{where}: duplicate id {line['id']!r}")
            kept[line["id"]] = dict(line)
        verdicts = {ident: recorded_verdict(line, f"{source}: id {ident}") for ident, line in kept.items()}
        return cls(verdicts, source, confidence_levels=confidence_levels, lines=kept)._warn_contradictions()

    # -- counts
    def reset_counts(self) -> None:
        """Zero ``n_lookups``, ``n_missing``, ``missing_ids`` and ``n_contradicted`` (lookups handed on because
        the line contradicts itself)."""
        self.n_lookups = 0
        self.n_missing = 0
        self.missing_ids: list[str] = []
        self.n_contradicted = 0

    def _count(self, ident: str, verdict: Verdict | None) -> None:
        with _COUNT_LOCK:
            self.n_lookups += 1
            if verdict is None:
                self.n_missing += 1
                self.missing_ids.append(ident)
            elif verdict.contradiction:
                self.n_contradicted += 1

    # -- what makes it a judge like the others
    @property
    def rubric(self) -> str:
        return ""

    @property
    def rubric_sha256(self) -> str:
        """sha256 of the verdicts it holds (their file's sha256, or of the lines read from a platform)."""
        return digest({"recorded": self.sha256 or digest(self.lines or {}), "levels": self.confidence_levels})

    def operating_point(self) -> dict[str, Any]:
        return {"recorded": {"source": self.source, "sha256": self.sha256, "lines": len(self.verdicts),
                             "confidence_levels": None if self.confidence_levels is None
                             else list(self.confidence_levels)}}


    def forward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        """The recorded verdict of `trajectory` (by its id), or a hand-on: an abstention of kind `HANDED_ON`
        when the file has no line for it (counted) or its line is an abstention; a contradiction (counted) when
        the line's score contradicts its verdict (a cascade hands it on).

        Raises:
            InputError: text instead of a `Trajectory` (text has no id to look up).
        """
        trajectory = trajectory_input(trajectory)
        if not isinstance(trajectory, Trajectory):
            raise InputError("a recorded stage looks a trajectory up by its id: pass the Trajectory, not its text")
        verdict = self.verdicts.get(trajectory.id)
        self._count(trajectory.id, verdict)
        if verdict is None:
            verdict = Verdict.abstention(f"no recorded verdict for id {trajectory.id!r} in {self.source}", HANDED_ON)
        raw = None if verdict.abstained else {"passed": verdict.passed, "score": verdict.score}
        return verdict_prediction(verdict, raw)

    async def aforward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        """`forward` (a dictionary lookup)."""
        return type(self).forward(self, trajectory)

    # -- storage
    def to_document(self, folder: Path) -> dict[str, Any]:
        """The stage's JSON, its verdict file named relative to `folder` (where the JSON is written)."""
        if self.path is None or self.sha256 is None:
            raise ProgramError(f"{self.source}: these verdicts have no file yet; save the stage to write them out")
        relative = Path(os.path.relpath(self.path.resolve(), folder.resolve()))
        return {"kind": RECORDED_KIND, "version": VERSION, "source": self.source,
                "verdicts": {"path": relative.as_posix(), "sha256": self.sha256},
                "confidence_levels": None if self.confidence_levels is None else list(self.confidence_levels),
                "lines": len(self.verdicts)}

    def write_lines(self, path: Path) -> None:
        """Write verdicts read from a platform as a verdict JSONL at `path` and reference it from now on."""
        if self.lines is None:
            raise ProgramError(f"{self.source}: verdicts read from a file are referenced, not written again")
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in self.lines.values()))
        self.path, self.sha256, self.source = path, file_sha256(path), f"{path} (from {self.source})"
        self.lines = None

    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Write the stage JSON at `path` (see the module docstring); verdicts read from a platform are first
        written beside it as ``<stem>.verdicts.jsonl``."""
        if save_program:
            raise InputError("RecordedJudge saves as JSON only; pickled programs are not supported")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.path is None:
            self.write_lines(path.with_name(f"{path.stem}.verdicts.jsonl"))
        path.write_bytes(orjson.dumps(self.to_document(path.parent), option=orjson.OPT_INDENT_2
                                      | orjson.OPT_APPEND_NEWLINE))

    @classmethod
    def from_document(cls, data: Mapping[str, Any], path: Path, allow_unverified: bool = False) -> "RecordedJudge":
        """The stage a stage JSON (`to_document`) at `path` describes, its verdict file read once its sha256
        is the recorded one.

        Raises:
            ProgramError: malformed, the verdict file missing, or changed since (its sha256 differs; with
                `allow_unverified`, a warning `UnverifiedProgramWarning` instead).
            VerdictLineError: a line of the verdict file that is not a verdict.
        """
        ref = data.get("verdicts")
        if data.get("version") != VERSION or not isinstance(ref, Mapping) or not isinstance(ref.get("path"), str) \
                or not isinstance(ref.get("sha256"), str):
            raise ProgramError(f"{path}: malformed recorded stage: expected version {VERSION} and \"verdicts\": "
                               "{\"path\", \"sha256\"}")
        target = path.parent / ref["path"]
        try:
            regular_file(target, "verdict file")
        except InputError as error:
            raise ProgramError(f"{path}: its verdict file {target}: {error}") from None
        actual = file_sha256(target)
        if actual != ref["sha256"]:
            problem = (f"its verdict file {target} is not the file it was saved with (sha256 {actual[:12]}..., "
                       f"recorded {ref['sha256'][:12]}...): the recorded verdicts changed")
            if not allow_unverified:
                raise ProgramError(f"{path}: {problem}; refusing to load it. Fit the cascade again on the new "
                                   f"verdicts, or {OVERRIDE_HINT}")
            warnings.warn(f"{path}: {problem}; loaded anyway because unverified programs were allowed",
                          UnverifiedProgramWarning, stacklevel=3)
        levels = checked_levels(data.get("confidence_levels"), str(path))
        return cls.from_file(target, confidence_levels=levels, sha256=actual)

    def load(self: JudgeT, path: PathArg, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False,
             allow_unverified: bool = False) -> JudgeT:
        """Read a recorded stage JSON into this judge (`load_judge` is the usual way); returns it."""
        from rubricforge_dspy.program.store import read_json_document

        if allow_pickle:
            raise InputError(f"{path}: RecordedJudge loads JSON only, never pickles")
        loaded = RecordedJudge.from_document(read_json_document(path, "recorded stage"), Path(path), allow_unverified)
        self.__dict__.update({k: v for k, v in loaded.__dict__.items() if not k.startswith("_")})
        return self


# -- Python stages -----------------------------------------------------------------------------------------

def _verdict_of(answer: Any) -> Verdict:
    from rubricforge_dspy.judge.execution import as_verdict

    if isinstance(answer, Mapping):
        if answer.get("abstained"):
            return Verdict.abstention(str(answer.get("error") or "abstained"), answer.get("error_kind") or "other")
        return Verdict.from_answer(bool(answer["passed"]), float(answer["score"]), answer.get("reason", ""))
    return as_verdict(answer)


class CallableJudge(_TrajectoryStage):
    """A callable ``fn(trajectory) -> Verdict`` (or a `dspy.Prediction` / mapping with ``passed`` and
    ``score``) behind the judge contract, so it can be a cascade stage.

    Args:
        fn: called with what the judge is given: a `Trajectory` in a cascade (or text, when called with text).
        import_path: ``module:attr`` naming `fn` (default: found from the function, `import_path_of`).
        confidence_levels: the values its confidence can take (None: continuous).
    """

    needs_trajectory = True  # `fn` is given the Trajectory in a cascade

    def __init__(self, fn: Callable[[Any], Any], *, import_path: str | None = None,
                 confidence_levels: Sequence[float] | None = None):
        super().__init__()
        if not callable(fn):
            raise InputError(f"a callable stage needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.import_path = import_path
        self.confidence_levels = None if confidence_levels is None else tuple(sorted({float(v)
                                                                                      for v in confidence_levels}))
        self.manifest = None
        self.stage_name = getattr(fn, "__name__", "stage")

    @property
    def rubric(self) -> str:
        return ""

    @property
    def rubric_sha256(self) -> str:
        name = self.import_path or f"{getattr(self.fn, '__module__', '?')}:{getattr(self.fn, '__qualname__', '?')}"
        return digest({"callable": name, "levels": self.confidence_levels})

    def operating_point(self) -> dict[str, Any]:
        return {"callable": self.import_path or getattr(self.fn, "__qualname__", repr(self.fn))}


    def forward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        """`fn`'s verdict (its exceptions propagate: batch judging records them as abstentions)."""
        verdict = _verdict_of(self.fn(trajectory_input(trajectory)))
        return verdict_prediction(verdict, None if verdict.abstained else {"passed": verdict.passed,
                                                                            "score": verdict.score})

    async def aforward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        return type(self).forward(self, trajectory)

    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Write the stage JSON naming `fn` by its import path (`save_python_stage`)."""
        save_python_stage(self, Path(path))

    def load(self: JudgeT, path: PathArg, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False,
             allow_unverified: bool = False) -> JudgeT:
        raise InputError(f"{path}: load a Python stage with load_judge(path, allow_import=True)")


def as_stage(stage: Any) -> BaseJudge:
    """`stage` as a cascade stage: a `BaseJudge` as it is, a callable wrapped in `CallableJudge`.

    Raises:
        InputError: neither.
    """
    if isinstance(stage, BaseJudge):
        return stage
    if callable(stage) and not isinstance(stage, type):
        return CallableJudge(stage)
    raise InputError(f"a cascade stage is a judge (BaseJudge) or a callable returning a Verdict, got "
                     f"{type(stage).__name__}")


def resolve_import(path: str) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted); imports the module.

    Raises:
        InputError: not of that form, the module cannot be imported, or it has no such attribute.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or not all(part.isidentifier() for part in (*module_name.split("."),
                                                                                *attr.split("."))):
        raise InputError(f"an import path is 'package.module:name', got {path!r}")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise InputError(f"{path}: cannot import {module_name} ({error})") from None
    for part in attr.split("."):
        if not hasattr(value, part):
            raise InputError(f"{path}: {module_name} has no attribute {attr}")
        value = getattr(value, part)
    return value


def import_path_of(stage: BaseJudge) -> str:
    """The ``module:attr`` import path that names `stage` (a `CallableJudge`: its function), checked to
    resolve to that very object.

    Raises:
        ProgramError: why it has none: defined in ``__main__``, a lambda or a function defined inside
            another, or not a module-level name of its module (give it one, or set ``stage.import_path``).
    """
    target = stage.fn if isinstance(stage, CallableJudge) else stage
    what = f"{type(target).__name__} object" if not isinstance(stage, CallableJudge) \
        else f"function {getattr(target, '__qualname__', repr(target))}"
    path = getattr(stage, "import_path", None)
    if path is None and isinstance(stage, CallableJudge):
        module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
        if "<lambda>" in qualname or "<locals>" in qualname:
            raise ProgramError(f"the {what} has no import path (a lambda, or a function defined inside another): "
                               "define it at module level in an importable module")
        path = f"{module}:{qualname}" if module else None
    if path is None:
        module = sys.modules.get(type(target).__module__)
        names = [name for name, value in vars(module).items() if value is target] if module is not None else []
        if not names:
            raise ProgramError(f"the {what} is not a module-level name of {type(target).__module__}: a cascade saves "
                               "a Python stage by the import path that names it (module:attr); assign it to a "
                               "module-level name, or set stage.import_path = 'package.module:NAME'")
        path = f"{type(target).__module__}:{names[0]}"
    if path.partition(":")[0] == "__main__":
        raise ProgramError(f"the {what} is defined in __main__ (a script): loading could not import it again; "
                           "move it into an importable module")
    try:
        found = resolve_import(path)
    except InputError as error:
        raise ProgramError(f"the {what}: {error}") from None
    if found is not target:
        raise ProgramError(f"the {what}: {path} names another object; set stage.import_path to the name of this one")
    return path


def save_python_stage(stage: BaseJudge, path: Path) -> None:
    """Write `stage` as a Python stage JSON (its import path, `import_path_of`); `ProgramError` says why not."""
    levels = stage.confidence_levels
    document = {"kind": PYTHON_STAGE_KIND, "version": VERSION, "import": import_path_of(stage),
                "wraps": "callable" if isinstance(stage, CallableJudge) else "judge",
                "confidence_levels": None if levels is None else [float(v) for v in levels]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))


def load_python_stage(data: Mapping[str, Any], path: Path, allow_import: bool = False) -> BaseJudge:
    """The stage a Python stage JSON at `path` names: imported only with `allow_import`.

    Raises:
        ProgramError: import not allowed (the message names the import path and how to allow it), malformed,
            or the import path does not name a judge or a callable.
    """
    target = data.get("import")
    if data.get("version") != VERSION or not isinstance(target, str):
        raise ProgramError(f"{path}: malformed Python stage: expected version {VERSION} and an \"import\" path")
    if not allow_import:
        raise ProgramError(f"{path}: this stage is Python code to import ({target}); loading a file never imports "
                           "code unless asked: pass allow_import=True to load_judge (--allow-import-stage) if you "
                           "trust the file and that module")
    try:
        value = resolve_import(target)
    except InputError as error:
        raise ProgramError(f"{path}: {error}") from None
    levels = checked_levels(data.get("confidence_levels"), str(path))
    if isinstance(value, BaseJudge):
        return value
    if callable(value) and not isinstance(value, type):
        return CallableJudge(value, import_path=target, confidence_levels=levels)
    raise ProgramError(f"{path}: {target} is a {type(value).__name__}, not a judge (a BaseJudge object) or a "
                       "function returning a Verdict")
