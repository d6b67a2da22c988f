"""What a cascade's batch did: `cascade_summary` (per stage decided, LM calls and judge verdicts, realized risks
with labels) and `measure_cascade` (judge labeled held-out items and summarize).

Split from `trust.cascade` (the fit) by responsibility; `trust.cascade` re-exports the public names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.judge.cascade import ESCALATED, Cascade, CascadeVerdicts
from rubricforge_dspy.metrics.intervals import proportion_ci

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.core.verdict import Verdict

__all__ = ["cascade_summary", "measure_cascade"]


def _rates(verdicts: Sequence[Verdict], labels: Sequence[int], mask: np.ndarray) -> dict[str, Any]:
    y = np.asarray(labels, dtype=bool)
    passed = np.array([v.passed for v in verdicts], dtype=bool)
    n, errors = int(mask.sum()), int((mask & (passed != y)).sum())
    failed, false_passes = int((mask & ~y).sum()), int((mask & passed & ~y).sum())
    return {"disagreement": errors / n if n else None,
            "disagreement_ci95": list(proportion_ci(errors, n)) if n else None,
            "false_pass": false_passes / failed if failed else None,
            "false_pass_ci95": list(proportion_ci(false_passes, failed)) if failed else None}


def cascade_summary(cascade: Cascade, verdicts: CascadeVerdicts, labels: Sequence[int] | None = None,
                    spend: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a cascade's batch did, for reports, certificates and the demo: per stage the items decided, their
    share, the judge verdicts and LM calls it needed (a floor needs none; a recorded or Python stage needs a
    judge verdict per item and makes no LM call), and with `labels` (held-out, 0/1, same order) the
    realized disagreement and false-pass rate with exact 95% intervals; the escalated items (for a
    person); the judge verdicts needed against judging every item with the judge (``judge_verdicts``,
    ``judge_stages``: what a user pays, another tool's recorded verdicts included,
    `BaseJudge.gives_judge_verdicts`); and the LM calls (and, with `spend`, tokens) against judging
    everything with the last stage: ``lm_calls_saved`` and ``lm_calls_judging_everything`` are None when no
    stage of the cascade makes LM calls (nothing to save against; a stage the fit dropped is not in the cascade).

    Args:
        cascade: the cascade that judged.
        verdicts: its `CascadeVerdicts` (``cascade.batch(...)``).
        labels: the items' labels, to report realized risks (never used to decide anything).
        spend: the tokens spent and the estimate of judging everything (`report.cascade.token_spend`; a
            cascade run's ``token_spend()``), reported as ``token_spend``.

    Returns:
        A JSON-safe dict.
    """
    n = len(verdicts)
    if labels is not None and len(labels) != n:
        raise InputError(f"one label per verdict: {len(labels)} labels for {n} verdicts")
    stages = np.array(verdicts.stages, dtype=object)
    produced = np.array([not v.abstained for v in verdicts], dtype=bool)
    rows: list[dict[str, Any]] = []
    lm_calls = judge_verdicts = 0
    has_lm = any(stage.calls_lm for stage in cascade.stages)
    judge_stages = [rule.name for stage, rule in zip(cascade.stages, cascade.rules, strict=True)
                    if stage.gives_judge_verdicts]
    for stage, rule in zip(cascade.stages, cascade.rules, strict=True):
        ran = int(verdicts.stage_calls.get(rule.name, 0))
        calls = ran if stage.calls_lm else 0
        needed = ran if rule.name in judge_stages else 0
        lm_calls += calls
        judge_verdicts += needed
        mine = (stages == rule.name) & produced
        rows.append({"name": rule.name, **rule.to_dict(), "decided": int(mine.sum()),
                     "share": float(mine.sum()) / n if n else 0.0, "lm_calls": calls, "judge_verdicts": needed,
                     "lm": stage.calls_lm, "judge": rule.name in judge_stages,
                     **(_rates(verdicts, labels, mine) if labels is not None else {})})
    decided = (stages != ESCALATED) & produced
    return {"n": n, "stages": rows, "escalated": int((stages == ESCALATED).sum()),
            "failed": int((~produced & (stages != ESCALATED)).sum()), "judge_verdicts": judge_verdicts,
            "judge_stages": judge_stages, "lm_calls": lm_calls, "lm_stages": [
                rule.name for stage, rule in zip(cascade.stages, cascade.rules, strict=True) if stage.calls_lm],
            "lm_calls_judging_everything": n if has_lm else None, "lm_calls_saved": n - lm_calls if has_lm else None,
            "coverage": float(decided.sum()) / n if n else 0.0,
            **({"overall": _rates(verdicts, labels, decided)} if labels is not None else {}),
            "token_spend": spend, "guarantee": cascade.guarantee}


def measure_cascade(cascade: Cascade, trajectories: Sequence[Trajectory], verdicts_out: PathArg, *,
                    lm: dspy.BaseLM | None = None, concurrency: int = 4,
                    cascade_file: PathArg | None = None) -> dict[str, Any]:
    """Judge labeled held-out `trajectories` with `cascade` (`apply.cascade.run_cascade`: the verdict lines into
    `verdicts_out`, the escalated ones into its labeling queue beside it) and return `cascade_summary` with the
    labels: coverage per stage, realized risks with exact intervals, LM calls and tokens against judging
    everything. The labels are read after judging, never shown to a stage; nothing is written into the cascade
    (its guarantee is its fit's). `cascade_file`: the file it was loaded from (in the job's fingerprint).

    Raises:
        UnlabeledError: a trajectory has no label. InputError: `verdicts_out` exists (a measurement is of one
        whole run: it is never resumed).
    """
    from pathlib import Path

    from rubricforge_dspy.apply.cascade import run_cascade

    trajectories = require_labels(list(trajectories), "measuring a cascade")
    if Path(verdicts_out).exists():
        raise InputError(f"{verdicts_out} exists: certify measures a cascade in one whole run; give a new "
                         "--verdicts-out or remove it")
    run = run_cascade(cascade, trajectories, verdicts_out, lm=lm, concurrency=concurrency, cascade_file=cascade_file)
    labels = [int(t.label) for t in trajectories if t.label is not None]  # every one labeled (require_labels)
    if run.verdicts is None:  # only a complete run keeps its verdicts; an incomplete one raised above
        raise InputError(f"{verdicts_out}: the cascade run did not complete ({run.outcome}); nothing to measure")
    summary = cascade_summary(cascade, run.verdicts, labels, run.token_spend())
    return {**summary, "verdicts": str(verdicts_out), "escalated_queue": run.escalated_path}
