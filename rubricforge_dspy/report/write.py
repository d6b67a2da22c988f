"""Writing a report: ``report.md``, ``report.json`` (every number) and ``figures/*.png``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from rubricforge_dspy.report.cascade import cascade_lines, cascade_section, read_cascade_fit, report_label_rule
from rubricforge_dspy.report.compute import compute_report
from rubricforge_dspy.report.markdown import render_markdown
from rubricforge_dspy.report.run import decided_run, load_run

if TYPE_CHECKING:
    from rubricforge_dspy.core.trajectory import LabelRule

__all__ = ["write_report", "FIGURES_DIR"]

FIGURES_DIR = "figures"


def write_report(run_dir: str | Path | Sequence[str | Path], out_path: str | Path, figures: bool = True, *,
                 n_resamples: int = 10_000, seed: int = 0, labels: str | Path | None = None,
                 label_threshold: float | str | LabelRule | None = None) -> Path:
    """Load ``run_dir`` (a run directory or verdict file(s), see docs/REPORT.md), write ``out_path``
    (markdown), ``<stem>.json`` (all numbers) and, with ``figures``, ``figures/*.png`` next to the
    markdown. Returns ``out_path``. A run directory's ``cascade_fit.json`` (the demo's cascade fit) leads the
    report (`report.cascade.fit_lead_lines`). A cascade's verdict file (lines with ``stage``) adds the cascade section
    (`report.cascade`) and its risk-coverage figure; its escalated items are neither passes nor fails: the
    metrics, confusion counts and figures are on the decided items (`report.run.decided_run`). Labels read
    against a cascade's verdicts (`labels`, `label_threshold`) are read by the rule the cascade was certified with
    (`report.cascade.report_label_rule`: another rule is refused)."""
    paths = [run_dir] if isinstance(run_dir, (str, Path)) else list(run_dir)
    label_threshold, rule_note = report_label_rule(paths, labels, label_threshold)
    run, escalated = decided_run(load_run(run_dir, labels=labels, label_threshold=label_threshold))
    report = compute_report(run, n_resamples=n_resamples, seed=seed)
    if rule_note:
        report["warnings"].append(rule_note)
    report["items"]["escalated_left_out"] = escalated
    fit = read_cascade_fit(run_dir)  # a run's cascade fit (the demo's): the report leads with it
    if fit is not None:
        report["cascade_fit"] = fit
        # a demo run's fit records that its LLM stage is the embedded model (runs before run.json said so)
        report["meta"]["embedded"] = bool(report["meta"].get("embedded") or fit.get("embedded"))
    found = cascade_lines(paths)
    if found is not None:
        report["cascade"] = cascade_section(*found)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    links: dict[str, str] = {}
    if figures:
        try:
            from rubricforge_dspy.report.figures import write_cascade_figure, write_figures
        except ImportError as error:  # matplotlib is the optional `plots` extra
            report["warnings"].append(f"figures skipped: {error} (install rubricforge-dspy[plots])")
        else:
            written = write_figures(run, report, out_path.parent / FIGURES_DIR)
            if "cascade" in report:
                written.update(write_cascade_figure(report["cascade"], out_path.parent / FIGURES_DIR))
            links = {name: f"{FIGURES_DIR}/{path.name}" for name, path in written.items()}
    out_path.write_text(render_markdown(report, links), encoding="utf-8")
    out_path.with_suffix(".json").write_text(
        json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return out_path

