"""What each preset's render shows of the shipped long agent trajectories (issue 40 item 1): per trajectory,
the `EvidenceRecord` the verdict line would carry (steps, shown whole, clipped, elided, characters cut).

    python -m evals.evidence_coverage [--out evals/results/evidence_coverage.json]

Files: the coding-agent runs (evals/data/mini_swe, swe_agent, openhands) and the tau-bench files. No LM: the
render alone (`render_with_evidence`, render version `RENDER_VERSION`), seconds on the 2-core VM. Writes one
JSON with the machine and the exact settings.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from rubricforge_dspy.core.presets import PRESETS
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RENDER_VERSION, RenderConfig, render_with_evidence

DATA = Path(__file__).resolve().parent / "data"
FILES = [*sorted(DATA.glob("mini_swe/*.traj.json")), *sorted(DATA.glob("swe_agent/*.traj")),
         *sorted(DATA.glob("openhands/*.json*")), *sorted(DATA.glob("tau_bench_*/*.json"))]


def measure(path: Path) -> dict:
    trajectories = load_trajectories(path)
    row: dict = {"file": str(path.relative_to(DATA.parent.parent)), "trajectories": len(trajectories),
                 "presets": {}}
    for name, preset in PRESETS.items():
        records = [render_with_evidence(t, RenderConfig.of(preset))[1] for t in trajectories]
        chars = [sum(len(s.content or "") + (len(json.dumps(s.arguments)) if s.arguments is not None else 0)
                     for s in t.steps) for t in trajectories]
        row["presets"][name] = {
            "render_tokens": preset.render_tokens, "step_chars": preset.step_chars,
            "complete": sum(r.complete for r in records),
            "with_elided_steps": sum(r.elided > 0 for r in records),
            "steps": sum(r.steps for r in records), "steps_elided": sum(r.elided for r in records),
            "steps_clipped": sum(r.clipped for r in records),
            "max_steps_elided": max(r.elided for r in records),
            "share_of_steps_unseen": round(sum(r.elided for r in records) / max(1, sum(r.steps for r in records)), 4),
            "longest": max(({"text_chars": c, **r.to_dict()} for r, c in zip(records, chars, strict=True)),
                           key=lambda x: x["steps"]),
        }
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "evidence_coverage.json"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = [measure(path) for path in FILES]
    out = {"benchmark": "evidence_coverage", "render_version": RENDER_VERSION, "lm": None,
           "machine": {"platform": platform.platform(), "python": sys.version.split()[0], "note": "2-core VM"},
           "seconds": round(time.perf_counter() - start, 2), "files": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for row in rows:
        for name, p in row["presets"].items():
            print(f"{row['file']}: {name}: {p['complete']}/{row['trajectories']} complete, "
                  f"{p['with_elided_steps']} with steps elided (max {p['max_steps_elided']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
