"""Add the floor rows to runs and certificates committed before the floor existed (no LM call).

    PYTHONPATH=. python -m evals.floor_backfill

For each committed protocol run (``artifacts/demo``, ``artifacts/paper/{airline,retail,webshop}``):
re-derive its sample and split with the same code and seed (`split.sample_by_task`,
`split.split_by_task`), refuse unless the test ids equal the persisted ``predictions/induced.jsonl``,
fit the symptom floor and the length-only model on the run's own training split
(`protocol.write_floor_predictions`, as a new run does), re-render the report, and add the induced
judge's margin over the floor to its program's certificate. The hybrid row cannot be added: it needs
the induced judge's validation verdicts, which these runs did not keep (and their validation splits hold
1-2 items). For ``programs/airline-smollm2-135m.json`` (certified on
``artifacts/certify-airline-smollm2``): the margin over the floor cross-validated by task on its 16
held-out items (what `rubricforge certify` does for a program frozen without a floor).

Every change is recorded: ``run.json`` gets ``floor_backfill``; the certificate's ``floor.source`` says
how the floor was obtained.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from rubricforge_dspy.core.verdict import read_lines
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.split import sample_by_task, split_by_task
from rubricforge_dspy.pipeline.protocol import FLOOR, JUDGES, write_floor_predictions
from rubricforge_dspy.program.store import MANIFEST_KEY, read_program, update_manifest
from rubricforge_dspy.report import write_report
from rubricforge_dspy.trust.certificate import CERTIFICATE_KEY
from rubricforge_dspy.trust.floor_margin import floor_margin_of_records, floor_verdicts

ROOT = Path(__file__).resolve().parents[1]
NOTE = ("floor and length_only rows added after the run by evals/floor_backfill.py: fit on this run's own "
        "training split (re-derived with the run's seed; test ids checked against predictions/induced.jsonl). "
        "No hybrid row: the run did not keep its validation verdicts.")


def runs() -> list[tuple[Path, Path, float]]:
    """(run directory, data file, label threshold) of each committed protocol run."""
    from evals.paper import DATASETS

    # the committed demo ran before its data moved into the package: it sampled the full shipped file
    out = [(ROOT / "artifacts" / "demo", ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json", 0.0)]
    for name, (path, threshold, _) in DATASETS.items():
        out.append((ROOT / "artifacts" / "paper" / name, path, threshold))
    return out


def backfill_run(run_dir: Path, data: Path, threshold: float) -> dict:
    meta = json.loads((run_dir / "run.json").read_text())
    n_tasks = sum(part["tasks"] for part in meta["split"].values())
    config = meta["config"]
    seed = config["induction"]["seed"] if "induction" in config else config["seed"]  # runs before the nesting: flat
    trajectories = load_trajectories(data, label_threshold=threshold)
    split = split_by_task(sample_by_task(trajectories, n_tasks), tuple(config["fractions"]), seed)
    predictions = run_dir / "predictions"
    persisted = sorted(record["id"] for _, record in read_lines(predictions / "induced.jsonl"))
    if sorted(t.id for t in split.test) != persisted:
        raise SystemExit(f"{run_dir}: the re-derived test split does not match predictions/induced.jsonl; not touched")
    notes = write_floor_predictions(run_dir, split, predictions)
    meta["judges"] = [j for j in JUDGES if (predictions / f"{j}.jsonl").exists()]
    meta["floor_notes"] = [*notes, "no hybrid row: this run predates it and did not keep the induced judge's "
                                    "validation verdicts the hybrid is fit on"]
    meta["floor_backfill"] = {"date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(), "note": NOTE}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2, default=str))
    write_report(run_dir, run_dir / "report.md")
    program = ROOT / meta["program"] if not Path(meta["program"]).is_absolute() else Path(meta["program"])
    if program.exists() and (predictions / f"{FLOOR}.jsonl").exists():
        add_margin(program, [r for _, r in read_lines(predictions / "induced.jsonl")],
                   [r for _, r in read_lines(predictions / f"{FLOOR}.jsonl")],
                   "the symptom floor fit on the training split; added by evals/floor_backfill.py")
    return json.loads((run_dir / "report.json").read_text())


def add_margin(program: Path, judge_records: list, floor_records: list, source: str) -> None:
    manifest = read_program(program).get(MANIFEST_KEY) or {}
    certificate = manifest.get(CERTIFICATE_KEY)
    if not certificate:
        print(f"{program}: no certificate; margin not added", file=sys.stderr)
        return
    alpha = 1.0 - certificate.get("confidence", 0.95)
    margin = floor_margin_of_records(judge_records, floor_records, source=source, alpha=alpha)
    update_manifest(program, {CERTIFICATE_KEY: {**certificate, "floor": margin}})


def backfill_certified_program() -> None:
    program = ROOT / "programs" / "airline-smollm2-135m.json"
    folder = ROOT / "artifacts" / "certify-airline-smollm2"
    trajectories = load_trajectories(folder / "held_out.jsonl")
    floor, source = floor_verdicts(trajectories, (read_program(program).get(MANIFEST_KEY) or {}).get("floor"))
    add_margin(program, [r for _, r in read_lines(folder / "verdicts.jsonl")], floor,
               source + "; added by evals/floor_backfill.py")


def main() -> int:
    from evals.paper import write_summary

    rows = []
    for run_dir, data, threshold in runs():
        report = backfill_run(run_dir, data, threshold)
        floor = report["floor"]
        print(f"{run_dir.relative_to(ROOT)}: floor rows {floor['floor']}, length-only {floor['length_only']}, "
              f"length gives it away: {floor['gives_away']}", file=sys.stderr)
        if run_dir.parent.name == "paper":
            rows.append((run_dir.name, run_dir, report))
    paper = ROOT / "artifacts" / "paper"
    meta = json.loads((paper / "airline" / "run.json").read_text())
    summary = paper / "SUMMARY.md"
    header = summary.read_text().split("\n| dataset |")[0] if summary.exists() else ""
    write_summary(summary, rows, (meta["lm"], meta["reflection_lm"]), meta.get("notes") or "")
    if header:  # keep the committed header (its warning), replace the table
        summary.write_text(header + "\n| dataset |" + summary.read_text().split("\n| dataset |", 1)[1])
    backfill_certified_program()
    return 0


if __name__ == "__main__":
    sys.exit(main())
