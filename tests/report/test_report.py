"""Tests for rubricforge_dspy.report / figures on synthetic run directories: table numbers
cross-checked against rubricforge_dspy.metrics, the run-directory validation, graded vs binary
runs, attribution, and determinism of the markdown, the numbers and the PNG files."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rubricforge_dspy import metrics as M
from rubricforge_dspy.core.rubric import SEED_RUBRIC, parse_criteria
from rubricforge_dspy.pipeline.report_job import report_main
from rubricforge_dspy.report import (
    RunError,
    attribute_reason,
    compute_report,
    load_run,
    render_markdown,
    write_report,
)


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Reference exact interval from the beta quantiles (Clopper & Pearson 1934)."""
    low = 0.0 if k == 0 else stats.beta.ppf(alpha / 2, k, n - k + 1)
    high = 1.0 if k == n else stats.beta.ppf(1 - alpha / 2, k + 1, n - k)
    return float(low), float(high)

JUDGES = ["oracle", "induced", "geval", "fewshot", "heuristic", "majority"]
CRITERIA = parse_criteria(SEED_RUBRIC)
SWEEP = [
    {"candidate": 0, "parents": [], "val_score": 0.70, "val_agreement": 0.70, "discovered_at_metric_call": 0,
     "rubric_sha256": "a" * 64, "rubric_chars": 2100},
    {"candidate": 1, "parents": [0], "val_score": 0.78, "val_agreement": 0.75, "discovered_at_metric_call": 40,
     "rubric_sha256": "b" * 64, "rubric_chars": 2300},
    {"candidate": 2, "parents": [1], "val_score": 0.82, "val_agreement": 0.80, "discovered_at_metric_call": 95,
     "rubric_sha256": "c" * 64, "rubric_chars": 2500},
    {"candidate": 3, "parents": [1], "val_score": 0.82, "val_agreement": 0.81, "discovered_at_metric_call": 150,
     "rubric_sha256": "d" * 64, "rubric_chars": 2450},
]


# --------------------------------------------------------------------------------------
# Synthetic run directory
# --------------------------------------------------------------------------------------


def _reason(rng, passed: bool) -> str:
    if passed:
        return "All goals were fulfilled by successful tool calls."
    c = CRITERIA[int(rng.integers(len(CRITERIA)))]
    return rng.choice([f"Fails {c.name}: the record contradicts it.",
                       f"Criterion {c.number} does not hold.",
                       "The booking was never completed."])


def _line(i, items, passed, score, reason, abstained=False, error=None):
    it = items[i]
    return {"id": it["id"], "task_id": it["task_id"], "domain": it["domain"], "agent": it["agent"],
            "n_steps": it["n_steps"], "passed": bool(passed), "score": float(score), "reason": reason,
            "abstained": bool(abstained), "error": error, "label": it["label"], "reward": it["reward"],
            "error_kind": None, "cached": False}


def _judge_lines(rng, items, flip_fail, flip_pass, abstain=0.0):
    """Verdicts that pass a failed item with prob. flip_fail and fail a passed one with prob. flip_pass."""
    lines = []
    for i, it in enumerate(items):
        truth = it["label"] == 1
        u = rng.random()
        passed = (u >= flip_pass) if truth else (u < flip_fail)
        score = float(np.clip((0.55 + 0.45 * rng.random()) if passed else 0.45 * rng.random(), 0, 1))
        if rng.random() < abstain:
            lines.append(_line(i, items, False, 0.0, "", True, "TimeoutError: timed out"))
        else:
            lines.append(_line(i, items, passed, score, _reason(rng, passed)))
    return lines


def write_trajectories(path: Path, lines, rng) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    order = rng.permutation(len(lines))  # completion order, not id order
    path.write_text("".join(json.dumps(lines[k]) + "\n" for k in order))


def build_run(root: Path, *, n: int = 120, graded: bool = False, seed: int = 0, ablation: bool = True,
              sweep: bool = True, attribution: bool = False, judges=JUDGES) -> Path:
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        if graded:
            reward = round(float(rng.random()), 3)
            label = int(reward >= 0.5)
        else:
            label = int(rng.random() < 0.4)
            reward = float(label)
        items.append({"id": f"item-{i:03d}", "task_id": f"t{i // 2}", "domain": ["airline", "retail"][i % 2],
                      "agent": ["agent-a", "agent-b", "agent-c"][i % 3], "n_steps": int(rng.integers(4, 40)),
                      "label": label, "reward": reward})
    preds = {
        "oracle": [_line(i, items, it["label"], it["reward"] if graded else it["label"], "gold")
                   for i, it in enumerate(items)],
        "induced": _judge_lines(rng, items, 0.12, 0.15),
        "geval": _judge_lines(rng, items, 0.45, 0.05),
        "fewshot": _judge_lines(rng, items, 0.30, 0.20, abstain=0.08),
        "heuristic": _judge_lines(rng, items, 0.35, 0.30),
        "majority": [_line(i, items, False, 0.0, "majority class: fail") for i in range(n)],
    }
    if graded:  # graded scores track rewards more or less closely
        for judge, noise in (("induced", 0.15), ("geval", 0.3), ("fewshot", 0.25), ("heuristic", 0.4)):
            for line, it in zip(preds[judge], items, strict=True):
                if not line["abstained"]:
                    line["score"] = float(np.clip(it["reward"] + noise * rng.normal(), 0, 1))
                    line["passed"] = line["score"] >= 0.5
    for judge in judges:
        write_trajectories(root / "predictions" / f"{judge}.jsonl", preds[judge], rng)
    meta = {"lm": "fake/judge-lm", "reflection_lm": "fake/reflector", "dataset": "synthetic",
            "split": {"train": {"trajectories": 30, "positives": 12}, "val": {"trajectories": 20, "positives": 8},
                      "test": {"trajectories": n, "positives": sum(it["label"] for it in items)}},
            "induced": "induced", "judges": list(judges), "graded": graded, "notes": "synthetic | test run",
            "rubric": SEED_RUBRIC}
    if sweep:
        meta["sweep"] = SWEEP
    (root / "run.json").write_text(json.dumps(meta, indent=2))
    if ablation:
        base = preds["induced"]
        crit = []
        for c, (ff, fp) in zip(CRITERIA[:3], ((0.3, 0.0), (0.0, 0.2), (0.05, 0.05)), strict=True):
            lines = []
            for line in base:
                new = dict(line)
                u = rng.random()
                if line["label"] == 0 and not line["passed"] and u < ff:
                    new.update(passed=True, score=0.8, abstained=False)
                elif line["label"] == 1 and line["passed"] and u < fp:
                    new.update(passed=False, score=0.2)
                lines.append(new)
            slug = re.sub(r"[^a-z0-9]+", "-", c.name.lower())
            write_trajectories(root / "ablation" / f"{c.number}_{slug}.jsonl", lines, rng)
            crit.append({"number": c.number, "name": c.name})
        (root / "ablation" / "criteria.json").write_text(json.dumps(crit))
    if attribution:
        (root / "attribution.jsonl").write_text("".join(
            json.dumps({"id": it["id"], "criterion": (i % 6) + 1}) + "\n" for i, it in enumerate(items)))
    return root


def arrays(run_dir: Path, judge: str, sub: str = "predictions"):
    """Independent re-read of a judge file, aligned by sorted id."""
    rows = sorted((json.loads(x) for x in (run_dir / sub / f"{judge}.jsonl").read_text().splitlines()),
                  key=lambda r: r["id"])
    y = np.array([r["label"] for r in rows])
    p = np.array([int(r["passed"] and not r["abstained"]) for r in rows])
    s = np.array([r["score"] for r in rows])
    rew = np.array([r["reward"] for r in rows])
    return rows, y, p, s, rew


@pytest.fixture(scope="module")
def binary_run(tmp_path_factory):
    root = build_run(tmp_path_factory.mktemp("binary") / "RUN")
    run = load_run(root)
    report = compute_report(run)
    return root, run, report, render_markdown(report)


def _row(md: str, first_cell: str) -> str:
    for line in md.splitlines():
        if line.startswith(f"| {first_cell} |"):
            return line
    raise AssertionError(f"no table row starting with {first_cell!r}")


def _section(md: str, title: str) -> str:
    start = md.index(f"## {title}")
    end = md.find("\n## ", start + 1)
    return md[start:end if end >= 0 else None]


# --------------------------------------------------------------------------------------
# Main table and error decomposition
# --------------------------------------------------------------------------------------


def test_main_table_matches_metrics(binary_run):
    root, run, report, md = binary_run
    main = {r["judge"]: r for r in report["main"]}
    assert list(main) == JUDGES
    _, _, p_ind, _, _ = arrays(root, "induced")
    for judge in JUDGES:
        _, y, p, s, _ = arrays(root, judge)
        r = main[judge]
        assert r["n"] == len(y) == 120
        assert r["accuracy"] == pytest.approx(M.accuracy(y, p))
        assert r["false_pass_rate"] == pytest.approx(M.false_pass_rate(y, p))
        assert r["f1"] == pytest.approx(M.f1_positive(y, p), nan_ok=True) if not math.isnan(
            M.f1_positive(y, p)) else r["f1"] is None
        kappa = M.cohens_kappa(y, p)
        assert (r["kappa"] is None) if math.isnan(kappa) else r["kappa"] == pytest.approx(kappa)
        assert r["false_fail_count"] == M.false_fail_count(y, p)
        assert r["predicted_positive_rate"] == pytest.approx(p.mean())
        # Rates carry exact Clopper-Pearson intervals, computed here from the beta quantiles.
        k_acc, k_fp, n_fail = int((y == p).sum()), int(((p == 1) & (y == 0)).sum()), int((y == 0).sum())
        assert (r["accuracy_ci_low"], r["accuracy_ci_high"]) == pytest.approx(clopper_pearson(k_acc, len(y)))
        assert (r["false_pass_ci_low"], r["false_pass_ci_high"]) == pytest.approx(clopper_pearson(k_fp, n_fail))
        # Tasks repeat (two items per task): kappa and AUC are bootstrapped over whole tasks, with the
        # one engine metrics.bootstrap_ci uses (same seed, same resamples).
        tasks = [f"t{int(i.split('-')[1]) // 2}" for i in sorted(run.items.ids)]
        assert r["bootstrap"] == "task-clustered"
        if not math.isnan(kappa):
            kci = M.bootstrap_ci(M.cohens_kappa, y, p, seed=0, clusters=tasks)
            assert (r["kappa_ci_low"], r["kappa_ci_high"]) == pytest.approx(tuple(kci))
        if judge == "induced":
            assert r["mcnemar"] is None
        else:
            c = M.compare_paired(y, p_ind, p)
            assert (r["mcnemar"]["b"], r["mcnemar"]["c"]) == (c["b"], c["c"])
            assert r["mcnemar"]["p_value"] == pytest.approx(c["p_value"])
            assert r["mcnemar"]["mark"] == c["mark"]
        # The rendered row: false-pass rate is the first column after the judge name.
        name = "**induced**" if judge == "induced" else judge
        cells = [c.strip() for c in _row(md, name).strip("|").split("|")]
        assert cells[1].startswith(f"{M.false_pass_rate(y, p):.3f} [")
        assert cells[3].startswith(f"{M.accuracy(y, p):.3f} [")
        assert cells[2] == "120"
    header = [c.strip() for c in md.splitlines()[md.splitlines().index("## Main table") + 2].strip("|").split("|")]
    assert header[0] == "judge" and header[1].startswith("false-pass rate")
    # AUC of the oracle is perfect, majority (constant score) is at chance.
    assert main["oracle"]["auc"] == pytest.approx(1.0)
    assert main["majority"]["auc"] == pytest.approx(0.5)


def test_abstentions_counted_and_scored_as_fail(binary_run):
    root, run, report, md = binary_run
    rows, y, p, _, _ = arrays(root, "fewshot")
    n_abst = sum(r["abstained"] for r in rows)
    assert n_abst > 0
    fewshot = next(r for r in report["main"] if r["judge"] == "fewshot")
    assert fewshot["abstained"] == n_abst
    assert fewshot["abstained_on_passed"] + fewshot["abstained_on_failed"] == n_abst
    assert not run.predictions["fewshot"].passed[run.predictions["fewshot"].abstained].any()
    cells = [c.strip() for c in _row(md, "fewshot").strip("|").split("|")]
    assert cells[9] == str(n_abst)


def test_abstained_but_passed_line_is_refused(tmp_path):
    """The verdict line schema's rule: an abstention is a fail; a file saying otherwise is refused."""
    root = build_run(tmp_path / "RUN", ablation=False, sweep=False)
    path = root / "predictions" / "geval.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    target = next(line for line in lines if line["passed"])
    target["abstained"] = True
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    match = rf"geval\.jsonl:\d+: an abstained verdict cannot be passed \(id {target['id']}\)"
    with pytest.raises(RunError, match=match):
        load_run(root)


def test_error_decomposition(binary_run):
    root, run, report, md = binary_run
    sec = _section(md, "Error decomposition")
    for r in report["main"]:
        _, y, p, _, _ = arrays(root, r["judge"])
        assert {k: r[k] for k in ("tp", "fp", "fn", "tn")} == M.confusion_counts(y, p)
        assert r["tp"] + r["fp"] + r["fn"] + r["tn"] == 120
        name = "**induced**" if r["judge"] == "induced" else r["judge"]
        cells = [c.strip() for c in _row(sec, name).strip("|").split("|")]
        assert cells[1:5] == [str(r["fp"]), str(r["tp"]), str(r["fn"]), str(r["tn"])]


def test_how_to_read_this_comes_first(binary_run):
    md = binary_run[3]
    assert md.index("## How to read this") < md.index("## Main table")
    assert "False-pass rate comes first" in _section(md, "How to read this")


# --------------------------------------------------------------------------------------
# Graded vs binary
# --------------------------------------------------------------------------------------


def test_binary_run_has_no_graded_section(binary_run):
    _, run, report, md = binary_run
    assert run.graded is False and report["graded"] is None
    assert "Not a graded run" in _section(md, "Ranking vs calibration")


def test_graded_run_ranking_and_calibration(tmp_path):
    root = build_run(tmp_path / "RUN", graded=True)
    run = load_run(root)
    assert run.graded
    report = compute_report(run)
    md = render_markdown(report)
    _, _, _, s_ind, rew = arrays(root, "induced")
    for r in report["graded"]:
        _, _, _, s, _ = arrays(root, r["judge"])
        if r["judge"] == "majority":  # constant score: rank correlations undefined
            assert r["spearman"] is None and r["kendall"] is None
        else:
            assert r["spearman"] == pytest.approx(M.spearman(s, rew))
            assert r["kendall"] == pytest.approx(M.kendall(s, rew))
        assert r["mae"] == pytest.approx(M.mean_abs_error(s, rew))
        if r["judge"] == "induced":
            assert r["vs_induced"] is None
        else:
            tasks = [f"t{int(i.split('-')[1]) // 2}" for i in sorted(run.items.ids)]  # tasks repeat
            b = M.paired_bootstrap_abs_error(s, s_ind, rew, n_resamples=10_000, seed=0, clusters=tasks)
            v = r["vs_induced"]
            assert v["mean_diff"] == pytest.approx(b["mean_diff"])
            assert (v["ci_low"], v["ci_high"]) == pytest.approx((b["ci_low"], b["ci_high"]))
            assert v["p_value"] == pytest.approx(b["p_value"])
            assert v["mark"] == M.significance_mark(b["p_value"])
    sec = _section(md, "Ranking vs calibration")
    geval = next(r for r in report["graded"] if r["judge"] == "geval")
    cells = [c.strip() for c in _row(sec, "geval").strip("|").split("|")]
    assert cells[1] == f"{geval['spearman']:.3f}" and cells[3] == f"{geval['mae']:.3f}"
    assert cells[4].startswith(f"{geval['vs_induced']['mean_diff']:+.3f} [")
    assert "Δ MAE" in _section(md, "Criterion ablation")  # graded ablation reports the MAE change
    assert "truth (reward)" in _section(md, "Disagreements")


def test_graded_flag_inferred_when_absent(tmp_path):
    root = build_run(tmp_path / "RUN", graded=True, ablation=False, sweep=False)
    meta = json.loads((root / "run.json").read_text())
    del meta["graded"]
    (root / "run.json").write_text(json.dumps(meta))
    assert load_run(root).graded is True


# --------------------------------------------------------------------------------------
# Ablation, stratification, disagreements, sweep
# --------------------------------------------------------------------------------------


def test_ablation_deltas(binary_run):
    root, run, report, md = binary_run
    ab = report["ablation"]
    _, y, p_full, _, _ = arrays(root, "induced")
    assert [r["number"] for r in ab["rows"]] == [1, 2, 3]
    assert [r["name"] for r in ab["rows"]] == [c.name for c in CRITERIA[:3]]
    files = sorted((root / "ablation").glob("*.jsonl"))
    for r, f in zip(ab["rows"], files, strict=True):
        rows = sorted((json.loads(x) for x in f.read_text().splitlines()), key=lambda d: d["id"])
        p = np.array([int(d["passed"] and not d["abstained"]) for d in rows])
        assert r["delta_accuracy"] == pytest.approx(M.accuracy(y, p) - M.accuracy(y, p_full))
        assert r["delta_false_pass_rate"] == pytest.approx(M.false_pass_rate(y, p) - M.false_pass_rate(y, p_full))
        assert r["delta_kappa"] == pytest.approx(M.cohens_kappa(y, p) - M.cohens_kappa(y, p_full))
        c = M.compare_paired(y, p_full, p)
        assert (r["mcnemar"]["b"], r["mcnemar"]["c"]) == (c["b"], c["c"])
        cells = [c.strip() for c in _row(md, f"{r['number']}. {r['name']}").strip("|").split("|")]
        assert cells[2] == f"{r['delta_false_pass_rate']:+.3f}"
    # Criterion 1 was built to let failed items through: its removal raises the false-pass rate.
    assert ab["rows"][0]["delta_false_pass_rate"] > 0


def test_stratification_of_false_pass_gap(binary_run):
    root, run, report, md = binary_run
    st = report["stratification"]
    rows, y, p_ind, _, _ = arrays(root, "induced")
    _, _, p_ge, _, _ = arrays(root, "geval")
    domain = np.array([r["domain"] for r in rows])
    overall = st["rows"][0]
    main = {r["judge"]: r for r in report["main"]}
    assert overall["gap"] == pytest.approx(main["geval"]["false_pass_rate"] - main["induced"]["false_pass_rate"])
    for d in ("airline", "retail"):
        r = next(r for r in st["rows"] if r["group"] == "domain" and r["stratum"] == d)
        m = domain == d
        assert r["n"] == m.sum()
        assert r["induced_fpr"] == pytest.approx(M.false_pass_rate(y[m], p_ind[m]))
        assert r["baseline_fpr"] == pytest.approx(M.false_pass_rate(y[m], p_ge[m]))
        assert r["gap"] == pytest.approx(r["baseline_fpr"] - r["induced_fpr"])
        assert r["gap_ci_low"] <= r["gap"] <= r["gap_ci_high"]
        mc = M.mcnemar_exact(p_ind[m & (y == 0)] == 0, p_ge[m & (y == 0)] == 0)
        assert (r["b"], r["c"]) == (mc.b, mc.c) and r["p_value"] == pytest.approx(mc.p_value)
    agents = [r for r in st["rows"] if r["group"] == "agent"]
    assert [r["stratum"] for r in agents] == ["agent-a", "agent-b", "agent-c"]
    lengths = [r for r in st["rows"] if r["group"] == "length"]
    assert len(lengths) == 3 and sum(r["n"] for r in lengths) == 120
    assert [r["stratum"].split()[0] for r in lengths] == ["short", "medium", "long"]
    sec = _section(md, "Where the false-pass gap comes from")
    assert f"{overall['gap']:+.3f}" in _row(sec, "all")


def test_disagreements_cover_every_differing_item(binary_run):
    root, run, report, md = binary_run
    dg = report["disagreements"]
    rows, y, p_ind, _, _ = arrays(root, "induced")
    _, _, p_ge, _, _ = arrays(root, "geval")
    expected = {r["id"] for r, a, b in zip(rows, p_ind, p_ge, strict=True) if a != b}
    assert {r["id"] for r in dg["rows"]} == expected and expected
    assert sum(dg["counts"].values()) == len(expected)
    assert dg["counts"]["baseline_false_pass"] == int(((p_ge == 1) & (p_ind == 0) & (y == 0)).sum())
    sec = _section(md, "Disagreements")
    for item_id in expected:
        assert f"`{item_id}`" in sec
    assert dg["attribution_source"] == "keywords of the induced reason"
    by_id = {r["id"]: r for r in rows}
    for r in dg["rows"]:
        reason = by_id[r["id"]]["reason"]
        found = attribute_reason(reason, CRITERIA)
        assert r["criterion"] == (found.label if found else "unattributed")
        assert len(r["reason"]) <= 160
    assert sum(e["n"] for e in dg["by_criterion"]) == len(expected)


def test_attribution_file_takes_precedence(tmp_path):
    root = build_run(tmp_path / "RUN", attribution=True, ablation=False)
    report = compute_report(load_run(root), n_resamples=200)
    dg = report["disagreements"]
    assert dg["attribution_source"] == "attribution.jsonl"
    names = {c.number: f"{c.number}. {c.name}" for c in CRITERIA}
    for r in dg["rows"]:
        i = int(r["id"].split("-")[1])
        assert r["criterion"] == names[(i % 6) + 1]


def test_attribute_reason():
    def label(reason, criteria=CRITERIA):
        found = attribute_reason(reason, criteria)
        return found.label if found else None

    assert label("Criterion 4 fails: wrong date.") == "4. Correct details"
    assert label("grounded claims is violated; also goal fulfilled") == "3. Grounded claims"
    assert label("The tool call ended in an error that stayed unresolved") == "2. No unresolved errors"
    assert label("The episode was never properly closed.") == "6. Properly closed"
    assert label("") is None
    assert label("Looks fine to me.") is None
    assert label("criterion 3", []) is None


def test_no_rubric_means_unattributed(tmp_path):
    root = build_run(tmp_path / "RUN", ablation=False, sweep=False)
    meta = json.loads((root / "run.json").read_text())
    del meta["rubric"]
    (root / "run.json").write_text(json.dumps(meta))
    dg = compute_report(load_run(root), n_resamples=200)["disagreements"]
    assert dg["rows"] and all(r["criterion"] == "unattributed" for r in dg["rows"])


def test_sweep_table_marks_best(binary_run):
    _, _, report, md = binary_run
    sw = report["sweep"]
    assert sw["best"] == 2  # 0.82 ties with candidate 3; the earliest wins, as in induce()
    sec = _section(md, "Induction sweep")
    assert _row(sec, "2").rstrip().endswith("★ |")
    assert "★" not in _row(sec, "3")
    assert "`cccccccccccc`" in _row(sec, "2")


def test_optional_sections_absent(tmp_path):
    root = build_run(tmp_path / "RUN", ablation=False, sweep=False,
                     judges=["oracle", "induced", "fewshot", "heuristic", "majority"])
    report = compute_report(load_run(root), n_resamples=200)
    assert report["ablation"] is None and report["sweep"] is None
    assert report["stratification"] is None and report["disagreements"] is None
    md = render_markdown(report)
    assert "No ablation in this run" in md and "No sweep recorded" in md
    assert "Skipped: no `geval` judge" in md


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def _rewrite(path: Path, fn) -> None:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(x) + "\n" for x in fn(lines)))


def test_mismatched_ids_name_the_file(tmp_path):
    root = build_run(tmp_path / "RUN", ablation=False, sweep=False)

    def drop_and_add(lines):
        lines = sorted(lines, key=lambda r: r["id"])[1:]  # drop item-000
        extra = dict(lines[0], id="item-999")
        return lines + [extra]

    _rewrite(root / "predictions" / "geval.jsonl", drop_and_add)
    with pytest.raises(RunError) as e:
        load_run(root)
    msg = str(e.value)
    assert "geval.jsonl" in msg and "oracle.jsonl" in msg
    assert "missing 1 id(s)" in msg and "item-000" in msg
    assert "1 extra id(s)" in msg and "item-999" in msg


def test_mismatched_ablation_ids_name_the_file(tmp_path):
    root = build_run(tmp_path / "RUN", sweep=False)
    path = next((root / "ablation").glob("2_*.jsonl"))
    _rewrite(path, lambda lines: lines[:-3])
    with pytest.raises(RunError, match=re.escape(path.name) + r".*missing 3 id"):
        load_run(root)


@pytest.mark.parametrize("mutate, pattern", [
    (lambda r: r.update(score=1.5), r"geval\.jsonl:\d+: score: 1\.5 is greater than the maximum of 1"),
    (lambda r: r.update(passed="yes"), r"geval\.jsonl:\d+: passed: 'yes' is not of type 'boolean'"),
    (lambda r: r.update(label=2), r"geval\.jsonl:\d+: label: 2 is not one of"),
    (lambda r: r.pop("passed"), r"geval\.jsonl:\d+: \(record\): 'passed' is a required property"),
    (lambda r: r.update(label=None), r"geval\.jsonl:\d+: report needs labels: id 'item-\d+' has no 'label'.*--labels"),
    (lambda r: r.update(n_steps=-1), r"geval\.jsonl:\d+: n_steps"),
])
def test_bad_line_names_file_and_line(tmp_path, mutate, pattern):
    root = build_run(tmp_path / "RUN", ablation=False, sweep=False)

    def fn(lines):
        mutate(lines[3])
        return lines

    _rewrite(root / "predictions" / "geval.jsonl", fn)
    with pytest.raises(RunError, match=pattern):
        load_run(root)


def test_other_validation_errors(tmp_path):
    root = build_run(tmp_path / "RUN", ablation=False, sweep=False)
    geval = root / "predictions" / "geval.jsonl"
    original = geval.read_text()

    # Conflicting ground truth between judges.
    _rewrite(geval, lambda ls: [dict(ls[0], label=1 - ls[0]["label"], reward=1.0 - ls[0]["reward"])] + ls[1:])
    with pytest.raises(RunError, match=r"geval\.jsonl: id 'item-\d+' has label="):
        load_run(root)
    # Duplicate id.
    geval.write_text(original + original.splitlines()[0] + "\n")
    with pytest.raises(RunError, match=r"geval\.jsonl:\d+: duplicate id"):
        load_run(root)
    # Truncated final line (a killed writer).
    geval.write_text(original + '{"id": "item-0')
    with pytest.raises(RunError, match=r"geval\.jsonl:\d+: not JSON"):
        load_run(root)
    # Missing judge file.
    geval.unlink()
    with pytest.raises(RunError, match=r"missing prediction file\(s\) geval\.jsonl"):
        load_run(root)
    geval.write_text(original)
    # Induced judge not among the judges.
    meta = json.loads((root / "run.json").read_text())
    (root / "run.json").write_text(json.dumps({**meta, "induced": "nope"}))
    with pytest.raises(RunError, match=r"run\.json: induced judge 'nope'"):
        load_run(root)
    (root / "run.json").unlink()  # without run.json the judges are predictions/*.jsonl by name
    run = load_run(root)
    assert run.judges == tuple(sorted(JUDGES)) and run.induced == "induced"
    assert any("no run.json" in w for w in run.warnings)


# --------------------------------------------------------------------------------------
# Determinism and writing
# --------------------------------------------------------------------------------------


def test_render_twice_identical(binary_run):
    root, run, report, md = binary_run
    again = compute_report(load_run(root))
    assert json.dumps(again, sort_keys=True) == json.dumps(report, sort_keys=True)
    assert render_markdown(again) == md


def test_line_order_does_not_matter(tmp_path):
    a = build_run(tmp_path / "A", seed=3)
    b = tmp_path / "B"
    shutil.copytree(a, b)
    rng = np.random.default_rng(99)
    for path in list((b / "predictions").glob("*.jsonl")) + list((b / "ablation").glob("*.jsonl")):
        lines = path.read_text().splitlines()
        path.write_text("".join(lines[k] + "\n" for k in rng.permutation(len(lines))))
    ra = compute_report(load_run(a), n_resamples=500)
    rb = compute_report(load_run(b), n_resamples=500)
    ra["meta"]["run"] = rb["meta"]["run"] = None
    assert ra == rb


@pytest.mark.slow
def test_write_report_files_and_identical_pngs(tmp_path):
    root = build_run(tmp_path / "RUN")
    out1 = write_report(root, root / "report.md")
    out2 = write_report(root, tmp_path / "copy" / "report.md")
    md1, md2 = out1.read_text(), out2.read_text()
    assert md1 == md2
    names = ["over_credit", "confusion", "reliability", "scores", "sweep"]
    for name in names:
        assert f"](figures/{name}.png)" in md1
        png1 = (root / "figures" / f"{name}.png").read_bytes()
        png2 = (tmp_path / "copy" / "figures" / f"{name}.png").read_bytes()
        assert png1[:8] == b"\x89PNG\r\n\x1a\n"
        assert png1 == png2, name
        assert b"Software" not in png1 and b"Matplotlib" not in png1
    numbers = json.loads((root / "report.json").read_text())
    assert numbers["items"]["n"] == 120 and len(numbers["main"]) == 6


@pytest.mark.slow
def test_write_report_graded_figures_and_no_figures(tmp_path):
    root = build_run(tmp_path / "RUN", graded=True, sweep=False)
    out = write_report(root, root / "report.md")
    assert (root / "figures" / "scores.png").exists()
    assert not (root / "figures" / "sweep.png").exists()
    assert "figures/sweep.png" not in out.read_text()
    bare = write_report(root, tmp_path / "bare" / "report.md", figures=False)
    assert "![" not in bare.read_text() and not (tmp_path / "bare" / "figures").exists()


@pytest.mark.slow
def test_report_main_accepts_run_or_predictions_dir(tmp_path):
    root = build_run(tmp_path / "RUN", ablation=False)
    a = report_main(root, tmp_path / "a" / "report.md")
    b = report_main(root / "predictions", tmp_path / "b" / "report.md")
    assert a.read_text() == b.read_text()
    assert a.read_text().startswith("# Judge report: synthetic")


def test_single_class_run_renders_na_without_raising(tmp_path):
    """Every item passed: false-pass rates and AUC are undefined -> n/a cells and report warnings."""
    root = build_run(tmp_path / "RUN", n=30, sweep=False)
    for path in [*(root / "predictions").glob("*.jsonl"), *(root / "ablation").glob("*.jsonl")]:
        _rewrite(path, lambda lines: [dict(x, label=1, reward=1.0) for x in lines])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # undefined statistics become report warnings, not Python warnings
        report = compute_report(load_run(root), n_resamples=500)
    md = render_markdown(report)
    assert all(r["false_pass_rate"] is None and r["auc"] is None for r in report["main"])
    assert _row(md, "geval").split("|")[2].strip() == "n/a [n/a]"
    assert any("no failed trajectories" in w for w in report["warnings"])
    assert "## Warnings" in md
    assert report["stratification"]["rows"][0]["n_failed"] == 0


def test_an_attribution_entry_is_resolved_by_the_one_attribution_function():
    """attribution.jsonl entries (a number or a name) go through core.criteria.attribute_reason with
    reference=True: numbers and names resolve exactly, never by the keywords of a prose reason."""
    criteria = parse_criteria(SEED_RUBRIC)
    grounded = next(c for c in criteria if c.name.lower().startswith("grounded"))
    for entry in (grounded.number, str(grounded.number), f"{grounded.number}. anything", grounded.name.upper()):
        assert attribute_reason(entry, criteria, reference=True) == grounded
    assert attribute_reason(99, criteria, reference=True) is None
    # a prose reason that would be attributed by its keywords is not a reference
    prose = f"{grounded.name} are weak"
    assert attribute_reason(prose, criteria) == grounded
    assert attribute_reason(prose, criteria, reference=True) is None
    assert attribute_reason(None, SEED_RUBRIC, reference=True) is None


# --------------------------------------------------------------------------------------
# What a person reads first: the run's cascade fit (`rubricforge report` reads cascade_fit.json), whether the
# induced judge is the seed rubric and which rubric it judges with, no one-point sweep figure, and bootstrap
# resamples left out of an interval said once (not a warning per judge and statistic)
# --------------------------------------------------------------------------------------

REFUSED = {"certified": False, "n": 7, "alpha": 0.1, "delta": 0.1, "reason": "cascade fit refused: too few",
           "needed_decided": 22, "needed_labels": 30, "embedded": True}


def _one_candidate(root):
    meta = json.loads((root / "run.json").read_text())
    meta.update(sweep=SWEEP[:1], beat_seed=False)
    (root / "run.json").write_text(json.dumps(meta))


def test_report_of_a_run_leads_with_its_cascade_fit(tmp_path):
    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    (root / "cascade_fit.json").write_text(json.dumps(REFUSED))
    text = report_main(root, tmp_path / "out" / "report.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    # an embedded fit: what that model can and cannot tell opens the report, then the cascade (issue 41 item 7)
    assert sections[:2] == ["## Read this first: what the embedded 135M model can and cannot tell",
                            "## Trust or escalate: what a certified cascade would do here"]
    assert "**Nothing certified.**" in text and "about 30 labeled tasks" in text and "135M" in text
    assert json.loads((tmp_path / "out" / "report.json").read_text())["cascade_fit"]["needed_labels"] == 30
    # the same from its predictions/ folder; and verdict files carry no fit
    assert "## Trust or escalate" in report_main(root / "predictions", tmp_path / "b" / "report.md").read_text()
    files = report_main([root / "predictions" / "induced.jsonl"], tmp_path / "c" / "report.md").read_text()
    assert "## Trust or escalate" not in files


def test_a_malformed_cascade_fit_is_named(tmp_path):
    import pytest

    from rubricforge_dspy.report import RunError

    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    (root / "cascade_fit.json").write_text("[1, 2]")
    with pytest.raises(RunError, match="cascade_fit.json: not a cascade fit"):
        write_report(root, tmp_path / "out" / "report.md", figures=False)


def test_the_report_says_when_the_induced_judge_is_the_seed_and_draws_no_one_point_sweep(tmp_path):
    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    _one_candidate(root)
    text = write_report(root, root / "report.md", n_resamples=300).read_text()
    assert "**The induced judge is the seed rubric, unchanged.**" in text
    assert SEED_RUBRIC.strip().splitlines()[0] in text  # the rubric it judges with is shown
    assert not (root / "figures" / "sweep.png").exists() and "figures/sweep.png" not in text
    assert "No figure: the sweep holds one candidate" in text


def test_an_induced_rubric_is_shown_without_the_seed_sentence(tmp_path):
    root = build_run(tmp_path / "RUN", n=30, ablation=False)
    meta = json.loads((root / "run.json").read_text())
    (root / "run.json").write_text(json.dumps({**meta, "beat_seed": True}))
    text = write_report(root, root / "report.md", n_resamples=300).read_text()
    assert "scored higher on the validation split than the seed" in text and "seed rubric, unchanged" not in text
    assert (root / "figures" / "sweep.png").exists()  # several candidates: the figure is drawn


def test_resamples_left_out_of_an_interval_are_said_once_not_warned_per_judge(tmp_path):
    root = build_run(tmp_path / "RUN", n=6, ablation=False, sweep=False)  # few items: one-outcome resamples
    report = compute_report(load_run(root), n_resamples=500)
    assert report["bootstrap_excluded"], "six items must give resamples holding one outcome"
    assert not any("undefined (nan)" in w for w in report["warnings"])
    from rubricforge_dspy.report import render_markdown

    md = render_markdown(report)
    assert "undefined (nan)" not in md and md.count("left out of that interval") == 1
