"""`rubricforge floor --data LABELED [--labels L.jsonl] [--json]`: the floor by task-grouped
cross-validation, with the length-only model and the fixed Heuristic beside it. Seconds, no LM: the
first command to run on new labeled data.

With a judge's verdicts (``--judge-verdicts V.jsonl``: any tool's lines in the verdict-line schema) or a live
judge (``--judge PROGRAM``, one LM call per labeled item, through the resumable, cached job path: its verdicts
in ``<stem>.judge-verdicts.jsonl`` beside ``--save-floor``, else ``--out``), the report adds the judge alone and
the *hybrid stage* (the floor's model with the judge's verdict and score as inputs, `trust.hybrid_cv`) on the
same folds, and ``--save-floor`` writes the hybrid (plain JSON; a cascade stage: docs/CASCADE.md, "The hybrid
stage"). The work is the job's (`pipeline.floor_job.run_floor_job`); this module parses the flags and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rubricforge_dspy.cli.data_options import add_data_arguments, data_spec
from rubricforge_dspy.cli.lm_options import add_lm_arguments
from rubricforge_dspy.core.judge_names import FLOOR_FOLDS, FLOOR_RESAMPLES

if TYPE_CHECKING:
    from rubricforge_dspy.pipeline.floor_job import FloorData, FloorJobResult

__all__ = ["add_floor_parser", "cmd_floor"]


def _say_read(data: FloorData) -> None:
    """What the load did, on stderr, once the data are read and before any LM call: skipped records, ignored
    files, the label join and label warnings, the sessions grouped, the unlabeled trajectories left out."""
    from rubricforge_dspy.cli.data_options import print_label_warnings, print_load_problems, warn_left_out

    if data.sessions is not None:
        print(data.sessions.summary(), file=sys.stderr)
    print_load_problems(data.report, data.join)
    print_label_warnings(data.tally)
    if len(data.table):
        warn_left_out(data.left_out, len(data.table))


def cmd_floor(args: argparse.Namespace) -> int:
    """The floor job (`pipeline.floor_job.run_floor_job`) on the flags' data and options; prints its report."""
    from rubricforge_dspy.apply.options import JobOptions
    from rubricforge_dspy.pipeline.floor_job import FloorOptions, run_floor_job

    spec = data_spec(args)
    judge = getattr(args, "judge", None)
    options = FloorOptions(folds=args.folds, seed=args.seed, resamples=args.resamples,
                           judge_verdicts=getattr(args, "judge_verdicts", None), judge=judge,
                           job=JobOptions(cache=True, concurrency=getattr(args, "concurrency", 4)),
                           save_floor=args.save_floor, out=args.out, verdicts_dir=args.verdicts_dir)
    lm = None
    if judge:  # the judge LM's configuration: opened by the job, only for the judge's run
        from rubricforge_dspy.cli.lm_options import lm_config

        lm = lm_config(args, "judge")
    result = run_floor_job(spec, options, lm=lm, on_read=_say_read)
    if result.judge_run is not None:
        print(result.judge_run.format(), file=sys.stderr)
    _print(args, result)
    return 0


def _print(args: argparse.Namespace, result: FloorJobResult) -> None:
    from rubricforge_dspy.core.terminal import terminal_safe
    from rubricforge_dspy.trust.floor_cv import format_floor_report

    report, dropped = result.report, result.data.dropped
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return
    print(format_floor_report(report, ", ".join(report["data"])))
    extra = [f"{dropped['skipped_records']} malformed record(s) skipped"] if dropped["skipped_records"] else []
    if dropped["unlabeled_left_out"]:
        extra.append(f"{dropped['unlabeled_left_out']} unlabeled trajectories left out")
    if dropped["labels_not_in_data"]:
        extra.append(f"{dropped['labels_not_in_data']} label(s) for ids not in the data ignored")
    judged = report.get("judge") or {}
    if judged.get("missing"):
        extra.append(f"{judged['missing']} labeled item(s) have no verdict in {terminal_safe(judged['source'])}: left "
                     "out of the hybrid's fit, and fails in its rows")
    if result.judge_out is not None:
        extra.append(f"the judge's verdicts are in {terminal_safe(str(result.judge_out))} (a run again asks the LM "
                     "only for the items not in it)")
    for line in extra:
        print(f"note: {line}")
    if args.save_floor:
        what = "hybrid stage" if result.hybrid is not None else "floor"
        print(f"{what} written to: {terminal_safe(args.save_floor)}")


def add_floor_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("floor", help="the floor every judge must beat: symptom and length-only models by "
                                     "task-grouped cross-validation, and the Heuristic (no LM, seconds)")
    add_data_arguments(p)
    p.add_argument("--folds", type=int, default=FLOOR_FOLDS, help=f"cross-validation folds (default {FLOOR_FOLDS})")
    p.add_argument("--seed", type=int, default=0, help="fold shuffling and bootstrap seed")
    p.add_argument("--resamples", type=int, default=FLOOR_RESAMPLES, help="bootstrap resamples for kappa/AUC")
    p.add_argument("--json", action="store_true", help="print every number as JSON")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--verdicts-dir", default=None,
                   help="write out-of-fold verdict files floor.jsonl, length_only.jsonl, heuristic.jsonl here "
                        "(pass them to `rubricforge report` or `gate --floor-verdicts`)")
    p.add_argument("--save-floor", default=None,
                   help="write the floor fit on all the data here (plain JSON); with a judge, the hybrid stage")
    p.add_argument("--judge-verdicts", default=None, metavar="V.jsonl",
                   help="a judge's verdicts on the data (verdict-line schema, any tool): add the judge and the hybrid "
                        "(the floor's model with the judge's verdict and score as inputs) to the report")
    p.add_argument("--judge", default=None, metavar="PROGRAM",
                   help="a frozen judge program, run live on the data (one LM call per labeled item) instead of "
                        "--judge-verdicts; its verdicts go to <stem>.judge-verdicts.jsonl beside --save-floor (else "
                        "--out, one of which is needed), cached, and a run again asks the LM only for what is missing")
    p.add_argument("--concurrency", type=int, default=4, help="threads of the live --judge's calls")
    add_lm_arguments(p, reflection=False)
    p.set_defaults(func=cmd_floor)
