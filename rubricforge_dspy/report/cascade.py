"""The cascade section of a report: what a certified cascade (`rubricforge judge --cascade`) did, read from its
verdict lines only (``stage``, ``stage_index``, ``lm_stages_run``; docs/CASCADE.md).

Per stage: the items it decided and their share (coverage), and on labeled lines the realized disagreement
and false-pass rate with exact (Clopper-Pearson) 95% intervals: descriptive numbers on these items, not
the guarantee (the guarantee is the fit's bound, `trust.cascade`); the items escalated to a person; the LM
requests spent against judging everything with the last stage (one per item); and a risk-coverage
figure: after each stage, the share decided so far against the disagreement among them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import orjson

from rubricforge_dspy.metrics.intervals import proportion_ci

__all__ = ["ESCALATED", "cascade_lines", "cascade_section", "cascade_markdown", "plot_risk_coverage"]

ESCALATED = "escalated"


def cascade_lines(paths: Iterable[str | Path]) -> tuple[str, list[dict]] | None:
    """The first verdict file among `paths` whose lines carry a cascade's ``stage``: ``(path, lines)``; None
    when none does (a directory or a non-JSONL path is skipped)."""
    for path in paths:
        path = Path(path)
        if not path.is_file() or path.suffix != ".jsonl":
            continue
        with path.open("rb") as handle:
            first = handle.readline().strip()
            if not first or "stage" not in orjson.loads(first):
                continue
            handle.seek(0)
            return str(path), [orjson.loads(line) for line in handle if line.strip()]
    return None


def _rates(lines: Sequence[dict]) -> dict:
    labeled = [x for x in lines if x.get("label") is not None]
    errors = sum(bool(x["passed"]) != bool(x["label"]) for x in labeled)
    failed = [x for x in labeled if not x["label"]]
    false_passes = sum(bool(x["passed"]) for x in failed)
    return {"labeled": len(labeled),
            "disagreement": errors / len(labeled) if labeled else None,
            "disagreement_ci95": list(proportion_ci(errors, len(labeled))) if labeled else None,
            "failed_labeled": len(failed),
            "false_pass": false_passes / len(failed) if failed else None,
            "false_pass_ci95": list(proportion_ci(false_passes, len(failed))) if failed else None}


def cascade_section(source: str, lines: Sequence[dict]) -> dict:
    """Every number of the section (JSON-safe) from a cascade's verdict lines."""
    n = len(lines)
    decided = [x for x in lines if not x.get("abstained")]
    names: list[str] = []
    for x in sorted(lines, key=lambda x: (x.get("stage_index") is None, x.get("stage_index") or 0)):
        if x.get("stage") not in names and x.get("stage") != ESCALATED:
            names.append(x["stage"])
    stages, cumulative, curve = [], [], []
    for name in names:
        mine = [x for x in decided if x.get("stage") == name]
        cumulative += mine
        stages.append({"name": name, "decided": len(mine), "share": len(mine) / n if n else 0.0, **_rates(mine)})
        curve.append({"after": name, "coverage": len(cumulative) / n if n else 0.0, **_rates(cumulative)})
    lm_calls = sum(int(x.get("lm_stages_run") or 0) for x in lines)
    escalated = sum(x.get("stage") == ESCALATED for x in lines)
    return {"source": source, "n": n, "stages": stages, "curve": curve, "escalated": escalated,
            "failed": sum(bool(x.get("abstained")) and x.get("stage") != ESCALATED for x in lines),
            "coverage": len(decided) / n if n else 0.0, "overall": _rates(decided), "lm_calls": lm_calls,
            "lm_calls_judging_everything": n, "lm_calls_saved": n - lm_calls}


def _rate(value, ci) -> str:
    return "n/a" if value is None else f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def cascade_markdown(section: dict | None, figure_links: dict[str, str] | None = None) -> list[str]:
    """The section's markdown lines (none without a cascade)."""
    if not section:
        return []
    n = section["n"]
    out = ["## Cascade: decided per stage, escalated to a person", "",
           f"From `{section['source']}`: {n} item(s), {section['coverage']:.0%} decided, "
           f"{section['escalated']} escalated to a person"
           + (f", {section['failed']} failed (no verdict)" if section["failed"] else "") + ". "
           f"LM requests: {section['lm_calls']}, against {section['lm_calls_judging_everything']} judging everything "
           f"with the last stage ({section['lm_calls_saved']} saved). Realized rates are on these labeled items, "
           "with exact 95% intervals; the certified bound is the fit's (`cascade.json`).", "",
           "| stage | decided | share | disagreement [95% CI] | false-pass [95% CI] |", "|---|---|---|---|---|"]
    for row in section["stages"]:
        out.append(f"| {row['name']} | {row['decided']} | {row['share']:.1%} | "
                   f"{_rate(row['disagreement'], row['disagreement_ci95'])} | "
                   f"{_rate(row['false_pass'], row['false_pass_ci95'])} |")
    overall = section["overall"]
    out.append(f"| all decided | {n - section['escalated'] - section['failed']} | {section['coverage']:.1%} | "
               f"{_rate(overall['disagreement'], overall['disagreement_ci95'])} | "
               f"{_rate(overall['false_pass'], overall['false_pass_ci95'])} |")
    out.append(f"| escalated | {section['escalated']} | {section['escalated'] / n if n else 0:.1%} | (a person) | |")
    out.append("")
    link = (figure_links or {}).get("risk_coverage")
    if link:
        out += [f"![risk against coverage after each stage]({link})", ""]
    return out


def plot_risk_coverage(section: dict):
    """After each stage: coverage so far (x) against the disagreement among the decided (y), with its exact
    95% interval; None without labels."""
    points = [p for p in section["curve"] if p["disagreement"] is not None]
    if not points:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    x = [p["coverage"] for p in points]
    y = [p["disagreement"] for p in points]
    low = [p["disagreement"] - p["disagreement_ci95"][0] for p in points]
    high = [p["disagreement_ci95"][1] - p["disagreement"] for p in points]
    ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=4, color="#1f77b4", label="disagreement (exact 95% CI)")
    for p in points:
        ax.annotate(f"after {p['after']}", (p["coverage"], p["disagreement"]), textcoords="offset points",
                    xytext=(5, 5), fontsize=8)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, max(0.2, max(p["disagreement_ci95"][1] for p in points) * 1.05))
    ax.set_xlabel("coverage (share decided so far)")
    ax.set_ylabel("disagreement with the label")
    ax.set_title("Cascade: risk against coverage")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig
