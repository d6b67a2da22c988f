"""The promotion gate: may a candidate judge replace the baseline? Two paired tests on the same labeled
items, and one decision usable as a CI step (`rubricforge gate`: exit 0 yes, 1 no, 2 bad input).

1. Accuracy: the exact McNemar test on paired correctness (`metrics.mcnemar_exact`; McNemar 1947,
   exact binomial form as in Fagerland, Lydersen & Laake, BMC Med. Res. Methodol. 13:91, 2013).
2. False passes: a non-inferiority test on the difference of the paired false-pass rates over the
   failed items, ``d = FPR(candidate) - FPR(baseline)``, ``H0: d >= margin`` against ``H1: d < margin``,
   with Tango's asymptotic score test for paired proportions (T. Tango, "Equivalence test and
   confidence interval for the difference in proportions for the paired-sample design", Statistics in
   Medicine 17(8):891-908, 1998; recommended for paired differences by Fagerland, Lydersen & Laake,
   *Statistical Analysis of Contingency Tables*, 2017, ch. 8). With ``b`` failed items only the
   candidate passed, ``c`` failed items only the baseline passed and ``N`` failed items::

       Z(m) = (b - c - N m) / sqrt(N (2 q(m) + m (1 - m)))

   where ``q(m)`` is the maximum-likelihood estimate of the probability of a ``c`` item under
   ``d = m``: ``q = (sqrt(B^2 - 4 A C) - B) / (2 A)``, ``A = 2N``, ``B = -b - c + (2N - b + c) m``,
   ``C = -c m (1 - m)``. The p-value is ``Phi(Z(margin))``; the one-sided upper bound of ``d`` is
   the root of ``Z(u) = -z_(1-alpha)``, so ``p < alpha`` exactly when that bound is below the margin.

Decision: the candidate may replace the baseline when its false-pass rate is shown non-inferior
(``p < alpha``) and McNemar does not show it significantly less accurate (fewer correct items with
``p < alpha``). Abstentions are fail verdicts, as everywhere.

With ``require_beats_floor`` (``--require-beats-floor``) the candidate must also beat the symptom floor
on the same items (`rubricforge_dspy.trust.floor_margin`): more items right than the floor (McNemar's
``b > c``; the p-value is reported). The floor is the candidate program's own (fit on its training
split) when its manifest holds one, else cross-validated by task on the gate's data; with verdict files,
the floor's verdict file (``rubricforge floor --verdicts-dir``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from scipy import optimize, stats

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.metrics.agreement import mcnemar_exact

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.core.trajectory import Trajectory


class GateInputError(InputError):
    """Verdicts that cannot be compared (not the same labeled items); the message says which."""


@dataclass(frozen=True)
class Paired:
    """Two judges' verdicts on the same labeled items, aligned by id."""

    ids: tuple[str, ...]
    labels: tuple[int, ...]
    candidate: tuple[bool, ...]
    baseline: tuple[bool, ...]


def _verdicts(records: Iterable[Mapping[str, Any]], where: str) -> dict[str, tuple[int, bool]]:
    out: dict[str, tuple[int, bool]] = {}
    for record in records:
        ident = record["id"]
        if record.get("label") not in (0, 1):
            raise GateInputError(f"{where}: item {ident} has no 0/1 label; the gate needs labeled verdicts")
        if ident in out:
            raise GateInputError(f"{where}: item {ident} appears twice")
        out[ident] = (int(record["label"]), bool(record["passed"]) and not record.get("abstained"))
    if not out:
        raise GateInputError(f"{where}: no verdicts")
    return out


def pair(candidate: Iterable[Mapping[str, Any]], baseline: Iterable[Mapping[str, Any]],
         where: tuple[str, str] = ("candidate", "baseline")) -> Paired:
    """Align two verdict sets; both must hold the same ids with the same labels."""
    a, b = _verdicts(candidate, where[0]), _verdicts(baseline, where[1])
    for mine, theirs, name, other in ((a, b, where[0], where[1]), (b, a, where[1], where[0])):
        extra = sorted(set(mine) - set(theirs))
        if extra:
            raise GateInputError(f"{name}: {len(extra)} item(s) not judged in {other} (first: {extra[0]}); "
                                 "judge both on the same labeled items")
    ids = tuple(sorted(a))
    disagree = [i for i in ids if a[i][0] != b[i][0]]
    if disagree:
        raise GateInputError(f"{where[0]} and {where[1]} disagree on the label of {len(disagree)} item(s) "
                             f"(first: {disagree[0]})")
    return Paired(ids, tuple(a[i][0] for i in ids), tuple(a[i][1] for i in ids), tuple(b[i][1] for i in ids))


def tango_z(b: int, c: int, n: int, margin: float) -> float:
    """Tango's score statistic for ``H0: p_b - p_c = margin`` on ``n`` pairs (see the module docstring)."""
    A = 2.0 * n
    B = -b - c + (2.0 * n - b + c) * margin
    C = -c * margin * (1.0 - margin)
    q = (math.sqrt(max(0.0, B * B - 4.0 * A * C)) - B) / (2.0 * A)
    variance = n * (2.0 * q + margin * (1.0 - margin))
    if variance <= 0.0:
        return -math.inf if b - c - n * margin < 0 else math.inf
    return (b - c - n * margin) / math.sqrt(variance)


@dataclass(frozen=True)
class NonInferiority:
    """A one-sided non-inferiority test of the candidate's false passes against the incumbent's (discordant
    counts b and c of n items, the margin, alpha, the p-value and the upper confidence bound)."""

    b: int
    c: int
    n: int
    margin: float
    alpha: float
    p_value: float
    upper: float

    @property
    def difference(self) -> float:
        return (self.b - self.c) / self.n

    @property
    def shown(self) -> bool:
        return self.p_value < self.alpha


def false_pass_noninferiority(paired: Paired, margin: float = 0.05, alpha: float = 0.05) -> NonInferiority:
    """Tango's score test that the candidate's false-pass rate is at most `margin` above the baseline's."""
    if not 0.0 < margin < 1.0:
        raise GateInputError(f"margin must be in (0, 1), got {margin}")
    if not 0.0 < alpha < 0.5:
        raise GateInputError(f"alpha must be in (0, 0.5), got {alpha}")
    failed = [(c, b) for y, c, b in zip(paired.labels, paired.candidate, paired.baseline, strict=True) if y == 0]
    if not failed:
        raise GateInputError("no failed (label 0) items: the false-pass rate cannot be compared")
    n = len(failed)
    only_candidate = sum(c and not b for c, b in failed)
    only_baseline = sum(b and not c for c, b in failed)
    p_value = float(stats.norm.cdf(tango_z(only_candidate, only_baseline, n, margin)))
    z = stats.norm.ppf(1.0 - alpha)
    low, high = -1.0 + 1e-9, 1.0 - 1e-9
    if tango_z(only_candidate, only_baseline, n, high) + z >= 0:
        upper = 1.0
    else:
        upper = float(optimize.brentq(lambda m: tango_z(only_candidate, only_baseline, n, m) + z, low, high,
                                      xtol=1e-10))
    return NonInferiority(only_candidate, only_baseline, n, margin, alpha, p_value, upper)


@dataclass(frozen=True)
class GateResult:
    """A gate decision between two frozen programs on the same items: paired agreement, McNemar's test, the
    false-pass non-inferiority test and, when asked, the candidate's margin over the symptom floor."""

    paired: Paired
    mcnemar_b: int
    mcnemar_c: int
    mcnemar_p: float
    false_pass: NonInferiority
    names: tuple[str, str]
    floor: dict[str, Any] | None = None  # the candidate's margin over the symptom floor (`floor.margin`)
    require_beats_floor: bool = False

    @property
    def less_accurate(self) -> bool:
        return self.mcnemar_c > self.mcnemar_b and self.mcnemar_p < self.false_pass.alpha

    @property
    def false_passes_worse_than_floor(self) -> bool:
        """The candidate passes a larger share of the failed items than the symptom floor (compared first)."""
        from rubricforge_dspy.trust.floor_margin import false_pass_worse

        return false_pass_worse(self.floor)

    @property
    def beats_floor(self) -> bool | None:
        if self.floor is None:
            return None
        return bool(self.floor["beats_floor"]) and not self.false_passes_worse_than_floor

    @property
    def may_replace(self) -> bool:
        """With `require_beats_floor`, a candidate whose false-pass rate is worse than the floor's (compared
        first), or that gets no more items right, never replaces the baseline; without it the floor is
        reported (a worse false-pass rate in words beside the decision), not required."""
        floor_ok = not self.require_beats_floor or bool(self.beats_floor)
        return self.false_pass.shown and not self.less_accurate and floor_ok

    def markdown(self) -> str:
        p, fp = self.paired, self.false_pass
        n, failed = len(p.ids), fp.n

        def counts(verdicts: Sequence[bool]) -> tuple[str, str]:
            right = sum(int(v) == y for v, y in zip(verdicts, p.labels, strict=True))
            false_passes = sum(v and y == 0 for v, y in zip(verdicts, p.labels, strict=True))
            return f"{right}/{n} ({right / n:.3f})", f"{false_passes}/{failed} ({false_passes / failed:.3f})"

        (acc_c, fp_c), (acc_b, fp_b) = counts(p.candidate), counts(p.baseline)
        decision = ("**PASS: the candidate may replace the baseline.**" if self.may_replace else
                    "**FAIL: keep the baseline.**")
        reasons = []
        if not fp.shown:
            reasons.append(f"its false-pass rate is not shown to be within {fp.margin:g} of the baseline's "
                           f"(upper bound {fp.upper:+.3f} >= margin)")
        if self.less_accurate:
            reasons.append("it is significantly less accurate (McNemar)")
        rates = self.floor or {}
        worse_than_floor = "" if not self.false_passes_worse_than_floor else (
            f"its false-pass rate ({rates['judge']['false_pass_rate']:.3f}) is worse than the symptom floor's "
            f"({rates['floor']['false_pass_rate']:.3f}): it passes more failed items than counting tool errors "
            "and turns does")
        if worse_than_floor and self.require_beats_floor:
            reasons.append("it does not beat the symptom floor: " + worse_than_floor)
        elif self.require_beats_floor and not self.beats_floor:
            reasons.append("it does not beat the symptom floor (no more items right than the floor)")
        lines = [
            f"## Promotion gate: {self.names[0]} (candidate) vs {self.names[1]} (baseline)",
            "",
            f"{n} labeled items, {failed} of them failed.",
            "",
            "| | candidate | baseline |",
            "|---|---|---|",
            f"| correct | {acc_c} | {acc_b} |",
            f"| false passes / failed items | {fp_c} | {fp_b} |",
            "",
            f"- Accuracy, exact McNemar on paired correctness: {self.mcnemar_b} item(s) only the candidate got "
            f"right, {self.mcnemar_c} only the baseline; p = {self.mcnemar_p:.4g}.",
            f"- False passes, non-inferiority (Tango score test, paired; margin {fp.margin:g}, alpha {fp.alpha:g}):"
            f" difference {fp.difference:+.3f} ({fp.b} failed item(s) only the candidate passed, {fp.c} only "
            f"the baseline), one-sided {100 * (1 - fp.alpha):g}% upper bound {fp.upper:+.3f}, p = {fp.p_value:.4g}.",
        ]
        if self.floor is not None:
            from rubricforge_dspy.trust.floor_margin import margin_lines

            required = " (required)" if self.require_beats_floor else " (not required)"
            lines += [f"- Candidate vs symptom floor{required}: " + margin_lines(self.floor)[0].split(": ", 1)[1],
                      *("  " + line.strip() for line in margin_lines(self.floor)[1:])]
        lines += ["", decision + (" Because " + "; and ".join(reasons) + "." if reasons else "")]
        if worse_than_floor and not self.require_beats_floor:
            lines += ["", f"**WARNING: {worse_than_floor}** (the floor is not required: --require-beats-floor "
                      "makes this refuse the candidate)."]
        return "\n".join(lines)


def decide(paired: Paired, margin: float = 0.05, alpha: float = 0.05,
           names: tuple[str, str] = ("candidate", "baseline"), floor: dict[str, Any] | None = None,
           require_beats_floor: bool = False) -> GateResult:
    """Run both tests and decide (see the module docstring); `floor` is the candidate's margin over the
    symptom floor (`floor.margin.floor_margin_of_records`), required to be positive with `require_beats_floor`."""
    if require_beats_floor and floor is None:
        raise GateInputError("--require-beats-floor needs the floor's verdicts on the same items "
                             "(--floor-verdicts with verdict files, or --data)")
    correct_c = [int(v) == y for v, y in zip(paired.candidate, paired.labels, strict=True)]
    correct_b = [int(v) == y for v, y in zip(paired.baseline, paired.labels, strict=True)]
    b, c, p = mcnemar_exact(correct_c, correct_b)
    return GateResult(paired, b, c, p, false_pass_noninferiority(paired, margin, alpha), names, floor,
                      require_beats_floor)


def _floor(candidate: list[dict[str, Any]], floor_records: list[dict[str, Any]] | None, source: str, alpha: float
           ) -> dict[str, Any] | None:
    if floor_records is None:
        return None
    from rubricforge_dspy.trust.floor_margin import FloorMarginError, floor_margin_of_records

    try:
        return floor_margin_of_records(candidate, floor_records, source=source, alpha=alpha)
    except FloorMarginError as error:
        raise GateInputError(str(error)) from None


def gate_verdict_files(candidate_path: PathArg, baseline_path: PathArg, margin: float = 0.05, alpha: float = 0.05,
                       *, floor_path: PathArg | None = None, require_beats_floor: bool = False) -> GateResult:
    """The gate on two verdict JSONL files judged on the same labeled items (and, with `floor_path`, the
    symptom floor's verdict file on them: ``rubricforge floor --verdicts-dir DIR`` writes DIR/floor.jsonl)."""
    from rubricforge_dspy.core.verdict import read_verdicts

    candidate = list(read_verdicts(candidate_path).values())
    baseline = list(read_verdicts(baseline_path).values())
    paired = pair(candidate, baseline, (str(candidate_path), str(baseline_path)))
    _compare_evidence(candidate, baseline, (str(candidate_path), str(baseline_path)))
    floor_records = list(read_verdicts(floor_path).values()) if floor_path is not None else None
    floor = _floor(candidate, floor_records, f"the floor verdicts in {floor_path}", alpha)
    return decide(paired, margin, alpha, names=(str(candidate_path), str(baseline_path)), floor=floor,
                  require_beats_floor=require_beats_floor)


def gate_programs(candidate_program: PathArg, baseline_program: PathArg, trajectories: list[Trajectory], *,
                  lm: dspy.BaseLM | None, verdicts_dir: PathArg,
                  margin: float = 0.05, alpha: float = 0.05, concurrency: int = 4,
                  require_beats_floor: bool = False, allow_import: bool = False) -> GateResult:
    """Judge `trajectories` with both frozen programs on `lm` (verdicts kept in `verdicts_dir`), then gate;
    the candidate's margin over the symptom floor is always reported (required with `require_beats_floor`).
    `allow_import`: load a cascade's Python stage by importing its module (`judge.loading.load_judge`)."""
    from pathlib import Path

    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.trust.certify import judge_labeled

    if not trajectories:
        raise GateInputError("no labeled trajectories to gate on")
    from rubricforge_dspy.trust.certificate import CERTIFICATE_KEY, warn_evidence_mismatch

    records: list[list[dict[str, Any]]] = []
    for name, program in (("candidate", candidate_program), ("baseline", baseline_program)):
        judge = load_judge(program, check_certificate=False, allow_import=allow_import)
        records.append(judge_labeled(judge, trajectories, Path(verdicts_dir) / f"{name}.jsonl", lm=lm,
                                     concurrency=concurrency))
        certificate = (getattr(judge, "manifest", None) or {}).get(CERTIFICATE_KEY)
        if isinstance(certificate, Mapping):  # the program's certificate, applied to the gate's verdicts
            warn_evidence_mismatch(certificate.get("evidence"), records[-1], earned_on=f"the {name}'s certificate",
                                   applied_to=f"its verdicts on the gate's data ({program})")
    paired = pair(records[0], records[1], (str(candidate_program), str(baseline_program)))
    _compare_evidence(records[0], records[1], (str(candidate_program), str(baseline_program)))
    floor = _program_floor(candidate_program, trajectories, records[0], alpha, require_beats_floor, allow_import)
    return decide(paired, margin, alpha, names=(str(candidate_program), str(baseline_program)), floor=floor,
                  require_beats_floor=require_beats_floor)


def _compare_evidence(candidate: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]],
                      names: tuple[str, str]) -> str | None:
    """Warn (`trust.certificate.EvidenceMismatchWarning`) when the two judges read the items differently: one
    on complete evidence, the other on cut (their false-pass rates then measure different things)."""
    from rubricforge_dspy.trust.certificate import evidence_shares, warn_evidence_mismatch

    return warn_evidence_mismatch(evidence_shares(baseline), candidate,
                                  earned_on=f"the baseline's verdicts ({names[1]})",
                                  applied_to=f"the candidate's verdicts ({names[0]})")


def _program_floor(program: PathArg, trajectories: list[Trajectory], candidate: list[dict[str, Any]], alpha: float,
                   required: bool, allow_import: bool = False) -> dict[str, Any] | None:
    """The candidate's margin over the floor (its own, else cross-validated on the gate's data); None when no
    floor can be fit and none is required."""
    from rubricforge_dspy.judge.cascade import is_cascade_file
    from rubricforge_dspy.judge.floor import FloorError
    from rubricforge_dspy.program.store import read_manifest
    from rubricforge_dspy.trust.floor_margin import floor_verdicts

    # a floor file (or another stage document) has no manifest, and a cascade's holds no floor of its own: the
    # floor is cross-validated on the gate's data (a segments or explorer judge's manifest: `read_manifest`)
    stage = is_cascade_file(program) or _stage_file(program, allow_import)
    manifest = {} if stage else read_manifest(program) or {}
    try:
        records, source = floor_verdicts(trajectories, manifest.get("floor"))
    except FloorError as error:
        if required:
            raise GateInputError(f"--require-beats-floor: no floor for these items: {error}") from None
        return None
    return _floor(candidate, records, source, alpha)


def _stage_file(path: PathArg, allow_import: bool = False) -> bool:
    """Whether `path` holds a judge that is not a frozen program (a floor file, a recorded stage): `load_judge`
    reads it, and it carries no program manifest."""
    from pathlib import Path

    from rubricforge_dspy.judge.loading import load_judge

    if Path(path).suffix != ".json":
        return False
    try:
        judge = load_judge(path, check_certificate=False, allow_import=allow_import)
    except InputError:
        return False
    return getattr(judge, "manifest", None) is None


def needs_lm(*programs: PathArg, allow_import: bool = False) -> bool:
    """Whether judging with any of `programs` calls an LM (a floor file calls none); `allow_import` as in
    `gate_programs`."""
    from rubricforge_dspy.judge.loading import load_judge

    return any(load_judge(program, check_certificate=False, allow_import=allow_import).predictors()
               for program in programs)
