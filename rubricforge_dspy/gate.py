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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from scipy import optimize, stats

from rubricforge_dspy.metrics import mcnemar_exact


class GateInputError(ValueError):
    """Verdicts that cannot be compared (not the same labeled items); the message says which."""


@dataclass(frozen=True)
class Paired:
    """Two judges' verdicts on the same labeled items, aligned by id."""

    ids: tuple[str, ...]
    labels: tuple[int, ...]
    candidate: tuple[bool, ...]
    baseline: tuple[bool, ...]


def _verdicts(records: Iterable[Mapping], where: str) -> dict[str, tuple[int, bool]]:
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


def pair(candidate: Iterable[Mapping], baseline: Iterable[Mapping], where: tuple[str, str] = ("candidate", "baseline")
         ) -> Paired:
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
    failed = [(c, b) for y, c, b in zip(paired.labels, paired.candidate, paired.baseline) if y == 0]
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
    paired: Paired
    mcnemar_b: int
    mcnemar_c: int
    mcnemar_p: float
    false_pass: NonInferiority
    names: tuple[str, str]

    @property
    def less_accurate(self) -> bool:
        return self.mcnemar_c > self.mcnemar_b and self.mcnemar_p < self.false_pass.alpha

    @property
    def may_replace(self) -> bool:
        return self.false_pass.shown and not self.less_accurate

    def markdown(self) -> str:
        p, fp = self.paired, self.false_pass
        n, failed = len(p.ids), fp.n

        def counts(verdicts) -> tuple[str, str]:
            right = sum(int(v) == y for v, y in zip(verdicts, p.labels))
            false_passes = sum(v and y == 0 for v, y in zip(verdicts, p.labels))
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
            "",
            decision + (" Because " + "; and ".join(reasons) + "." if reasons else ""),
        ]
        return "\n".join(lines)


def decide(paired: Paired, margin: float = 0.05, alpha: float = 0.05,
           names: tuple[str, str] = ("candidate", "baseline")) -> GateResult:
    """Run both tests and decide (see the module docstring)."""
    correct_c = [int(v) == y for v, y in zip(paired.candidate, paired.labels)]
    correct_b = [int(v) == y for v, y in zip(paired.baseline, paired.labels)]
    b, c, p = mcnemar_exact(correct_c, correct_b)
    return GateResult(paired, b, c, p, false_pass_noninferiority(paired, margin, alpha), names)


def gate_verdict_files(candidate_path, baseline_path, margin: float = 0.05, alpha: float = 0.05) -> GateResult:
    """The gate on two verdict JSONL files judged on the same labeled items."""
    from rubricforge_dspy.verdict import read_lines

    candidate = [record for _, record in read_lines(candidate_path)]
    baseline = [record for _, record in read_lines(baseline_path)]
    paired = pair(candidate, baseline, (str(candidate_path), str(baseline_path)))
    return decide(paired, margin, alpha, names=(str(candidate_path), str(baseline_path)))


def gate_programs(candidate_program, baseline_program, trajectories, *, lm, verdicts_dir,
                  margin: float = 0.05, alpha: float = 0.05, concurrency: int = 4) -> GateResult:
    """Judge `trajectories` with both frozen programs on `lm` (verdicts kept in `verdicts_dir`), then gate."""
    from pathlib import Path

    from rubricforge_dspy.certify import judge_labeled
    from rubricforge_dspy.judge import load

    if not trajectories:
        raise GateInputError("no labeled trajectories to gate on")
    records = []
    for name, program in (("candidate", candidate_program), ("baseline", baseline_program)):
        judge = load(program, check_certificate=False)
        records.append(judge_labeled(judge, trajectories, Path(verdicts_dir) / f"{name}.jsonl", lm=lm,
                                     concurrency=concurrency))
    paired = pair(records[0], records[1], (str(candidate_program), str(baseline_program)))
    return decide(paired, margin, alpha, names=(str(candidate_program), str(baseline_program)))
