"""The report's columnar reader: what it holds equals the verdict lines (each field, missing values
and defaults, alignment of several files, label joins), free text is read back from the file for the
lines a table shows, a file changed under the report is refused, and memory per line is bounded."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from rubricforge_dspy.report import RunError, compute_report, load_run
from rubricforge_dspy.report.records import read_columns, read_predictions


def line(i: int, rng: np.random.Generator, **extra) -> dict:
    abstained = bool(rng.random() < 0.1)
    passed = bool(rng.random() < 0.5) and not abstained
    out = {"id": f"v{i:04d}", "passed": passed, "score": round(float(rng.random()), 2), "abstained": abstained,
           "reason": None if i % 7 == 0 else f"  criterion {i % 5}\n holds  ",
           "error": "Timeout" if abstained else None,
           "label": int(rng.random() < 0.5)}
    # optional fields present on some lines only, some null
    if i % 3:
        out["task_id"] = f"t{i // 3}"
    if i % 4:
        out["domain"] = ["airline", "retail"][i % 2]
    if i % 5 == 0:
        out["contradiction"] = True
    if i % 2:
        out["score_calibrated"] = None if i % 9 == 1 else round(float(rng.random()), 3)
    if i % 6 == 0:
        out["reward"] = None
    elif i % 6 == 1:
        out["reward"] = round(float(rng.random()), 3)
    return {**out, **extra}


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" + ("\n" if k % 10 == 3 else "") for k, r in enumerate(rows)))
    return path


def test_columns_hold_every_field_of_every_line(tmp_path):
    rng = np.random.default_rng(0)
    path = write(tmp_path / "a.jsonl", [line(i, rng, n_steps=i % 13) for i in range(60)])
    cols, records = read_columns(path), read_predictions(path)
    assert cols.ids == list(records)
    for k, (ident, r) in enumerate(records.items()):
        assert cols.row[ident] == k and cols.line[k] == r["_line"]
        assert (cols.passed[k], cols.abstained[k], cols.score[k]) == (r["passed"], r["abstained"], r["score"])
        assert cols.contradiction[k] == r.get("contradiction", False) and cols.n_steps[k] == r["n_steps"]
        assert cols.label[k] == r["label"]
        for key in ("reward", "score_calibrated"):
            value = r.get(key)
            assert np.isnan(getattr(cols, key)[k]) if value is None else getattr(cols, key)[k] == value
        for key in ("task_id", "domain", "agent"):
            assert cols.strings(key, np.array([k]))[0] == r.get(key)


def test_a_run_of_two_files_matches_the_lines_in_sorted_id_order(tmp_path):
    rng = np.random.default_rng(1)
    rows = [line(i, rng) for i in range(40)]
    a = write(tmp_path / "a.jsonl", rows[::-1])
    b_rows = [{**r, "passed": not r["passed"] and not r["abstained"], "score": 1.0 - r["score"],
               "reason": f"other {r['id']}"} for r in rows]
    b = write(tmp_path / "b.jsonl", b_rows[7:] + b_rows[:7])
    run = load_run([a, b])
    by_id = {r["id"]: r for r in rows}
    assert run.items.ids == tuple(sorted(by_id))
    for k, ident in enumerate(run.items.ids):
        r = by_id[ident]
        assert run.items.task_id[k] == r.get("task_id", ident)  # defaulted to the id
        assert run.items.domain[k] == r.get("domain", "unknown") and run.items.agent[k] == "unknown"
        assert run.items.label[k] == r["label"]
        assert run.items.reward[k] == (r["label"] if r.get("reward") is None else r["reward"])
        p = run.predictions["a"]
        assert (p.passed[k], p.score[k], p.abstained[k]) == (r["passed"], r["score"], r["abstained"])
        assert p.reason[k] == " ".join((r["reason"] or "").split()) and p.error[k] == r["error"]
        assert run.predictions["b"].reason[k] == f"other {ident}"
    assert run.predictions["a"].score_calibrated is None  # not every line carries one
    assert run.items.n_steps is None


def test_the_first_differing_item_field_is_named(tmp_path):
    rng = np.random.default_rng(2)
    rows = [line(i, rng, n_steps=3) for i in range(12)]
    a = write(tmp_path / "a.jsonl", rows)
    changed = [dict(r) for r in rows]
    changed[9]["n_steps"], changed[4]["label"] = 4, 1 - changed[4]["label"]
    b = write(tmp_path / "b.jsonl", changed)
    with pytest.raises(RunError, match=r"b\.jsonl: id 'v0004' has label=\d but a\.jsonl has \d; all judges"):
        load_run([a, b])


def test_labels_joined_from_a_file_fill_the_columns(tmp_path):
    rng = np.random.default_rng(3)
    rows = [{**line(i, rng), "label": None} for i in range(10)]
    preds = write(tmp_path / "p.jsonl", rows)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": r["id"], "label": i % 2}) + "\n" for i, r in enumerate(rows)))
    run = load_run(preds, labels=labels)
    assert run.items.label.tolist() == [i % 2 for i in range(10)]
    with pytest.raises(RunError, match=r"p\.jsonl:1: report needs labels: id 'v0000'.*10 of 10 verdicts"):
        load_run(preds)


def test_free_text_is_read_back_and_a_changed_file_is_refused(tmp_path):
    rng = np.random.default_rng(4)
    rows = [line(i, rng) for i in range(8)]
    path = write(tmp_path / "a.jsonl", rows)
    run = load_run(path)
    reasons = run.predictions["a"].reason
    assert len(reasons) == 8 and list(reasons) == [" ".join((r["reason"] or "").split()) for r in rows]
    write(path, rows[::-1])  # rewritten after it was read
    fresh = load_run(path).predictions["a"].reason
    assert fresh[0] == " ".join((rows[0]["reason"] or "").split())  # v0000, now on the last line
    with pytest.raises(RunError, match="changed while the report read it"):
        run.predictions["a"].error[1]


def test_report_numbers_equal_those_of_the_dict_records(tmp_path):
    """The report computed from the columns equals one computed from arrays built from the dicts."""
    rng = np.random.default_rng(5)
    rows = [line(i, rng) for i in range(80)]
    path = write(tmp_path / "a.jsonl", rows)
    report = compute_report(load_run(path), n_resamples=300)
    records = read_predictions(path)
    ids = sorted(records)
    y = np.array([records[i]["label"] for i in ids])
    v = np.array([records[i]["passed"] for i in ids], dtype=int)
    main = report["main"][0]
    assert main["n"] == 80 and main["accuracy"] == pytest.approx(float((y == v).mean()))
    assert main["abstained"] == sum(r["abstained"] for r in rows)


@pytest.mark.slow
def test_memory_per_line_is_bounded(tmp_path):
    rng = np.random.default_rng(6)
    n = 5000
    path = write(tmp_path / "a.jsonl", [line(i, rng, n_steps=5, agent="a") for i in range(n)])
    tracemalloc.start()
    try:
        cols = read_columns(path)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(cols) == n
    # ids, the id -> row index and the numbers: well under the ~1.5 KB per line of a dict per record
    assert current / n < 400, current / n
