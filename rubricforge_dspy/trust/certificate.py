"""A judge's faithfulness certificate: what a frozen program measured on labeled data it never saw,
bound to the LM that produced it; and the checks that use it (drift, recheck).

The certificate is plain JSON in the program's manifest (key ``"certificate"``)::

    n, positives, negatives, tasks        -- the held-out labeled items judged (tasks: distinct task ids)
    false_pass    {k, n, rate, interval, method}       -- FP / failed items; Clopper-Pearson exact interval
    accuracy, kappa, auc {value, interval, method, resamples, seed}
                                          -- intervals: percentile bootstrap resampling whole tasks
    ece           {value, bins, binning}  -- 10 equal-width bins of the raw score
    abstention    {k, rate}               -- verdicts that were abstentions (counted as fails above)
    contradictions {k, rate} | null       -- passed/score contradictions (null: not recorded by the judge)
    confidence, data_fingerprint, lm_fingerprint {sha256, parts}, rubric_sha256, date
    floor                                 -- the judge's margin over the symptom floor on the same items
                                             (`rubricforge_dspy.trust.floor_margin`), or absent
    evidence      {complete, cut, unknown, cut_share}  -- what the judge read for the verdicts (`evidence_shares`)
    read          {mode, render_tokens, ...}           -- how it read: "budget" (one render), "segments" or
                                             "explore", with their settings (overlap, caps); absent before
    render_version                        -- `render.RENDER_VERSION` of the text the judge read

Everything is computed from verdict lines (`rubricforge_dspy.core.verdict`), so a certificate can be
recomputed from the verdict file it came from. An abstention is a fail verdict with score 0.0.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from scipy import stats
from sklearn.exceptions import UndefinedMetricWarning

from rubricforge_dspy import metrics
from rubricforge_dspy.core.errors import InputError, RubricForgeWarning
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.verdict import EVIDENCE_SHARE_TOLERANCE as EVIDENCE_SHARE_TOLERANCE  # re-exported
from rubricforge_dspy.core.verdict import evidence_differs
from rubricforge_dspy.core.verdict import evidence_shares as evidence_shares  # re-exported (its home: core.verdict)
from rubricforge_dspy.evidence.render import RENDER_VERSION
from rubricforge_dspy.judge.fingerprint import lm_fingerprint
from rubricforge_dspy.program.store import CERTIFICATE_KEY as CERTIFICATE_KEY  # re-exported for trust callers

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.judge.floor import SymptomFloor

ECE_BINS = 10
BOOTSTRAP_RESAMPLES = 2_000


class CertificateError(InputError):
    """Data or verdicts that cannot give an honest certificate; the message says what to change."""


def _labeled(records: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    if not records:
        raise CertificateError(f"{where}: no verdicts to certify on")
    unlabeled = [r["id"] for r in records if r.get("label") not in (0, 1)]
    if unlabeled:
        raise CertificateError(f"{where}: {len(unlabeled)} verdict(s) have no 0/1 label (first: {unlabeled[0]}); "
                               "a certificate needs labeled data")
    return records


def _interval(ci: Iterable[float]) -> list[float | None]:
    return [None if math.isnan(x) else round(float(x), 4) for x in ci]


def _value(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 4)


class EvidenceMismatchWarning(RubricForgeWarning):
    """A certificate (or a judge compared with another) was earned on verdicts made on complete evidence and is
    applied to verdicts made on cut evidence, or the reverse (`evidence_mismatch`): its rates need not hold."""


def evidence_mismatch(earned: Mapping[str, Any] | None, applied: Mapping[str, Any], *,
                      earned_on: str = "the certificate", applied_to: str = "these verdicts") -> str | None:
    """Why the evidence `earned` (`evidence_shares` of the verdicts a certificate was measured on) does not
    match `applied` (those of the verdicts it is applied to), or None when it matches or either is unknown:
    one set has verdicts on cut evidence and the other none, or their cut shares differ by more than
    `EVIDENCE_SHARE_TOLERANCE` (the rule: `core.verdict.evidence_differs`)."""
    differs = evidence_differs(earned, applied)
    if differs is None:
        return None
    was, now = differs

    def kind(share: float) -> str:
        return "complete evidence" if share == 0 else "cut evidence" if share == 1 else f"{share:.0%} cut evidence"

    said = earned_on[:1].upper() + earned_on[1:]
    return (f"{said} rests on {kind(was)} (share judged on cut evidence {was:.2f}); {applied_to} on "
            f"{kind(now)} (share {now:.2f}): an error in an elided or clipped step cannot be seen, so rates measured "
            "on one need not hold on the other; measure on verdicts read the same way (the same render budget or "
            "--read mode)")


def warn_evidence_mismatch(earned: Mapping[str, Any] | None, records: Iterable[Mapping[str, Any]], **words: str) -> \
        str | None:
    """Warn (`EvidenceMismatchWarning`) when `evidence_mismatch` finds one between `earned` and `records`'
    shares; returns the message (None: no warning)."""
    message = evidence_mismatch(earned, evidence_shares(records), **words)
    if message is not None:
        warnings.warn(message, EvidenceMismatchWarning, stacklevel=3)
    return message


def compute_certificate(records: Iterable[Mapping[str, Any]], *, confidence: float = 0.95,
                        resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, where: str = "verdicts") -> dict[str, Any]:
    """The certificate's statistics from verdict lines (id, task_id, label, passed, score, abstained,
    contradiction): see the module docstring. No fingerprints or date (see `certificate_for`)."""
    rows = _labeled([dict(r) for r in records], where)
    y = np.array([int(r["label"]) for r in rows])
    passed = np.array([int(bool(r["passed"]) and not r.get("abstained")) for r in rows])
    scores = np.array([float(r["score"]) for r in rows])
    tasks = np.array([str(r.get("task_id") or r["id"]) for r in rows])
    alpha = 1.0 - confidence
    counts = metrics.confusion_counts(y, passed)
    negatives = counts["fp"] + counts["tn"]

    def clustered(statistic: Callable[..., float], *arrays: np.ndarray) -> dict[str, Any]:
        with warnings.catch_warnings():  # a statistic undefined on the data or on some resamples: reported as None
            warnings.filterwarnings("ignore", category=UndefinedMetricWarning)
            value = statistic(*arrays)
            ci = metrics.bootstrap_ci(statistic, *arrays, clusters=tasks, n_resamples=resamples,
                                      confidence=confidence, seed=seed)
        return {"value": _value(value), "interval": _interval(ci), "method": "task-clustered percentile bootstrap",
                "resamples": resamples, "seed": seed}

    fp_ci = metrics.proportion_ci(counts["fp"], negatives, alpha=alpha, method="exact")
    recorded = [r for r in rows if "contradiction" in r]
    abstained = sum(bool(r.get("abstained")) for r in rows)
    return {
        "n": len(rows), "positives": int(y.sum()), "negatives": negatives, "tasks": len(set(tasks)),
        "confusion": counts,
        "false_pass": {"k": counts["fp"], "n": negatives,
                       "rate": round(counts["fp"] / negatives, 4) if negatives else None,
                       "interval": _interval(fp_ci), "method": "Clopper-Pearson exact"},
        "accuracy": clustered(metrics.accuracy, y, passed),
        "kappa": clustered(metrics.cohens_kappa, y, passed),
        "auc": clustered(metrics.roc_auc, y, scores),
        "ece": {"value": round(metrics.expected_calibration_error(y, scores, ECE_BINS), 4), "bins": ECE_BINS,
                "binning": "equal-width bins of the raw score on [0, 1]"},
        "abstention": {"k": abstained, "rate": round(abstained / len(rows), 4)},
        "contradictions": ({"k": sum(bool(r["contradiction"]) for r in recorded), "n": len(recorded)}
                           if recorded else None),
        "confidence": confidence,
        "evidence": evidence_shares(rows),
    }


def certificate_for(records: Iterable[Mapping[str, Any]], *, lm: dspy.BaseLM | None, data_fingerprint: str,
                    rubric_sha256: str | None, floor: tuple[Sequence[Mapping[str, Any]], str] | None = None,
                    reading: Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """`compute_certificate` plus what binds it: data fingerprint, LM fingerprint, rubric hash, date; and,
    with `floor` (the floor's verdict lines on the same items, and where the floor came from), the
    judge's margin over it; with `reading` (``{"mode": "budget" | "segments" | "explore", ...}``,
    `trust.certify.reading_of`), how the judge read the episodes, under ``read``."""
    from rubricforge_dspy.trust.floor_margin import floor_margin_of_records

    records = [dict(r) for r in records]
    fingerprint = lm_fingerprint(lm)
    extra: dict[str, Any] = {}
    if reading is not None:
        extra["read"] = dict(reading)
    if floor is not None:
        extra["floor"] = floor_margin_of_records(records, floor[0], source=floor[1],
                                                 alpha=round(1.0 - options.get("confidence", 0.95), 6))
    return {
        **compute_certificate(records, **options), **extra,
        "data_fingerprint": data_fingerprint,
        "lm_fingerprint": {"sha256": fingerprint.sha256, "parts": fingerprint.parts},
        "rubric_sha256": rubric_sha256,
        "render_version": RENDER_VERSION,
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
    }


def check_held_out(manifest: Mapping[str, Any] | None, ids: Iterable[str], tasks: Iterable[str], fingerprint: str,
                   where: str) -> None:
    """Refuse to certify on data the program trained or selected on: the same data fingerprint, or
    any id (or task, ``domain/task_id``) listed in the manifest's ``data_seen``."""
    manifest = manifest or {}
    if fingerprint and fingerprint == manifest.get("data_fingerprint"):
        raise CertificateError(f"{where}: this is the data the program was induced on (same data fingerprint "
                               f"{fingerprint[:12]}); certify on labeled items it never trained or selected on")
    seen = manifest.get("data_seen") or {}
    for kind, mine in (("id", set(ids)), ("task", set(tasks))):
        overlap = sorted(mine & set(seen.get(kind + "s") or []))
        if overlap:
            raise CertificateError(
                f"{where}: {len(overlap)} {kind}(s) overlap the program's training/validation data "
                f"(first: {overlap[0]}); remove them (the manifest's data_seen lists them) and certify again")


@dataclass(frozen=True)
class Recheck:
    """A canary recheck: the false-pass rate now against the certified one (one-sided exact test)."""

    k: int
    n: int
    certified_rate: float
    p_value: float
    alpha: float

    @property
    def rate(self) -> float:
        return self.k / self.n

    @property
    def worse(self) -> bool:
        return self.p_value < self.alpha

    def format(self) -> str:
        change = self.rate - self.certified_rate
        verdict = ("SIGNIFICANTLY HIGHER than certified" if self.worse else "not significantly higher than certified")
        return (f"false-pass rate {self.rate:.3f} ({self.k}/{self.n} failed items passed) vs certified "
                f"{self.certified_rate:.3f}: {change:+.3f} ({verdict}; one-sided exact binomial test "
                f"p = {self.p_value:.4g}, alpha = {self.alpha})")


def recheck(certificate: Mapping[str, Any], records: Iterable[Mapping[str, Any]], alpha: float = 0.05,
            where: str = "canary") -> Recheck:
    """Test H0 "the false-pass rate is at most the certified one" on canary verdicts with the one-sided
    exact binomial test (``scipy.stats.binomtest(k, n, p=certified, alternative="greater")``)."""
    rows = _labeled([dict(r) for r in records], where)
    warn_evidence_mismatch(certificate.get("evidence"), rows, applied_to=f"the {where} verdicts")
    failed = [r for r in rows if r["label"] == 0]
    if not failed:
        raise CertificateError(f"{where}: no failed (label 0) items; a false-pass recheck needs some")
    certified = (certificate.get("false_pass") or {}).get("rate")
    if certified is None:
        raise CertificateError("the certificate has no false-pass rate (it saw no failed items); certify again")
    k = sum(bool(r["passed"]) and not r.get("abstained") for r in failed)
    p_value = float(stats.binomtest(k, len(failed), p=float(certified), alternative="greater").pvalue)
    return Recheck(k=k, n=len(failed), certified_rate=float(certified), p_value=p_value, alpha=alpha)


def format_certificate(certificate: Mapping[str, Any] | None) -> list[str]:
    """A few readable lines for `rubricforge show`."""
    if not certificate:
        return ["certificate: none (run `rubricforge certify PROGRAM --data HELD_OUT_LABELED`)"]
    from rubricforge_dspy.trust.floor_margin import margin_lines

    c = certificate
    level = int(round(100 * c.get("confidence", 0.95)))

    def stat(name: str) -> str:
        entry = c[name]
        if entry["value"] is None:
            return f"{name} undefined"
        low, high = entry["interval"]
        span = f" [{low:.3f}, {high:.3f}]" if low is not None else ""
        return f"{name} {entry['value']:.3f}{span}"

    fp = c["false_pass"]
    fp_text = ("false-pass rate undefined (no failed items)" if fp["rate"] is None else
               f"false-pass rate {fp['rate']:.3f} ({fp['k']}/{fp['n']}) [{fp['interval'][0]:.3f}, "
               f"{fp['interval'][1]:.3f}] exact")
    contradictions = ("not recorded" if c.get("contradictions") is None
                      else f"{c['contradictions']['k']}/{c['contradictions']['n']}")
    lm = (c.get("lm_fingerprint") or {}).get("parts") or {}
    return [
        f"certificate ({c['date']}): n {c['n']} held-out items ({c['positives']} passed, {c['negatives']} failed, "
        f"{c['tasks']} tasks)",
        f"  {fp_text}; {level}% intervals",
        f"  {stat('accuracy')}, {stat('kappa')}, {stat('auc')} (task-clustered bootstrap)",
        f"  ECE {c['ece']['value']:.3f} ({c['ece']['bins']} equal-width bins), abstained "
        f"{c['abstention']['k']}/{c['n']}, contradictions {contradictions}",
        f"  LM {lm.get('model')} @ {lm.get('api_base')} (temperature {lm.get('temperature')}, max_tokens "
        f"{lm.get('max_tokens')}); LM fingerprint {c['lm_fingerprint']['sha256'][:12]}, data "
        f"{str(c['data_fingerprint'])[:12]}",
        *reading_lines(c),
        *("  " + line for line in margin_lines(c.get("floor"))),
    ]


def reading_lines(certificate: Mapping[str, Any]) -> list[str]:
    """How the certified judge read (``read``) and the evidence its verdicts rested on (``evidence``), as one
    line (none when the certificate records neither)."""
    read, evidence = certificate.get("read") or {}, certificate.get("evidence") or {}
    if not read and not evidence:
        return []
    settings = ", ".join(f"{k} {v}" for k, v in read.items() if k != "mode")
    mode = f"read: {read.get('mode', 'unrecorded')}" + (f" ({settings})" if settings else "")
    if not evidence:
        return [f"  {mode}"]
    return [f"  {mode}; verdicts on complete evidence {evidence.get('complete')}, on cut evidence "
            f"{evidence.get('cut')}, unknown {evidence.get('unknown')}"]


def _json_document(path: PathArg) -> Any:
    """The parsed JSON of a ``.json`` judge file (`program.store.read_json_document`), or None when `path` is not
    one or cannot be read (its own reader then says what is wrong with it)."""
    from pathlib import Path

    from rubricforge_dspy.program.store import read_json_document

    if Path(path).suffix != ".json":
        return None
    try:
        return read_json_document(Path(path), "program")
    except InputError:
        return None


def floor_file(path: PathArg) -> SymptomFloor | None:
    """The `SymptomFloor` a floor file (``rubricforge floor --save-floor``) holds, or None when `path` is not
    one (a program, a cascade: read by their own readers, which say what is wrong with them).

    Raises:
        InputError: the file says it is a floor but is not a valid one (`judge.floor.FloorError`).
    """
    from rubricforge_dspy.judge.floor import FLOOR_KIND, SymptomFloor

    data = _json_document(path)
    if not isinstance(data, dict) or data.get("kind") != FLOOR_KIND:
        return None
    return SymptomFloor.from_dict(data, str(path))


def describe_floor(path: PathArg, floor: SymptomFloor) -> str:
    """What `rubricforge show` prints of a floor file: its model, what it was fit on, its strongest features.
    A floor carries no certificate: its cross-validated numbers come from ``rubricforge floor --data``."""
    from rubricforge_dspy.core.terminal import terminal_safe

    trained = floor.trained_on or {}
    weights = sorted(zip(floor.features, floor.model.coef, strict=True), key=lambda pair: -abs(pair[1]))
    strongest = ", ".join(f"{terminal_safe(name)} {weight:+.2f}" for name, weight in weights[:5] if weight)
    return "\n".join([
        f"floor: {terminal_safe(path)}",
        f"kind: symptom floor {terminal_safe(floor.name)!r}, a logistic regression on {len(floor.features)} observable "
        "feature(s) of the steps; passes at p >= 0.5; no LM call",
        f"trained on {trained.get('n')} trajectories ({trained.get('positives')} passed, {trained.get('tasks')} tasks)",
        f"strongest features (standardized coefficients): {strongest or 'none'}",
        "certificate: none (a floor file carries none; `rubricforge floor --data LABELED` cross-validates it, "
        "`rubricforge cascade fit --stage FLOOR` certifies a cascade with it)",
    ])


def reading_document(path: PathArg) -> dict[str, Any] | None:
    """The verified document of a saved segments or explorer judge at `path` (`program.store.read_judge_document`),
    or None when `path` is not a sealed judge document (a program, a floor, a cascade: read by their own readers).

    Raises:
        ProgramError: the file is a sealed judge document but was edited after it was saved.
    """
    from rubricforge_dspy.program.store import is_judge_document, read_judge_document

    return read_judge_document(path) if is_judge_document(_json_document(path)) else None


def describe_reading_judge(path: PathArg, document: Mapping[str, Any]) -> str:
    """What `rubricforge show` prints of a saved segments or explorer judge: its kind, how it reads, its rubric
    hash, where it was induced, and its certificate (`format_certificate`); every text from the file escaped."""
    from rubricforge_dspy.core.terminal import terminal_safe, terminal_safe_strings

    manifest = terminal_safe_strings(dict(document.get("manifest") or {}))
    settings = {k: v for k, v in (manifest.get("reading") or {}).items() if k != "read"}
    listed = ", ".join(f"{k} {v}" for k, v in settings.items())
    reading = f"{manifest.get('read')}" + (f" ({listed})" if listed else "")
    render = document.get("render") or {}
    lines = [f"judge: {terminal_safe(path)}",
             f"kind: {terminal_safe(str(document.get('kind')))} (integrity: sha256 {str(document.get('sha256'))[:12]}, "
             "verified)",
             f"reads: {reading}; {render.get('max_tokens')} tokens a call",
             f"rubric: sha256 {str(document.get('rubric_sha256'))[:12]}",
             f"induced with: {manifest.get('induced_with_lm')} on data {str(manifest.get('data_fingerprint'))[:12]} "
             f"({manifest.get('created_at')})"]
    return "\n".join([*lines, *format_certificate(manifest.get(CERTIFICATE_KEY))])


def describe_program(path: PathArg, *, allow_unverified: bool = False) -> str:
    """What `rubricforge show` prints of a frozen program (or of a floor file: `describe_floor`): its integrity,
    the rubric (sha256, length, criteria), where it was induced, its calibration, hybrid stack and symptom floor,
    and its certificate (`format_certificate`).

    Args:
        path: the program file (``.json``).
        allow_unverified: describe a program whose manifest cannot verify it (marked UNVERIFIED) instead of
            refusing it.

    Raises:
        InputError: the file is not a program, or (without `allow_unverified`) it cannot be verified.
    """
    from rubricforge_dspy.core.rubric import parse_criteria
    from rubricforge_dspy.core.terminal import terminal_safe, terminal_safe_strings
    from rubricforge_dspy.program.store import MANIFEST_KEY, program_sha256, read_program

    floor = floor_file(path)
    if floor is not None:
        return describe_floor(path, floor)
    document = reading_document(path)
    if document is not None:
        return describe_reading_judge(path, document)
    state = read_program(path, allow_unverified=allow_unverified)
    manifest = state.get(MANIFEST_KEY) or {}
    verified = bool(manifest.get("program_sha256")) and manifest.get("program_sha256") == program_sha256(state)
    rubric = manifest.get("rubric") or ""
    criteria = [replace(c, name=terminal_safe(c.name)) for c in parse_criteria(rubric)]
    manifest = terminal_safe_strings(manifest)  # whatever the file says is printed escaped (core.terminal)
    lines = [
        f"program: {terminal_safe(path)}",
        f"integrity: program_sha256 {str(manifest.get('program_sha256'))[:12]} (instructions, field texts, demos, "
        "operating point, render, manifest)" + ("" if verified else ": UNVERIFIED, the content does not match it"),
        f"rubric: sha256 {str(manifest.get('rubric_sha256'))[:12]}, {len(rubric)} chars, {len(criteria)} criteria"
        + (": " + "; ".join(f"{c.number}. {c.name}" for c in criteria) if criteria else ""),
        f"induced with: {manifest.get('induced_with_lm')} on data {str(manifest.get('data_fingerprint'))[:12]} "
        f"({manifest.get('created_at')})",
    ]
    if manifest.get("calibration"):
        cal = manifest["calibration"]
        lines.append(f"calibration: {cal.get('method')} fit on {cal.get('n')} verdicts")
    if manifest.get("hybrid"):
        hybrid = manifest["hybrid"]
        lines.append(f"hybrid: LLM score + symptom features, fit on {(hybrid.get('fit') or {}).get('n')} validation "
                     f"verdicts; passes at p >= {hybrid.get('threshold')}")
    if manifest.get("floor"):
        lines.append(f"symptom floor: fit on {(manifest['floor'].get('trained_on') or {}).get('n')} training "
                     "trajectories")
    return "\n".join([*lines, *format_certificate(manifest.get(CERTIFICATE_KEY))])
