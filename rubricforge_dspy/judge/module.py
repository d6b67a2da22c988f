"""The judge: a DSPy Signature whose instruction is the rubric, and the Module that applies it.

`TrajectoryJudge` is strict, as DSPy modules are: it returns a produced verdict or raises.
- An answer that is not strict JSON (DSPy's JSON adapter would repair it with ``json_repair``), or
  whose fields have the wrong types, raises `VerdictFormatError` (an `AdapterParseError`, so GEPA
  records it as a format failure and shows it to the reflection LM).
- An answer cut at ``max_tokens`` (finish reason ``length``) raises `VerdictFormatError` with kind
  ``truncated``, whatever could be salvaged from it: raised by the engines `lm.make_lm` builds, and
  seen by `StrictJSONAdapter` from the completion's finish reason for any other `dspy.LM`
  (`lm.watch_completions`), whether the answer came from the network or from DSPy's cache.
- LM and network errors propagate as DSPy's `LMError`s.

Turning a raised error into a recorded fail verdict (an abstention) is the job of the execution layer,
`rubricforge_dspy.judge.execution`, used by batch judging, the reward proxy and the audit. Induction uses
the strict judge directly and lets GEPA decide what an error means.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator

import dspy
from dspy.clients.errors import error_boundary
from dspy.utils.exceptions import AdapterParseError

from rubricforge_dspy._dspy_compat import PlannedResponseFormat, engine_specs, json_response_format
from rubricforge_dspy.core.errors import InputError, RubricForgeDeprecationWarning, RubricForgeError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.rubric import SEED_RUBRIC, rubric_sha256
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import REASON_MAX_CHARS, EvidenceRecord, PassRule, Verdict
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory, render_with_evidence
from rubricforge_dspy.judge.contract import BaseJudge, JudgeT, trajectory_input, verdict_prediction
from rubricforge_dspy.judge.operating_point import Calibration, from_manifest
from rubricforge_dspy.lm.copies import resolve_lm
from rubricforge_dspy.lm.engine import AsyncChatCompletionsEngine, CompiledRequest, RequestCaptured, capture_request
from rubricforge_dspy.lm.truncation import CompletionWatch, TruncatedCompletionError, watch_completions
from rubricforge_dspy.program.store import MANIFEST_KEY, ProgramError, read_program, save_judge

FORMAT_KINDS = ("parse", "truncated", "invalid")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class TrajectoryVerdictSignature(dspy.Signature):  # type: ignore[misc]  # (dspy is untyped)
    __doc__ = SEED_RUBRIC

    trajectory: str = dspy.InputField(desc="The agent episode: observable events only, numbered in order.")
    reason: str = dspy.OutputField(
        desc="One sentence naming the decisive observable evidence.", max_length=REASON_MAX_CHARS
    )
    passed: bool = dspy.OutputField(desc="True if the agent accomplished the user's task.")
    score: float = dspy.OutputField(desc="Probability in [0, 1] that the task was accomplished.")


def judge_signature(rubric: str = SEED_RUBRIC) -> type[dspy.Signature]:
    """`TrajectoryVerdictSignature` with `rubric` as its instruction.

    Args:
        rubric: the instruction (the rubric text).

    Returns:
        The Signature class (input ``trajectory``; outputs ``reason``, ``passed``, ``score``).
    """
    signature: type[dspy.Signature] = TrajectoryVerdictSignature.with_instructions(rubric)
    return signature


def __getattr__(name: str) -> type[TrajectoryVerdictSignature]:
    if name == "JudgeTrajectory":  # the Signature's old name, easily confused with the Module TrajectoryJudge
        warnings.warn("JudgeTrajectory is renamed TrajectoryVerdictSignature", RubricForgeDeprecationWarning,
                      stacklevel=2)
        return TrajectoryVerdictSignature
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class VerdictFormatError(AdapterParseError, RubricForgeError):  # type: ignore[misc]  # (dspy is untyped)
    """The LM answered, but not with a verdict: ``kind`` is ``parse`` (not strict JSON), ``truncated``
    (cut at max_tokens) or ``invalid`` (JSON with a wrong-typed or non-finite field)."""

    def __init__(self, kind: str, signature: type[dspy.Signature] | None, lm_response: str, message: str):
        if kind not in FORMAT_KINDS:
            raise ValueError(f"kind must be one of {FORMAT_KINDS}, got {kind!r}")
        self.kind = kind
        super().__init__(  # type: ignore[call-arg]  # dspy's base untyped
            adapter_name="StrictJSONAdapter", signature=signature, lm_response=lm_response or "", message=message)


@lru_cache(maxsize=256)
def _response_format(adapter_type: type[dspy.JSONAdapter], signature: type[dspy.Signature], supported: bool,
                     schema_ok: bool, native: bool) -> Any:
    """The response format DSPy's JSON adapter plans for `signature` (a pydantic model class it builds with
    `pydantic.create_model`, ~2 ms of CPU), computed once per signature instead of once per call."""
    return json_response_format(adapter_type(use_native_function_calling=native), signature,
                                supports_response_format=supported, supports_schema=schema_ok)


class StrictJSONAdapter(PlannedResponseFormat, dspy.JSONAdapter):  # type: ignore[misc]  # (dspy is untyped)
    """DSPy's JSON adapter, minus the repair: the answer must be one JSON object (optionally inside a
    single ```json fence). Anything `json_repair` would have had to guess at is a parse failure.

    A completion cut at ``max_tokens`` raises `TruncatedCompletionError` (never parsed into fields): the
    finish reason is read from the response each LM call returns (`lm.watch_completions`), for any
    `dspy.LM` and whether DSPy served it from the network or from its cache.

    The structured-output schema of a signature is built once and reused (DSPy builds it on every call)."""

    def __call__(self, lm: dspy.BaseLM, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                 demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        with watch_completions() as watch:
            try:
                values: list[dict[str, Any]] = super().__call__(lm, lm_kwargs, signature, demos, inputs)
            except AdapterParseError as error:
                raise_if_cut(watch, error)
                raise
        raise_if_cut(watch)
        return values

    async def acall(self, lm: dspy.BaseLM, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                    demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        with watch_completions() as watch:
            try:
                values: list[dict[str, Any]] = await super().acall(lm, lm_kwargs, signature, demos, inputs)
            except AdapterParseError as error:
                raise_if_cut(watch, error)
                raise
        raise_if_cut(watch)
        return values

    def plan_response_format(self, lm: dspy.BaseLM, lm_kwargs: dict[str, Any], signature: type[dspy.Signature]) -> None:
        """Set ``lm_kwargs['response_format']`` to DSPy's plan for `signature`, computed once per signature."""
        planned = _response_format(dspy.JSONAdapter, signature,  # type: ignore[arg-type]  # dspy Signature untyped
                                   "response_format" in lm.supported_params,
                                   bool(getattr(lm, "supports_response_schema", False)),
                                   self.use_native_function_calling)
        if planned is not None:
            lm_kwargs["response_format"] = planned

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        text = (completion or "").strip()
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise VerdictFormatError("parse", signature, completion,
                                     f"the answer is not strict JSON ({error.msg} at char {error.pos})") from None
        if not isinstance(value, dict):
            raise VerdictFormatError("parse", signature, completion, "the answer is JSON but not an object")
        missing = [name for name in signature.output_fields if name not in value]
        if missing:
            raise VerdictFormatError("parse", signature, completion, f"the answer lacks field(s) {missing}")
        wrong = _wrong_type(signature, value)
        if wrong is not None:  # never coerced: "passed": "true" is not a verdict
            raise VerdictFormatError("invalid", signature, completion, wrong)
        plain = _plain_fields(signature, value)
        if plain is not None:
            return plain
        try:
            fields: dict[str, Any] = super().parse(signature, text)
            return fields
        except VerdictFormatError:
            raise
        except AdapterParseError as error:  # a field of the wrong type (DSPy's own check)
            raise VerdictFormatError("invalid", signature, completion, error.message or str(error)) from None


_PLAIN = {str: (str,), bool: (bool,), float: (float, int)}  # annotation -> value types DSPy would keep as is
_JSON_TYPE = {str: "a string", bool: "true or false", float: "a number"}


def _wrong_type(signature: type[dspy.Signature], value: dict[str, Any]) -> str | None:
    """The problem with the first output field of `value` whose JSON type is not its annotation's (a
    string for ``str``, ``true``/``false`` for ``bool``, a number for ``float``), or None. DSPy's parse
    would coerce ``"passed": "true"`` to True, ``"score": "0.9"`` to 0.9: a verdict field of the wrong
    type is refused instead (an ``invalid`` abstention), whatever it would have been coerced to."""
    for name, field in signature.output_fields.items():
        kinds = _PLAIN.get(field.annotation)
        if kinds is not None and type(value[name]) not in kinds:
            return f"{name} must be {_JSON_TYPE[field.annotation]}, got {json.dumps(value[name])[:80]}"
    return None


def _plain_fields(signature: type[dspy.Signature], value: dict[str, Any]) -> dict[str, Any] | None:
    """The output fields of `value` (a parsed JSON object holding them all) as DSPy's JSON adapter would
    return them, when each already has its annotation's plain type (a string for ``str``, a boolean for
    ``bool``, a number for ``float``: DSPy's `parse_value` returns such a value as is, an int as a float);
    None otherwise (DSPy's own parse decides). Skips building a pydantic validator per field and call."""
    out: dict[str, Any] = {}
    for name, field in signature.output_fields.items():  # in the signature's order, as DSPy returns them
        item, kinds = value[name], _PLAIN.get(field.annotation)
        if kinds is None or type(item) not in kinds or (type(item) is int and abs(item) >= 1 << 53):
            return None
        out[name] = float(item) if type(item) is int else item
    return out


def truncated_error(signature: type[dspy.Signature] | None, error: TruncatedCompletionError) -> VerdictFormatError:
    """The `VerdictFormatError` ("truncated") for an answer cut at max_tokens."""
    return VerdictFormatError("truncated", signature, error.partial,
                              f"the answer was cut at max_tokens (finish reason 'length'): {error}")


class DirectCall:
    """``await direct.acall(trajectory=...)``: what ``judge.acall(trajectory=...)`` returns, for the batch
    (`TrajectoryJudge.direct_call` makes one), at a fraction of the client CPU.

    The body is the one DSPy builds, templated (`lm.engine.CompiledRequest`: the rubric's system and user
    messages are built once, each item's JSON-escaped text is put between them); the engine posts it
    (`AsyncChatCompletionsEngine.apost`: the same errors, and a completion cut at max_tokens raises); the
    answer is parsed by the judge's own `StrictJSONAdapter.parse` and becomes the judge's Prediction by
    the same code as `forward`'s. No DSPy history, trace or callback is touched (the batch turns them off).
    A text DSPy would change before sending (whitespace at its end, an empty text) or that cannot be
    encoded goes through ``judge.acall`` itself. Usage goes to ``dspy.settings.usage_tracker`` when set.
    """

    def __init__(self, judge: TrajectoryJudge, lm: dspy.LM, engine: AsyncChatCompletionsEngine,
                 request: CompiledRequest, model: str | None):
        self.judge, self.lm, self.engine, self.request, self.model = judge, lm, engine, request, model

    async def acall(self, trajectory: Trajectory | str) -> dspy.Prediction:
        """Judge one trajectory; raises as ``judge.acall`` does (see the module docstring)."""
        judge = self.judge
        text, evidence = judge._read(trajectory)
        content = self.request.body_for(text) if text and not text[-1].isspace() else None
        if content is None:
            with dspy.context(lm=self.lm, disable_history=True, trace=None):
                return judge._with_evidence(await judge.acall(trajectory=text), evidence)
        judge._check_certificate()
        signature = judge.judge.signature
        try:
            # DSPy's own boundary, as around its engine call: lm15 errors become the same DSPy LM errors.
            with error_boundary(self.lm.model, provider=getattr(self.lm, "_provider_name", None), unexpected=True):
                response, usage = await self.engine.apost(content, self.model)
        except TruncatedCompletionError as error:
            raise truncated_error(signature, error) from error
        tracker = dspy.settings.usage_tracker
        if usage and tracker is not None:
            tracker.add_usage(self.lm.model, usage)
        completion = "".join(getattr(part, "text", "") or "" for part in response.message.parts or ())
        return judge._with_evidence(judge._prediction(dspy.Prediction(**judge.adapter.parse(signature, completion))),
                                    evidence)


def raise_if_cut(watch: CompletionWatch, cause: BaseException | None = None) -> None:
    """Raise the cut completion `watch` saw, if any (from `cause`)."""
    cut = watch.cut()
    if cut is not None:
        raise cut from cause


def verdict_from_fields(prediction: dspy.Prediction, signature: type[dspy.Signature] | None = None) -> Verdict:
    """A produced `Verdict` from the LM's parsed fields; raises `VerdictFormatError` ("invalid") on a
    ``passed`` that is not a boolean (the string ``"true"`` included: never coerced) or a ``score`` that
    is not a finite number (a numeric string included). The contradiction rule is `Verdict.from_answer`'s."""
    passed, score = prediction.passed, prediction.score
    problem = None
    if not isinstance(passed, bool):
        problem = f"passed is not a boolean: {passed!r}"
    elif isinstance(score, bool) or not isinstance(score, (int, float)):
        problem = f"score is not a number: {score!r}"
    else:
        score = float(score)
        if not math.isfinite(score):
            problem = f"score is not finite: {score!r}"
    if problem is not None:
        raise VerdictFormatError("invalid", signature, json.dumps(dict(prediction), default=str), problem)
    return Verdict.from_answer(passed, score, prediction.reason)


class TrajectoryJudge(BaseJudge):
    """Judge agent trajectories against a rubric (the plain LLM judge of the `BaseJudge` contract).

    ``judge(trajectory=...)`` and ``await judge.acall(trajectory=...)`` take rendered text or a
    `Trajectory` (rendered with `render_config`) and return a `dspy.Prediction` with the contract's fields
    (`judge.contract.verdict_prediction`), or raise (see the module docstring). For a verdict that is
    always recorded, use `rubricforge_dspy.judge.execution.judge_verdict` (or ``judge.batch``).

    Args:
        rubric: the Signature's instruction.
        render_config: how a `Trajectory` is rendered (default `RenderConfig()`).
        adapter: the adapter (default `StrictJSONAdapter`, which never repairs an answer).
    """

    def __init__(self, rubric: str = SEED_RUBRIC, render_config: RenderConfig | None = None,
                 adapter: dspy.Adapter | None = None):
        super().__init__()
        self.judge = dspy.Predict(judge_signature(rubric))
        self.render_config = render_config or RenderConfig()
        self.adapter = adapter or StrictJSONAdapter()
        self.manifest: dict[str, Any] | None = None
        # The operating point (`rubricforge_dspy.judge.operating_point`): a map from raw score to calibrated
        # probability fit on validation verdicts, and optionally a pass threshold on it (the false-pass cap).
        self.calibration: Calibration | None = None
        self.threshold: float | None = None

    @property
    def rubric(self) -> str:
        """The rubric: the Signature's instruction."""
        instructions: str = self.judge.signature.instructions
        return instructions

    @property
    def rubric_sha256(self) -> str:
        """Identity of what this program says to the LM: the rubric's sha256, extended with the
        demonstrations when there are any. The cache key is the wider `fingerprint` (LM settings,
        adapter, render, versions); the file's ``program_sha256`` also covers the manifest."""
        if not self.judge.demos:
            return rubric_sha256(self.rubric)
        demos = json.dumps([dict(d) for d in self.judge.demos], sort_keys=True, default=str)
        return rubric_sha256(self.rubric + "\n#demos " + demos)

    def render(self, trajectory: Trajectory | str, config: RenderConfig | None = None) -> str:
        """The text this judge reads.

        Args:
            trajectory: a `Trajectory` (rendered with `config`, default `render_config`) or text (as is).
            config: a render configuration to use instead of `render_config`.

        Returns:
            The rendered text.
        """
        trajectory = trajectory_input(trajectory)
        if isinstance(trajectory, Trajectory):
            return render_trajectory(trajectory, config or self.render_config)
        return trajectory

    def reading_of(self, trajectory: Trajectory) -> tuple[dict[str, Any], EvidenceRecord | None]:
        """`inputs_of` and what of `trajectory` they show (`render_with_evidence`'s record), from one render;
        the record is None when a subclass renders its own way (then nobody knows what it showed).

        Args:
            trajectory: the `Trajectory` to judge.

        Returns:
            ``({"trajectory": text}, record)``.
        """
        if type(self).render is not TrajectoryJudge.render or type(self).inputs_of is not TrajectoryJudge.inputs_of:
            return self.inputs_of(trajectory), None
        text, evidence = render_with_evidence(trajectory, self.render_config)
        return {"trajectory": text}, evidence

    def _read(self, trajectory: Trajectory | str) -> tuple[str, EvidenceRecord | None]:
        trajectory = trajectory_input(trajectory)
        if isinstance(trajectory, Trajectory) and type(self).render is TrajectoryJudge.render:
            return render_with_evidence(trajectory, self.render_config)
        return self.render(trajectory), None

    def forward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        """Judge one trajectory (see the class docstring); raises on anything that is not a verdict. Given a
        `Trajectory`, the prediction's ``evidence`` says what its render showed (`core.verdict.EvidenceRecord`
        as JSON); given text, the prediction has none (unknown)."""
        text, evidence = self._read(trajectory)
        self._check_certificate()
        with self._strict():
            raw = self.judge(trajectory=text)
        return self._with_evidence(self._prediction(raw), evidence)

    async def aforward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        """The async `forward` (``await judge.acall(trajectory=...)``), through ``dspy.Predict.acall``: the
        same adapter, truncation watch and verdict checks."""
        text, evidence = self._read(trajectory)
        self._check_certificate()
        with self._strict():
            raw = await self.judge.acall(trajectory=text)
        return self._with_evidence(self._prediction(raw), evidence)

    @staticmethod
    def _with_evidence(prediction: dspy.Prediction, evidence: EvidenceRecord | None) -> dspy.Prediction:
        """`prediction` with ``evidence``: the record as JSON (`EvidenceRecord.to_dict`; a prediction stays
        JSON), which `judge.execution.as_verdict` takes to the verdict and its line."""
        if evidence is not None:
            prediction.evidence = evidence.to_dict()
        return prediction

    @contextmanager
    def _strict(self) -> Iterator[None]:
        """The strict call of both `forward`s: this judge's adapter, and a completion cut at max_tokens (seen
        by the engine or by the completion watch) raised as `VerdictFormatError` ("truncated")."""
        signature = self.judge.signature
        try:
            # The watch covers any adapter given (StrictJSONAdapter also watches its own calls).
            with dspy.context(adapter=self.adapter), watch_completions() as watch:
                try:
                    yield
                except AdapterParseError as error:
                    raise_if_cut(watch, error)
                    raise
                raise_if_cut(watch)
        except TruncatedCompletionError as error:
            raise truncated_error(signature, error) from error

    def direct_call(self) -> "DirectCall | None":
        """This judge's batch fast path with its own LM, or None where there is none (see `DirectCall`).

        There is one when the LM is a `dspy.LM` built by `lm.make_lm` (its async engine an
        `AsyncChatCompletionsEngine`) that makes one attempt per call with DSPy's response cache off (as
        `lm.copies.one_attempt_lm` makes it), the adapter is `StrictJSONAdapter`, the judge is a
        `TrajectoryJudge` whose calls are not overridden by a subclass, and no DSPy callback is set
        anywhere (a callback would see no call on the fast path). The request DSPy builds is captured
        once, without a call (`lm.engine.capture_request`), and must differ between two texts only by the
        text.

        Returns:
            A `DirectCall`, or None.
        """
        lm = resolve_lm(self)
        engine = engine_specs(lm)[1]
        overridden = any(getattr(type(self), name) is not getattr(TrajectoryJudge, name)
                         for name in ("forward", "aforward", "render", "_prediction", "__call__", "acall"))
        if (overridden or type(self.adapter) is not StrictJSONAdapter or not isinstance(lm, dspy.LM)
                or not isinstance(engine, AsyncChatCompletionsEngine) or lm.cache or lm.num_retries
                or lm.callbacks or dspy.settings.callbacks or self.callbacks or self.judge.callbacks
                or self.adapter.callbacks):
            return None
        captured: list[RequestCaptured] = []

        def make_body(sentinel: str) -> dict[str, Any]:
            try:
                with capture_request(), dspy.context(lm=lm, disable_history=True, trace=None, usage_tracker=None):
                    self(trajectory=sentinel)
            except RequestCaptured as capture:
                captured.append(capture)
                return capture.body
            raise RuntimeError("the judge made no LM request")  # pragma: no cover - forward always calls

        try:
            request = CompiledRequest(make_body)
        except Exception:  # noqa: BLE001 - no template to be had: the batch takes the ordinary path
            return None
        return DirectCall(self, lm, engine, request, captured[0].model)

    def _prediction(self, raw: dspy.Prediction) -> dspy.Prediction:
        verdict = verdict_from_fields(raw, self.judge.signature)
        answer = {"passed": raw.passed, "score": float(raw.score)}
        if self.calibration is None:
            return verdict_prediction(verdict, answer)
        calibrated = verdict.with_operating_point(self.calibration.apply(verdict.score), self.threshold)
        return verdict_prediction(calibrated, answer, before=verdict)

    def pass_rule(self) -> PassRule:
        """The calibrated score against the program's pass threshold when it has one (the false-pass cap),
        else the rubric's rule on the raw score (``score >= 0.5``; a calibration alone decides nothing)."""
        if self.calibration is not None and self.threshold is not None:
            return PassRule("score_calibrated", float(self.threshold))
        return PassRule()

    def operating_point(self) -> dict[str, Any] | None:
        """The calibration map and pass threshold as JSON (None when uncalibrated): part of the fingerprint."""
        if self.calibration is None:
            return None
        return {"calibration": self.calibration.to_dict(), "threshold": self.threshold}

    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Save as a frozen JSON program (`program.store.save_judge`); never a pickle.

        Args:
            path: the ``.json`` file to write.
            save_program: must be False (DSPy's whole-program pickle is refused).
            modules_to_serialize: ignored (DSPy's pickle option).

        Raises:
            InputError: `save_program` was asked for.
            ProgramError: `path` is not a ``.json`` file.
        """
        if save_program:
            raise InputError("TrajectoryJudge saves as JSON only; pickled programs are not supported")
        save_judge(self, path)

    def load(self: JudgeT, path: PathArg, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False,
             allow_unverified: bool = False) -> JudgeT:
        """Load a frozen JSON program into this judge (never a pickle); `load_judge` is the usual way.

        Args:
            path: the program, verified by its manifest's ``program_sha256`` (`program.store.read_program`).
            allow_pickle: must be False.
            allow_unsafe_lm_state: ignored (no LM state is ever read from a program).
            allow_unverified: load one that cannot be verified, with a warning.

        Returns:
            This judge.

        Raises:
            InputError: a pickle was asked for.
            ProgramError: naming the file: unreadable, malformed or unverifiable.
        """
        if allow_pickle or str(path).endswith(".pkl"):
            raise InputError(f"{path}: TrajectoryJudge loads JSON programs only, never pickles")
        state = read_program(path, allow_unverified=allow_unverified)
        state["judge"]["lm"] = None
        manifest = state.get(MANIFEST_KEY)
        fields = state["judge"]["signature"]["fields"]
        if len(fields) != len(self.judge.signature.fields):
            raise ProgramError(f"{path}: malformed program: {len(fields)} signature fields, the judge has "
                               f"{len(self.judge.signature.fields)} ({', '.join(self.judge.signature.fields)})")
        try:
            self.load_state({"judge": state["judge"]})
            render_config = self.render_config
            if manifest and "render" in manifest:
                render = manifest["render"]
                render_config = RenderConfig(max_tokens=render["max_tokens"], max_step_chars=render["max_step_chars"])
            calibration, threshold = None, None
            if manifest and manifest.get("calibration"):
                calibration = from_manifest(manifest)
                threshold = (manifest.get("threshold") or {}).get("pass_threshold")
                if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
                    raise ValueError(f"threshold.pass_threshold is not a number: {threshold!r}")
        except ProgramError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            raise ProgramError(f"{path}: malformed program: {type(error).__name__}: {error}") from error
        self.render_config = render_config
        if calibration is not None:
            self.calibration, self.threshold = calibration, threshold
        self.manifest = manifest
        return self
