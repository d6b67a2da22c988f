"""Markdown of the comparison sections (see :mod:`rubricforge_dspy.report.comparisons`): one
function per section, named after its table."""

from __future__ import annotations

from typing import Any

from rubricforge_dspy.report.cells import ci, figure, num, pval, table
from rubricforge_dspy.report.comparisons import CATEGORIES

__all__ = ["ablation_section", "false_pass_gap_section", "disagreements_section", "sweep_section"]


def ablation_section(report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    out += ["## Criterion ablation (leave one out)", ""]
    ab = report["ablation"]
    if ab is None:
        skipped = (report["meta"].get("config") or {}).get("ablation") is False
        out += ["The ablation was not run: `ablation: false` in run.json's config (the embedded preset skips it: "
                "judging the test split once more per criterion costs about as much CPU as the rest of the demo, for "
                "a 135M model's near-chance verdicts; `--preset server` with a real model runs it)." if skipped
                else "No ablation in this run (no `ablation/` directory)."]
    else:
        f = ab["full"]
        graded = "mae" in f
        header = ["removed criterion", "false-pass rate", "Δ false-pass", "accuracy", "Δ accuracy", "κ", "Δ κ"]
        header += ["MAE", "Δ MAE"] if graded else []
        header += ["abstained", "McNemar vs full b/c", "p", "mark"]
        rows = [["(none: full induced judge)", num(f["false_pass_rate"]), "—", num(f["accuracy"]), "—",
                 num(f["kappa"]), "—", *([num(f["mae"]), "—"] if graded else []), f["abstained"],
                 "—", "—", "—"]]
        for r in ab["rows"]:
            mc = r["mcnemar"]
            rows.append([f"{r['number']}. {r['name']}", num(r["false_pass_rate"]),
                         num(r["delta_false_pass_rate"], signed=True), num(r["accuracy"]),
                         num(r["delta_accuracy"], signed=True), num(r["kappa"]), num(r["delta_kappa"], signed=True),
                         *([num(r["mae"]), num(r["delta_mae"], signed=True)] if graded else []), r["abstained"],
                         f"{mc['b']}/{mc['c']}", pval(mc["p_value"]), mc["mark"]])
        out += table(header, rows)
        out += ["", "Δ = ablated − full. A positive Δ false-pass means the removed criterion was stopping failed "
                "trajectories from passing; a negative Δ accuracy means it was helping overall. McNemar `b` = "
                "items only the full judge got right."]
    out.append("")

    return out


def false_pass_gap_section(report: dict[str, Any]) -> list[str]:
    meta, settings = report["meta"], report["settings"]
    induced, base = meta["induced"], settings["baseline"]
    conf = int(round(100 * settings["confidence"]))
    out: list[str] = []
    out += ["## Where the false-pass gap comes from", ""]
    st = report["stratification"]
    if st is None:
        out += [f"Skipped: no `{base}` judge in this run."]
    else:
        header = ["group", "stratum", "n", "failed", f"{induced} false-pass rate", f"{base} false-pass rate",
                  f"gap ({base} − {induced}) [{conf}% CI]", "b/c", "p", "mark"]
        rows = []
        for r in st["rows"]:
            rows.append([r["group"], r["stratum"], r["n"], r["n_failed"],
                         f"{num(r['induced_fpr'])} ({r['induced_false_passes']})",
                         f"{num(r['baseline_fpr'])} ({r['baseline_false_passes']})",
                         f"{num(r['gap'], signed=True)} {ci(r['gap_ci_low'], r['gap_ci_high'], signed=True)}",
                         f"{r['b']}/{r['c']}", pval(r["p_value"]), r["mark"] if r["n_failed"] else "—"])
        out += table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2))
        out += ["", f"Computed on the failed items of each stratum (false passes in parentheses). Gap > 0: "
                f"`{induced}` passes fewer failed trajectories than `{base}`. CI: bootstrap over the stratum's "
                f"failed items (whole tasks when tasks repeat); p: exact McNemar on them (`b` = failed items only "
                f"`{induced}` failed, `c` = only `{base}` failed). Length strata are tertiles of `n_steps` (absent "
                f"without it)."]
    out.append("")

    return out


def disagreements_section(report: dict[str, Any]) -> list[str]:
    meta, settings = report["meta"], report["settings"]
    induced, base = meta["induced"], settings["baseline"]
    out: list[str] = []
    out += [f"## Disagreements: {induced} vs {base}", ""]
    dg = report["disagreements"]
    if dg is None:
        out += [f"Skipped: no `{base}` judge in this run."]
    else:
        c = dg["counts"]
        out += [f"{len(dg['rows'])} item(s) where the verdicts differ: {c['baseline_false_pass']} `{base}` false "
                f"pass(es) that `{induced}` failed, {c['induced_false_fail']} `{induced}` false fail(s), "
                f"{c['induced_false_pass']} `{induced}` false pass(es), {c['baseline_false_fail']} `{base}` "
                f"false fail(s). Criterion attribution: {dg['attribution_source']}.", ""]
        if dg["by_criterion"]:
            out += table(["attributed criterion", "disagreements", f"{induced} right", f"{induced} wrong"],
                          [[e["criterion"], e["n"], e["induced_right"], e["induced_wrong"]]
                           for e in dg["by_criterion"]])
            out.append("")
            labels = {k: v.format(i=induced, b=base) for k, v in CATEGORIES}
            truth_col = "truth (reward)" if meta["graded"] else "truth"
            header = ["id", "domain", truth_col, induced, base, "case", "criterion", f"{induced} reason"]
            rows = []
            for r in dg["rows"]:
                truth = "pass" if r["label"] else "fail"
                if meta["graded"]:
                    truth += f" ({r['reward']:.2f})"
                rows.append([f"`{r['id']}`", r["domain"], truth, r["induced"], r["baseline"], labels[r["category"]],
                             r["criterion"], r["reason"]])
            out += table(header, rows, ["l"] * len(header))
    out.append("")

    return out


def sweep_section(report: dict[str, Any], figure_links: dict[str, str] | None) -> list[str]:
    out: list[str] = []
    out += ["## Induction sweep", ""]
    sw = report["sweep"]
    if sw is None:
        out += ["No sweep recorded in run.json."]
    else:
        header = ["candidate", "parents", "val score", "val agreement", "found at metric call", "rubric chars",
                  "rubric sha256", "best"]
        rows = []
        for i, r in enumerate(sw["rows"]):
            parents = ", ".join(str(p) for p in r["parents"]) if r["parents"] else "—"
            sha = (r["rubric_sha256"] or "")[:12] or None
            rows.append([r["candidate"], parents, num(r["val_score"]), num(r["val_agreement"]),
                         r["discovered_at_metric_call"], r["rubric_chars"], f"`{sha}`" if sha else None,
                         "★" if i == sw["best"] else ""])
        out += table(header, rows)
        out += ["", "Best = highest validation score, earliest on ties (candidate 0 is the seed rubric)."]
        if figure_links and "sweep" in figure_links:
            out += figure(figure_links, "sweep", "Validation agreement against metric calls")
        elif len(sw["rows"]) < 2:
            out += ["", "No figure: the sweep holds one candidate, the seed (induction proposed none that was scored "
                    "on validation within its budget), and one point on empty axes shows nothing."]
    out.append("")

    return out
