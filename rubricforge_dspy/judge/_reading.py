"""What the long-episode judges (`judge.segments`, `judge.explorer`) share: the quoted step lines of the
renderer, the strict call, the evidence record, and their base class `ReadingJudgeBase` (identity, inputs, JSON files).

Step text is quoted exactly as `evidence.render` quotes it (one nonce for the whole trajectory, the
renderer's `HEADER` naming it): a window or a tool's answer is a slice of the same record, never
instructions. Nothing here reads a trajectory's ``reward``, ``label`` or ``hidden``.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, ClassVar, Iterator, TypeVar

import dspy
from dspy.utils.exceptions import AdapterParseError

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.rubric import rubric_sha256
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.evidence.render import (
    COUNTERS_LABEL,
    HEADER,
    RENDER_VERSION,
    RenderConfig,
    RenderPart,
    clean_step,
    make_part,
    quote_fence,
    quote_nonce,
    render_counters,
    shown_pieces,
    step_part,
)
from rubricforge_dspy.judge.contract import BaseJudge, trajectory_input
from rubricforge_dspy.judge.module import VerdictFormatError, raise_if_cut, truncated_error
from rubricforge_dspy.lm.budget import PROMPT_OVERHEAD
from rubricforge_dspy.lm.fingerprint import package_version
from rubricforge_dspy.lm.truncation import TruncatedCompletionError, watch_completions
from rubricforge_dspy.program.store import ProgramError, read_judge_document, write_judge_document

EVIDENCE_KEYS = ("steps", "whole", "clipped", "elided", "chars_cut", "complete", "read", "steps_read")


class ReadingLimitError(VerdictFormatError):
    """A long-episode judge stopped before it gave a verdict (its iteration or token cap): the execution
    layer records an abstention (kind ``truncated``: the answer was cut short), never a verdict."""

    def __init__(self, message: str, signature: type[dspy.Signature] | None = None):
        super().__init__("truncated", signature, "", message)
        self.limit = message

    def __str__(self) -> str:
        return self.limit


def require_trajectory(trajectory: Any, judge: str) -> Trajectory:
    """The `Trajectory` a long-episode judge reads (its steps, not a render); `InputError` otherwise."""
    trajectory = trajectory_input(trajectory)
    if not isinstance(trajectory, Trajectory):
        raise InputError(f"the {judge} judge reads a Trajectory's steps, not rendered text: pass the Trajectory "
                         "(rubricforge_dspy.data loaders give them)")
    return trajectory


class QuotedSteps:
    """The steps of one trajectory as the renderer writes them: numbered lines, content quoted between
    the tags of one nonce (`evidence.render.quote_nonce` of every piece of the trajectory)."""

    def __init__(self, trajectory: Trajectory):
        self.trajectory = trajectory
        self.cleaned = [clean_step(step) for step in trajectory.steps]
        self.nonce = quote_nonce(shown_pieces(trajectory.steps, self.cleaned))
        self.fence = quote_fence(self.nonce)
        self.parts: list[RenderPart] = [step_part(i, step, self.fence, c)
                                   for i, (step, c) in enumerate(zip(trajectory.steps, self.cleaned, strict=True), 1)]
        self.header = f"{HEADER.format(q=self.nonce)}\n{COUNTERS_LABEL} {render_counters(trajectory)}"

    def __len__(self) -> int:
        return len(self.parts)

    def sha256(self) -> str:
        """sha256 of every step's whole line and the header: the identity of what a reader of this
        trajectory can be shown (its verdict cache key, with the judge's own fingerprint)."""
        digest = hashlib.sha256(self.header.encode("utf-8", "surrogatepass"))
        for part in self.parts:
            digest.update(b"\x00" + part.text().encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def cost(self, index: int) -> int:
        """Estimated tokens of step `index` (0-based) shown whole, with its line break."""
        part = self.parts[index]
        return part.fixed + part.cost

    def line(self, index: int, max_tokens: int | None = None) -> tuple[str, int]:
        """Step `index`'s line within `max_tokens` (None: whole) and the characters of its body cut (0: whole)."""
        part = self.parts[index]
        if max_tokens is None or part.fixed + part.cost <= max_tokens:
            return part.text(), 0
        body = part.cut(max(1, max_tokens - part.fixed))
        return part.text(body), max(1, len(part.body) - len(body))

    def body_chars(self, index: int) -> int:
        return len(self.parts[index].body)

    def labeled(self, label: str, index: int | None, max_tokens: int) -> str:
        """A context line (``TASK:``, ``FINAL ANSWER:``) quoting step `index`'s content (None: ``(none)``)."""
        if index is None:
            return f"{label} (none)"
        part = make_part(None, label, None, self.fence, cleaned=self.cleaned[index][0])
        whole = part.fixed + part.cost <= max_tokens
        return part.text(part.body if whole else part.cut(max(1, max_tokens - part.fixed)))

    def task_index(self) -> int | None:
        return next((i for i, s in enumerate(self.trajectory.steps) if s.kind == "user"), None)

    def final_index(self) -> int | None:
        steps = self.trajectory.steps
        return next((i for i in range(len(steps) - 1, -1, -1) if steps[i].kind == "final_answer"), None)


@dataclass
class ReadLedger:
    """What a judge's calls really showed of each step: whole in some call, or only clipped (and how many
    characters of it no call showed)."""

    n_steps: int
    read: str

    def __post_init__(self) -> None:
        self.whole: set[int] = set()
        self.cut: dict[int, int] = {}  # step (1-based) -> fewest characters cut in any call that showed it

    def shown(self, number: int, chars_cut: int) -> None:
        if chars_cut == 0:
            self.whole.add(number)
            self.cut.pop(number, None)
        elif number not in self.whole:
            self.cut[number] = min(chars_cut, self.cut.get(number, chars_cut))

    def record(self, body_chars: list[int]) -> dict[str, Any]:
        """The ``evidence`` dict (keys `EVIDENCE_KEYS`); an unread step's characters are all cut."""
        read = sorted(self.whole | set(self.cut))
        unread = [n for n in range(1, self.n_steps + 1) if n not in self.whole and n not in self.cut]
        chars_cut = sum(self.cut.values()) + sum(body_chars[n - 1] for n in unread)
        return {"steps": self.n_steps, "whole": len(self.whole), "clipped": len(self.cut), "elided": len(unread),
                "chars_cut": chars_cut, "complete": len(self.whole) == self.n_steps, "read": self.read,
                "steps_read": read}


@contextmanager
def strict_call(adapter: dspy.Adapter, signature: type[dspy.Signature]) -> Iterator[None]:
    """`TrajectoryJudge`'s strict call: the judge's adapter, a completion cut at max_tokens raised as
    `VerdictFormatError` ("truncated"); an LM error propagates as is."""
    try:
        with dspy.context(adapter=adapter), watch_completions() as watch:
            try:
                yield
            except AdapterParseError as error:
                raise_if_cut(watch, error)
                raise
            raise_if_cut(watch)
    except TruncatedCompletionError as error:
        raise truncated_error(signature, error) from error


# Bytes of chat template (roles, special tokens) and of the structured-output schema a request adds to the messages
# the adapter formats: the run budget's own allowance (`lm.budget.PROMPT_OVERHEAD`).
CALL_OVERHEAD = PROMPT_OVERHEAD


def answer_cap(lm: Any) -> int:
    """The cap on one answer of `lm` (its ``max_tokens`` or ``max_completion_tokens``; 0 when it has none)."""
    kwargs = getattr(lm, "kwargs", None) or {}
    return int(kwargs.get("max_tokens") or kwargs.get("max_completion_tokens") or 0)


def call_bound(adapter: dspy.Adapter, predictor: dspy.Predict, inputs: dict[str, Any], max_tokens: int) -> int:
    """The most tokens one call of `predictor` on `inputs` may use: its prompt's bound (the UTF-8 bytes of the
    messages `adapter` formats, demos included, plus `CALL_OVERHEAD`: a byte-level BPE tokenizer never makes
    more tokens than bytes) plus `max_tokens` for the answer."""
    messages = adapter.format(predictor.signature, list(predictor.demos or []), inputs)
    size = sum(len(str(m.get("content") or "").encode("utf-8", "surrogatepass")) for m in messages)
    return size + CALL_OVERHEAD + max_tokens


def instructions_sha256(predictors: list[dspy.Predict]) -> str:
    """`core.rubric.rubric_sha256` of every predictor's instruction (and demos, when any), in order."""
    parts = []
    for predictor in predictors:
        parts.append(predictor.signature.instructions)
        if predictor.demos:
            parts.append("#demos " + json.dumps([dict(d) for d in predictor.demos], sort_keys=True, default=str))
    return rubric_sha256("\n#predictor\n".join(parts))


def load_predictor_state(predictor: dspy.Predict, state: Any, path: PathArg, name: str) -> None:
    """Load a saved predictor's state (its instruction and demos; never an LM) into `predictor`."""
    try:
        fields = state["signature"]["fields"]
        if len(fields) != len(predictor.signature.fields):
            raise ValueError(f"{len(fields)} signature fields, the judge has {len(predictor.signature.fields)}")
        predictor.load_state({**state, "lm": None})
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise ProgramError(f"{path}: malformed predictor {name!r}: {type(error).__name__}: {error}") from error


ReaderT = TypeVar("ReaderT", bound="ReadingJudgeBase")


class ReadingJudgeBase(BaseJudge):
    """What the long-episode judges share: they read a `Trajectory`'s steps (never one render), their rubric
    is the instruction of every predictor, and they save as a sealed JSON document of their own kind
    (`program.store.write_judge_document`: their predictors' state, render, reading settings and manifest,
    never an LM or a pickle), which `load_judge` reads and `rubricforge certify` certifies.

    A subclass sets `kind`, `read_mode`, `judge_name` and `predictor_names`, and gives its reading settings
    (`_document_settings` for `reading_settings` and the saved document, `_parse_settings` to load them).
    """

    kind: str  # the document's "kind" (a registered stage kind)
    read_mode: str  # the --read mode ("segments", "explore")
    judge_name: ClassVar[str]  # in messages: "segments", "explorer"
    predictor_names: ClassVar[tuple[str, ...]]  # its predictors' attributes, in order
    format_version: ClassVar[int] = 1
    calls_lm = True
    needs_trajectory = True  # a cascade gives it the Trajectory (judge.cascade), never one render of it

    render_config: RenderConfig
    manifest: dict[str, Any] | None

    def _predictors(self) -> list[dspy.Predict]:
        return [getattr(self, name) for name in self.predictor_names]

    @property
    def rubric_sha256(self) -> str:
        """sha256 of every predictor's instruction (and demos): GEPA may evolve them apart."""
        return instructions_sha256(self._predictors())

    def reading_settings(self) -> dict[str, Any]:
        """What, besides the predictors, the render and the adapter, decides what this judge reads. Part of its
        fingerprint (`judge.fingerprint.judge_parts`): a verdict read otherwise is not reused."""
        return {"read": self.read_mode, **self._document_settings()}

    def inputs_of(self, trajectory: Trajectory) -> dict[str, Any]:
        """``{"trajectory": trajectory, "read_sha256": ...}``: this judge reads the steps, not one render;
        ``read_sha256`` (the sha256 of every step as quoted) makes the verdict cache's key
        (`judge.cache.input_sha256`) differ between trajectories, as a render's text does for a plain judge."""
        return {"trajectory": trajectory, "read_sha256": QuotedSteps(trajectory).sha256()}

    # -- the settings a subclass adds to its document
    def _document_settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def _parse_settings(self, data: dict[str, Any]) -> dict[str, Any]:
        """The reading settings of a saved document (`_document_settings`' keys) as the attributes to set;
        raise KeyError, TypeError or ValueError on a malformed one."""
        raise NotImplementedError

    # -- files
    def base_manifest(self) -> dict[str, Any]:
        """The manifest a judge saved without one gets: its rubric (and hash), how it reads, its render, the
        versions and the date (what `induce` records besides the induction's own fields)."""
        return {"rubric": self.rubric, "rubric_sha256": self.rubric_sha256, "read": self.read_mode,
                "reading": self.reading_settings(),
                "render": {"max_tokens": self.render_config.max_tokens,
                           "max_step_chars": self.render_config.max_step_chars, "version": RENDER_VERSION},
                "versions": {"rubricforge_dspy": package_version("rubricforge-dspy"),
                             "dspy": package_version("dspy")},
                "created_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat()}

    def to_dict(self) -> dict[str, Any]:
        """The JSON document `save` writes (its ``kind`` is the judge's); no LM, no pickle."""
        return {"kind": self.kind, "format": self.format_version, "rubric_sha256": self.rubric_sha256,
                "render": {"max_tokens": self.render_config.max_tokens,
                           "max_step_chars": self.render_config.max_step_chars},
                **self._document_settings(),
                "predictors": {name: {**getattr(self, name).dump_state(), "lm": None}
                               for name in self.predictor_names},
                "manifest": self.manifest}

    def save(self, path: PathArg, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        """Save as JSON (`to_dict` with its sha256); a pickle is refused. A judge without a manifest gets
        `base_manifest`; one whose rubric changed since gets the new rubric and hash in it.

        Raises:
            InputError: `save_program` was asked for.
            ProgramError: `path` is not a ``.json`` file.
        """
        if save_program:
            raise InputError(f"{type(self).__name__} saves as JSON only; pickled programs are not supported")
        manifest = self.manifest or self.base_manifest()
        if manifest.get("rubric_sha256") != self.rubric_sha256:
            manifest = {**manifest, "rubric": self.rubric, "rubric_sha256": self.rubric_sha256}
        self.manifest = manifest
        write_judge_document(self.to_dict(), path)

    @classmethod
    def from_file(cls: type[ReaderT], path: PathArg) -> ReaderT:
        """The judge saved at `path` (verified by its sha256). Raises `ProgramError` naming the file."""
        return cls().load(path)

    def load(self: ReaderT, path: PathArg, allow_pickle: bool = False, **ignored: Any) -> ReaderT:
        """Load a saved judge of this kind into this one (JSON only; never a pickle, never an LM).

        Raises:
            InputError: a pickle was asked for.
            ProgramError: naming the file: unreadable, not a judge of this kind, edited, or malformed.
        """
        if allow_pickle or str(path).endswith(".pkl"):
            raise InputError(f"{path}: {type(self).__name__} loads JSON only, never pickles")
        data = read_judge_document(path, self.kind)
        try:
            render = RenderConfig(max_tokens=int(data["render"]["max_tokens"]),
                                  max_step_chars=int(data["render"]["max_step_chars"]))
            predictors = data["predictors"]
            states = [predictors[name] for name in self.predictor_names]
            settings = self._parse_settings(data)
        except (KeyError, TypeError, ValueError, InputError) as error:
            raise ProgramError(f"{path}: malformed {self.judge_name} judge: {error}") from error
        for name, state in zip(self.predictor_names, states, strict=True):
            load_predictor_state(getattr(self, name), state, path, name)
        for attribute, value in settings.items():
            setattr(self, attribute, value)
        self.render_config, self.manifest = render, data.get("manifest")
        return self
