"""Report figures (matplotlib, Agg), drawn from the numbers of :func:`compute_report` (and, for the
score plot, the loaded run).

Deterministic output: figures are built with the object-oriented API (no pyplot state, no backend
switch), under matplotlib's default style whatever the user's matplotlibrc says, at a fixed size
and dpi with fixed margins (no layout engine, which would also cost most of the drawing time),
with jitter from a fixed seed, and saved as PNG without the ``Software`` metadata entry (Agg
writes no timestamp), so re-rendering a run gives byte-identical files on the same matplotlib /
freetype build.

Figures (``FIGURES``):

- ``over_credit``: false-pass rate per judge with its exact (Clopper-Pearson) interval;
- ``confusion``: TP / FP / FN / TN counts per judge, stacked;
- ``reliability``: reliability diagram per judge (fraction passed against mean score per bin, with
  the calibrated score when verdicts carry one) and its ECE;
- ``scores``: score against reward per judge (graded runs) or score by true outcome (binary);
- ``sweep``: validation agreement of each induction candidate against the metric call it was found
  at, best candidate marked (only when the run has a sweep of two candidates or more; the section says why
  otherwise).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import matplotlib
import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from rubricforge_dspy.report.run import Run

__all__ = ["FIGURES", "DPI", "plot_over_credit", "plot_confusion", "plot_reliability", "plot_scores", "plot_sweep",
           "save_png", "write_figures", "write_cascade_figure"]

FIGURES = ("over_credit", "confusion", "reliability", "scores", "sweep")
DPI = 100
_INDUCED_COLOR = "#1f77b4"
_OTHER_COLOR = "#9aa5b1"
_CONFUSION = (("fp", "FP (false pass)", "#d62728"), ("fn", "FN (false fail)", "#ff7f0e"),
              ("tp", "TP", "#2ca02c"), ("tn", "TN", "#8fbcd4"))


def _style() -> AbstractContextManager[None]:
    """Matplotlib defaults (independent of the user's matplotlibrc), with fixed fonts."""
    return matplotlib.style.context(["default", {"font.family": "DejaVu Sans", "svg.hashsalt": "rubricforge",
                                                 "figure.dpi": DPI, "savefig.dpi": DPI}])


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def plot_over_credit(report: dict[str, Any]) -> Figure:
    rows = report["main"]
    names = [r["judge"] for r in rows]
    fpr = np.array([_nan(r["false_pass_rate"]) for r in rows])
    lo = np.array([_nan(r["false_pass_ci_low"]) for r in rows])
    hi = np.array([_nan(r["false_pass_ci_high"]) for r in rows])
    err = np.nan_to_num(np.vstack([fpr - lo, hi - fpr]), nan=0.0).clip(min=0.0)
    fig = Figure(figsize=(7.0, 4.0), dpi=DPI)
    fig.subplots_adjust(left=0.10, right=0.98, bottom=0.15, top=0.91)
    ax = fig.subplots()
    x = np.arange(len(rows))
    colors = [_INDUCED_COLOR if r.get("induced") else _OTHER_COLOR for r in rows]
    ax.bar(x, np.nan_to_num(fpr), color=colors, yerr=err, capsize=4, ecolor="#333333")
    for xi, v, h in zip(range(len(rows)), fpr, hi, strict=True):
        top = 0.0 if math.isnan(v) else (h if not math.isnan(h) else v)
        ax.text(xi, top + 0.02, "n/a" if math.isnan(v) else f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, names, rotation=20, ha="right")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("false-pass rate (FP / failed items)")
    ax.set_title(f"Over-credit: failed trajectories judged pass ({report['items']['n_failed']} failed items)")
    ax.grid(axis="y", alpha=0.3)
    return fig


def plot_confusion(report: dict[str, Any]) -> Figure:
    rows = report["main"]
    height = 0.5 * len(rows) + 1.6
    fig = Figure(figsize=(7.0, height), dpi=DPI)
    fig.subplots_adjust(left=0.17, right=0.97, bottom=0.6 / height, top=1.0 - 0.5 / height)
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for key, label, color in _CONFUSION:
        vals = np.array([r[key] for r in rows], dtype=float)
        ax.barh(y, vals, left=left, color=color, label=label, height=0.7)
        for yi, l, v in zip(y, left, vals, strict=True):
            if v >= 0.04 * report["items"]["n"]:
                ax.text(l + v / 2, yi, f"{int(v)}", ha="center", va="center", fontsize=7)
        left += vals
    ax.set_yticks(y, [f"{r['judge']}*" if r.get("induced") else r["judge"] for r in rows])
    ax.set_xlabel(f"items (n = {report['items']['n']}); * = {report['meta'].get('reference_kind') or 'induced'} judge")
    ax.set_xlim(0, report["items"]["n"])
    ax.legend(ncols=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, frameon=False)
    return fig


def _grid(n: int) -> tuple[int, int]:
    cols = min(3, n)
    return int(math.ceil(n / cols)), cols


def plot_reliability(report: dict[str, Any]) -> Figure:
    """Reliability diagram per judge: for each score bin holding items, the fraction that truly passed
    against the bin's mean score (marker area ~ items); the diagonal is perfect calibration."""
    cal = report["calibration"]
    rows = cal["rows"]
    nrows, ncols = _grid(len(rows))
    fig = Figure(figsize=(3.0 * ncols, 2.9 * nrows), dpi=DPI)
    fig.subplots_adjust(left=0.22 / ncols, right=0.98, bottom=0.5 / (2.9 * nrows), top=1.0 - 0.6 / (2.9 * nrows),
                        wspace=0.35, hspace=0.6)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    n = max(1, report["items"]["n"])
    for ax, row in zip(axes, rows, strict=False):
        ax.plot([0, 1], [0, 1], color="#999999", lw=0.8, ls="--")
        curves = [("reliability", _INDUCED_COLOR if row.get("induced") else "#555555", "score")]
        if row.get("reliability_calibrated"):
            curves.append(("reliability_calibrated", "#2ca02c", "calibrated"))
        for key, color, name in curves:
            curve = row[key]
            bins = zip(curve["mean_score"], curve["fraction_passed"], curve["count"], strict=True)
            pts = [(m, f, c) for m, f, c in bins if c]
            xs, ys, cs = (np.array([p[i] for p in pts], dtype=float) for i in range(3))
            ax.plot(xs, ys, color=color, lw=1.0, marker=None, label=name)
            ax.scatter(xs, ys, s=8 + 200 * cs / n, color=color, alpha=0.7, linewidths=0)
        ece = f"ECE {row['ece']:.3f}" if row["ece"] is not None else "ECE n/a"
        if row.get("ece_calibrated") is not None:
            ece += f" → {row['ece_calibrated']:.3f}"
        ax.set_title(f"{row['judge']}: {ece}", fontsize=9)
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("mean score in bin", fontsize=8)
        ax.set_ylabel("fraction passed", fontsize=8)
        if len(curves) > 1:
            ax.legend(fontsize=7, loc="upper left")
    for ax in axes[len(rows):]:
        ax.set_visible(False)
    fig.suptitle(f"Reliability diagram ({cal['n_bins']} {cal['binning']} bins)", fontsize=10)
    return fig


def plot_scores(run: "Run", report: dict[str, Any]) -> Figure:
    judges = list(run.judges)
    nrows, ncols = _grid(len(judges))
    fig = Figure(figsize=(3.0 * ncols, 2.7 * nrows), dpi=DPI)
    fig.subplots_adjust(left=0.22 / ncols, right=0.98, bottom=0.5 / (2.7 * nrows), top=1.0 - 0.6 / (2.7 * nrows),
                        wspace=0.35, hspace=0.55)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    reward, label = run.items.reward, run.items.label
    jitter = np.random.default_rng(0).uniform(-0.18, 0.18, size=len(label))
    for ax, judge in zip(axes, judges, strict=False):
        p = run.predictions[judge]
        color = _INDUCED_COLOR if judge == run.induced else "#555555"
        if run.graded:
            ax.scatter(reward, p.score, s=9, alpha=0.45, color=color, linewidths=0)
            lo, hi = min(0.0, float(reward.min())), max(1.0, float(reward.max()))
            ax.plot([lo, hi], [lo, hi], color="#999999", lw=0.8, ls="--")
            ax.set_xlabel("reward")
        else:
            ax.scatter(label + jitter, p.score, s=9, alpha=0.45, color=color, linewidths=0)
            ax.set_xticks([0, 1], ["failed", "passed"])
            ax.set_xlim(-0.5, 1.5)
            ax.set_xlabel("true outcome")
        ax.axhline(0.5, color="#cc4444", lw=0.7, ls=":")
        ax.set_ylim(-0.05, 1.05)
        ax.set_ylabel("judge score")
        marked = judge == run.induced and judge != run.reference_kind
        ax.set_title(f"{judge}{f' ({run.reference_kind})' if marked else ''}", fontsize=9)
    for ax in axes[len(judges):]:
        ax.set_visible(False)
    fig.suptitle("Score against reward" if run.graded else "Score by true outcome (jittered)", fontsize=10)
    return fig


def plot_sweep(report: dict[str, Any]) -> Figure | None:
    sw = report.get("sweep")
    if not sw:
        return None
    pts = [(i, r["discovered_at_metric_call"], r["val_agreement"]) for i, r in enumerate(sw["rows"])
           if r["discovered_at_metric_call"] is not None and r["val_agreement"] is not None]
    if len(pts) < 2:  # one point on empty axes shows nothing: the section says so instead
        return None
    idx = [p[0] for p in pts]
    x = np.array([p[1] for p in pts], dtype=float)
    y = np.array([p[2] for p in pts], dtype=float)
    order = np.argsort(x, kind="stable")
    fig = Figure(figsize=(7.0, 4.0), dpi=DPI)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.13, top=0.92)
    ax = fig.subplots()
    ax.scatter(x, y, s=22, color=_OTHER_COLOR, zorder=2, label="candidate")
    ax.step(x[order], np.maximum.accumulate(y[order]), where="post", color=_INDUCED_COLOR, lw=1.2,
            label="best val agreement so far")
    for i, xi, yi in pts:
        ax.annotate(str(sw["rows"][i]["candidate"]), (xi, yi), textcoords="offset points", xytext=(3, 3),
                    fontsize=7)
    if sw.get("best") is not None and sw["best"] in idx:
        k = idx.index(sw["best"])
        ax.scatter([x[k]], [y[k]], marker="*", s=180, color="#d62728", zorder=3,
                   label=f"best val score (candidate {sw['rows'][sw['best']]['candidate']})")
    ax.set_xlabel("metric calls when the candidate was found")
    ax.set_ylabel("validation agreement")
    ax.set_title("Induction sweep")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def save_png(fig: Figure, path: Path) -> Path:
    """Save without metadata that could vary between runs (no Software entry; Agg adds no time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    return path


def write_figures(run: "Run", report: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write every applicable figure as ``out_dir/<name>.png``; returns ``{name: path}`` in FIGURES order."""
    out_dir = Path(out_dir)
    written: dict[str, Path] = {}
    with _style():
        builders: dict[str, Callable[[], Figure | None]] = {
            "over_credit": lambda: plot_over_credit(report),
            "confusion": lambda: plot_confusion(report),
            "reliability": lambda: plot_reliability(report),
            "scores": lambda: plot_scores(run, report),
            "sweep": lambda: plot_sweep(report),
        }
        for name in FIGURES:
            fig = builders[name]()
            if fig is not None:
                written[name] = save_png(fig, out_dir / f"{name}.png")
    return written


def write_cascade_figure(section: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """The cascade's risk-coverage figure (`report.cascade.plot_risk_coverage`) as ``out_dir/risk_coverage.png``;
    nothing without labels."""
    from rubricforge_dspy.report.cascade import plot_risk_coverage

    with _style():
        fig = plot_risk_coverage(section)
        return {} if fig is None else {"risk_coverage": save_png(fig, Path(out_dir) / "risk_coverage.png")}
