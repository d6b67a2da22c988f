"""The cascade fit's words: the fit report and a cascade run's summary as text, and why a fit refused.

Split from `trust.cascade` (the fit) by responsibility; `trust.cascade` re-exports the public names.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from rubricforge_dspy.core.cascade import format_judge_verdicts, format_token_spend
from rubricforge_dspy.metrics.risk_control import SEQUENCE_METHODS, GridResult, decided_needed, tasks_needed

__all__ = ["format_fit_report", "format_cascade_summary", "judge_verdicts_line", "refusal_message"]


def _failed_test(result: GridResult, names: Sequence[str]) -> dict[str, Any]:
    """The test that stopped the refusal's vector: the one with the largest p-value (it is above the level)."""
    tests: list[dict[str, Any]] = []
    n = max(result.n_trials, 1)
    if result.bound == "per_stage":
        for name, row in zip(names, result.stages, strict=False):
            if row.get("p_disagreement") is not None:
                tests.append({"what": f"stage {name}'s disagreement", "p": row["p_disagreement"], "bound": result.alpha,
                              "rate": row["errors"] / row["decided"] if row["decided"] else 0.0,
                              "share": row["decided"] / n, "count": row["decided"]})
            if row.get("p_false_pass") is not None:
                base = row["passes"] if result.false_pass_rate == "among_passes" else row["failed_decided"]
                tests.append({"what": f"stage {name}'s false-pass rate ({_rate_words(result)})",
                              "p": row["p_false_pass"], "bound": result.max_false_pass,
                              "rate": row["false_passes"] / base if base else 0.0, "share": base / n, "count": base})
    if not tests:  # pooled (or a vector with no stage tested)
        tests.append({"what": "the disagreement", "p": result.p_value, "bound": result.alpha,
                      "rate": result.disagreement or 0.0, "share": result.coverage, "count": result.n_decided})
        if result.max_false_pass is not None:
            passes = sum(int(row.get("passes", 0)) for row in result.stages)
            base = passes if result.false_pass_rate == "among_passes" else result.n_failed_decided
            tests.append({"what": f"the false-pass rate ({_rate_words(result)})", "p": result.p_value,
                          "bound": result.max_false_pass, "rate": result.false_passes / base if base else 0.0,
                          "share": base / n, "count": base})
            # pooled p_L = max(p_D, p_F): the one whose rate is nearer its bound failed
            tests.sort(key=lambda t: (t["bound"] - t["rate"]) * t["share"])
            return tests[0]
    return max(tests, key=lambda t: t["p"])


def _rate_words(result: GridResult) -> str:
    return "failures among its passes" if result.false_pass_rate == "among_passes" else "passes among its failures"


def _tasks_for(test: dict[str, Any], result: GridResult) -> int | None:
    """About how many tested tasks the failed test would need at its observed rate and share (None: none
    suffice); never fewer than were tested, since these did not suffice: when the estimate says otherwise, the
    observed p-value is extrapolated (``p`` falls about geometrically in the tasks: ``n log(level) / log(p)``)."""
    level, tested = result.level, max(result.n_tasks, 1)
    if test["rate"] >= test["bound"] or test["share"] <= 0:
        return None
    estimate: int | None
    if result.p_values == "binomial":
        decided = decided_needed(test["bound"], level, test["rate"])
        estimate = math.ceil(decided / test["share"]) if decided is not None else None
    else:
        estimate = tasks_needed(test["bound"], level, test["share"], test["rate"])
    if estimate is not None and estimate > tested:
        return estimate
    p = float(test["p"])
    if 0.0 < p < 1.0:
        return max(math.ceil(tested * math.log(level) / math.log(p)), tested + 1)
    return None


def refusal_message(result: GridResult, n_items: int, tasks: int, names: Sequence[str] | None = None
                    ) -> tuple[str, int | None, int | None]:
    """Why nothing was certified: the vector where the procedure stopped (a sequence: the first not rejected;
    Holm and Bonferroni: the smallest p-value), each of its tests' p-values against the level it needed, and
    the tasks the test that failed would need; what more labels of this kind of data can and cannot buy."""
    names = list(names) if names is not None else [f"stage {k + 1}" for k in range(len(result.thresholds))]
    sequence = result.method in SEQUENCE_METHODS
    level = result.level or (result.delta if sequence else result.delta / result.n_tested)
    beta = result.max_false_pass
    if result.bound == "per_stage":
        bound = f"per stage: disagreement <= {result.alpha} and false-pass <= {beta:.3g}" if beta is not None else \
            f"per stage: disagreement <= {result.alpha}"
    else:
        bound = f"disagreement <= {result.alpha}" + (f" and false-pass <= {beta}" if beta is not None else "")
    used = (f"{result.n_trials} trials of {result.n_tasks} tasks tested"
            + (f", {result.n_order_tasks} more tasks ordered the grid (split fixed sequence: "
               f"{result.n_order_tasks / max(result.n_order_tasks + result.n_tasks, 1):.0%} of the tasks)"
               if result.n_order_tasks else "")
            + f"; {n_items} calibration trajectories of {tasks} tasks given")
    where = ("the sequence stopped at its first vector not certified" if sequence
             else "the vector with the smallest p-value")
    vector = "; ".join(f"{name}: " + _threshold_text({"t_pass": tp if math.isfinite(tp) else None,
                                                      "t_fail": tf if math.isfinite(tf) else None})
                       for name, (tp, tf) in zip(names, result.thresholds, strict=False))
    parts: list[str] = []
    if result.bound == "per_stage" and result.stages:
        for name, row in zip(names, result.stages, strict=False):
            if not row.get("tested"):
                continue
            bits = [f"decided {row['decided']} with {row['errors']} disagreement(s): p = "
                    f"{_p_text(row['p_disagreement'])} (needs <= {level:.3g})"]
            if row.get("p_false_pass") is not None:
                of = (f"of {row['passes']} passes" if result.false_pass_rate == "among_passes"
                      else f"of {row['failed_decided']} failed")
                bits.append(f"{row['false_passes']} false pass(es) {of}: p = "
                            f"{_p_text(row['p_false_pass'])} (needs <= {level:.3g})")
            parts.append(f"{name} " + ", ".join(bits))
    else:
        parts.append(f"decides {result.n_decided} trials with {result.errors} disagreement(s)"
                     + (f" and {result.false_passes} false pass(es) of {result.n_failed_decided} failed"
                        if beta is not None else "") + f": p = {_p_text(result.p_value)} (needs <= {level:.3g})")
    failed = _failed_test(result, names)
    seen = (f"{where} ({vector}): " + "; ".join(parts) + f" (level: delta {result.delta}"
            + ("" if sequence else f" over {result.n_tested} vectors") + f", {result.method}, {result.p_values} "
            f"p-values)")
    need_tasks = _tasks_for(failed, result)
    trials = max(result.n_trials / max(result.n_tasks, 1), 1.0)
    needed = labels = None
    if failed["rate"] >= failed["bound"]:
        advice = (f"{failed['what']} is {failed['rate']:.3f} >= its bound {failed['bound']:.3g} on these items: no "
                  "number of labels suffices for this vector: raise the bound, or use stronger stages")
    elif need_tasks is None:
        advice = (f"{failed['what']} failed (p = {_p_text(failed['p'])}); no number of tasks suffices at its share "
                  f"{failed['share']:.2f} and rate {failed['rate']:.3f}: raise the bound or use stronger stages")
    else:
        labels = math.ceil(need_tasks * trials)
        needed = math.ceil(need_tasks * trials * failed["share"])
        total = (math.ceil(need_tasks * (result.n_order_tasks + result.n_tasks) / max(result.n_tasks, 1))
                 if result.n_order_tasks else need_tasks)
        advice = (f"{failed['what']} failed (p = {_p_text(failed['p'])} > {level:.3g}); certifying it needs about "
                  f"{need_tasks} labeled tasks in the test (more than the {result.n_tasks} tested)"
                  + (f", about {total} with the ordering share" if total != need_tasks else "")
                  + f", at its share {failed['share']:.2f} and rate {failed['rate']:.3f}"
                  + (": more trials of the same tasks cannot replace tasks (the task is the unit)"
                     if result.p_values != "binomial" else ""))
    if result.bound == "per_stage" and beta is not None and result.false_pass_rate != "among_passes":
        advice += ("; on a small calibration set a stage that passes anything may be out of reach of this false-pass "
                   "bound (docs/CASCADE.md, \"Power on small multi-agent sets\"): --false-pass among-passes bounds the "
                   "failures among a stage's passes instead (more power; weaker against a stage that passes many "
                   "failures beside many successes)")
    if result.order == "label-free":
        advice += ("; the sequence's order was label-free (no ordering data): give the fit split's labeled "
                   "trajectories to order it (--order-data), or test every vector with --method holm")
    return (
        f"cascade fit refused: no threshold vector is certified for {bound} with probability >= "
        f"{1 - result.delta:.2f} ({used}); {seen}; {advice}", needed, labels)


def _p_text(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.3g}"


def judge_verdicts_line(needed: int, total: int) -> str:
    """The cost a user pays for another tool's (or an LLM's) verdicts: ``judge verdicts needed: 101 of 188 (46%
    saved)`` (the same wording in the fit report and the cascade summaries)."""
    saved = 1.0 - needed / total if total else 0.0
    return f"judge verdicts needed: {needed} of {total} ({saved:.0%} saved)"


def _interval(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "[-]"


def _rate(value: float | None, ci: Sequence[float] | None) -> str:
    return "n/a (none decided)" if value is None else f"{value:.3f} {_interval(ci)}"


def _threshold_text(row: dict[str, Any]) -> str:
    t_pass = "never" if row.get("t_pass") is None else f">= {row['t_pass']}"
    t_fail = "never" if row.get("t_fail") is None else f"<= {row['t_fail']}"
    return f"pass {t_pass}, fail {t_fail}"


def format_fit_report(report: dict[str, Any], guarantee: dict[str, Any] | None = None) -> str:
    """A fitted cascade's report (``cascade.fit_report``) as `rubricforge cascade fit` prints it: the
    guarantee (alpha, delta, method), then per stage kept its thresholds, its decided share of all calibration
    trajectories and the realized disagreement (D) and false-pass rate (FP) with exact 95% intervals
    (descriptive; the guarantee is the bound), the escalated share, and each stage the fit dropped."""
    guarantee = guarantee or report.get("guarantee") or {}
    units = report.get("units", {})
    # the default rate (over the failed items decided) keeps the headline as it was; the other one is named
    kind = " (failures among its passes)" if guarantee.get("false_pass_rate") == "among_passes" else ""
    bound = f" and false-pass{kind} <= {guarantee['max_false_pass']:.3g}" \
        if guarantee.get("max_false_pass") is not None else ""
    per_stage = guarantee.get("bound") == "per_stage"
    among = "for every stage, among the items it decides" if per_stage else "among decided items"
    lines = [f"certified: disagreement <= {guarantee.get('alpha')}{bound} {among}, with probability "
             f">= {1 - guarantee.get('delta', 0):.2f} (alpha {guarantee.get('alpha')}, delta {guarantee.get('delta')}; "
             f"{guarantee.get('method')}, "
             f"{guarantee.get('p_values', 'binomial')} p-values, "
             f"{guarantee.get('grid', {}).get('vectors')} distinct threshold vectors)"]
    if guarantee.get("method_why"):
        lines.append(f"method: {guarantee['method']}: {guarantee['method_why']}"
                     + (f" (order: {guarantee['order']})" if guarantee.get("order") else ""))
    if guarantee.get("bound_why"):
        lines.append(f"bound: {guarantee['bound']}: {guarantee['bound_why']}")
    ordering = units.get("ordering_data")
    if isinstance(ordering, dict):
        lines.append(f"ordering data: {ordering.get('trajectories')} labeled trajectories apart from the calibration; "
                     + "; ".join(map(str, ordering.get("stages", []))))
    rule = guarantee.get("label_rule")
    if isinstance(rule, dict) and rule.get("rules"):
        lines.append(f"labels: {'; '.join(map(str, rule['rules']))} ({rule.get('source')}"
                     + (f"; joined from {rule['labels']}" if rule.get("labels") else "")
                     + "): labels read against this cascade are read by this rule")
    if "trials_used" in units:
        lines.append(f"calibration: {units['trials_used']} trajectories of {units.get('tasks')} tasks used"
                     + (f" ({units.get('tested_tasks')} tasks tested, {units['ordering_tasks']} ordered the grid)"
                        if units.get("ordering_tasks") else "")
                     + (f"; {units['dropped_trials']} trial(s) dropped (one per task kept)"
                        if units.get("dropped_trials") else "; none dropped"))
    else:  # a cascade fit before every trial counted
        lines.append(f"calibration: {units.get('calibration_units')} units ({units.get('tasks')} tasks, one trial "
                     f"each; {units.get('dropped_trials', 0)} further trial(s) not used)")
    n = max(units.get("trials_used") or units.get("calibration_units") or 0, 1)
    dropped = {row["name"]: row for row in report.get("dropped", [])}
    lines.append(f"per stage, on the {n} calibration trajectories (share of all of them; disagreement D and "
                 "false-pass FP realized, with exact 95% intervals: descriptive, the certificate is the bound):")
    calls: dict[str, int] = {}
    for row in report.get("stages", []):
        calls[row["name"]] = row["calls"]
        if row["name"] in dropped:  # not in the cascade: said below, never as a stage that decides
            continue
        among = ""
        if "failures_among_passes" in row:
            among = (f" ({row.get('false_passes')} of {row.get('failed_decided')} failed decided); failures among its "
                     f"{row.get('decided_pass')} passes "
                     + ("n/a (none passed)" if row["failures_among_passes"] is None else
                        f"{row['failures_among_passes']:.3f} {_interval(row['failures_among_passes_ci95'])}"))
        lines.append(f"  {row['name']}: {_threshold_text(row)}; decided {row['decided']} ({row['decided'] / n:.0%} of "
                     f"all; {row['reached']} reached it): D {_rate(row['disagreement'], row['disagreement_ci95'])}, "
                     f"FP {_rate(row['false_pass'], row['false_pass_ci95'])}{among}; {row['calls']} run(s) in the fit")
    lines.append(f"  escalated to a person: {report.get('escalated')} ({report.get('escalated', 0) / n:.0%} of all)")
    for name, row in dropped.items():
        ran = f" (it ran on {calls[name]} in the fit)" if name in calls else ""
        lines.append(f"  dropped stage {name}{ran}: {row['reason']}; not in the cascade")
    if per_stage and guarantee.get("false_pass_rate") != "among_passes":
        lines.append("  bounded per stage: D and FP (false passes over the failed items it decides); the share of a "
                     "stage's passes that are failures is shown, not bounded (it moves with how many failures reach "
                     "the stage)")
    elif per_stage:
        lines.append("  bounded per stage: D and the failures among its passes (false passes over its passes: its own "
                     "easy fails do not dilute it); FP (false passes over the failed items it decides) is shown, not "
                     "bounded")
    verdicts = report.get("judge_verdicts")
    if isinstance(verdicts, dict) and verdicts.get("line"):
        lines.append(f"  {verdicts['line']} (on the calibration trajectories; stages that count: "
                     f"{', '.join(verdicts.get('stages', []))})")
    return "\n".join(lines)


def format_cascade_summary(summary: dict[str, Any]) -> str:
    """`cascade_summary` as text: coverage per stage, realized risks with exact 95% intervals (when labels
    were given), the escalated items, the judge verdicts needed against judging every item with the judge
    (``judge verdicts needed: 101 of 188 (46% saved)``: recorded and Python stages' verdicts count, they are
    what a user pays another tool for), and the LM calls this process made against judging everything with
    the last stage (the calls saved only when a stage makes LM calls; a cascade whose judge stage is recorded
    says it makes none, never that its cost is 0)."""
    n = summary["n"]
    lines = [f"cascade on {n} item(s): {summary['coverage']:.0%} decided, {summary['escalated']} escalated to a person"
             + (f", {summary['failed']} failed (no verdict)" if summary.get("failed") else "")]
    for row in summary["stages"]:
        risk = ""
        if "disagreement" in row:
            risk = (f"; disagreement {_rate(row['disagreement'], row['disagreement_ci95'])}, "
                    f"false-pass {_rate(row['false_pass'], row['false_pass_ci95'])}")
        if row.get("lm", row["lm_calls"] > 0):
            cost = f"{row['lm_calls']} LM call(s)"
        elif row.get("judge"):
            cost = f"{row['judge_verdicts']} judge verdict(s), recorded or computed: no LM call"
        else:
            cost = "no LM call"
        lines.append(f"  {row['name']}: decided {row['decided']} ({row['share']:.0%}), {cost}" + risk)
    overall = summary.get("overall")
    if overall:
        lines.append(f"  all decided: disagreement {_rate(overall['disagreement'], overall['disagreement_ci95'])}, "
                     f"false-pass {_rate(overall['false_pass'], overall['false_pass_ci95'])}")
    judges = summary.get("judge_stages")
    if judges:
        lines.append(f"  {format_judge_verdicts(summary['judge_verdicts'], n)}, by the judge stage(s) "
                     f"{', '.join(judges)}")
    recorded = [name for name in judges or [] if name not in summary.get("lm_stages", [])]
    if summary.get("lm_calls_saved") is None and recorded:
        lines.append(f"  LM calls: none made by this process ({', '.join(recorded)}: verdicts recorded by another tool "
                     "or computed, paid for where they were made, counted above)")
    elif summary.get("lm_calls_saved") is None:
        lines.append("  LM calls: 0 (no stage of the cascade makes LM calls)")
    else:
        lines.append(f"  LM calls: {summary['lm_calls']}, against {summary['lm_calls_judging_everything']} judging "
                     f"everything with the last stage ({summary['lm_calls_saved']} saved)")
    if summary.get("token_spend") is not None and (summary.get("lm_calls_saved") is not None or not recorded):
        lines.append("  " + format_token_spend(summary["token_spend"], summary["lm_calls"]))
    guarantee = summary.get("guarantee")
    if guarantee:
        bound = (f" and false-pass <= {guarantee['max_false_pass']}" if guarantee.get("max_false_pass") is not None
                 else "")
        lines.append(f"  certified at fit: disagreement <= {guarantee['alpha']}{bound} with probability >= "
                     f"{1 - guarantee['delta']:.2f} (the rates above are realized on these items, not the bound)")
    else:
        lines.append("  no certificate: hand-set thresholds (fit them with `rubricforge cascade fit`)")
    return "\n".join(lines)
