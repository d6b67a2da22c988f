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
from typing import Sequence

from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.split import split_by_task

__all__ = ["DEMO_ALPHA", "DEMO_DELTA", "DEMO_MAX_FALSE_PASS", "DEMO_METHOD", "fit_demo_cascade", "cascade_lead",
           "lead_report"]

logger = logging.getLogger(__name__)

DEMO_ALPHA, DEMO_DELTA, DEMO_MAX_FALSE_PASS = 0.10, 0.10, None
# Small calibration sets: the split fixed sequence pays no multiplicity over the grid (3,136 vectors for two
# stages), Holm does (docs/CASCADE.md); the benchmark checks both are valid.
DEMO_METHOD = "split_fixed_sequence"


def _result_of(cascade, n: int) -> dict:
    """What the lead shows of a certified cascade. The stages are the ones the fit kept (a stage certified to
    decide nothing is dropped: not in the cascade, never called); LM calls saved are counted only when an LLM
    stage is kept (None otherwise: the cascade makes no LM call, there is nothing to save against)."""
    rows = {row["name"]: row for row in cascade.fit_report["stages"]}
    kept = {rule.name for rule in cascade.rules}
    floor, judge = rows.get("floor", {}), rows.get("judge", {}) if "judge" in kept else {}
    has_lm = any(stage.predictors() for stage in cascade.stages)
    to_llm = judge.get("reached", 0)
    return {"certified": True, "n": n, "guarantee": cascade.guarantee,
            "free": floor.get("decided", 0), "free_false_pass": floor.get("false_pass"),
            "free_false_pass_ci95": floor.get("false_pass_ci95"), "free_disagreement": floor.get("disagreement"),
            "to_llm": to_llm, "llm_decided": judge.get("decided", 0),
            "to_person": cascade.fit_report["escalated"], "lm_calls_saved": n - to_llm if has_lm else None,
            "dropped": list(cascade.fit_report.get("dropped") or []), "stages": list(rows.values())}


def fit_demo_cascade(sample: Sequence[Trajectory], fractions, seed: int, program: str | Path, judge_lm,
                     run_dir: str | Path) -> dict:
    """Fit the demo's cascade (floor on the training split, the induced judge at `program`, calibrated on the test
    split); save it beside the run (``cascade.json``) when certified. Returns what the lead needs (a refusal
    is a result: ``certified`` False with the reason and the labels needed), also written as ``cascade.json``
    (certified) or ``cascade_fit.json`` in `run_dir`."""
    from rubricforge_dspy.judge.floor import FloorError, FloorJudge, SymptomFloor
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.trust.cascade import CascadeCalibrationError, fit_cascade

    run_dir = Path(run_dir)
    split = split_by_task(list(sample), fractions, seed)
    calibration = list(split.test)
    result: dict
    try:
        floor = FloorJudge(SymptomFloor.fit(list(split.train)))
    except FloorError as error:
        result = {"certified": False, "n": len(calibration), "reason": f"no floor: {error}"}
    else:
        judge = load_judge(program, lm=judge_lm, check_certificate=False)
        try:
            cascade = fit_cascade([floor, judge], calibration, DEMO_ALPHA, DEMO_DELTA, DEMO_MAX_FALSE_PASS,
                                  DEMO_METHOD)
        except CascadeCalibrationError as error:
            result = {"certified": False, "n": len(calibration), "reason": str(error),
                      "needed_decided": error.needed_decided, "needed_labels": error.needed_labels}
        else:
            cascade.save(run_dir / "cascade.json")
            result = _result_of(cascade, len(calibration))
    result.update({"alpha": DEMO_ALPHA, "delta": DEMO_DELTA, "calibration": "the test split (held out from the floor "
                                                                            "and from induction)"})
    (run_dir / "cascade_fit.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    logger.info("demo cascade: %s", "certified" if result["certified"] else result["reason"])
    return result


def _pct(k: int, n: int) -> str:
    return f"{k} of {n} ({k / n:.0%})" if n else f"{k} of 0"


def cascade_lead(result: dict, embedded: bool) -> list[str]:
    """The report's first section (markdown lines)."""
    n = result["n"]
    out = ["## Trust or escalate: what a certified cascade would do here", ""]
    if not result["certified"]:
        needed = result.get("needed_labels") or result.get("needed_decided")
        out += [f"**Nothing certified.** The cascade (the free symptom floor, then this judge, then a person) was "
                f"calibrated on {n} held-out test trajectories at disagreement <= {result['alpha']} with probability "
                f">= {1 - result['delta']:.2f} ({DEMO_METHOD}): {result['reason']}.", "",
                "So here every trajectory would go to a person: no verdict of this run can be acted on with a "
                "guarantee." + (f" Certifying would take about {needed} labeled tasks." if needed else ""), ""]
    else:
        g = result["guarantee"]
        fp = result["free_false_pass"]
        fp_text = "no failed trajectory among them" if fp is None else (
            f"realized false-pass {fp:.3f} [{result['free_false_pass_ci95'][0]:.3f}, "
            f"{result['free_false_pass_ci95'][1]:.3f}]")
        out += [f"Certified: among decided trajectories, disagreement with the label <= {g['alpha']} with probability "
                f">= {1 - g['delta']:.2f} ({g.get('method', DEMO_METHOD)}; calibrated on {n} held-out test "
                "trajectories; the rates below are realized on them).", "",
                f"- **decided for free** by the symptom floor (no LM call): {_pct(result['free'], n)}; {fp_text}"]
        if result.get("lm_calls_saved") is None:  # the fit dropped the LLM stage: no LM call is ever made
            dropped = ", ".join(row["name"] for row in result.get("dropped") or []) or "the LLM judge"
            out += [f"- **dropped by the fit**: {dropped} (certified to decide nothing here): the cascade makes no "
                    "LM call"]
        else:
            out += [f"- **sent to the LLM judge**: {_pct(result['to_llm'], n)}, of which it decided "
                    f"{result['llm_decided']}"]
        out += [f"- **escalated to a person**: {_pct(result['to_person'], n)}"]
        if result.get("lm_calls_saved") is not None:
            out += [f"- **saved**: {result['lm_calls_saved']} of {n} LM calls against judging everything with the "
                    "LLM"]
        out += [""]
    if embedded:
        out += ["The LLM stage here is the embedded 135M model: expect it to decide little or nothing; the floor's "
                "stage is real. With a real judge and a few hundred labeled tasks the same command certifies more "
                "(docs/CASCADE.md).", ""]
    return out


def lead_report(report_md: str | Path, lines: list[str]) -> None:
    """Insert `lines` (a section: its first line is its heading) right after the report's title, so the report
    leads with them; a section with the same heading already there (a resumed run) is replaced."""
    path = Path(report_md)
    text = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[0] in text:
        start = text.index(lines[0])
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        end = next((i for i in range(start + 1, end) if text[i].startswith("- ")), end)  # the facts that follow
        del text[start:end]
    at = next((i + 1 for i, line in enumerate(text) if line.startswith("# ")), 0)
    while at < len(text) and text[at].strip() == "":
        at += 1
    path.write_text("\n".join(text[:at] + lines + text[at:]), encoding="utf-8")
