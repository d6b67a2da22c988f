"""How many shipped trajectories each preset's render budget cuts (issue: evidence is cut).

    python -m evals.render_cuts [--out evals/results/render_cuts.json]

For every shipped tau-bench file (evals/data/tau_bench_*) and each preset (`rubricforge_dspy.core.presets`),
renders every trajectory and counts those whose steps were elided to fit the token budget (the middle of
the episode, where tool errors sit, replaced by a marker) and those with at least one step cut (its text
head and tail around ``[... N chars elided ...]``, or its JSON trimmed by structure). Sizes are in the
conservative estimated tokens of `rubricforge_dspy.evidence.tokens` (render version `RENDER_VERSION`). No LM:
seconds. Writes one JSON with the machine and the exact settings.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

from rubricforge_dspy.core.presets import PRESETS
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RENDER_VERSION, RenderConfig, estimate_tokens, render_trajectory

DATA = Path(__file__).resolve().parent / "data"
FILES = sorted(DATA.glob("tau_bench_*/*.json"))
ELIDED = "steps elided to fit"
CUT = re.compile(r"\[\.\.\. \d+ chars elided \.\.\.\]|\.\.\. \d+ more (?:items|keys)|\.\.\. \d+ chars \.\.\.")


def measure(path: Path) -> dict:
    trajectories = load_trajectories(path)
    row = {"file": str(path.relative_to(DATA.parent.parent)), "trajectories": len(trajectories), "presets": {}}
    for name, preset in PRESETS.items():
        texts = [render_trajectory(t, RenderConfig.of(preset)) for t in trajectories]
        row["presets"][name] = {
            "render_tokens": preset.render_tokens, "step_chars": preset.step_chars,
            "elided": sum(ELIDED in text for text in texts),
            "cut_steps": sum(bool(CUT.search(text)) for text in texts),
            "max_estimated_tokens": max(estimate_tokens(text) for text in texts),
        }
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "render_cuts.json"))
    args = parser.parse_args(argv)
    started = time.time()
    rows = [measure(path) for path in FILES]
    result = {"command": "python -m evals.render_cuts", "machine": f"{platform.machine()}, {platform.system()}, "
              f"Python {platform.python_version()}", "lm": "none (rendering only)", "render_version": RENDER_VERSION,
              "date": time.strftime("%Y-%m-%d", time.gmtime()), "wall_time_s": round(time.time() - started, 2),
              "files": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for row in rows:
        cuts = ", ".join(f"{n}: {p['elided']} elided / {p['cut_steps']} cut" for n, p in row["presets"].items())
        print(f"{row['file']} ({row['trajectories']}): {cuts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
