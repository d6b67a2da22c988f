"""The demo's cascade: the symptom floor (fit on the training split), then the demo's induced judge, calibrated on
the held-out test split (`trust.cascade.fit_cascade`), so the report can lead with what a user decides on: how
many trajectories were decided for free and at what certified rate, how many went to the LLM, how many to a
person, and what that saved.

At the demo's sizes (a handful of test tasks) the fit usually refuses: certifying any bound needs dozens of
decided labels (docs/CASCADE.md, "How many labels"). The lead then says so, with the labels it would need;
it never invents a number. The numbers are on the calibration (test) items: the certified bound is the
guarantee, the realized rates are descriptive.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.metrics.risk_methods import DEFAULT_METHOD
from rubricforge_dspy.report.cascade import CASCADE_FIT_FILE, fit_lead_lines

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.judge.cascade import Cascade

# the lead's markdown is the report's (`rubricforge report` reads the run's cascade_fit.json too)
cascade_lead = fit_lead_lines

__all__ = ["DEMO_ALPHA", "DEMO_DELTA", "DEMO_MAX_FALSE_PASS", "DEMO_METHOD", "fit_demo_cascade", "cascade_lead"]

logger = logging.getLogger(__name__)

DEMO_ALPHA, DEMO_DELTA, DEMO_MAX_FALSE_PASS = 0.10, 0.10, None
# The package's default: a fixed sequence (no multiplicity over the 3,136 vectors of two stages) ordered on the
# training split, which the floor was fit on (its out-of-fold probabilities; the judge's verdicts there), so every
# calibration item is tested and the order never depends on alpha (docs/CASCADE.md). The embedded judge is not
# run on the training split for the order (it would double the demo's LM time): it gets a label-free position.
DEMO_METHOD = DEFAULT_METHOD


def _result_of(cascade: Cascade, n: int) -> dict[str, Any]:
    """What the lead shows of a certified cascade. The stages are the ones the fit kept (a stage certified to
    decide nothing is dropped: not in the cascade, never called); LM calls saved are counted only when an LLM
    stage is kept (None otherwise: the cascade makes no LM call, there is nothing to save against)."""
    report = cascade.fit_report
    if report is None:  # `fit_cascade` returns a cascade with its fit report
        raise InputError("the cascade has no fit report: fit it with trust.cascade.fit_cascade")
    rows = {row["name"]: row for row in report["stages"]}
    kept = {rule.name for rule in cascade.rules}
    floor, judge = rows.get("floor", {}), rows.get("judge", {}) if "judge" in kept else {}
    has_lm = any(stage.predictors() for stage in cascade.stages)
    to_llm = judge.get("reached", 0)
    return {"certified": True, "n": n, "guarantee": cascade.guarantee,
            "free": floor.get("decided", 0), "free_false_pass": floor.get("false_pass"),
            "free_false_pass_ci95": floor.get("false_pass_ci95"), "free_disagreement": floor.get("disagreement"),
            "to_llm": to_llm, "llm_decided": judge.get("decided", 0),
            "to_person": report["escalated"], "lm_calls_saved": n - to_llm if has_lm else None,
            "dropped": list(report.get("dropped") or []), "stages": list(rows.values())}


def fit_demo_cascade(sample: Sequence[Trajectory], fractions: Sequence[float], seed: int, program: str | Path,
                     judge_lm: dspy.BaseLM | None,
                     run_dir: str | Path, embedded: bool = False) -> dict[str, Any]:
    """Fit the demo's cascade (floor on the training split, the induced judge at `program`, calibrated on the test
    split); save it beside the run (``cascade.json``) when certified. Returns what the lead needs (a refusal
    is a result: ``certified`` False with the reason and the labels needed), written as ``cascade_fit.json`` in
    `run_dir` (the report's lead: `report.cascade.fit_lead_lines`; `embedded`: the LLM stage is the embedded
    model, which the lead says)."""
    from rubricforge_dspy.judge.floor import FloorError, FloorJudge, SymptomFloor
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.trust.cascade import CascadeCalibrationError, FitOptions, fit_cascade

    run_dir = Path(run_dir)
    split = split_by_task(list(sample), fractions, seed)
    calibration = list(split.test)
    result: dict[str, Any]
    try:
        floor = FloorJudge(SymptomFloor.fit(list(split.train)))
    except FloorError as error:
        result = {"certified": False, "n": len(calibration), "reason": f"no floor: {error}"}
    else:
        judge = load_judge(program, lm=judge_lm, check_certificate=False)
        try:
            cascade = fit_cascade([floor, judge], calibration, FitOptions(
                DEMO_ALPHA, DEMO_DELTA, DEMO_MAX_FALSE_PASS, DEMO_METHOD, order_trajectories=list(split.train),
                order_llm_stages=False))
        except CascadeCalibrationError as error:
            result = {"certified": False, "n": len(calibration), "reason": str(error),
                      "needed_decided": error.needed_decided, "needed_labels": error.needed_labels}
        else:
            cascade.save(run_dir / "cascade.json")
            result = _result_of(cascade, len(calibration))
    result.update({"alpha": DEMO_ALPHA, "delta": DEMO_DELTA, "method": DEMO_METHOD, "embedded": embedded,
                   "calibration": "the test split (held out from the floor and from induction)"})
    (run_dir / CASCADE_FIT_FILE).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    logger.info("demo cascade: %s", "certified" if result["certified"] else result["reason"])
    return result
