"""`rubricforge floor --data LABELED [--labels L.jsonl] [--json]`: the floor by task-grouped
cross-validation, with the length-only model and the fixed Heuristic beside it. Seconds, no LM: the
first command to run on new labeled data.
"""

from __future__ import annotations

import json
from pathlib import Path

from rubricforge_dspy.cli.data_options import add_data_arguments
from rubricforge_dspy.core.judge_names import FLOOR_FOLDS, FLOOR_RESAMPLES

__all__ = ["add_floor_parser", "cmd_floor", "load_labeled", "load_table"]


def load_labeled(args) -> tuple[list, dict]:
    """The labeled trajectories of ``--data`` (``--labels`` joined by id, `data_options.load_data`) and what
    was dropped, counted: malformed records skipped, unlabeled trajectories left out, label ids unmatched."""
    from rubricforge_dspy.cli.data_options import load_data

    data = load_data(args, need_labels=True)
    join = data.join.to_dict() if data.join is not None else None
    dropped = {"skipped_records": len(data.report.skipped), "unlabeled_left_out": data.left_out,
               "labels_not_in_data": join["label_ids_without_trajectory"] if join else 0}
    return data.trajectories, dropped


def load_table(args):
    """The `evidence.features.FeatureTable` of the labeled trajectories of ``--data`` (``--labels`` joined),
    built in one streaming pass (`data_options.stream_data`): no `Trajectory` is kept, so memory grows by
    a few hundred bytes per item. Unlabeled trajectories are left out and counted, with the messages of
    `load_data(need_labels=True)`; returns ``(table, dropped)`` as `load_labeled` does."""
    from rubricforge_dspy.cli.data_options import no_labels_error, stream_data, warn_left_out
    from rubricforge_dspy.evidence.features import FeatureTableBuilder

    builder, seen, first = FeatureTableBuilder(), 0, None
    data = stream_data(args)
    for trajectory in data.trajectories:
        seen += 1
        first = first or trajectory
        if trajectory.label is not None:
            builder.add(trajectory)
    table = builder.finish()
    left_out = seen - len(table)
    if not len(table):  # the words of `load_data(need_labels=True)`
        raise no_labels_error(args, seen, first)
    warn_left_out(left_out, len(table))
    join = data.join.to_dict() if data.join is not None else None
    dropped = {"skipped_records": len(data.report.skipped), "unlabeled_left_out": left_out,
               "labels_not_in_data": join["label_ids_without_trajectory"] if join else 0}
    return table, dropped


def cmd_floor(args) -> int:
    # scikit-learn and DSPy: imported by this command only, so `rubricforge stats` starts light
    from rubricforge_dspy.judge.floor import SymptomFloor
    from rubricforge_dspy.trust.floor_cv import floor_report, format_floor_report, write_cv_verdicts

    trajectories, dropped = load_table(args)  # one streaming pass; the features are computed once per item
    report = floor_report(trajectories, n_splits=args.folds, seed=args.seed, n_resamples=args.resamples)
    report = {"data": [str(p) for p in args.data], "labels": args.labels,
              "label_threshold": None if args.label_threshold is None else str(args.label_threshold),
              **dropped, **report}
    if args.verdicts_dir:
        write_cv_verdicts(trajectories, args.verdicts_dir, n_splits=args.folds, seed=args.seed)
        report["verdicts_dir"] = str(args.verdicts_dir)
    if args.save_floor:
        Path(args.save_floor).write_text(SymptomFloor.fit(trajectories).to_json(), encoding="utf-8")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_floor_report(report, ", ".join(map(str, args.data))))
        extra = [f"{dropped['skipped_records']} malformed record(s) skipped"] if dropped["skipped_records"] else []
        if dropped["unlabeled_left_out"]:
            extra.append(f"{dropped['unlabeled_left_out']} unlabeled trajectories left out")
        if dropped["labels_not_in_data"]:
            extra.append(f"{dropped['labels_not_in_data']} label(s) for ids not in the data ignored")
        for line in extra:
            print(f"note: {line}")
    return 0


def add_floor_parser(sub) -> None:
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
    p.add_argument("--save-floor", default=None, help="write the floor fit on all the data here (plain JSON)")
    p.set_defaults(func=cmd_floor)
