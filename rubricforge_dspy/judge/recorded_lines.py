"""The verdict lines of a recorded stage (`judge.recorded.RecordedJudge`): how a line is read as a `Verdict`
(`recorded_verdict`), the stage's confidence in it (`recorded_confidence`: kept on its verdict's side of
PASS_THRESHOLD), the one contradiction rule (`recorded_contradiction`), the confidence levels a file implies,
and the file's sha256. The rules and their reasons are in `rubricforge_dspy.judge.recorded`'s docstring, which
re-exports every public name here.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from rubricforge_dspy.core.cascade import ESCALATED
from rubricforge_dspy.core.errors import RubricForgeWarning
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.verdict import (
    PASS_THRESHOLD,
    REASON_MAX_CHARS,
    Verdict,
    VerdictLineError,
    check_line,
    read_lines,
)
from rubricforge_dspy.program.store import ProgramError

__all__ = ["HANDED_ON", "RecordedContradictionWarning", "recorded_contradiction", "recorded_confidence",
           "recorded_verdict", "file_sha256"]
# `duplicate_id_error`, `confidence_levels_of` and `checked_levels` are shared with judge.recorded, not public API.

# The error kind of a recorded stage's hand-on (no line for the id, or an abstained line): not an LM error
# (`lm.errors.LM_ERROR_KINDS`), so a cascade hands the item on instead of recording an LM failure.
HANDED_ON = ESCALATED

# the largest confidence a fail line can have: strictly below PASS_THRESHOLD, so no t_pass >= 0.5 passes it
_BELOW_PASS = math.nextafter(PASS_THRESHOLD, 0.0)


class RecordedContradictionWarning(RubricForgeWarning):
    """Some lines of a recorded stage's verdicts have a score that contradicts their verdict: the stage hands
    those items on (`RecordedJudge.contradiction_note` says how many)."""


def recorded_contradiction(passed: bool, score: float, score_calibrated: float | None = None,
                           declared: bool = False) -> bool:
    """Whether a recorded verdict line contradicts itself: it says so (`declared`, its ``contradiction``
    field), or it has no calibrated score and ``passed`` is not ``score >= PASS_THRESHOLD`` (the rule of
    `core.verdict`, `Verdict.from_answer`). A line with a calibrated score may have been decided on it at
    another threshold (a false-pass cap): only its own flag counts then."""
    if declared:
        return True
    return score_calibrated is None and bool(passed) != (float(score) >= PASS_THRESHOLD)


def recorded_confidence(passed: bool, score: float, score_calibrated: float | None = None) -> float:
    """A recorded stage's confidence that the item passed, from the tool's verdict and score: the score
    (``score_calibrated``, else ``score``) kept on its verdict's side of PASS_THRESHOLD: a pass's confidence is
    ``max(score, 0.5)`` in [0.5, 1], a fail's ``min(score, 0.5-)`` in [0, 0.5). Non-decreasing in the score
    within a verdict, the score itself wherever it agrees with the verdict, so every threshold pair with
    ``t_fail < 0.5 <= t_pass`` keeps the verdict or hands it on, never reverses it."""
    value = float(score_calibrated if score_calibrated is not None else score)
    return max(value, PASS_THRESHOLD) if passed else min(value, _BELOW_PASS)


def file_sha256(path: PathArg) -> str:
    """sha256 of a file's bytes, read in chunks."""
    digest_ = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest_.update(chunk)
    return digest_.hexdigest()


def recorded_verdict(line: Mapping[str, Any], where: str) -> Verdict:
    """The `Verdict` a verdict line records, as a stage reads it: a produced verdict with the tool's
    ``passed`` and ``score``, its ``score_calibrated`` the stage's confidence (`recorded_confidence`; left
    None when that is the score itself); a line whose score contradicts its verdict
    (`recorded_contradiction`) as a contradiction (resolved to a fail, as `core.verdict`'s rule does; a stage
    hands it on); an abstained line as a hand-on (kind `HANDED_ON`, the recorded error in the message: another
    tool's failure is never this stage's LM error). Raises `VerdictLineError` naming `where` for a line that is
    not a verdict."""
    line = check_line(line, where)
    if line["abstained"]:
        kind, error = line.get("error_kind"), line.get("error")
        return Verdict.abstention(f"recorded abstention ({kind or 'no kind'}): {error or 'no error given'}", HANDED_ON)
    try:
        passed, score = bool(line["passed"]), float(line["score"])
        calibrated = None if line.get("score_calibrated") is None else float(line["score_calibrated"])
        reason = " ".join(str(line.get("reason") or "").split())[:REASON_MAX_CHARS]
        if recorded_contradiction(passed, score, calibrated, bool(line.get("contradiction", False))):
            return Verdict(passed=False, score=score, reason=reason, contradiction=True, score_calibrated=calibrated)
        confidence = recorded_confidence(passed, score, calibrated)
        return Verdict(passed=passed, score=score, reason=reason,
                       score_calibrated=None if calibrated is None and confidence == score else confidence)
    except (TypeError, ValueError) as error:
        raise VerdictLineError(f"{where}: not a verdict: {error} (id {line['id']})") from None


def duplicate_id_error(path: Path, number: int, ident: str) -> VerdictLineError:
    """The error of a repeated id on line `number`, naming the line of its first occurrence (read again: the
    stream keeps no line numbers)."""
    first = next((line for line, record in read_lines(path) if record["id"] == ident), None)
    error = VerdictLineError(f"{path}:{number}: duplicate id {ident!r}"
                             + (f" (first on line {first})" if first else ""))
    error.line = number
    return error


def _confidence(verdict: Verdict) -> float | None:
    """A produced verdict's confidence (its calibrated score, else its score); None for an abstention or a
    contradiction."""
    if verdict.abstained or verdict.contradiction:
        return None
    return float(verdict.score_calibrated if verdict.score_calibrated is not None else verdict.score)


def confidence_levels_of(verdicts: Iterable[Verdict]) -> tuple[float, ...] | None:
    """(0.0, 1.0) when every produced confidence is 0 or 1 (a pass/fail tool), else None (continuous)."""
    seen = {c for c in map(_confidence, verdicts) if c is not None}
    return (0.0, 1.0) if seen <= {0.0, 1.0} else None


def checked_levels(levels: Any, where: str) -> tuple[float, ...] | None:
    """`levels` as sorted distinct floats in [0, 1] (None stays None); a `ProgramError` naming `where` else."""
    if levels is None:
        return None
    if not isinstance(levels, (list, tuple)) or not levels or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in levels):
        raise ProgramError(f"{where}: confidence_levels must be null or a list of numbers in [0, 1], got {levels!r}")
    return tuple(sorted({float(v) for v in levels}))
