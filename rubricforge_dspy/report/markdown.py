"""The report as markdown: one function per section, named after its table; the comparison
sections are in :mod:`rubricforge_dspy.report.markdown_comparisons`."""

from __future__ import annotations

from typing import Any

from rubricforge_dspy.report.cascade import cascade_markdown, cascade_title, fit_lead_lines
from rubricforge_dspy.report.cells import cell, ci, figure, judge_name, num, pval, split_table, table
from rubricforge_dspy.report.judges import caveat_section, definitions_section
from rubricforge_dspy.report.markdown_comparisons import (
    ablation_section,
    disagreements_section,
    false_pass_gap_section,
    sweep_section,
)

__all__ = ["render_markdown", "HOW_TO_READ"]

HOW_TO_READ = (
    "**False-pass rate comes first.** It is the share of *failed* trajectories the judge passed "
    "(FP / (FP + TN)). A judge used to score agents, filter training data or serve as a reward "
    "over-credits exactly through false passes: each one counts a failure as a success, inflates the "
    "agent's measured success rate, and rewards behaviour that only looks successful (a confident closing "
    "message, a claimed booking no tool call shows). A false fail costs less: it under-credits and is "
    "visible as a lower pass rate. Accuracy and F1 mix the two errors and depend on the base pass rate, so "
    "a lenient judge can look accurate on a mostly-passing test set; compare the predicted-pass rate with the "
    "base pass rate to see leniency directly. Abstentions are counted and scored as fail verdicts, so a "
    "judge cannot lower its false-pass rate by abstaining without paying in false fails; a cascade's "
    "escalations (no stage was sure: a person decides) are neither passes nor fails, and are left out of the "
    "metrics and counted apart. McNemar compares "
    "each judge's per-item correctness with the induced judge's on the same items (exact binomial test on "
    "the discordant items; `b` = only the induced judge right, `c` = only this judge right). Marks: "
    "`***` p < 0.001, `**` p < 0.01, `*` p < 0.05, `ns` otherwise. Rates (false-pass rate, accuracy) carry "
    "exact Clopper-Pearson intervals, which stay honest on few items; κ, AUC and differences carry "
    "percentile bootstrap intervals, resampling whole tasks when a task has several trials."
)


def _kind(report: dict[str, Any]) -> str:
    """What the judge the others are compared with is: ``induced`` (a run), or ``reference`` (the first of
    plain verdict files: nothing says it was induced)."""
    return report["meta"].get("reference_kind") or "induced"


def _facts(report: dict[str, Any]) -> list[str]:
    meta, items, settings = report["meta"], report["items"], report["settings"]
    conf = int(round(100 * settings["confidence"]))
    resampled = ("whole tasks (tasks repeat: task-clustered bootstrap)" if settings["bootstrap"] == "task-clustered"
                 else "items")
    source = " (as its verdict lines record it)" if meta.get("lm_source") == "verdict lines" else ""
    if _kind(report) == "induced":
        lm = f"judge LM `{meta.get('lm') or 'n/a'}`{source}"
        facts = [lm, f"reflection LM `{meta.get('reflection_lm') or 'n/a'}`", f"induced judge `{meta['induced']}`"]
    else:  # plain verdict files: no induction run, so no reflection LM and no "induced" judge to speak of
        lm = (f"judge LM `{meta['lm']}`{source}" if meta.get("lm") else
              "judge LM not recorded (the verdict lines carry no `model`)")
        others = len(meta.get("judges") or []) > 1
        facts = [lm, f"reference judge `{meta['induced']}` (the first verdict file"
                     + ("; the others are compared with it)" if others else ")")]
    facts += [
        f"{items['n']} test items on {items['n_tasks']} tasks ({items['n_passed']} passed, {items['n_failed']} "
        f"failed; base pass rate {num(items['base_pass_rate'])})"
        + (f"; {items['escalated_left_out']} more escalated to a person, neither passes nor fails, left out of every "
           "metric and figure" if items.get("escalated_left_out") else ""),
        "graded rewards" if meta["graded"] else "binary rewards",
        f"{conf}% intervals: exact Clopper-Pearson for rates; {settings['n_resamples']} bootstrap resamples "
        f"(seed {settings['seed']}) of {resampled} for the rest" + _excluded_text(report),
    ]
    out = ["- " + f for f in facts]
    if meta.get("program"):
        out.append(f"- frozen program `{meta['program']}`")
    if meta.get("notes"):
        out.append(f"- notes: {cell(meta['notes'])}")
    return out


def _excluded_text(report: dict[str, Any]) -> str:
    """The resamples left out of bootstrap intervals (a statistic undefined on them), in one clause."""
    excluded = report.get("bootstrap_excluded") or []
    if not excluded:
        return ""
    worst = max(excluded, key=lambda e: e["undefined"])
    return (f"; a resample on which κ or AUC is undefined (it holds one outcome: likely on few items) is left out of "
            f"that interval: at most {worst['undefined']} of {worst['resamples']} ({worst['where']}, "
            f"{worst['statistic']}; every count in report.json, `bootstrap_excluded`)")


def induced_section(report: dict[str, Any]) -> list[str]:
    """What the induced judge is: the seed rubric unchanged (induction found nothing better on validation), or
    an induced rubric; and the rubric itself. Nothing for verdict files (no induction run)."""
    meta = report["meta"]
    beat, rubric = meta.get("beat_seed"), meta.get("rubric")
    if beat is None and not rubric:
        return []
    out = ["## The induced judge", ""]
    if beat is False:
        out += [f"**The induced judge is the seed rubric, unchanged.** No candidate that induction proposed scored "
                "higher on the validation split than the seed (candidate 0 of the sweep below), so the frozen judge "
                f"judges with the seed rubric: every `{meta['induced']}` row of this report is the seed's. More "
                "labeled tasks, a larger budget (--budget) or a stronger model give induction room to improve on it.",
                ""]
    elif beat:
        out += ["Induction found a rubric that scored higher on the validation split than the seed (the sweep "
                "below); the frozen judge judges with it.", ""]
    if rubric:
        fence = "~~~~" if "```" in rubric else "```"
        out += ["The rubric it judges with:", "", f"{fence}text", rubric.rstrip("\n"), fence, ""]
    return out


def floor_section(report: dict[str, Any]) -> list[str]:
    """In words, above the tables: does length give the outcome away; does the induced judge beat the floor."""
    floor = report.get("floor")
    if not floor:
        return []
    out = ["## The floor", ""]
    if floor["giveaway_sentence"]:
        out += [floor["giveaway_sentence"], ""]
    if floor.get("floor_giveaway_sentence"):
        out += [floor["floor_giveaway_sentence"], ""]
    v = floor["vs_floor"]
    if v:
        induced = report["meta"]["induced"]
        verdict = ("beats" if v["beats_floor"] else "ties with" if v["only_judge_right"] == v["only_floor_right"]
                   else "does **not** beat")
        fit = "fit on the training split" if report["meta"].get("split") is not None else "from its verdict file"
        out += [f"The {induced} judge {verdict} the symptom floor (a logistic regression on observable symptom "
                f"counts, {fit}) on these items: κ {num(v['kappa_judge'])} vs "
                f"{num(v['kappa_floor'])}, false-pass rate {num(v['false_pass_judge'])} vs "
                f"{num(v['false_pass_floor'])}; {v['only_judge_right']} item(s) only the judge got right, "
                f"{v['only_floor_right']} only the floor (McNemar p = {pval(v['p_value'])}).", ""]
    h = floor.get("hybrid_row")
    if h:
        out += [f"The hybrid judge (the {induced} judge's score stacked with the floor's features, fit on "
                f"validation verdicts): κ {num(h['kappa'])}, false-pass rate {num(h['false_pass'])}; it is "
                + ("more accurate than both its parts here." if h["beats_both"] else
                   "not more accurate than both its parts here."), ""]
    if not (floor["floor"] and floor["length_only"]):
        out += ["This report has no floor or length-only row, so it cannot say whether the judge beats what "
                "observable symptoms or episode length already know. `rubricforge report --predictions ... "
                "--floor-data LABELED` adds them (cross-validated by task on the judged items).", ""]
    return out


def main_section(report: dict[str, Any], links: dict[str, str] | None) -> list[str]:
    items, induced = report["items"], report["meta"]["induced"]
    conf = int(round(100 * report["settings"]["confidence"]))
    clustered = report["settings"]["bootstrap"] == "task-clustered"
    header = ["judge", f"false-pass rate [{conf}% exact CI]", "n", f"accuracy [{conf}% exact CI]", "F1",
              f"κ [{conf}% CI]", f"AUC [{conf}% CI]", "false fails", "pred. pass rate", "abstained",
              f"McNemar vs {induced} b/c", "p", "mark"]
    rows = []
    for r in report["main"]:
        mc = r["mcnemar"]
        rows.append([
            judge_name(r, _kind(report)),
            f"{num(r['false_pass_rate'])} {ci(r['false_pass_ci_low'], r['false_pass_ci_high'])}",
            r["n"], f"{num(r['accuracy'])} {ci(r['accuracy_ci_low'], r['accuracy_ci_high'])}", num(r["f1"]),
            f"{num(r['kappa'])} {ci(r['kappa_ci_low'], r['kappa_ci_high'])}",
            f"{num(r['auc'])} {ci(r['auc_ci_low'], r['auc_ci_high'])}", r["false_fail_count"],
            num(r["predicted_positive_rate"]), r["abstained"], f"{mc['b']}/{mc['c']}" if mc else "—",
            pval(mc["p_value"]) if mc else "—", mc["mark"] if mc else "—",
        ])
    out = ["## Main table", "", *table(header, rows), ""]
    out.append(f"False-pass rate = FP / failed items ({items['n_failed']} failed); false fails = passed items "
               f"judged fail; predicted pass rate vs base pass rate {num(items['base_pass_rate'])}. AUC ranks the "
               "judge's score (abstentions score as persisted). κ and AUC intervals: percentile bootstrap over "
               + ("whole tasks (task-clustered: tasks repeat)." if clustered else "items."))
    out += figure(links, "over_credit", "False-pass rate per judge with its exact 95% interval")
    return out + [""]


def task_clustered_section(report: dict[str, Any]) -> list[str]:
    tc = report["task_clustered"]
    if tc is None:
        return []
    conf = int(round(100 * report["settings"]["confidence"]))
    rows = [[judge_name(r, _kind(report)), ci(r["false_pass_ci_low"], r["false_pass_ci_high"]),
             ci(r["accuracy_ci_low"], r["accuracy_ci_high"])] for r in tc["rows"]]
    return ["## Task-clustered intervals", "",
            f"Tasks repeat ({tc['n_items']} items on {tc['n_tasks']} tasks, up to {tc['max_items_per_task']} per "
            "task), so items are not independent. These intervals resample whole tasks; read them next to the "
            "exact intervals of the main table, which treat items as independent.", "",
            *table(["judge", f"false-pass rate [{conf}% task-clustered CI]", f"accuracy [{conf}% task-clustered CI]"],
                   rows), ""]


def error_decomposition_section(report: dict[str, Any], links: dict[str, str] | None) -> list[str]:
    header = ["judge", "FP (false pass)", "TP", "FN (false fail)", "TN", "abstained on passed", "abstained on failed"]
    rows = [[judge_name(r, _kind(report)), r["fp"], r["tp"], r["fn"], r["tn"], r["abstained_on_passed"],
             r["abstained_on_failed"]]
            for r in report["main"]]
    out = ["## Error decomposition", "", *table(header, rows), "",
           "Positive class = passed. Abstentions are already inside FN / TN (they are fail verdicts)."]
    return out + figure(links, "confusion", "Confusion decomposition per judge") + [""]


def calibration_section(report: dict[str, Any], links: dict[str, str] | None) -> list[str]:
    cal = report["calibration"]
    after = any(r["ece_calibrated"] is not None for r in cal["rows"])
    header = ["judge", "ECE"] + (["ECE after calibration"] if after else [])
    rows = [[judge_name(r, _kind(report)), num(r["ece"]), *([num(r["ece_calibrated"])] if after else [])]
            for r in cal["rows"]]
    out = ["## Calibration", "", *table(header, rows), "",
           f"Expected calibration error of the score against the pass/fail label, {cal['n_bins']} {cal['binning']} "
           "bins over [0, 1]: the item-weighted mean |fraction passed − mean score| per bin (0 = calibrated)."
           + (" After calibration: the verdicts' `score_calibrated`." if after else "")]
    return out + figure(links, "reliability", "Reliability diagram per judge") + [""]


def contradictions_section(report: dict[str, Any]) -> list[str]:
    conf = int(round(100 * report["settings"]["confidence"]))
    rows = [[judge_name(r, _kind(report)), r["n_verdicts"], r["contradictions"],
             f"{num(r['rate'])} {ci(r['ci_low'], r['ci_high'])}"] for r in report["contradictions"]]
    return ["## Contradictions", "", *table(["judge", "verdicts produced", "contradictions",
                                              f"rate [{conf}% exact CI]"], rows), "",
            "A contradiction is a verdict whose `passed` disagreed with its `score` (e.g. passed with score 0.2); "
            "it is resolved to a fail. Verdict files without the `contradiction` field count none.", ""]


def evidence_section(report: dict[str, Any]) -> list[str]:
    """What each judge read (issue 40): its verdicts on complete evidence, on cut evidence and unknown, with
    the share judged on cut evidence and the disagreement and false-pass rates of each."""
    rows_in = report.get("evidence")
    if not rows_in:
        return []
    conf = int(round(100 * report["settings"]["confidence"]))
    rows = []
    for r in rows_in:
        for kind in ("complete", "cut", "unknown"):
            k = r[kind]
            if not k["n"]:
                continue
            rows.append([judge_name(r, _kind(report)), kind, k["n"], f"{100 * k['share']:.1f}%",
                         f"{num(k['disagreement_rate'])} {ci(*k['disagreement_ci'])}",
                         f"{k['false_passes']}/{k['n_failed']}",
                         f"{num(k['false_pass_rate'])} {ci(*k['false_pass_ci'])}"])
    cut = ", ".join(f"{cell(r['judge'])} {100 * r['cut']['share']:.1f}%" for r in rows_in)
    return ["## Evidence read", "", f"Share of verdicts judged on cut evidence: {cut}.", "",
            *table(["judge", "evidence", "items", "share", f"disagreement [{conf}% exact CI]", "false passes",
                    f"false-pass rate [{conf}% exact CI]"], rows), "",
            "`complete`: the judge read every step whole; `cut`: steps were clipped or elided to fit its budget "
            "(the verdict line's `evidence`); `unknown`: the line does not say (an older line, another tool's). "
            "An error in an elided middle step cannot be seen: compare the false-pass rates.", ""]


def ranking_section(report: dict[str, Any], links: dict[str, str] | None) -> list[str]:
    induced = report["meta"]["induced"]
    conf = int(round(100 * report["settings"]["confidence"]))
    out = ["## Ranking vs calibration", ""]
    if report["graded"] is None:
        out += ["Not a graded run (rewards are pass/fail): ranking quality is the AUC column of the main table."]
    else:
        header = ["judge", "Spearman ρ", "Kendall τ-b", "MAE vs reward", f"ΔMAE vs {induced} [{conf}% CI]", "p", "mark"]
        rows = []
        for r in report["graded"]:
            v = r["vs_induced"]
            rows.append([judge_name(r, _kind(report)), num(r["spearman"]), num(r["kendall"]), num(r["mae"]),
                         f"{num(v['mean_diff'], signed=True)} {ci(v['ci_low'], v['ci_high'], signed=True)}"
                         if v else "—", pval(v["p_value"]) if v else "—", v["mark"] if v else "—"])
        out += table(header, rows)
        unit = "tasks" if report["settings"]["bootstrap"] == "task-clustered" else "items"
        out += ["", f"Ranking: Spearman / Kendall of score against reward (higher is better). Calibration: mean "
                f"|score − reward| (lower is better). ΔMAE = MAE(judge) − MAE({induced}), paired bootstrap over "
                f"{unit}; positive means the judge is further from the rewards than {induced}."]
    return out + figure(links, "scores", "Judge score against ground truth") + [""]


def phases_section(report: dict[str, Any]) -> list[str]:
    """Where the run's time went: wall and CPU seconds per phase (run.json's ``phases``), CPU of the whole process
    tree (the embedded llama.cpp server included) where the system lets it be read. Nothing when not recorded."""
    phases = report["meta"].get("phases")
    if not phases:
        return []
    out = ["## Where the time went", "", "| phase | wall s | CPU s |", "|---|---|---|"]
    out += [f"| {cell(p['phase'])} | {p['wall_s']:.1f} | {p['cpu_s']:.1f}"
            + ("" if p.get("cpu_scope", "tree") == "tree" else " (this process only)") + " |" for p in phases]
    total = report["meta"].get("phases_total")
    if total:
        out.append(f"| **all** | **{total['wall_s']:.1f}** | **{total['cpu_s']:.1f}** |")
    return out + ["", "CPU seconds count this process, its threads and every process it started (the embedded "
                  "llama.cpp server answering the judge included); on a loaded machine wall time grows, CPU much less.",
                  ""]


def render_markdown(report: dict[str, Any], figure_links: dict[str, str] | None = None) -> str:
    """The report as markdown. ``figure_links`` maps figure names (see ``figures.FIGURES``) to
    relative paths; figures are embedded only when given. Before any table: what the embedded model can and
    cannot tell (a run judged by it: `report.judges.caveat_section`), and every judge row defined in one line
    (`report.judges.definitions_section`)."""
    meta = report["meta"]
    title = cascade_title(report["cascade"]) if report.get("cascade") else meta.get("dataset") or meta["run"]
    out = [f"# Judge report: {title}", ""]
    out += caveat_section(report)  # what the embedded model can and cannot tell: first, before any table
    if report.get("cascade_fit"):
        out += fit_lead_lines(report["cascade_fit"])
    out += [*_facts(report), ""]
    out += definitions_section(report)  # every judge row in one line, before the first table lists it
    out += induced_section(report)
    out += cascade_markdown(report.get("cascade"), figure_links)
    out += floor_section(report)
    out += ["## How to read this", "", HOW_TO_READ, ""]
    if meta.get("split") is not None:
        out += ["## Split", "", *split_table(meta["split"]), ""]
    out += main_section(report, figure_links)
    out += task_clustered_section(report)
    out += error_decomposition_section(report, figure_links)
    out += calibration_section(report, figure_links)
    out += contradictions_section(report)
    out += evidence_section(report)
    out += ranking_section(report, figure_links)
    out += ablation_section(report) + [""]
    out += false_pass_gap_section(report) + [""]
    out += disagreements_section(report) + [""]
    out += sweep_section(report, figure_links) + [""]
    out += phases_section(report)
    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {cell(w)}" for w in report["warnings"]] + [""]
    return "\n".join(out).rstrip("\n") + "\n"
