"""Every number of the report, as one JSON-safe dict (``report.json``)."""

from __future__ import annotations

import numbers
from typing import Any

from rubricforge_dspy import metrics as M
from rubricforge_dspy.report.comparisons import (
    BASELINE,
    REASON_CHARS,
    ablation_table,
    disagreements_table,
    false_pass_gap_table,
    sweep_table,
)
from rubricforge_dspy.report.floor import floor_table
from rubricforge_dspy.report.notes import clean, split_excluded
from rubricforge_dspy.report.run import Run
from rubricforge_dspy.report.tables import (
    calibration_table,
    clusters_of,
    contradictions_table,
    evidence_table,
    main_table,
    ranking_table,
    task_clustered_table,
)

__all__ = ["compute_report"]


def compute_report(run: Run, *, n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
                   n_bins: int = M.DEFAULT_BINS) -> dict[str, Any]:
    """Every number of the report as a JSON-safe dict (nan -> None); deterministic for fixed inputs."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, numbers.Integral) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not isinstance(confidence, numbers.Real) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in the open interval (0, 1), got {confidence!r}")
    y = run.items.label
    notes = list(run.warnings)
    it = run.items
    boot = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    n_passed = int(y.sum())
    meta = run.meta
    clusters = clusters_of(run)
    report = {
        "meta": {
            "run": run.run_dir.name, "lm": meta.get("lm") or run.lines_lm,
            "lm_source": "run.json" if meta.get("lm") else "verdict lines" if run.lines_lm else None,
            "reflection_lm": meta.get("reflection_lm"),
            "dataset": meta.get("dataset"), "split": meta.get("split"), "induced": run.induced,
            "reference_kind": run.reference_kind,
            "judges": list(run.judges), "graded": run.graded, "notes": meta.get("notes"),
            "program": meta.get("program"),
            # did induction find a rubric better than the seed (run.json; None: not an induction run)
            "beat_seed": meta.get("beat_seed"), "rubric": run.rubric,
            # where the run's time went (run.json: wall and CPU seconds per phase, the process tree's CPU)
            "phases": meta.get("phases"), "phases_total": meta.get("phases_total"), "config": meta.get("config"),
            # the judge LM was the embedded CPU model (the demo's run.json): the report opens with what it can tell
            "embedded": bool(meta.get("embedded")),
        },
        "settings": {**boot, "baseline": BASELINE, "reason_chars": REASON_CHARS, "rate_intervals": "exact",
                     "bootstrap": "task-clustered" if clusters else "items", "ece_bins": n_bins,
                     "ece_binning": M.BINNING},
        "items": {"n": len(it), "n_passed": n_passed, "n_failed": len(it) - n_passed,
                  "base_pass_rate": n_passed / len(it), "domains": sorted(set(it.domain)),
                  "agents": sorted(set(it.agent)), "n_tasks": len(set(it.task_id)),
                  "n_steps_min": int(it.n_steps.min()) if it.n_steps is not None else None,
                  "n_steps_max": int(it.n_steps.max()) if it.n_steps is not None else None},
        "main": main_table(run, notes=notes, **boot),
        "task_clustered": task_clustered_table(run, notes=notes, **boot),
        "calibration": calibration_table(run, n_bins=n_bins),
        "contradictions": contradictions_table(run, confidence=confidence),
        "evidence": evidence_table(run, confidence=confidence),
        "graded": ranking_table(run, notes=notes, **boot) if run.graded else None,
        "ablation": ablation_table(run, y, notes),
        "stratification": false_pass_gap_table(run, notes=notes, **boot),
        "disagreements": disagreements_table(run, y, notes),
        "sweep": sweep_table(run),
    }
    notes.extend(n for n in (meta.get("floor_notes") or []) if n not in notes)  # e.g. why no hybrid row
    report["floor"] = floor_table(report["main"], run.induced, notes)
    report["warnings"], report["bootstrap_excluded"] = split_excluded(notes)
    return clean(report)
