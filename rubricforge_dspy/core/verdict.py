"""The verdict: one record type for what a judge said about one trajectory, and one JSON Schema for a
verdict line (``schemas/verdict.schema.json``) shared by the judge, the batch writer, the protocol,
the report loader and the verdict cache.

A verdict is either *produced* (the LM returned a well-formed, complete answer) or an *abstention*
(no such answer could be obtained: an LM or network error, an unparsable, repaired or truncated
answer). An abstention is a fail: ``passed`` is False, ``score`` is 0.0. `Verdict.abstention` is the
only constructor of one.

Contradictions (one documented rule). The rubric defines ``passed`` as ``score >= PASS_THRESHOLD``.
When the LM's ``passed`` disagrees with its ``score`` (passed with score 0.2, failed with 0.8), the
verdict is resolved to a *fail*, its score is kept, and ``contradiction`` is true: a judge that
contradicts itself never passes an agent. Reports count contradictions per judge.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol, Sized

import orjson

from rubricforge_dspy.core.errors import InputError, RubricForgeDeprecationWarning, RubricForgeWarning

# Re-exported: their home is core.evidence_record (what a judge read; every importer of core.verdict keeps working).
from rubricforge_dspy.core.evidence_record import EVIDENCE_SHARE_TOLERANCE as EVIDENCE_SHARE_TOLERANCE
from rubricforge_dspy.core.evidence_record import READ_MODES as READ_MODES
from rubricforge_dspy.core.evidence_record import EvidenceRecord as EvidenceRecord
from rubricforge_dspy.core.evidence_record import evidence_differs as evidence_differs
from rubricforge_dspy.core.evidence_record import evidence_shares as evidence_shares
from rubricforge_dspy.core.evidence_record import line_evidence as line_evidence
from rubricforge_dspy.core.evidence_record import shares_of as shares_of
from rubricforge_dspy.core.files import PathArg, regular_file

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

PASS_THRESHOLD = 0.5
REASON_MAX_CHARS = 300
# Why no verdict was produced. truncated: finish reason `length`; parse: not a strict JSON verdict;
# invalid: JSON, but a field has the wrong type or a non-finite score; rate_limit: HTTP 429; not_json: a 2xx
# reply whose body is not a JSON completion (an HTML page: `lm.errors`);
# escalated: no stage of a cascade (`judge.cascade`) decided; the item goes to a person.
ERROR_KINDS = ("timeout", "connection", "http_5xx", "rate_limit", "http_4xx", "not_json", "parse", "truncated",
               "invalid", "other", "escalated")
RETRYABLE_KINDS = frozenset({"timeout", "connection", "http_5xx", "rate_limit"})
SCHEMA_NAME = "verdict.schema.json"


def token_usage(prompt: int, completion: int, calls: int, *, cached: bool = False,
                usd: float | None = None) -> dict[str, Any]:
    """The verdict line's ``tokens`` field (one definition): the prompt and completion tokens the LM reported for
    this item, the HTTP requests sent for it (``calls``), their cost in US dollars when a price is known (``usd``),
    and ``cached`` for a verdict replayed from the verdict cache.

    Args:
        prompt: the prompt tokens the LM reported, summed over the item's requests (every stage, every call of a
            segment or explorer judge, every retried attempt that was answered).
        completion: the completion tokens, summed likewise.
        calls: the HTTP requests sent to the LM for this item: each request it answered, plus each request that
            got no answer (a timeout, a reset connection, an HTTP error; a retried attempt included). So a judge
            that makes 32 calls per item (a segment judge's windows and its verdict) counts 32, and an answer
            that came after an HTTP 500 counts 2: what the server counted. How often the retry policy tried is
            the line's own ``attempts``.
        cached: the verdict was replayed from the verdict cache, so nothing was spent again (the counts are 0).
        usd: the cost in US dollars at the run's price (`apply.pricing`), when a price is known; absent
            otherwise (never a quiet 0: an unknown price is said in the run's summary).
    """
    counts = (prompt, completion, calls)
    if any(type(n) is not int or n < 0 for n in counts):
        raise ValueError(f"token counts are integers >= 0, got {counts}")
    usage: dict[str, Any] = {"prompt": prompt, "completion": completion, "calls": calls}
    if cached:
        usage["cached"] = True
    if usd is not None:
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < 0:
            raise ValueError(f"a cost in USD is a finite number >= 0, got {usd!r}")
        usage["usd"] = float(usd)
    return usage


@dataclass(frozen=True)
class Verdict:
    """What the judge said: ``passed`` (after the contradiction rule), ``score`` in [0, 1], a one-line
    ``reason``; or, for an abstention, ``abstained`` with the ``error`` and its ``error_kind``."""

    passed: bool
    score: float
    reason: str = ""
    abstained: bool = False
    error: str | None = None
    error_kind: str | None = None
    contradiction: bool = False
    score_calibrated: float | None = None
    # How it was obtained, not what was said: the LM calls `judge.execution.judge_verdict` made (None when
    # the verdict did not come from it). Not compared, not in `to_dict` (a verdict line records it apart).
    attempts: int | None = field(default=None, compare=False, repr=False)
    # What the judge read to say it (`EvidenceRecord`; None when the judge does not say): recorded on the line.
    evidence: EvidenceRecord | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.score, (int, float)) or not math.isfinite(self.score) or not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be a finite number in [0, 1], got {self.score!r}")
        if self.abstained and (self.passed or self.error_kind not in ERROR_KINDS):
            raise ValueError("an abstention is a fail with an error kind; use Verdict.abstention")
        if not self.abstained and (self.error is not None or self.error_kind is not None):
            raise ValueError("a produced verdict carries no error")

    @classmethod
    def from_answer(cls, passed: bool, score: float, reason: str = "") -> "Verdict":
        """A produced verdict from the LM's fields, with the contradiction rule applied.

        `score` is clipped to [0, 1] (it is a probability); `reason` is flattened to one line and cut
        at `REASON_MAX_CHARS`."""
        score = min(1.0, max(0.0, float(score)))
        contradiction = bool(passed) != (score >= PASS_THRESHOLD)
        reason = " ".join(str(reason or "").split())[:REASON_MAX_CHARS]
        return cls(passed=bool(passed) and not contradiction, score=score, reason=reason,
                   contradiction=contradiction)

    @classmethod
    def abstention(cls, error: BaseException | str, kind: str) -> "Verdict":
        """The fail recorded when no verdict was produced (abstention-as-fail lives here only)."""
        if kind not in ERROR_KINDS:
            raise ValueError(f"error kind must be one of {ERROR_KINDS}, got {kind!r}")
        message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return cls(passed=False, score=0.0, reason="", abstained=True, error=message or kind, error_kind=kind)

    def with_operating_point(self, score_calibrated: float, threshold: float | None = None) -> "Verdict":
        """This verdict with its calibrated score and, when the program fixes a pass `threshold` on the
        calibrated score (the false-pass cap), the decision it implies: pass when
        ``score_calibrated >= threshold`` and the LM did not contradict itself. Abstentions stay fails."""
        if self.abstained:
            return self
        passed = self.passed if threshold is None else (score_calibrated >= threshold and not self.contradiction)
        return replace(self, score_calibrated=float(score_calibrated), passed=bool(passed))

    def to_dict(self) -> dict[str, Any]:
        """What was said, as JSON (without ``attempts`` and ``evidence``: the line records them apart)."""
        data = asdict(self)
        del data["attempts"], data["evidence"]
        return data

    @property
    def verdict(self) -> "Verdict":
        """Deprecated: `judge_verdict` returned an ``Outcome(verdict, attempts)``; it now returns the
        `Verdict` itself (with ``attempts``). Kept so ``judge_verdict(...).verdict`` still works."""
        warnings.warn("judge_verdict(...) returns the Verdict itself; drop `.verdict`", RubricForgeDeprecationWarning,
                      stacklevel=2)
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Verdict":
        return cls(**{name: data[name] for name in cls.__dataclass_fields__
                      if name in data and name not in ("attempts", "evidence")})


@dataclass(frozen=True)
class PassRule:
    """What decided a produced verdict's ``passed``: its field `on` (``"score"``, the LM's raw score, or
    ``"score_calibrated"``) at least `threshold`, and no contradiction (a judge's answer whose ``passed``
    disagrees with its score is a fail). A judge's own rule is ``judge.pass_rule()``: the rubric's
    ``score >= PASS_THRESHOLD`` unless the program fixes a pass threshold on calibrated scores (the
    false-pass cap) or a hybrid stack's threshold."""

    on: str = "score"
    threshold: float = PASS_THRESHOLD

    def __post_init__(self) -> None:
        if self.on not in ("score", "score_calibrated"):
            raise ValueError(f"a pass rule is on 'score' or 'score_calibrated', got {self.on!r}")

    def explain(self, verdict: "Verdict | Mapping[str, Any]") -> str:
        """Why `verdict` passed or failed under this rule, with the raw score, the calibrated score (when
        there is one) and the threshold, e.g. ``"calibrated score 0.62 is below the pass threshold 0.70
        (raw score 0.81)"``: a score alone would not say what decided the verdict."""
        def get(name: str) -> Any:
            return verdict.get(name) if isinstance(verdict, Mapping) else getattr(verdict, name, None)

        if get("abstained"):
            return f"no verdict was produced ({get('error_kind')})"
        raw, calibrated = float(get("score")), get("score_calibrated")
        on_calibrated = self.on == "score_calibrated" and calibrated is not None
        value = float(calibrated) if on_calibrated else raw
        side = "at or above" if value >= self.threshold else "below"
        never = " (nothing passes: no threshold met the false-pass cap)" if self.threshold > 1.0 else ""
        text = (f"{'calibrated score' if on_calibrated else 'score'} {value:.2f} is {side} the pass threshold "
                f"{self.threshold:.2f}{never}")
        if on_calibrated:
            text += f" (raw score {raw:.2f})"
        elif calibrated is not None and calibrated != raw:
            text += f" (calibrated {float(calibrated):.2f})"
        if get("contradiction"):
            said = "fail" if raw >= PASS_THRESHOLD else "pass"
            text += (f"; the answer contradicted itself (its passed said {said}, its score "
                     f"{'>=' if raw >= PASS_THRESHOLD else '<'} {PASS_THRESHOLD}), and a contradiction is a fail")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"on": self.on, "threshold": self.threshold}


# -- the verdict line --------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def line_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one verdict line, as shipped in the package."""
    text = resources.files("rubricforge_dspy.core").joinpath("schemas").joinpath(SCHEMA_NAME).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    import jsonschema

    schema = line_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


class VerdictLineError(InputError):
    """A verdict line that does not follow the schema, or repeats an id; the message names the file and
    line (``line`` holds the line number when the error came from a file)."""

    line: int | None = None


_KINDS_OR_NONE = frozenset((*ERROR_KINDS, None))
_OPTIONAL_TEXT = ("reason", "error", "program_sha256", "judge_fingerprint", "model")


def _surely_valid_line(record: Any) -> bool:
    """True only when `record` certainly follows the verdict line schema (a structural check in a few
    microseconds); False leaves the decision, and the message, to jsonschema (`check_line`)."""
    if type(record) is not dict:
        return False
    ident, score = record.get("id"), record.get("score")
    if type(ident) is not str or not ident or type(record.get("passed")) is not bool \
            or type(record.get("abstained")) is not bool:
        return False
    if (type(score) is not float and type(score) is not int) or not 0 <= score <= 1:
        return False
    for key in ("task_id", "domain", "agent"):
        if key in record and type(record[key]) is not str:
            return False
    for key in _OPTIONAL_TEXT:
        if record.get(key) is not None and type(record[key]) is not str:
            return False
    for key in ("contradiction", "cached"):
        if key in record and type(record[key]) is not bool:
            return False
    for key in ("n_steps", "attempts"):
        if key in record and (type(record[key]) is not int or record[key] < 0):
            return False
    calibrated, reward, label = record.get("score_calibrated"), record.get("reward"), record.get("label")
    if calibrated is not None and ((type(calibrated) is not float and type(calibrated) is not int)
                                   or not 0 <= calibrated <= 1):
        return False
    if reward is not None and type(reward) is not float and type(reward) is not int:
        return False
    if label is not None and (type(label) is not int or label not in (0, 1)):
        return False
    kind = record.get("error_kind")
    if kind is not None and (type(kind) is not str or kind not in _KINDS_OR_NONE):
        return False
    return ("evidence" not in record or _surely_valid_evidence(record["evidence"])) \
        and ("tokens" not in record or _surely_valid_tokens(record["tokens"]))


_EVIDENCE_COUNTS = ("steps", "whole", "clipped", "elided", "chars_cut")
_EVIDENCE_KEYS = frozenset((*_EVIDENCE_COUNTS, "complete", "read", "steps_read"))
_TOKEN_COUNTS = ("prompt", "completion", "calls")


def _surely_valid_evidence(evidence: Any) -> bool:
    if type(evidence) is not dict or not evidence.keys() <= _EVIDENCE_KEYS:
        return False
    if any(type(evidence.get(key)) is not int or evidence[key] < 0 for key in _EVIDENCE_COUNTS):
        return False
    if type(evidence.get("complete")) is not bool or evidence.get("read") not in READ_MODES:
        return False
    steps_read = evidence.get("steps_read")
    return steps_read is None or (type(steps_read) is list and all(type(i) is int and i >= 1 for i in steps_read))


def _surely_valid_tokens(tokens: Any) -> bool:
    if type(tokens) is not dict or any(type(tokens.get(key)) is not int or tokens[key] < 0 for key in _TOKEN_COUNTS):
        return False
    usd = tokens.get("usd", 0.0)
    if (type(usd) is not float and type(usd) is not int) or not 0 <= usd < math.inf:
        return False
    return "cached" not in tokens or type(tokens["cached"]) is bool


def check_line(record: Any, where: str) -> dict[str, Any]:
    """Validate one verdict line against the schema; raises `VerdictLineError` naming `where`
    (``file:line``) and the first problem, with the record's id when it has one. A line the structural
    check accepts costs microseconds; any other is checked by jsonschema. A line with only ``id`` and
    ``passed`` takes the defaults of the others first (`fill_defaults`, in place). A ``NaN`` or an infinity
    in any of `NUMBER_FIELDS` (``score``, ``score_calibrated``: the confidence fields) is refused."""
    _refuse_non_finite(record, where)
    fill_defaults(record)
    if _surely_valid_line(record):
        if record["abstained"] and record["passed"]:
            raise VerdictLineError(f"{where}: an abstained verdict cannot be passed (id {record['id']})")
        valid: dict[str, Any] = record
        return valid
    errors = sorted(_validator().iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        field = "/".join(map(str, error.absolute_path)) or "(record)"
        ident = record.get("id") if isinstance(record, dict) else None
        suffix = f" (id {ident})" if ident is not None else ""
        raise VerdictLineError(f"{where}: {field}: {error.message}{suffix}. "
                               "See rubricforge_dspy/core/schemas/verdict.schema.json for the verdict line format.")
    if record["abstained"] and record["passed"]:
        raise VerdictLineError(f"{where}: an abstained verdict cannot be passed (id {record['id']})")
    checked: dict[str, Any] = record
    return checked


class VerdictDefaultsWarning(RubricForgeWarning):
    """Lines of a verdict file (another tool's) lacked ``score`` or ``abstained``, which took their defaults
    (`fill_defaults`); said once per file."""


def fill_defaults(record: Any) -> tuple[str, ...]:
    """Complete a line that has only ``id`` and ``passed`` (a verdict file from another tool), in place:
    ``abstained`` defaults to false, ``score`` to 1.0 for a pass and 0.0 for a fail (the verdict itself, so
    no contradiction; a recorded stage's confidence is then certain). Returns the fields filled; a line
    whose ``passed`` is not a boolean is left to the schema's error."""
    if not isinstance(record, dict) or not isinstance(record.get("passed"), bool):
        return ()
    filled = []
    if "abstained" not in record:
        record["abstained"] = False
        filled.append("abstained")
    if "score" not in record:
        record["score"] = 1.0 if record["passed"] and not record["abstained"] else 0.0
        filled.append("score")
    return tuple(filled)


def say_defaults(path: PathArg, filled: dict[str, int]) -> None:
    """Warn once for a file whose lines took defaults (`fill_defaults`): how many lines, which fields."""
    if filled:
        fields = ", ".join(f"{n} without {name!r}" for name, n in sorted(filled.items()))
        warnings.warn(f"{path}: lines lacked fields a verdict line may omit ({fields}): a missing 'abstained' is "
                      "false, a missing 'score' is 1.0 for a pass and 0.0 for a fail",
                      VerdictDefaultsWarning, stacklevel=3)


# The fields of a verdict line that hold a number: a NaN or an infinity in any of them is refused (a NaN
# confidence compares false with every threshold and would silently escalate or fail an item).
NUMBER_FIELDS = ("score", "score_calibrated", "reward")


def load_line(raw: bytes, where: str) -> Any:
    """The JSON value of one verdict line, or `VerdictLineError` naming `where` (``file:line``) for bytes that
    are not UTF-8, text that is not JSON, or JSON nested too deeply (a ``NaN`` is read here and refused by
    `check_line`)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:  # the standard library's message for malformed JSON (orjson's is terse), and NaN/Infinity to refuse
        record = json.loads(raw)
    except UnicodeDecodeError as error:
        raise VerdictLineError(f"{where}: not UTF-8 text (byte {error.start}: {error.reason}); a verdict line "
                               "is JSON in UTF-8") from None
    except json.JSONDecodeError as error:
        raise VerdictLineError(f"{where}: not JSON ({error.msg})") from error
    except RecursionError:  # nested deeper than any JSON parser here follows: not a verdict
        raise VerdictLineError(f"{where}: not a verdict line: JSON nested too deeply") from None
    return record


def _refuse_non_finite(record: Any, where: str) -> None:
    if isinstance(record, dict):
        for name in NUMBER_FIELDS:
            value = record.get(name)
            if isinstance(value, float) and not math.isfinite(value):
                ident = record.get("id")
                raise VerdictLineError(f"{where}: {name}: {value!r} is not a number in [0, 1]"
                                       f"{'' if ident is None else f' (id {ident})'}; NaN and Infinity are not JSON")


def parse_line(raw: bytes, path: Path, number: int, filled: dict[str, int] | None = None) -> dict[str, Any]:
    """One verdict line of `path` (line `number`), checked (`check_line`) after its optional fields took their
    defaults (`fill_defaults`; each field filled is counted in `filled` when given); `VerdictLineError` says
    where and what."""
    try:
        record = load_line(raw, f"{path}:{number}")
        for name in fill_defaults(record):
            if filled is not None:
                filled[name] = filled.get(name, 0) + 1
        return check_line(record, f"{path}:{number}")
    except VerdictLineError as error:
        error.line = number
        raise


def read_lines(path: PathArg) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each non-blank line of a verdict JSONL, each validated."""
    path = regular_file(path, "verdict file")
    filled: dict[str, int] = {}
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if raw.strip():
                yield number, parse_line(raw, path, number, filled)
    say_defaults(path, filled)


class VerdictIndex(dict[str, dict[str, Any]]):
    """id -> verdict line of one verdict file, in file order (a `dict`), with where each line was.

    lines: id -> its line number. torn_bytes: the length of a final line cut without its newline (a
    kill mid-write), skipped when read with ``torn_tail=True``; complete_bytes: the bytes before it.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.lines: dict[str, int] = {}
        self.torn_bytes = 0
        self.complete_bytes = 0


def read_verdicts(path: PathArg, *, torn_tail: bool = False) -> VerdictIndex:
    """The id -> verdict line index of a verdict JSONL: the one reader of a verdict file by id.

    Every non-blank line is validated (`check_line`); a line that is not a verdict, or that repeats an
    id, raises `VerdictLineError` naming the file and line (for a repeat, also the first line of the
    id). With `torn_tail`, a final line without its newline (a kill mid-write, as a resumed run finds
    it) is skipped and its length recorded in ``torn_bytes`` instead of being read; without it, the
    line is read like any other (and refused when it is not a verdict). A missing file raises
    `FileNotFoundError` (`MissingFileError`); a FIFO or a device, `NotARegularFileError` (`core.files`).
    """
    path = regular_file(path, "verdict file")
    index = VerdictIndex(path)
    filled: dict[str, int] = {}
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if torn_tail and not raw.endswith(b"\n"):
                index.torn_bytes = len(raw)
                break
            index.complete_bytes += len(raw)
            if not raw.strip():
                continue
            record = parse_line(raw, path, number, filled)
            ident = record["id"]
            if ident in index:
                error = VerdictLineError(f"{path}:{number}: duplicate id {ident!r} "
                                         f"(first on line {index.lines[ident]})")
                error.line = number
                raise error
            index[ident] = record
            index.lines[ident] = number
    say_defaults(path, filled)
    return index


class VerdictSubject(Protocol):
    """What `verdict_line` reads of what was judged: a `Trajectory`, or a stand-in that keeps only these fields
    (``steps`` only for its length), such as the floor's `evidence.features.TableRow` and the judging pass's
    `apply.writer.Spilled`."""

    @property
    def id(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def agent(self) -> str: ...
    @property
    def steps(self) -> Sized: ...
    @property
    def label(self) -> int | None: ...
    @property
    def reward(self) -> float | None: ...


def verdict_line(trajectory: VerdictSubject, verdict: Verdict, *, cached: bool = False, attempts: int = 0,
                 judge_fingerprint: str | None = None, program_sha256: str | None = None,
                 model: str | None = None, evidence: EvidenceRecord | None = None,
                 tokens: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The verdict line for `trajectory` (a `Trajectory`): what was judged, the verdict, how it was
    obtained, and the ground truth for evaluation (never shown to the judge): ``label`` and ``reward``
    are null for an unlabeled trajectory (``label=None``).

    `trajectory` may be any `VerdictSubject` (the fields read, ``steps`` for its length only).
    `evidence`: what the judge read (default: ``verdict.evidence``); written as the line's ``evidence`` when
    known, absent otherwise (evidence unknown). `tokens`: this item's LM usage (`token_usage`), written as
    the line's ``tokens`` when given."""
    label = getattr(trajectory, "label", None)
    reward = getattr(trajectory, "reward", None)
    evidence = evidence if evidence is not None else verdict.evidence
    extra: dict[str, Any] = {}
    if evidence is not None:
        extra["evidence"] = evidence.to_dict()
    if tokens is not None:
        extra["tokens"] = dict(tokens)
    return {
        "id": trajectory.id, "task_id": trajectory.task_id, "domain": trajectory.domain,
        "agent": trajectory.agent, "n_steps": len(trajectory.steps),
        **verdict.to_dict(),
        "cached": cached, "attempts": attempts,
        "label": None if label is None else int(label),
        "reward": None if label is None or reward is None else float(reward),
        "program_sha256": program_sha256, "judge_fingerprint": judge_fingerprint, "model": model,
        **extra,
    }
