"""What every integration needs from a frozen judge: load it (then judge with `judge.execution.judge_verdict`), and
the facts that bind a verdict to the program that gave it (rubric and program hashes, certificate).

One place for these calls, so the MLflow and Inspect integrations judge exactly as ``rubricforge judge``
does (`judge_verdict`: retries, abstentions recorded, never an exception).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.criteria import attribute_reason
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.rubric import rubric_sha256
from rubricforge_dspy.core.verdict import PassRule, Verdict
from rubricforge_dspy.judge.loading import judge_from
from rubricforge_dspy.program.store import CERTIFICATE_KEY, PROGRAM_SHA_KEY
from rubricforge_dspy.trust.certificate import format_certificate


@dataclass(frozen=True)
class ProgramFacts:
    """What binds a verdict to its program: where it came from, its hashes, its certificate in brief, and
    the rule that decides its ``passed`` (`PassRule`: which score, against which threshold)."""

    where: str
    rubric: str
    rubric_sha256: str
    program_sha256: str | None
    certificate_summary: str
    model: str | None
    pass_rule: PassRule = PassRule()

    @property
    def key(self) -> str:
        """The identity of the program for 'one assessment per trace and program' (the whole-program hash,
        else the rubric hash for a program frozen before programs were hashed whole)."""
        return self.program_sha256 or self.rubric_sha256


def certificate_summary(certificate: Any) -> str:
    """The certificate as `rubricforge show` prints it (`trust.certificate.format_certificate`), on one line."""
    return " | ".join(" ".join(line.split()) for line in format_certificate(certificate or None))


def judge_with_facts(program: Any, lm: Any = None, *, allow_unverified: bool = False,
                     check_certificate: bool = True) -> tuple[Any, ProgramFacts]:
    """The judge a ``program`` argument names (`judge.loading.judge_from`, so a file is loaded by
    `judge.loading.load_judge`, the one loader) and its `ProgramFacts`.

    Args:
        program: a frozen program file (path) or a judge already loaded (`rubricforge_dspy.load_judge`).
        lm: the `dspy.LM` the judge calls; None keeps the judge's own (or ``dspy.configure``'s).
        allow_unverified: load a program whose manifest cannot verify it (see `rubricforge_dspy.load_judge`).
        check_certificate: warn when the program is uncertified or certified with another LM (off when the
            judge will not be called, e.g. to write its verdicts back).

    Returns:
        ``(judge, facts)``.

    Raises:
        InputError: the program file is missing or is not a verifiable program (`ProgramError`).
    """
    if program is None:
        raise InputError("no program: give a frozen program file or a judge")
    if isinstance(program, (str, os.PathLike)) and not Path(program).is_file():
        raise InputError(f"{program}: no such program file; freeze one with `rubricforge induce`")
    judge = judge_from(program, lm, check_certificate=check_certificate, allow_unverified=allow_unverified)
    where = str(program) if isinstance(program, (str, os.PathLike)) else type(program).__name__
    manifest = getattr(judge, "manifest", None) or {}
    rubric = getattr(judge, "rubric", None) or manifest.get("rubric") or ""
    model = getattr(lm, "model", None) or manifest.get("induced_with_lm")
    facts = ProgramFacts(where=where, rubric=rubric,
                         rubric_sha256=manifest.get("rubric_sha256") or rubric_sha256(rubric),
                         program_sha256=manifest.get(PROGRAM_SHA_KEY),
                         certificate_summary=certificate_summary(manifest.get(CERTIFICATE_KEY)), model=model,
                         pass_rule=judge.pass_rule())
    return judge, facts


def criterion_name(verdict: Verdict, rubric: str) -> str | None:
    """The rubric criterion the verdict's reason points at (`attribute_reason`), ``"N. Name"``, or None."""
    if verdict.abstained:
        return None
    found = attribute_reason(verdict.reason, rubric)
    return None if found is None else found.label
