"""The paper's protocol, end to end, on tau-bench (airline, retail) and WebShop (graded).

    python -m evals.paper                                   # embedded default LM, small samples
    python -m evals.paper --api-base http://127.0.0.1:30000/v1 --model Qwen2.5-7B-Instruct@<rev> \\
        --reflection-api-base http://127.0.0.1:30000/v1 --reflection-model Qwen2.5-7B-Instruct@<rev> \\
        --tasks 0 --budget 200                            # SGLang (see docs/SERVING.md), all tasks

For each dataset: split by task (50/15/35, seed 0), induce with GEPA, freeze, run every baseline on the
test split, ablate each criterion, and write artifacts/paper/<dataset>/report.md. A summary of all
datasets goes to artifacts/paper/SUMMARY.md, with the LMs named.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rubricforge_dspy.cli.lm_options import add_lm_arguments, lm_from_args
from rubricforge_dspy.cli.presets import add_preset_arguments
from rubricforge_dspy.core.presets import EMBEDDED, SERVER
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.split import sample_by_task
from rubricforge_dspy.pipeline.protocol import run_protocol

DATA = Path(__file__).resolve().parent / "data"
DATASETS = {
    # name: (file, label threshold (None: the loader's own rule, here reward 1 for all three), description)
    "airline": (DATA / "tau_bench_official" / "gpt-4o-airline.json", None, "tau-bench airline, GPT-4o (official run)"),
    "retail": (DATA / "tau_bench_grok" / "tool-calling-grok-4-fast-reasoning-0.0_range_0--1_user-grok-4-fast-reasoning"
               "-llm_1129144541.json", None, "tau-bench retail, grok-4-fast-reasoning"),
    # WebShop rewards are graded; success is a full reward (the paper's success rate), ranking uses the grade.
    "webshop": (DATA / "react_webshop" / "react_webshop_davinci002_500.jsonl", None,
                "WebShop, ReAct text-davinci-002 (graded reward; label = reward 1.0)"),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m evals.paper", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks sampled per dataset, one trial each; 0 = all trajectories "
                             f"(default: {EMBEDDED.demo_tasks} on the embedded LM, all with a server)")
    parser.add_argument("--budget", type=int, default=None,
                        help=f"GEPA metric calls (default {EMBEDDED.budget} embedded, {SERVER.budget} server)")
    add_preset_arguments(parser, induction=True)
    parser.add_argument("--out", default="artifacts/paper")
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run instead of starting over")
    add_lm_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from rubricforge_dspy.cli.presets import resolve
    from rubricforge_dspy.lm.config import lm_name
    from rubricforge_dspy.pipeline.demo import EMBEDDED_REFLECTION_TOKENS, SMALL_MODEL_NOTE, protocol_config

    args = parse_args(argv)
    preset = resolve(args)
    embedded = preset.name == "embedded"
    n_tasks = args.tasks if args.tasks is not None else (preset.demo_tasks if embedded else 0)
    config = protocol_config(preset, ablation=not args.no_ablation)
    out = Path(args.out)
    rows = []
    # a 135M model rambles to the cap otherwise
    reflection_tokens = EMBEDDED_REFLECTION_TOKENS if embedded else None
    with lm_from_args(args, reflection=True, reflection_max_tokens=reflection_tokens) as (judge_lm, reflection_lm):
        names = lm_name(judge_lm), lm_name(reflection_lm)
        for name in args.datasets:
            path, threshold, description = DATASETS[name]
            trajectories = load_trajectories(path, label_threshold=threshold)
            if n_tasks:
                trajectories = sample_by_task(trajectories, n_tasks)
            print(f"[{name}] {len(trajectories)} trajectories; judge {names[0]}", file=sys.stderr)
            run_dir = run_protocol(trajectories, out / name, judge_lm=judge_lm, reflection_lm=reflection_lm,
                                   judge_lm_name=names[0], reflection_lm_name=names[1],
                                   program_path=out / name / "induced.json",
                                   dataset=f"{description} ({len(trajectories)} trajectories)", config=config,
                                   resume=args.resume, notes=SMALL_MODEL_NOTE if embedded else "")
            report = json.loads((run_dir / "report.json").read_text())
            rows.append((name, run_dir, report))
    write_summary(out / "SUMMARY.md", rows, names, SMALL_MODEL_NOTE if embedded else "")
    print(f"summary: {out / 'SUMMARY.md'}")
    return 0


def _main_row(report: dict, judge: str) -> dict:
    for row in report.get("main", []):
        if row.get("judge") == judge:
            return row
    return {}


def write_summary(path: Path, rows, names, note: str = "") -> None:
    lines = ["# Paper protocol summary\n", *([f"> {line}" for line in note.splitlines()] + [""] if note else []),
             f"Judge LM: `{names[0]}`; reflection LM: `{names[1]}`.\n",
             "| dataset | judge | false-pass rate | accuracy | kappa | n |", "|---|---|---|---|---|---|"]
    for name, run_dir, report in rows:
        for judge in ("induced", "hybrid", "geval", "fewshot", "heuristic", "floor", "length_only", "majority",
                      "oracle"):
            row = _main_row(report, judge)
            if row:
                fmt = lambda v: "n/a" if v is None else f"{v:.3f}"
                lines.append(f"| [{name}]({run_dir.name}/report.md) | {judge} | {fmt(row.get('false_pass_rate'))} | "
                             f"{fmt(row.get('accuracy'))} | {fmt(row.get('kappa'))} | {row.get('n')} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
