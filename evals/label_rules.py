"""Positives per file under each loader's own label rule vs the old CLI default (label = reward > 0).

    python -m evals.label_rules [--out evals/results/label_rules.json]

Reads every trajectory file bundled under evals/data/ and, when present, the shared raw-data
collection (../shared/data/raw); no LM is involved. Records that do not load are skipped and counted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rubricforge_dspy.data.formats import load_trajectories

ROOT = Path(__file__).resolve().parents[1]
ROOTS = {"evals/data": ROOT / "evals" / "data", "shared/data/raw": ROOT.parent / "shared" / "data" / "raw"}


def measure(path: Path) -> dict | None:
    new = load_trajectories(path, on_error="skip")
    report = new.report
    if not new:
        return None
    old = load_trajectories(path, label_threshold=0.0, on_error="skip")
    return {"n": len(new), "skipped": len(report.skipped), "rule": report.label_rules,
            "positives_loader_rule": sum(t.label for t in new), "positives_reward_gt_0": sum(t.label for t in old),
            "graded_rewards": sum(0.0 < t.reward < 1.0 for t in new)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "evals" / "results" / "label_rules.json"))
    args = parser.parse_args(argv)
    rows = {}
    for name, root in ROOTS.items():
        if not root.is_dir():
            continue
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()):
            try:
                row = measure(path)
            except ValueError:  # not a trajectory file (annotations, raw logs)
                continue
            if row:
                rows[f"{name}/{path.relative_to(root).as_posix()}"] = row
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    for rel, row in rows.items():
        print(f"{row['positives_loader_rule']:>4} vs {row['positives_reward_gt_0']:>4} of {row['n']:>4}  {rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
