"""The tables comparing the induced judge with something else, one function per table (named after
its section): :func:`ablation_table` ("Criterion ablation"), :func:`false_pass_gap_table` ("Where
the false-pass gap comes from"), :func:`disagreements_table` ("Disagreements") and
:func:`sweep_table` ("Induction sweep")."""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from rubricforge_dspy import metrics as M
from rubricforge_dspy.core.criteria import Criterion, attribute_reason, parse_criteria
from rubricforge_dspy.report.notes import collect
from rubricforge_dspy.report.records import Predictions, relative
from rubricforge_dspy.report.run import Run

__all__ = ["BASELINE", "REASON_CHARS", "CATEGORIES", "ablation_table", "false_pass_gap_table",
           "disagreements_table", "sweep_table"]

BASELINE = "geval"  # the judge the false-pass gap and the disagreement cases compare against
REASON_CHARS = 160


def ablation_table(run: Run, y: np.ndarray, notes: list[str]) -> dict[str, Any] | None:
    """The induced judge against itself re-run without each criterion (deltas and exact McNemar)."""
    if not run.ablations:
        return None
    full = run.predictions[run.induced]

    def stats(p: Predictions, label: str) -> dict[str, Any]:
        with collect(notes, label):
            out = {"accuracy": M.accuracy(y, p.verdict), "kappa": M.cohens_kappa(y, p.verdict),
                   "false_pass_rate": M.false_pass_rate(y, p.verdict), "abstained": int(p.abstained.sum())}
            if run.graded:
                out["mae"] = M.mean_abs_error(p.score, run.items.reward)
        return out

    base = stats(full, f"{run.induced} (ablation baseline)")
    rows = []
    for a in run.ablations:
        s = stats(a.predictions, f"ablation {a.number}")
        c = M.compare_paired(y, full.verdict, a.predictions.verdict)
        row = {"number": a.number, "name": a.name, "file": relative(a.predictions.path, run.run_dir), **s}
        for key in ("accuracy", "kappa", "false_pass_rate") + (("mae",) if run.graded else ()):
            row[f"delta_{key}"] = s[key] - base[key]
        row["mcnemar"] = {"b": c["b"], "c": c["c"], "p_value": c["p_value"], "mark": c["mark"]}
        rows.append(row)
    return {"full": base, "rows": rows}


def _tertiles(n_steps: np.ndarray) -> list[tuple[str, np.ndarray]]:
    q1, q2 = np.quantile(n_steps.astype(np.float64), [1.0 / 3.0, 2.0 / 3.0])
    bins = [("short", n_steps <= q1), ("medium", (n_steps > q1) & (n_steps <= q2)), ("long", n_steps > q2)]
    out = []
    for name, mask in bins:
        if mask.any():
            lo, hi = int(n_steps[mask].min()), int(n_steps[mask].max())
            span = f"{lo} steps" if lo == hi else f"{lo}–{hi} steps"
            out.append((f"{name} ({span})", mask))
    return out


def _gap_row(group: str, stratum: str, members: np.ndarray, run: Run, ind: np.ndarray, ref: np.ndarray,
             settings: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """One stratum's row; ``members`` are the positions of its items (ascending), so a row costs
    its own items, not all of them."""
    y = run.items.label
    failed = members[y[members] == 0]
    nf = len(failed)
    row = {"group": group, "stratum": stratum, "n": len(members), "n_failed": nf,
           "induced_false_passes": int(ind[failed].sum()), "baseline_false_passes": int(ref[failed].sum()),
           "induced_fpr": math.nan, "baseline_fpr": math.nan, "gap": math.nan, "gap_ci_low": math.nan,
           "gap_ci_high": math.nan, "b": 0, "c": 0, "p_value": math.nan, "mark": "ns"}
    if nf == 0:
        return row
    i, r = ind[failed].astype(np.float64), ref[failed].astype(np.float64)
    d = r - i  # per failed item: +1 baseline false pass caught by induced, -1 the reverse
    tasks = settings["tasks"][failed]
    clusters = tasks if M.has_repeated_clusters(tasks) else None
    with collect(notes, f"false-pass gap, {group} = {stratum}"):
        reps = M.bootstrap({"gap": M.weighted_mean(d)}, nf, n_resamples=settings["n_resamples"],
                           seed=settings["seed"], clusters=clusters)["gap"]
        ci = M.percentile_interval(reps, settings["confidence"], "false-pass gap")
    # Exact McNemar on the failed items: "correct" = judged fail.
    mc = M.mcnemar_exact(i == 0, r == 0)
    row.update(induced_fpr=float(i.mean()), baseline_fpr=float(r.mean()), gap=float(d.mean()),
               gap_ci_low=ci.low, gap_ci_high=ci.high, b=mc.b, c=mc.c, p_value=mc.p_value,
               mark=M.significance_mark(mc.p_value))
    return row


def false_pass_gap_table(run: Run, *, n_resamples: int, seed: int, confidence: float,
                         notes: list[str]) -> dict[str, Any] | None:
    """The induced judge's false-pass rate against the baseline's, overall and per domain, agent and
    length tertile (when ``n_steps`` is known), with a bootstrap CI of the gap (whole tasks resampled
    when tasks repeat) and exact McNemar on the stratum's failed items."""
    if BASELINE not in run.predictions or BASELINE == run.induced:
        return None
    ind = run.predictions[run.induced].passed
    ref = run.predictions[BASELINE].passed
    it = run.items
    settings = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence,
                "tasks": np.asarray(it.task_id, dtype=object)}
    args = (run, ind, ref, settings, notes)
    rows = [_gap_row("all", "all items", np.arange(len(it)), *args)]
    for group, values in (("domain", it.domain), ("agent", it.agent)):
        names, codes = np.unique(np.asarray(values, dtype=str), return_inverse=True)  # sorted, one pass
        members = np.split(np.argsort(codes, kind="stable"), np.cumsum(np.bincount(codes))[:-1])
        for value, index in zip(names.tolist(), members, strict=True):
            rows.append(_gap_row(group, value, index, *args))
    if it.n_steps is not None:
        for stratum, mask in _tertiles(it.n_steps):
            rows.append(_gap_row("length", stratum, np.flatnonzero(mask), *args))
    return {"baseline": BASELINE, "rows": rows}


CATEGORIES = (
    ("baseline_false_pass", "failed; {b} passed it, {i} failed it"),
    ("induced_false_fail", "passed; {i} failed it, {b} passed it"),
    ("induced_false_pass", "failed; {i} passed it, {b} failed it"),
    ("baseline_false_fail", "passed; {b} failed it, {i} passed it"),
)


def _verdict_text(p: Predictions, k: int) -> str:
    if p.abstained[k]:
        return "abstain (fail)"
    return f"{'pass' if p.passed[k] else 'fail'} ({p.score[k]:.2f})"


def _attribution_entry(value: str | int | None, criteria: Sequence[Criterion]) -> str | None:
    """An ``attribution.jsonl`` entry (number or name) as ``"N. Name"`` when the rubric has it, else as
    written (a bare unknown number as ``"criterion N"``)."""
    found = attribute_reason(value, criteria, reference=True)
    if found is not None:
        return found.label
    text = "" if value is None else str(value).strip()
    return f"criterion {int(text)}" if text.isdigit() else (text or None)


def disagreements_table(run: Run, y: np.ndarray, notes: list[str]) -> dict[str, Any] | None:
    if BASELINE not in run.predictions or BASELINE == run.induced:
        return None
    ind, ref = run.predictions[run.induced], run.predictions[BASELINE]
    criteria = parse_criteria(run.rubric) if run.rubric else []
    if run.attribution is not None:
        source = "attribution.jsonl"
    elif criteria:
        source = "keywords of the induced reason"
    else:
        source = "none (no rubric in run.json and no attribution.jsonl)"
    rows: list[dict[str, Any]] = []
    for hit in np.flatnonzero(ind.passed != ref.passed):
        k = int(hit)
        truth = int(y[k])
        if truth == 0:
            category = "baseline_false_pass" if ref.passed[k] else "induced_false_pass"
        else:
            category = "induced_false_fail" if ref.passed[k] else "baseline_false_fail"
        item_id = run.items.ids[k]
        if run.attribution is not None:
            crit = _attribution_entry(run.attribution.get(item_id), criteria)
        else:
            found = attribute_reason(ind.reason[k], criteria)
            crit = found.label if found else None
        reason = ind.reason[k] or (f"[abstained: {ind.error[k]}]" if ind.abstained[k] else "")
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 1].rstrip() + "…"
        rows.append({"id": item_id, "domain": run.items.domain[k], "label": truth,
                     "reward": float(run.items.reward[k]), "category": category,
                     "induced_right": category.startswith("baseline"),
                     "induced": _verdict_text(ind, k), "baseline": _verdict_text(ref, k),
                     "criterion": crit or "unattributed", "reason": reason})
    order = {c: i for i, (c, _) in enumerate(CATEGORIES)}
    rows.sort(key=lambda r: (order[r["category"]], r["id"]))
    counts = {c: sum(r["category"] == c for r in rows) for c, _ in CATEGORIES}
    by_crit: dict[str, dict[str, Any]] = {}
    for r in rows:
        e = by_crit.setdefault(r["criterion"], {"criterion": r["criterion"], "n": 0, "induced_right": 0,
                                                 "induced_wrong": 0})
        e["n"] += 1
        e["induced_right" if r["induced_right"] else "induced_wrong"] += 1

    def crit_key(e: dict[str, Any]) -> tuple[bool, float, str]:
        m = re.match(r"^(\d+)\.", e["criterion"])
        return (e["criterion"] == "unattributed", int(m[1]) if m else math.inf, e["criterion"])

    return {"baseline": BASELINE, "attribution_source": source, "counts": counts, "rows": rows,
            "by_criterion": sorted(by_crit.values(), key=crit_key)}


def sweep_table(run: Run) -> dict[str, Any] | None:
    if not run.sweep:
        return None
    rows = []
    for i, r in enumerate(run.sweep):
        rows.append({"candidate": r.get("candidate", i), "parents": r.get("parents"),
                     "val_score": r.get("val_score"), "val_agreement": r.get("val_agreement"),
                     "discovered_at_metric_call": r.get("discovered_at_metric_call"),
                     "rubric_sha256": r.get("rubric_sha256"), "rubric_chars": r.get("rubric_chars")})
    scored = [i for i, r in enumerate(rows)
              if isinstance(r["val_score"], (int, float)) and not isinstance(r["val_score"], bool)
              and math.isfinite(r["val_score"])]
    best = max(scored, key=lambda i: (rows[i]["val_score"], -i)) if scored else None
    return {"rows": rows, "best": best}


