"""The cascade section of a report: what a certified cascade (`rubricforge judge --cascade`) did, read from its
verdict lines (``stage``, ``stage_index``, ``lm_stages_run``, ``lm_tokens``; docs/CASCADE.md) and the job
file beside them (``OUT.job.json``: the runs' LM spend), never from DSPy.

Per stage: the items it decided and their share (coverage), and on labeled lines the realized disagreement
and false-pass rate with exact (Clopper-Pearson) 95% intervals: descriptive numbers on these items, not
the guarantee (the guarantee is the fit's bound, `trust.cascade`); the items escalated to a person; the LM
requests and tokens spent against judging everything with the last stage (one request per item; the tokens
an estimate: tokens per LM-judged item times all items, `token_spend`; the calls saved only when a stage of
the cascade makes LM calls, as its job recorded); the certified alpha, delta and method (the cascade's
guarantee, as the job's runs recorded it, else from the cascade file a run names); which cascade judged which
data (the report's title); and a risk-coverage figure: after each stage, the share decided so far against the
disagreement among them. An escalated line is neither a pass nor a fail: the section counts it apart, and the
report's metrics are on the decided items (`report.run.decided_run`).

A fitted cascade's guarantee records the label rule its calibration labels were made with (``label_rule``:
``rules``, ``source``, ``labels``; `trust.cascade.fit_cascade`): a disagreement certified under "reward > 0" says
nothing about labels made by "reward >= 1". `cascade_label_rule` is the one place that applies it wherever labels
are read against a cascade (``judge --cascade``, ``certify`` of a cascade, ``report`` of a cascade's verdicts):
no rule given -> the cascade's; the same rule -> as given; another rule -> refused (`LabelRuleMismatchError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import orjson

from rubricforge_dspy.core.cascade import (
    ESCALATED,
    TOKEN_KEYS,
    LabelRuleMismatchError,
    cascade_label_rule,
    format_judge_verdicts,
    format_token_spend,
    line_judge_verdicts,
    line_tokens,
    token_spend,
)
from rubricforge_dspy.core.trajectory import LabelRule
from rubricforge_dspy.metrics.intervals import proportion_ci

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["CASCADE_FIT_FILE", "fit_lead_lines", "read_cascade_fit", "ESCALATED", "TOKEN_KEYS", "cascade_lines",
           "cascade_section", "cascade_markdown", "plot_risk_coverage", "token_spend", "format_token_spend",
           "line_tokens", "job_runs", "cascade_title", "certificate_text", "LabelRuleMismatchError",
           "cascade_label_rule", "cascade_guarantee_of", "report_label_rule", "format_judge_verdicts",
           "line_judge_verdicts", "certified_lines"]

CASCADE_FIT_FILE = "cascade_fit.json"  # a run's cascade fit (the demo writes it): the report's lead
FIT_METHOD = "split_fixed_sequence"  # what a fit without a recorded method used (the demo's)


def job_runs(verdicts_path: str | Path) -> list[dict[str, Any]]:
    """The runs a cascade job recorded in its job file (``OUT.job.json``, ``cascade_runs``): per run the items
    judged and resumed, LM calls, tokens (every call's, also of items whose verdicts were not kept) and how it
    ended; [] when there is no job file or it records none."""
    path = Path(verdicts_path)
    job = path.with_name(path.name + ".job.json")
    try:
        runs = orjson.loads(job.read_bytes()).get("cascade_runs") or []
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return []
    return [run for run in runs if isinstance(run, dict)]


def _cascade_file(paths: Iterable[str | Path]) -> Path | None:
    """The first verdict file among `paths` whose first line carries a cascade's ``stage`` (a directory or a
    non-JSONL path is skipped)."""
    for path in paths:
        path = Path(path)
        if not path.is_file() or path.suffix != ".jsonl":
            continue
        with path.open("rb") as handle:
            first = handle.readline().strip()
        if first and "stage" in orjson.loads(first):
            return path
    return None


def cascade_lines(paths: Iterable[str | Path]) -> tuple[str, list[dict[str, Any]]] | None:
    """The first verdict file among `paths` whose lines carry a cascade's ``stage``: ``(path, lines)``; None
    when none does (a directory or a non-JSONL path is skipped)."""
    path = _cascade_file(paths)
    if path is None:
        return None
    with path.open("rb") as handle:
        return str(path), [orjson.loads(line) for line in handle if line.strip()]


def cascade_guarantee_of(paths: Iterable[str | Path]) -> dict[str, Any] | None:
    """The guarantee of the cascade whose verdicts are among `paths` (as its job recorded it, else its cascade
    file's), None when no file is a cascade's or its cascade has none."""
    path = _cascade_file(paths)
    if path is None:
        return None
    last: dict[str, Any] = next((run for run in reversed(job_runs(path)) if "stages" in run), {})
    return _guarantee(last)[0]


def report_label_rule(paths: Iterable[str | Path], labels: str | Path | None,
                      given: LabelRule | str | float | None) -> tuple[LabelRule | str | float | None, str | None]:
    """The label rule a report reads labels by, and a line saying so: among `paths` a cascade's verdicts whose
    cascade records its rule -> that rule for a `labels` file (`cascade_label_rule`; another `given` rule is
    refused, `LabelRuleMismatchError`); else `given`. Without `labels` or `given` the verdict lines' own labels
    are kept as they are (they were made when judging): no rule, no line."""
    if labels is None and given is None:
        return None, None
    guarantee = cascade_guarantee_of(paths)
    rule, note = cascade_label_rule(guarantee, given, "the cascade that judged")
    return rule, note


def _pct(k: int, n: int) -> str:
    return f"{k} of {n} ({k / n:.0%})" if n else f"{k} of 0"


def fit_lead_lines(result: Mapping[str, Any], embedded: bool | None = None) -> list[str]:
    """The section a run's cascade fit leads its report with (markdown lines): what a certified cascade would
    decide for free, send to the LLM and escalate to a person, or that nothing was certified and why, with the
    labels needed. `result` is the run's ``cascade_fit.json`` (`pipeline.demo_cascade.fit_demo_cascade`);
    `embedded` (default: the file's ``embedded``) adds that the LLM stage is the small embedded model."""
    embedded = bool(result.get("embedded")) if embedded is None else embedded
    n = result["n"]
    out = ["## Trust or escalate: what a certified cascade would do here", ""]
    if not result["certified"]:
        needed = result.get("needed_labels") or result.get("needed_decided")
        out += [f"**Nothing certified.** The cascade (the free symptom floor, then this judge, then a person) was "
                f"calibrated on {n} held-out test trajectories at disagreement <= {result['alpha']} with probability "
                f">= {1 - result['delta']:.2f} ({result.get('method', FIT_METHOD)}): {result['reason']}.", "",
                "So here every trajectory would go to a person: no verdict of this run can be acted on with a "
                "guarantee." + (f" Certifying would take about {needed} labeled tasks." if needed else ""), ""]
    else:
        g = result["guarantee"]
        fp = result["free_false_pass"]
        fp_text = "no failed trajectory among them" if fp is None else (
            f"realized false-pass {fp:.3f} [{result['free_false_pass_ci95'][0]:.3f}, "
            f"{result['free_false_pass_ci95'][1]:.3f}]")
        out += [f"Certified: among decided trajectories, disagreement with the label <= {g['alpha']} with probability "
                f">= {1 - g['delta']:.2f} ({g.get('method', FIT_METHOD)}; calibrated on {n} held-out test "
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
            out += [f"- **cost**: {format_judge_verdicts(int(result['to_llm']), n)}: the LLM judge's calls "
                    f"({result['lm_calls_saved']} of {n} LM calls saved against judging everything with the LLM)"]
        out += [""]
    if embedded:
        out += ["The LLM stage here is the embedded 135M model: expect it to decide little or nothing; the floor's "
                "stage is real. With a real judge and a few hundred labeled tasks the same command certifies more "
                "(docs/CASCADE.md).", ""]
    return out


def read_cascade_fit(run: str | Path | Sequence[str | Path]) -> dict[str, Any] | None:
    """The ``cascade_fit.json`` of a run directory (or of the directory of its ``run.json`` or ``predictions/``);
    None for verdict files or a run without one. A file that is not a JSON object is refused (`RunError`)."""
    from rubricforge_dspy.report.records import RunError

    paths = [run] if isinstance(run, (str, Path)) else list(run)
    if len(paths) != 1:
        return None
    path = Path(paths[0])
    folder = path.parent if path.name in ("run.json", "predictions") else path
    fit = folder / CASCADE_FIT_FILE
    if not folder.is_dir() or not fit.is_file():
        return None
    try:
        result = orjson.loads(fit.read_bytes())
    except orjson.JSONDecodeError as error:
        raise RunError(f"{fit}: not JSON ({error}); re-run the demo, or remove it") from None
    if not isinstance(result, dict) or "certified" not in result or "n" not in result:
        raise RunError(f"{fit}: not a cascade fit (no 'certified' and 'n'); re-run the demo, or remove it")
    return result


def _rates(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
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


def cascade_section(source: str, lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
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
    by_stage, total, lm_items, unreported = line_tokens(lines)
    for row in stages:
        row["tokens"] = by_stage.get(row["name"])
    runs = job_runs(source)
    last: dict[str, Any] = next((run for run in reversed(runs) if "stages" in run), {})  # a run that recorded them
    has_lm = bool(last["lm_stages"]) if "lm_stages" in last else (True if lm_calls else None)
    guarantee, certificate = _guarantee(last)
    judge_stages = last.get("judge_stages")
    if judge_stages is None and "lm_stages" in last:  # a job recorded before judge stages were: its LLM stages
        judge_stages = last["lm_stages"]
    judge_verdicts = (None if judge_stages is None or "stages" not in last
                      else line_judge_verdicts(lines, last["stages"], judge_stages))
    return {"source": source, "n": n, "stages": stages, "curve": curve, "escalated": escalated,
            "failed": sum(bool(x.get("abstained")) and x.get("stage") != ESCALATED for x in lines),
            "coverage": len(decided) / n if n else 0.0, "overall": _rates(decided), "lm_calls": lm_calls,
            "lm_stages": last.get("lm_stages"), "has_lm_stage": has_lm, "judge_stages": judge_stages,
            "judge_verdicts": judge_verdicts,
            "lm_calls_judging_everything": n if has_lm else None, "lm_calls_saved": n - lm_calls if has_lm else None,
            "token_spend": token_spend(total if lm_items else None, lm_items, n, unreported),
            "tokens_by_stage": by_stage, "runs": runs, "guarantee": guarantee, "certificate": certificate,
            "cascade_file": last.get("cascade_file"), "data_files": last.get("data_files")}


def _guarantee(run: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The cascade's certificate as its job recorded it (the last run's ``guarantee``), else read from the
    cascade file the run names (its manifest; shown, not verified: judging verified it), and where it came from:
    ``"certified"``, ``"hand-set"`` (the cascade has none) or ``"unknown"`` (nothing recorded it)."""
    if "guarantee" in run:
        guarantee = run["guarantee"]
        return (guarantee, "certified") if guarantee else (None, "hand-set")
    path = run.get("cascade_file")
    if path:
        try:
            manifest = orjson.loads(Path(path).read_bytes()).get("rubricforge") or {}
        except (OSError, orjson.JSONDecodeError, AttributeError):
            manifest = None
        if isinstance(manifest, dict):
            guarantee = manifest.get("guarantee")
            return (guarantee, "certified") if guarantee else (None, "hand-set")
    return None, "unknown"


def cascade_title(section: Mapping[str, Any]) -> str:
    """Which cascade judged which data: ``cascade `c.json` on `data.jsonl` `` (what the job recorded), else the
    verdict file's name."""
    cascade, data = section.get("cascade_file"), section.get("data_files")
    if not cascade and not data:
        return f"cascade verdicts `{Path(section['source']).name}`"
    where = f"cascade `{Path(cascade).name}`" if cascade else "a cascade"
    return where + (f" on `{', '.join(Path(d).name for d in data)}`" if data else "")


def certificate_text(section: Mapping[str, Any]) -> str:
    """The certified alpha, delta and method (or that there is none)."""
    guarantee = section.get("guarantee")
    if guarantee:
        bound = (f" and false-pass <= {guarantee['max_false_pass']}" if guarantee.get("max_false_pass") is not None
                 else "")
        return (f"Certified at fit: disagreement <= {guarantee.get('alpha')}{bound} among decided items, with "
                f"probability >= {1 - float(guarantee.get('delta') or 0):.2f} (alpha {guarantee.get('alpha')}, delta "
                f"{guarantee.get('delta')}, method {guarantee.get('method')}"
                + (f", {guarantee['p_values']} p-values" if guarantee.get("p_values") else "") + ").")
    if section.get("certificate") == "hand-set":
        return "No certificate: the cascade's thresholds were set by hand (fit them with `rubricforge cascade fit`)."
    return "No certificate recorded with this verdict file (its job file names no fitted cascade)."


def _rate(value: float | None, ci: Sequence[float]) -> str:
    return "n/a" if value is None else f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _tokens(row: Mapping[str, Any] | None) -> str:
    if not row:
        return ""
    return f"{row['prompt_tokens'] + row['completion_tokens']:,} ({row['items']} item(s))"


def cascade_markdown(section: dict[str, Any] | None, figure_links: dict[str, str] | None = None) -> list[str]:
    """The section's markdown lines (none without a cascade)."""
    if not section:
        return []
    n = section["n"]
    judges = section.get("judge_stages")
    verdicts = ""
    if section.get("judge_verdicts") is not None and judges:
        text = format_judge_verdicts(section["judge_verdicts"], n)
        verdicts = f"{text[0].upper()}{text[1:]}, by the judge stage(s) {', '.join(judges)}. "
    recorded = [name for name in judges or [] if name not in (section.get("lm_stages") or [])]
    if section.get("lm_calls_saved") is not None:
        calls = (f"LM requests: {section['lm_calls']}, against {section['lm_calls_judging_everything']} judging "
                 f"everything with the last stage ({section['lm_calls_saved']} saved). "
                 f"{format_token_spend(section.get('token_spend'), section['lm_calls'])}. ")
    elif section.get("has_lm_stage") is False and recorded:
        calls = (f"LM requests: none made by this job ({', '.join(recorded)}: verdicts recorded by another tool or "
                 "computed, paid for where they were made, counted above). ")
    elif section.get("has_lm_stage") is False:
        calls = "LM requests: 0 (no stage of this cascade makes LM calls). "
    else:
        calls = f"LM requests: {section['lm_calls']}. "
    title = cascade_title(section)
    out = ["## Cascade: decided per stage, escalated to a person", "",
           f"**{title[0].upper()}{title[1:]}** (from `{section['source']}`): "
           f"{n} item(s), {section['coverage']:.0%} decided, {section['escalated']} escalated to a person (neither "
           "a pass nor a fail: counted apart, never as a false fail)"
           + (f", {section['failed']} failed (no verdict)" if section["failed"] else "") + ". " + verdicts + calls +
           "Realized rates are on these labeled items, "
           "with exact 95% intervals; the certified bound is the fit's.", "", certificate_text(section), "",
           "| stage | decided | share | disagreement [95% CI] | false-pass [95% CI] | LM tokens |",
           "|---|---|---|---|---|---|"]
    for row in section["stages"]:
        out.append(f"| {row['name']} | {row['decided']} | {row['share']:.1%} | "
                   f"{_rate(row['disagreement'], row['disagreement_ci95'])} | "
                   f"{_rate(row['false_pass'], row['false_pass_ci95'])} | {_tokens(row.get('tokens'))} |")
    overall = section["overall"]
    out.append(f"| all decided | {n - section['escalated'] - section['failed']} | {section['coverage']:.1%} | "
               f"{_rate(overall['disagreement'], overall['disagreement_ci95'])} | "
               f"{_rate(overall['false_pass'], overall['false_pass_ci95'])} | |")
    out.append(f"| escalated | {section['escalated']} | {section['escalated'] / n if n else 0:.1%} | (a person) | | |")
    out.append("")
    runs = section.get("runs") or []
    paid = [run["tokens"] for run in runs if run.get("tokens")]
    if len(runs) > 1 or paid:
        total = sum(t.get("prompt_tokens", 0) + t.get("completion_tokens", 0) for t in paid)
        out += [f"Over the job's {len(runs)} run(s) (`{Path(section['source']).name}.job.json`): "
                f"{sum(int(run.get('lm_calls') or 0) for run in runs)} LM request(s), {total:,} tokens paid, calls "
                "whose verdicts were not kept included (LM errors, items in flight when a run stopped).", ""]
    link = (figure_links or {}).get("risk_coverage")
    if link:
        out += [f"![risk against coverage after each stage]({link})", ""]
    return out


def certified_lines(guarantee: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The certified bounds a risk-coverage figure draws, read from a cascade's guarantee: ``{"rate":
    "disagreement", "bound": alpha}`` and, when one is set, ``{"rate": "false_pass", "bound": max_false_pass}``,
    each with its ``label``; [] without a guarantee (a hand-set cascade)."""
    if not guarantee or guarantee.get("alpha") is None:
        return []
    delta = guarantee.get("delta")
    sure = f", probability >= {1 - float(delta):.2f}" if delta is not None else ""
    out = [{"rate": "disagreement", "bound": float(guarantee["alpha"]),
            "label": f"certified disagreement <= {guarantee['alpha']}{sure}"}]
    if guarantee.get("max_false_pass") is not None:
        out.append({"rate": "false_pass", "bound": float(guarantee["max_false_pass"]),
                    "label": f"certified false-pass <= {guarantee['max_false_pass']}{sure}"})
    return out


RATE_COLORS = {"disagreement": "#1f77b4", "false_pass": "#d62728"}


def plot_risk_coverage(section: dict[str, Any]) -> Figure | None:
    """After each stage: coverage so far (x) against the disagreement among the decided (y) and their
    false-pass rate, each with its exact 95% interval, and the cascade's certified bounds as horizontal lines
    (`certified_lines`: alpha, and the false-pass bound when one is set; the bound is on the population, the
    points are realized on these items); None without labels."""
    points = [p for p in section["curve"] if p["disagreement"] is not None]
    if not points:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    top = 0.2
    for rate, name in (("disagreement", "disagreement"), ("false_pass", "false-pass")):
        drawn = [p for p in points if p.get(rate) is not None]
        if not drawn:
            continue
        x = [p["coverage"] for p in drawn]
        y = [p[rate] for p in drawn]
        low = [p[rate] - p[f"{rate}_ci95"][0] for p in drawn]
        high = [p[f"{rate}_ci95"][1] - p[rate] for p in drawn]
        ax.errorbar(x, y, yerr=[low, high], marker="o" if rate == "disagreement" else "s", capsize=4,
                    color=RATE_COLORS[rate], label=f"{name} realized (exact 95% CI)")
        top = max(top, max(p[f"{rate}_ci95"][1] for p in drawn) * 1.05)
    for p in points:
        ax.annotate(f"after {p['after']}", (p["coverage"], p["disagreement"]), textcoords="offset points",
                    xytext=(5, 5), fontsize=8)
    for line in certified_lines(section.get("guarantee")):
        ax.axhline(line["bound"], color=RATE_COLORS[line["rate"]], linestyle="--", linewidth=1.2,
                   label=line["label"], gid=f"certified_{line['rate']}")
        top = max(top, line["bound"] * 1.15)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, min(1.05, top))
    ax.set_xlabel("coverage (share decided so far)")
    ax.set_ylabel("rate among the decided")
    ax.set_title("Cascade: risk against coverage")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig
