"""The cascade: judges in order (the free floor first, LLM judges next), each deciding only when it is sure.

Each stage is a judge (`FloorJudge`, `TrajectoryJudge`, `HybridJudge`) with two thresholds on its
confidence: the stage's calibrated score when its verdict has one, else its score (the floor's: its
probability). It decides *pass* when ``confidence >= t_pass``, *fail* when ``confidence <= t_fail``, and
otherwise hands the trajectory to the next stage. A stage whose answer is not a verdict (unparseable,
truncated, invalid) or contradicts itself (``passed`` against its score) hands it on too. What no stage
decides is *escalated*: an abstention with error kind ``"escalated"`` (`core.verdict.ERROR_KINDS`), never
counted as a verdict: it goes to a person. An LM or network error is not an escalation: a call raises it,
``batch`` records it as that stage's LM-error abstention (retried on resume like any other).

The thresholds come from `trust.cascade.fit_cascade` (Learn-then-Test, `metrics.risk_control`), which
states the guarantee; this module only applies them.

``batch`` runs stage by stage: a later stage sees only what the earlier ones left, so a trajectory the
floor decides costs no LM call. Each stage judges its items through its own ``batch`` (``abatch``), which for
every `BaseJudge` is the in-memory batch engine (`judge.batching`: a bounded window of calls, failures
counted, the stage's dead-server circuit). Each verdict names its deciding stage: the Prediction's ``stage`` (name)
and ``stage_index`` (None when escalated); ``batch`` returns `CascadeVerdicts`, whose ``stages`` list
holds the same names (``"escalated"`` for an escalation).

Storage: a JSON file beside its stage files, with the manifest and integrity of a program
(`program.store.program_sha256` over the cascade's state and manifest)::

    {"judge": {"kind": "rubricforge.cascade", "version": 1,
               "stages": [{"name", "path" (relative to the cascade file), "sha256" (of the stage file),
                           "t_pass" (null: never passes), "t_fail" (null: never fails)}, ...]},
     "rubricforge": {"format_version", "kind", "versions", "created_at", "guarantee", "fit",
                     "program_sha256"}}

`read_cascade` verifies the cascade's hash and every stage file's sha256 before loading a stage. A stage of
this package's classes saves itself (a program, a floor, a hybrid, a cascade, a recorded stage naming its
verdict file by sha256); any other judge (a user's `BaseJudge`, a callable in `judge.recorded.CallableJudge`) is
saved by its import path, loaded only with ``allow_import`` (`judge.recorded`), or refused with the reason.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import warnings
from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import dspy
import orjson

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import REASON_MAX_CHARS, EvidenceRecord, Verdict
from rubricforge_dspy.evidence.features import feature_values
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.contract import (
    DEFAULT_MAX_CONSECUTIVE_LM_ERRORS,
    BaseJudge,
    JudgeT,
    trajectory_input,
    verdict_prediction,
)
from rubricforge_dspy.judge.execution import RetryPolicy
from rubricforge_dspy.judge.fingerprint import digest
from rubricforge_dspy.judge.module import VerdictFormatError
from rubricforge_dspy.judge.stage_rule import ESCALATED, CascadeVerdicts, StageRule, stage_confidence
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS
from rubricforge_dspy.lm.fingerprint import package_version
from rubricforge_dspy.program.store import (
    MANIFEST_KEY,
    MAX_PROGRAM_BYTES,
    OVERRIDE_HINT,
    PROGRAM_SHA_KEY,
    ProgramError,
    UnverifiedProgramWarning,
    program_sha256,
    read_json_document,
)

__all__ = ["CASCADE_KIND", "CASCADE_VERSION", "ESCALATED", "StageRule", "Cascade", "CascadeVerdicts",
           "stage_confidence", "read_cascade", "is_cascade_file"]

CASCADE_KIND = "rubricforge.cascade"
CASCADE_VERSION = 1
MAX_CASCADE_NESTING = 16  # cascades whose stages are cascades, this many deep at most (`read_cascade`)
# The cascade files being loaded, outermost first (`read_cascade`): a stage that is one of them is a cycle.
_LOADING: ContextVar[tuple[Path, ...]] = ContextVar("rubricforge_cascades_loading", default=())


def _save_stage(stage: BaseJudge, path: Path) -> None:
    """Save one stage: a stage of this package's classes, or of a registered stage kind (its ``kind``,
    `judge.stage_kinds`), saves itself (`_save_without_lm`); any other judge (a user's `BaseJudge`, a
    `judge.recorded.CallableJudge`) is saved by its import path (`judge.recorded.save_python_stage`), or refused
    with the reason (`ProgramError`)."""
    from rubricforge_dspy.judge.recorded import CallableJudge, save_python_stage
    from rubricforge_dspy.judge.stage_kinds import stage_kind

    own = type(stage).__module__.startswith("rubricforge_dspy.") and not isinstance(stage, CallableJudge)
    if own or (stage.kind is not None and stage_kind(stage.kind) is not None):
        _save_without_lm(stage, path)
    else:
        save_python_stage(stage, path)


def _save_without_lm(stage: BaseJudge, path: Path) -> None:
    """Save a stage with its predictors' LMs detached (a program never holds an LM; an LM whose engine
    cannot be dumped, such as a scripted or custom one, would otherwise refuse the save), then reattach them."""
    attached = [(predictor, predictor.lm) for predictor in stage.predictors()]
    for predictor, _ in attached:
        predictor.lm = None
    try:
        stage.save(path)
    finally:
        for predictor, lm in attached:
            predictor.lm = lm


def _accepts_features(stage: BaseJudge) -> bool:
    # (the class's forward: reading `stage.forward` off an instance makes DSPy warn of a direct call)
    return "features" in inspect.signature(type(stage).forward).parameters


def _reads_ids(stage: BaseJudge) -> bool:
    """A stage that looks trajectories up by id (a recorded stage, a hybrid over one: ``needs_trajectory``)."""
    return bool(stage.needs_trajectory)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Cascade(BaseJudge):
    """Judges in order, each deciding only past its thresholds (see the module docstring).

    Args:
        stages: the judges, cheapest first.
        rules: one `StageRule` per stage (or ``(t_pass, t_fail)`` pairs, named ``stage0``...).
        guarantee: what the thresholds were certified for (``alpha``, ``delta``, ``max_false_pass``, method,
            grid, and the ``label_rule`` the calibration labels were made with), recorded in the manifest; None
            for hand-set thresholds.
        fit: the fit report (`trust.cascade.FitReport.to_dict`), recorded in the manifest.
    """

    def __init__(self, stages: Sequence[BaseJudge], rules: Sequence[StageRule | tuple[float, float]],
                 guarantee: dict[str, Any] | None = None, fit: dict[str, Any] | None = None):
        super().__init__()
        if not stages or len(stages) != len(rules):
            raise InputError(f"a cascade needs one rule per stage, got {len(stages)} stages and {len(rules)} rules")
        self.stages = list(stages)
        self.rules = [r if isinstance(r, StageRule) else StageRule(f"stage{k}", float(r[0]), float(r[1]))
                      for k, r in enumerate(rules)]
        if len({r.name for r in self.rules}) != len(self.rules):
            raise InputError(f"stage names must differ, got {[r.name for r in self.rules]}")
        self.guarantee = guarantee
        self.fit_report = fit
        self.manifest: dict[str, Any] | None = None

    # -- identity
    def _text_stage(self) -> BaseJudge:
        return next((s for s in self.stages if s.rubric), self.stages[0])

    @property
    def rubric(self) -> str:
        """The first LLM stage's rubric ("" for a cascade of floors)."""
        rubric: str = self._text_stage().rubric
        return rubric

    @property
    def render_config(self) -> RenderConfig | None:
        return getattr(self._text_stage(), "render_config", None)

    @property
    def rubric_sha256(self) -> str:
        """sha256 over every stage's `rubric_sha256` and the thresholds."""
        return digest({"stages": [s.rubric_sha256 for s in self.stages], "rules": [r.to_dict() for r in self.rules]})

    def operating_point(self) -> dict[str, Any]:
        return {"cascade": [{**rule.to_dict(), "stage": stage.operating_point()}
                            for stage, rule in zip(self.stages, self.rules, strict=True)]}

    def check_certificate_on_first_run(self, where: str) -> None:
        for stage in self.stages:
            stage.check_certificate_on_first_run(where)

    def render(self, trajectory: Trajectory | str, config: RenderConfig | None = None) -> str:
        """The text the first LLM stage reads (every text stage reads it when the cascade is given text)."""
        text: str = self._text_stage().render(trajectory, config)
        return text

    def inputs_of(self, trajectory: Trajectory) -> dict[str, Any]:
        """``{"trajectory": text}`` plus ``features`` when a stage reads them (the floor, a hybrid)."""
        return self.reading_of(trajectory)[0]

    def reading_of(self, trajectory: Trajectory) -> tuple[dict[str, Any], EvidenceRecord | None]:
        """`inputs_of` and what its text shows of `trajectory` (the first LLM stage's `reading_of`; None
        when that stage does not say)."""
        stage = self._text_stage()
        reading_of = getattr(stage, "reading_of", None)
        evidence: EvidenceRecord | None = None
        if reading_of is not None:
            stage_inputs, evidence = reading_of(trajectory)
            text = stage_inputs["trajectory"]
        else:
            text = self.render(trajectory)
        inputs: dict[str, Any] = {"trajectory": text}
        if any(_accepts_features(s) for s in self.stages):
            inputs["features"] = feature_values(trajectory)
        return inputs, evidence

    # -- one trajectory
    def _stage_inputs(self, stage: BaseJudge, item: Trajectory | str,
                      features: Mapping[str, float] | None) -> dict[str, Any]:
        inputs: dict[str, Any] = {"trajectory": item}
        if features is not None and _accepts_features(stage):
            inputs["features"] = features
        return inputs

    def _decided(self, k: int, verdict: Verdict, passed: bool, confidence: float) -> Verdict:
        name = self.rules[k].name
        reason = " ".join(f"[{name}] {verdict.reason}".split())[:REASON_MAX_CHARS]
        return Verdict(passed=passed, score=verdict.score, reason=reason, score_calibrated=confidence,
                       attempts=verdict.attempts, evidence=verdict.evidence)  # what the deciding stage read

    def _escalated(self, handed: list[str], last: tuple[str, float] | None = None) -> Verdict:
        """The escalation: an abstention of kind ``"escalated"`` whose ``score_calibrated`` is the confidence of
        the last stage that gave one (`last`: its name and confidence; None when no stage gave one), so a
        person's queue can take the nearest-the-threshold first."""
        verdict = Verdict.abstention(f"escalated: no stage decided ({'; '.join(handed)})", ESCALATED)
        return verdict if last is None else replace(verdict, score_calibrated=last[1])

    def _step(self, k: int, prediction: dspy.Prediction, handed: list[str],
              last: list[tuple[str, float]]) -> dspy.Prediction | None:
        verdict = Verdict.from_dict(dict(prediction))
        confidence = stage_confidence(verdict)
        decision = self.rules[k].decide(confidence)
        if decision is None or confidence is None:  # (no confidence: never decided)
            handed.append(f"{self.rules[k].name}: " + ("no usable verdict" if confidence is None
                                                       else f"confidence {confidence:.3f}"))
            if confidence is not None:
                last[:] = [(self.rules[k].name, confidence)]
            return None
        return verdict_prediction(self._decided(k, verdict, decision, confidence), getattr(prediction, "raw", None))

    def _out(self, prediction: dspy.Prediction, k: int | None,
             last: list[tuple[str, float]] | None = None) -> dspy.Prediction:
        prediction["stage"] = self.rules[k].name if k is not None else ESCALATED
        prediction["stage_index"] = k
        if k is None:  # the escalating stage: the last one that gave a confidence (None: none did)
            prediction["escalated_by"] = last[0][0] if last else None
        return prediction

    def forward(self, trajectory: Trajectory | str, features: Mapping[str, float] | None = None) -> dspy.Prediction:
        """Judge one trajectory: each stage in turn until one decides.

        Args:
            trajectory: a `Trajectory` (each stage reads what it needs), or text (then `features` is needed
                by a floor or hybrid stage).
            features: the observable features (`evidence.features.feature_values`), with text.

        Returns:
            The contract's Prediction with ``stage`` and ``stage_index``; an escalation is an abstention
            with error kind ``"escalated"``.

        Raises:
            InputError: text without the features a stage needs. An LM stage's LM errors.
        """
        item = trajectory_input(trajectory)
        handed: list[str] = []
        last: list[tuple[str, float]] = []
        for k, stage in enumerate(self.stages):
            try:
                prediction = stage(**self._stage_inputs(stage, item, features))
            except VerdictFormatError as error:
                handed.append(f"{self.rules[k].name}: {error.kind} answer")
                continue
            decided = self._step(k, prediction, handed, last)
            if decided is not None:
                return self._out(decided, k)
        return self._out(verdict_prediction(self._escalated(handed, last[0] if last else None), None), None, last)

    async def aforward(self, trajectory: Trajectory | str,
                       features: Mapping[str, float] | None = None) -> dspy.Prediction:
        """The async `forward` (each stage's ``acall``)."""
        item = trajectory_input(trajectory)
        handed: list[str] = []
        last: list[tuple[str, float]] = []
        for k, stage in enumerate(self.stages):
            try:
                prediction = await stage.acall(**self._stage_inputs(stage, item, features))
            except VerdictFormatError as error:
                handed.append(f"{self.rules[k].name}: {error.kind} answer")
                continue
            decided = self._step(k, prediction, handed, last)
            if decided is not None:
                return self._out(decided, k)
        return self._out(verdict_prediction(self._escalated(handed, last[0] if last else None), None), None, last)

    # -- many at once, stage by stage
    def _items(self, examples: Iterable[Any]) -> list[Trajectory | str]:
        items = [trajectory_input(item) for item in examples]
        needs = any(_accepts_features(s) or _reads_ids(s) for s in self.stages)
        if needs and not all(isinstance(i, Trajectory) for i in items):
            raise InputError("a cascade with a floor, hybrid or recorded stage judges Trajectory objects in a batch "
                             "(their features are computed from the steps, a recorded verdict is found by id); got "
                             "rendered text")
        return items

    def settle(self, k: int, verdict: Verdict) -> Verdict | None:
        """What stage `k`'s `verdict` (from the stage's own ``batch``) makes of an item: the cascade's verdict
        when the stage settles it (it decided; or its LM failed, kept as that LM-error abstention: never an
        escalation), None when it hands the item on."""
        if verdict.abstained and verdict.error_kind in LM_ERROR_KINDS:
            return verdict
        confidence = stage_confidence(verdict)
        decision = self.rules[k].decide(confidence)
        return None if decision is None or confidence is None else self._decided(k, verdict, decision, confidence)

    def escalation(self, last: tuple[str, float] | None = None) -> Verdict:
        """The verdict of an item no stage decided in a batch: an abstention of kind ``"escalated"`` carrying
        the confidence of the stage that escalated it (`last`: the name and confidence of the last stage that
        gave one; `escalating` finds it) as ``score_calibrated``, named in the error."""
        why = "no stage was sure" if last is None else f"no stage was sure; last: {last[0]} confidence {last[1]:.3f}"
        return replace(self._escalated([why], last), attempts=0)

    def escalating(self, k: int, verdict: Verdict) -> tuple[str, float] | None:
        """``(stage name, confidence)`` of stage `k`'s `verdict` when it gave a confidence (it handed the item
        on unsure), else None: the caller keeps the last one for `escalation`."""
        confidence = stage_confidence(verdict)
        return None if confidence is None else (self.rules[k].name, confidence)

    def _settle(self, k: int, remaining: list[int], verdicts: Sequence[Verdict], final: dict[int, Verdict],
                stages: dict[int, str], last: dict[int, tuple[str, float] | None]) -> list[int]:
        """Record what stage `k` decided among `remaining` (its `verdicts`) in `final` and `stages` (by item
        index); return the indices it left (with their confidence in `last`)."""
        left = []
        for i, verdict in zip(remaining, verdicts, strict=True):
            settled = self.settle(k, verdict)
            if settled is None:
                left.append(i)
                last[i] = self.escalating(k, verdict) or last.get(i)
            else:
                final[i], stages[i] = settled, self.rules[k].name
        return left

    def _finish(self, n: int, final: dict[int, Verdict], stages: dict[int, str], remaining: list[int],
                calls: dict[str, int], last: dict[int, tuple[str, float] | None]) -> CascadeVerdicts:
        for i in remaining:
            final[i], stages[i] = self.escalation(last.get(i)), ESCALATED
        return CascadeVerdicts([final[i] for i in range(n)], [stages[i] for i in range(n)], calls)

    def batch(self, examples: Iterable[Any], num_threads: int | None = None, *,
              policy: RetryPolicy = RetryPolicy(),
              max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS,
              **ignored: Any) -> CascadeVerdicts:
        """Judge many trajectories stage by stage: stage k runs (its own ``batch``) only on what stages < k
        left, so a floor-decided trajectory costs no LM call. Failures are counted abstentions.

        Args:
            examples, num_threads, policy, max_consecutive_lm_errors, **ignored: as `BaseJudge.batch`.

        Returns:
            `CascadeVerdicts`, in input order.

        Raises:
            InputError: an item is not a trajectory, or is text where a stage needs features.
            JudgeUnavailableError: a stage's circuit opened.
        """
        items = self._items(examples)
        final: dict[int, Verdict] = {}
        stages: dict[int, str] = {}
        calls: dict[str, int] = {}
        last: dict[int, tuple[str, float] | None] = {}
        remaining = list(range(len(items)))
        for k, stage in enumerate(self.stages):
            if not remaining:
                break
            calls[self.rules[k].name] = len(remaining)
            verdicts = stage.batch([items[i] for i in remaining], num_threads, policy=policy,
                                   max_consecutive_lm_errors=max_consecutive_lm_errors, **ignored)
            remaining = self._settle(k, remaining, verdicts, final, stages, last)
        return self._finish(len(items), final, stages, remaining, calls, last)

    async def abatch(self, examples: Iterable[Any], concurrency: int = 32, *,
                     policy: RetryPolicy = RetryPolicy(),
                     max_consecutive_lm_errors: int | None = DEFAULT_MAX_CONSECUTIVE_LM_ERRORS) -> CascadeVerdicts:
        """The async `batch` (each stage's ``abatch``, stage by stage)."""
        items = self._items(examples)
        final: dict[int, Verdict] = {}
        stages: dict[int, str] = {}
        calls: dict[str, int] = {}
        last: dict[int, tuple[str, float] | None] = {}
        remaining = list(range(len(items)))
        for k, stage in enumerate(self.stages):
            if not remaining:
                break
            calls[self.rules[k].name] = len(remaining)
            verdicts = await stage.abatch([items[i] for i in remaining], concurrency, policy=policy,
                                          max_consecutive_lm_errors=max_consecutive_lm_errors)
            remaining = self._settle(k, remaining, verdicts, final, stages, last)
        return self._finish(len(items), final, stages, remaining, calls, last)

    # -- storage
    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Write the cascade JSON at `path` and each stage beside it (``<stem>.<stage name>.json``), the
        stages pinned by their sha256 (see the module docstring). Raises `ProgramError` for a non-.json path."""
        if save_program:
            raise InputError("Cascade saves as JSON only; pickled programs are not supported")
        path = Path(path)
        if path.suffix != ".json":
            raise ProgramError(f"{path}: a cascade is a JSON file (.json)")
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = []
        for stage, rule in zip(self.stages, self.rules, strict=True):
            stage_path = path.with_name(f"{path.stem}.{rule.name}.json")
            try:
                _save_stage(stage, stage_path)
            except ProgramError as error:
                raise ProgramError(f"{path}: stage {rule.name!r} cannot be saved: {error}") from None
            entries.append({**rule.to_dict(), "path": stage_path.name, "sha256": _sha256(stage_path)})
        manifest = {"format_version": 1, "kind": CASCADE_KIND,
                    "versions": {"rubricforge_dspy": package_version("rubricforge-dspy"),
                                 "dspy": package_version("dspy")},
                    "created_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
                    "guarantee": self.guarantee, "fit": self.fit_report}
        state = orjson.loads(orjson.dumps({"judge": {"kind": CASCADE_KIND, "version": CASCADE_VERSION,
                                                     "stages": entries}, MANIFEST_KEY: manifest}))
        state[MANIFEST_KEY][PROGRAM_SHA_KEY] = program_sha256(state)
        self.manifest = state[MANIFEST_KEY]
        path.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))

    def load(self: JudgeT, path: PathArg, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False,
             allow_unverified: bool = False, allow_import: bool = False) -> JudgeT:
        """Read a cascade file into this cascade's own stages, as DSPy's ``module.load`` reads a program into a
        module of the same structure: stage k of the file is loaded by ``self.stages[k].load`` (so a stage of
        another kind refuses it), after the cascade and every stage file are verified (`read_cascade`); the
        thresholds and manifest are the file's. To build a cascade from its file alone, use
        `judge.loading.load_judge`. Returns it.

        Raises:
            InputError: the file has another number of stages than this cascade. ProgramError: as `read_cascade`.
        """
        if allow_pickle:
            raise InputError(f"{path}: Cascade loads JSON only, never pickles")
        mine = iter(self.stages)

        def into_own_stage(stage_path: PathArg, **options: Any) -> BaseJudge:
            stage = next(mine, None)
            if stage is None:
                raise InputError(f"{path}: the file has more stages than this cascade ({len(self.stages)}); build "
                                 "the cascade from its file with load_judge(path)")
            own: BaseJudge = stage.load(stage_path, allow_unverified=options.get("allow_unverified", False))
            return own

        loaded = read_cascade(path, into_own_stage, allow_unverified=allow_unverified, check_certificate=False,
                              allow_import=allow_import)
        if next(mine, None) is not None:
            raise InputError(f"{path}: the file has {len(loaded.stages)} stage(s), this cascade {len(self.stages)}; "
                             "build the cascade from its file with load_judge(path)")
        self.stages, self.rules = loaded.stages, loaded.rules
        self.guarantee, self.fit_report, self.manifest = loaded.guarantee, loaded.fit_report, loaded.manifest
        return self


def _read_state(path: Path) -> dict[str, Any]:
    state = read_json_document(path, "cascade")
    judge = state.get("judge") if isinstance(state, dict) else None
    if not isinstance(state, dict) or not isinstance(judge, dict) or judge.get("kind") != CASCADE_KIND:
        raise ProgramError(f"{path}: not a cascade (expected \"judge\": {{\"kind\": \"{CASCADE_KIND}\"}})")
    if judge.get("version") != CASCADE_VERSION:
        raise ProgramError(f"{path}: cascade version {judge.get('version')!r}; this release reads {CASCADE_VERSION}")
    stages = judge.get("stages")
    if not isinstance(stages, list) or not stages or not all(
            isinstance(s, dict) and isinstance(s.get("path"), str) and isinstance(s.get("sha256"), str)
            and isinstance(s.get("name"), str) for s in stages):
        raise ProgramError(f"{path}: malformed cascade: 'judge.stages' must be a list of objects with a name, "
                           "a path and a sha256")
    return state


def _unverified(path: Path, problem: str, allow_unverified: bool) -> None:
    if not allow_unverified:
        raise ProgramError(f"{path}: {problem}; refusing to load it. Re-fit or re-save it from a trusted source, "
                           f"or {OVERRIDE_HINT}")
    warnings.warn(f"{path}: {problem}; loaded anyway because unverified programs were allowed",
                  UnverifiedProgramWarning, stacklevel=3)


def _threshold(value: object, default: float, where: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProgramError(f"{where}: a threshold must be a finite number or null, got {value!r}")
    return float(value)


def read_cascade(path: PathArg, load_stage: Callable[..., BaseJudge], *, lm: dspy.BaseLM | None = None,
                 check_certificate: bool = True, allow_unverified: bool = False,
                 allow_import: bool = False) -> Cascade:
    """Load a cascade file, verifying it and each stage file first.

    Args:
        path: the cascade ``.json`` (`Cascade.save`).
        load_stage: loads one stage file (`judge.loading.load_judge`), called as
            ``load_stage(stage_path, check_certificate=..., allow_unverified=...)``.
        lm: an LM to attach to the LLM stages (``set_lm``).
        check_certificate: as `load_judge`'s, for each stage.
        allow_unverified: load a cascade or stage whose hash does not match, warning
            `UnverifiedProgramWarning`; refused otherwise.
        allow_import: import the code a Python stage names (`judge.recorded.load_python_stage`); refused
            otherwise (passed to `load_stage` as ``allow_import``).

    Returns:
        The `Cascade`.

    Raises:
        ProgramError: naming the file: unreadable, malformed, edited after it was saved, a stage file
            missing, outside a relative path, or not the one whose sha256 the cascade recorded; a cascade
            that is its own stage, directly or through other cascades (a cycle, named), or cascades nested
            more than `MAX_CASCADE_NESTING` deep.
    """
    path = Path(path)
    chain = _LOADING.get()
    here = path.resolve()
    if here in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(here):], here))
        raise ProgramError(f"{path}: the cascade is a stage of itself (a cycle of stages: {cycle}); refusing to "
                           "load it: a stage must be a program, a floor, or a cascade outside the cycle")
    if len(chain) >= MAX_CASCADE_NESTING:
        raise ProgramError(f"{path}: cascades nested more than {MAX_CASCADE_NESTING} deep (a cascade whose stage "
                           f"is a cascade, and so on, from {chain[0]}); refusing to load it")
    token = _LOADING.set((*chain, here))
    try:
        return _read_cascade(path, load_stage, lm=lm, check_certificate=check_certificate,
                             allow_unverified=allow_unverified, allow_import=allow_import)
    finally:
        _LOADING.reset(token)


def _read_cascade(path: Path, load_stage: Callable[..., BaseJudge], *, lm: dspy.BaseLM | None, check_certificate: bool,
                  allow_unverified: bool, allow_import: bool) -> Cascade:
    state = _read_state(path)
    manifest = state.get(MANIFEST_KEY)
    recorded = (manifest or {}).get(PROGRAM_SHA_KEY) if isinstance(manifest, dict) else None
    if recorded is None or recorded != program_sha256(state):
        _unverified(path, f"does not match its manifest's {PROGRAM_SHA_KEY} (its stages, thresholds or manifest "
                          "were changed after it was saved, or it has none)", allow_unverified)
    stages: list[BaseJudge] = []
    rules: list[StageRule] = []
    for entry in state["judge"]["stages"]:
        relative = Path(entry["path"])
        if relative.is_absolute() or ".." in relative.parts:
            raise ProgramError(f"{path}: stage {entry['name']!r}: its path must be relative to the cascade file's "
                               f"folder and stay inside it, got {entry['path']}")
        stage_path = path.parent / relative
        if not stage_path.is_file():  # (a FIFO or a device is not a file: never opened)
            raise ProgramError(f"{path}: stage {entry['name']!r}: {stage_path} not found (a cascade's stage files "
                               "are kept beside it)")
        if stage_path.stat().st_size > MAX_PROGRAM_BYTES:
            raise ProgramError(f"{path}: stage {entry['name']!r}: {stage_path} is larger than a program "
                               f"({MAX_PROGRAM_BYTES} bytes); refusing to read it")
        if _sha256(stage_path) != entry["sha256"]:
            _unverified(path, f"stage {entry['name']!r}: {stage_path} is not the file the cascade was saved with "
                              "(its sha256 differs)", allow_unverified)
        stages.append(load_stage(stage_path, check_certificate=check_certificate, allow_unverified=allow_unverified,
                                 **({"allow_import": True} if allow_import else {})))
        where = f"{path}: stage {entry['name']!r}"
        rules.append(StageRule(entry["name"], _threshold(entry.get("t_pass"), math.inf, where),
                               _threshold(entry.get("t_fail"), -math.inf, where)))
    cascade = Cascade(stages, rules, (manifest or {}).get("guarantee"), (manifest or {}).get("fit"))
    cascade.manifest = manifest
    if lm is not None:
        cascade.set_lm(lm)
    return cascade


def is_cascade_file(path: PathArg) -> bool:
    """True when `path` is a ``.json`` file whose ``judge.kind`` is a cascade's (for `load_judge`'s dispatch);
    reads at most `MAX_PROGRAM_BYTES`, never a FIFO or a device, nothing nested too deeply
    (`program.store.read_json_document`: False, and the loader then says what is wrong with the file)."""
    path = Path(path)
    if path.suffix != ".json":
        return False
    try:
        data = read_json_document(path, "program")
    except InputError:
        return False
    return isinstance(data, dict) and isinstance(data.get("judge"), dict) and data["judge"].get("kind") == CASCADE_KIND
