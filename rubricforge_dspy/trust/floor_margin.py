"""A judge's margin over the symptom floor on the same held-out items (certificate, gate).

Both verdict sets are verdict lines (`rubricforge_dspy.core.verdict`) on the same labeled ids; an
abstention is a fail verdict, as everywhere. Recorded::

    source                    -- which floor: fit on the program's training split, or cross-validated
    n, negatives              -- items, failed items
    judge, floor              -- accuracy, kappa, false_pass_rate, auc of each
    margin                    -- judge minus floor for each (for the false-pass rate, negative is better)
    mcnemar {b, c, p_value}   -- exact McNemar on paired correctness: b = items only the judge got
                                 right, c = items only the floor got right (`metrics.compare_paired`)
    false_pass_worse          -- the judge's false-pass rate is higher than the floor's (compared first: a
                                 judge that passes more failed items than counting tool errors does
                                 never beats the floor, whatever its accuracy)
    beats_floor               -- not false_pass_worse and b > c: the judge gets more of these items right
                                 than the floor
    significant               -- beats_floor and p_value < alpha
    floor_gives_away          -- the floor's kappa says the observable features give the outcome away
                                 (`core.judge_names.floor_gives_away`): then no margin says anything

A judge that does not beat the floor is doing no better than counting tool errors and turns.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np
from numpy.typing import ArrayLike
from sklearn.exceptions import UndefinedMetricWarning

from rubricforge_dspy import metrics
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.judge_names import FLOOR_GIVEAWAY_RULE, floor_gives_away

if TYPE_CHECKING:
    from rubricforge_dspy.core.trajectory import Trajectory

__all__ = ["FloorMarginError", "false_pass_worse", "floor_margin", "floor_margin_of_records", "floor_verdicts",
           "margin_lines", "PROGRAM_FLOOR", "CROSS_VALIDATED_FLOOR"]

PROGRAM_FLOOR = "the symptom floor fit on the program's training split"
CROSS_VALIDATED_FLOOR = "the symptom floor cross-validated by task on these items; the program holds no floor"


class FloorMarginError(InputError):
    """Judge and floor verdicts that are not on the same labeled items; the message says which."""


def _value(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else round(float(x), 4)


def _stats(y: np.ndarray, passed: np.ndarray, scores: np.ndarray | None) -> dict[str, float | None]:
    with warnings.catch_warnings():  # kappa, AUC or the false-pass rate undefined on one class: reported as None
        warnings.filterwarnings("ignore", category=UndefinedMetricWarning)
        out = {"accuracy": metrics.accuracy(y, passed), "kappa": metrics.cohens_kappa(y, passed),
               "false_pass_rate": metrics.false_pass_rate(y, passed) if (y == 0).any() else math.nan,
               "auc": metrics.roc_auc(y, scores) if scores is not None else math.nan}
    return {k: _value(v) for k, v in out.items()}


def _worse(judge_rate: float | None, floor_rate: float | None) -> bool:
    return judge_rate is not None and floor_rate is not None and judge_rate > floor_rate


def false_pass_worse(margin: Mapping[str, Any] | None) -> bool:
    """True when the margin's judge passes a larger share of the failed items than the floor (from the
    recorded rates, so a certificate written before the flag answers too)."""
    if not margin:
        return False
    judge, floor = margin.get("judge") or {}, margin.get("floor") or {}
    return _worse(judge.get("false_pass_rate"), floor.get("false_pass_rate"))


def floor_margin(labels: ArrayLike, judge_passed: ArrayLike, floor_passed: ArrayLike,
                 judge_scores: ArrayLike | None = None, floor_scores: ArrayLike | None = None, *,
                 source: str, alpha: float = 0.05) -> dict[str, Any]:
    """The margin (see the module docstring) from aligned labels, verdicts and optional scores."""
    y = np.asarray(labels, dtype=np.int64)
    j, f = np.asarray(judge_passed, dtype=np.int64), np.asarray(floor_passed, dtype=np.int64)
    if not len(y) or len(j) != len(y) or len(f) != len(y):
        raise FloorMarginError(f"need one judge and one floor verdict per labeled item ({len(y)} labels, "
                               f"{len(j)} judge, {len(f)} floor)")
    js = None if judge_scores is None else np.asarray(judge_scores, dtype=np.float64)
    fs = None if floor_scores is None else np.asarray(floor_scores, dtype=np.float64)
    judge, floor = _stats(y, j, js), _stats(y, f, fs)
    cmp = metrics.compare_paired(y, j, f)
    margin = {k: (None if (mine := judge[k]) is None or (its := floor[k]) is None else round(mine - its, 4))
              for k in judge}
    worse = _worse(judge["false_pass_rate"], floor["false_pass_rate"])
    beats = cmp["b"] > cmp["c"] and not worse
    return {"source": source, "n": int(len(y)), "negatives": int((y == 0).sum()), "judge": judge, "floor": floor,
            "margin": margin, "false_pass_worse": worse,
            "mcnemar": {"b": cmp["b"], "c": cmp["c"], "p_value": _value(cmp["p_value"])},
            "beats_floor": bool(beats), "significant": bool(beats and cmp["p_value"] < alpha), "alpha": round(alpha, 6),
            "floor_gives_away": floor_gives_away(floor["kappa"])}


def floor_margin_of_records(judge_records: Iterable[Mapping[str, Any]], floor_records: Iterable[Mapping[str, Any]],
                            *, source: str, alpha: float = 0.05) -> dict[str, Any]:
    """`floor_margin` of two verdict-line sets on the same labeled ids (refused otherwise)."""
    judge = {r["id"]: r for r in judge_records}
    floor = {r["id"]: r for r in floor_records}
    if set(judge) != set(floor):
        only = sorted(set(judge) ^ set(floor))
        raise FloorMarginError(f"judge and floor verdicts are not on the same items ({len(only)} id(s) in one "
                               f"only, first: {only[0]}); the floor must judge exactly the judge's items")
    ids = sorted(judge)
    labels: list[int] = []
    for i in ids:
        a, b = judge[i].get("label"), floor[i].get("label")
        if a not in (0, 1) or a != b:
            raise FloorMarginError(f"item {i}: labels {a!r} (judge) and {b!r} (floor); both need the same 0/1 label")
        labels.append(a)

    def passed(records: Mapping[str, Mapping[str, Any]]) -> list[bool]:
        return [bool(records[i]["passed"]) and not records[i].get("abstained") for i in ids]

    return floor_margin(labels, passed(judge), passed(floor), [float(judge[i]["score"]) for i in ids],
                        [float(floor[i]["score"]) for i in ids], source=source, alpha=alpha)


def floor_verdicts(trajectories: Iterable[Trajectory], floor: Mapping[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], str]:
    """Verdict lines of the symptom floor on `trajectories` and where the floor came from: the program's
    own floor (its manifest's ``"floor"``, fit on its training split) when given, else the floor
    cross-validated by task on `trajectories` themselves (`floor.cv`: each item scored by a floor that
    never saw its task)."""
    from rubricforge_dspy.core.judge_names import FLOOR
    from rubricforge_dspy.core.verdict import verdict_line
    from rubricforge_dspy.judge.floor import SymptomFloor
    from rubricforge_dspy.trust.floor_cv import cross_validate, verdict_lines

    items = list(trajectories)
    if floor is not None:
        model = SymptomFloor.from_dict(floor, "program manifest: floor")
        return [verdict_line(t, model.verdict(t), model=FLOOR) for t in items], PROGRAM_FLOOR
    return verdict_lines(items, cross_validate(items, name=FLOOR).scores, FLOOR), CROSS_VALIDATED_FLOOR


def margin_lines(margin: Mapping[str, Any] | None) -> list[str]:
    """Readable lines for `rubricforge show` and the gate."""
    if not margin:
        return ["margin over the symptom floor: not recorded (re-induce, or certify again)"]
    m, mc = margin["margin"], margin["mcnemar"]

    def num(x: float | None, signed: bool = False) -> str:
        return "n/a" if x is None else (f"{x:+.3f}" if signed else f"{x:.3f}")

    b, c = mc["b"], mc["c"]
    judge_fp, floor_fp = margin["judge"]["false_pass_rate"], margin["floor"]["false_pass_rate"]
    negatives = margin.get("negatives")

    def passes(rate: float) -> str:
        return f" ({round(rate * negatives)}/{negatives} failed items passed)" if negatives else ""

    if false_pass_worse(margin):  # the false-pass rate first: what a gate lets through
        verdict = (f"does NOT beat the floor: its false-pass rate {judge_fp:.3f}{passes(judge_fp)} is WORSE than "
                   f"the floor's {floor_fp:.3f}{passes(floor_fp)}, whatever its accuracy")
    else:
        on_fp = ("" if judge_fp is None or floor_fp is None
                 else f"false-pass rate {judge_fp:.3f}, no worse than the floor's {floor_fp:.3f}; ")
        verdict = on_fp + (("beats the floor" if b > c else "ties with the floor" if b == c
                            else "does NOT beat the floor") + " on accuracy") + (
            f" (significant, p < {margin['alpha']})" if margin["significant"] and b > c else "")
    kappa = (margin.get("floor") or {}).get("kappa")  # from the kappa: certificates written before the flag too
    warning = ([f"  WARNING: the floor reaches kappa {kappa:.3f} on these items ({FLOOR_GIVEAWAY_RULE}): the "
                "observable features give the outcome away (e.g. episodes that end at success), so this margin "
                "cannot show whether the judge reads the episode"] if floor_gives_away(kappa) else [])
    return [f"margin over the symptom floor ({margin['source']}; {margin['n']} items): {verdict}", *warning,
            f"  accuracy {num(margin['judge']['accuracy'])} vs {num(margin['floor']['accuracy'])} "
            f"({num(m['accuracy'], True)}), kappa {num(margin['judge']['kappa'])} vs {num(margin['floor']['kappa'])} "
            f"({num(m['kappa'], True)}), false-pass rate {num(margin['judge']['false_pass_rate'])} vs "
            f"{num(margin['floor']['false_pass_rate'])} ({num(m['false_pass_rate'], True)}), AUC "
            f"{num(margin['judge']['auc'])} vs {num(margin['floor']['auc'])}",
            f"  McNemar: {mc['b']} item(s) only the judge got right, {mc['c']} only the floor; "
            f"p = {num(mc['p_value'])}"]
