"""`rubricforge floor` on every shared dataset: the floor every judge must beat, committed as JSON.

    PYTHONPATH=. python -m evals.floor_table                # writes evals/results/floor/*.json, prints the table
    PYTHONPATH=. python -m evals.floor_table --shared PATH  # another copy of shared/data/raw

Datasets: the labeled files shipped under evals/data/, and every trajectory file under the shared raw-data
collection (``../shared/data/raw`` next to the repository, see its SOURCES.md); files byte-identical to a
shipped one are run once, from the shipped path. Files that are not trajectories (error-class
annotations, the notebook's printed log) and unlabeled trace samples (otel, langfuse) are listed as
skipped with the reason. Without the shared
directory only the shipped files run. Graded WebShop rewards run twice: label = reward > 0 and
label = reward 1.0 (threshold 0.999). Malformed records are skipped and counted (``skipped_records``).

Each JSON is `floor.cv.floor_report` (task-grouped 5-fold CV, seed 0, 2000 bootstrap resamples) plus
the file, its sha256, the label threshold and the wall time. No LM is called.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import sys
import time
from pathlib import Path

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.trust.floor_cv import floor_report

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "evals" / "data"
SHARED = ROOT.parent / "shared" / "data" / "raw"
OUT = ROOT / "evals" / "results" / "floor"
GRADED = ("react_webshop", "adapt")
SUFFIXES = (".json", ".jsonl")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shown(path: Path, shared: Path | None) -> str:
    """`path` as ``evals/data/...`` or ``shared/data/raw/...`` (independent of where the checkout is)."""
    if path.is_relative_to(SHIPPED):
        return str(Path("evals/data") / path.relative_to(SHIPPED))
    return str(Path("shared/data/raw") / path.relative_to(shared))


def candidates(shared: Path | None) -> tuple[list[tuple[str, Path, str]], list[dict]]:
    """(name, path, shown path) of every data file to run, and the files skipped with why."""
    files: dict[str, tuple[str, Path, str]] = {}
    skipped = []
    for root in [SHIPPED] + ([shared] if shared is not None and shared.is_dir() else []):
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.suffix not in SUFFIXES:
                if path.suffix == ".txt" and not path.name.startswith("LICENSE"):
                    skipped.append({"file": shown(path, shared), "reason": "not a trajectory file"})
                continue
            digest = sha256(path)
            if digest in files:
                continue
            name = re.sub(r"[^A-Za-z0-9]+", "-", f"{path.parent.name}__{path.stem}").strip("-")
            files[digest] = (name, path, shown(path, shared))
    return list(files.values()), skipped


def run_one(name: str, path: Path, where: str, threshold: float) -> dict:
    started = time.perf_counter()
    trajectories = load_trajectories(path, label_threshold=threshold, on_error="skip")
    load = trajectories.report
    if any(t.label is None for t in trajectories):
        raise ValueError("unlabeled trace format: no outcome to fit a floor on")
    report = floor_report(trajectories)
    return {"dataset": name, "file": where, "sha256": sha256(path), "domains": sorted({t.domain for t in trajectories}),
            "label_threshold": threshold, "skipped_records": len(load.skipped),
            "skipped_examples": [f"record {r}: {p}"[:200] for _, r, p in load.skipped[:3]],
            "wall_time_s": round(time.perf_counter() - started, 2), **report}


def table(results: list[dict]) -> str:
    def cell(row, key, ci):
        v, low, high = row[key], row[f"{ci}_ci_low"], row[f"{ci}_ci_high"]
        return "n/a" if v is None else f"{v:+.2f}" if key == "kappa" else f"{v:.2f} [{low:.2f}, {high:.2f}]"

    lines = ["| data | domain | n (tasks) | pass rate | floor κ | floor false-pass [95% exact] | floor AUC | "
             "length-only AUC [95% CI] | length gives it away | Heuristic κ | Heuristic false-pass [95% exact] |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows = {row["judge"]: row for row in r["rows"]}
        f, l, h = rows["floor"], rows["length_only"], rows["heuristic"]
        label = "" if r["label_threshold"] == 0.0 else f" (label: reward > {r['label_threshold']})"
        folder, stem = r["file"].split("/")[-2:]
        lines.append(
            f"| [{folder}/{stem if len(stem) <= 44 else stem[:30] + '…' + stem[-12:]}{label}](results/floor/{r['out']})"
            f" | {', '.join(r['domains'])} | {r['n']} ({r['tasks']}) | "
            f"{r['base_pass_rate']:.2f} | {cell(f, 'kappa', 'kappa')} | {cell(f, 'false_pass_rate', 'false_pass')} | "
            f"{f['auc']:.2f} | {cell(l, 'auc', 'auc')} | {'**yes**' if r['length_gives_away'] else 'no'} | "
            f"{cell(h, 'kappa', 'kappa')} | {cell(h, 'false_pass_rate', 'false_pass')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.floor_table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", default=str(SHARED), help="the shared raw-data directory (skipped if absent)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    shared = Path(args.shared)
    if not shared.is_dir():
        print(f"note: {shared} not found; running the shipped files only", file=sys.stderr)
    files, skipped = candidates(shared)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name, path, where in files:
        thresholds = (0.0, 0.999) if path.parent.name in GRADED else (0.0,)
        for threshold in thresholds:
            suffix = "" if threshold == 0.0 else "__reward-1"
            try:
                result = run_one(name, path, where, threshold)
            except (TrajectoryFormatError, ValueError) as error:
                skipped.append({"file": where, "reason": str(error).replace(str(path), where)[:300]})
                print(f"skipped {path.name}: {str(error)[:120]}", file=sys.stderr)
                break
            result["out"] = f"{name}{suffix}.json"
            result["machine"] = f"{platform.machine()}, {platform.system()}, Python {platform.python_version()}"
            (out / result["out"]).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
            results.append(result)
            print(f"{name}{suffix}: n {result['n']}, {result['wall_time_s']} s", file=sys.stderr)
    (out / "index.json").write_text(json.dumps({"datasets": [r["out"] for r in results], "skipped_files": skipped},
                                               indent=2) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
