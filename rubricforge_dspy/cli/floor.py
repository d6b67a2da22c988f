"""`rubricforge floor --data LABELED [--labels L.jsonl] [--json]`: the floor by task-grouped
cross-validation, with the length-only model and the fixed Heuristic beside it. Seconds, no LM: the
first command to run on new labeled data.

With a judge's verdicts (``--judge-verdicts V.jsonl``: any tool's lines in the verdict-line schema) or a live
judge (``--judge PROGRAM``, one LM call per labeled item), the report adds the judge alone and the *hybrid
stage* (the floor's model with the judge's verdict and score as inputs, `trust.hybrid_cv`) on the same folds,
and ``--save-floor`` writes the hybrid (plain JSON; a cascade stage: docs/CASCADE.md, "The hybrid stage").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rubricforge_dspy.cli.data_options import add_data_arguments, data_spec
from rubricforge_dspy.cli.lm_options import add_lm_arguments
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import writable_file
from rubricforge_dspy.core.judge_names import FLOOR_FOLDS, FLOOR_RESAMPLES

if TYPE_CHECKING:
    from rubricforge_dspy.judge.hybrid import HybridJudge

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
        raise no_labels_error("floor", seen, first)
    warn_left_out(left_out, len(table))
    join = data.join.to_dict() if data.join is not None else None
    dropped = {"skipped_records": len(data.report.skipped), "unlabeled_left_out": left_out,
               "labels_not_in_data": join["label_ids_without_trajectory"] if join else 0}
    return table, dropped


def _judge_part(args):
    """The judge of ``--judge-verdicts`` (a recorded stage, read and checked now: exit 2 naming a bad line) or
    ``--judge`` (a plain frozen program), or None."""
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.judge.recorded import RecordedJudge

    verdicts, program = getattr(args, "judge_verdicts", None), getattr(args, "judge", None)
    if verdicts and program:
        raise InputError("give --judge-verdicts or --judge, not both")
    if verdicts:
        return RecordedJudge.from_file(verdicts)
    if program:
        judge = load_judge(args.judge)
        if type(judge) is not TrajectoryJudge:
            raise InputError(f"--judge {args.judge}: the hybrid's judge is a plain frozen program, got a "
                             f"{type(judge).__name__} (a floor, hybrid or cascade file)")
        return judge
    return None


def _live_verdicts(args, judge, table) -> list:
    """The live judge's verdicts on the labeled items (one LM call each; LM failures are counted abstentions,
    a dead server stops with exit 3)."""
    from rubricforge_dspy.cli.data_options import load_data
    from rubricforge_dspy.cli.lm_options import lm_from_args

    by_id = {t.id: t for t in load_data(args, need_labels=True).trajectories}
    with lm_from_args(args) as lm:
        judge.set_lm(lm)
        return list(judge.batch([by_id[i] for i in table.ids], args.concurrency))


def _hybrid(args, judge, table, report: dict[str, Any]) -> HybridJudge:
    """Add the judge's and the hybrid's rows to `report`; return the hybrid fit on all the items."""
    from rubricforge_dspy.judge.hybrid import HybridJudge
    from rubricforge_dspy.judge.recorded import RecordedJudge
    from rubricforge_dspy.trust.hybrid_cv import fit_hybrid_stack, hybrid_rows

    if isinstance(judge, RecordedJudge):
        verdicts, source = [judge.verdicts.get(i) for i in table.ids], str(args.judge_verdicts)
    else:
        verdicts, source = _live_verdicts(args, judge, table), f"the program {args.judge}"
    extra = hybrid_rows(table, verdicts, source, n_splits=args.folds, seed=args.seed, n_resamples=args.resamples)
    report["rows"] = [*report["rows"], *extra["rows"]]
    report["notes"] = [*report["notes"], *extra["notes"]]
    report["judge"] = extra["judge"]
    return HybridJudge(judge, fit_hybrid_stack(verdicts, table, source))


def cmd_floor(args) -> int:
    # scikit-learn and DSPy: imported by this command only, so `rubricforge stats` starts light
    from rubricforge_dspy.judge.floor import SymptomFloor
    from rubricforge_dspy.trust.floor_cv import floor_report, format_floor_report, write_cv_verdicts

    for path, what in ((args.save_floor, "floor"), (args.out, "floor report")):
        if path:  # a missing folder is made, an unwritable path is exit 2, before any work
            writable_file(path, what)
    judge = _judge_part(args)  # a bad verdict line stops here, before any work
    trajectories, dropped = load_table(args)  # one streaming pass; the features are computed once per item
    report = floor_report(trajectories, n_splits=args.folds, seed=args.seed, n_resamples=args.resamples)
    hybrid = _hybrid(args, judge, trajectories, report) if judge is not None else None
    spec = data_spec(args)
    report = {"data": list(spec.paths), "labels": spec.labels,
              "label_threshold": None if spec.label_rule is None else str(spec.label_rule),
              **dropped, **report}
    if args.verdicts_dir:
        write_cv_verdicts(trajectories, args.verdicts_dir, n_splits=args.folds, seed=args.seed)
        report["verdicts_dir"] = str(args.verdicts_dir)
    if args.save_floor and hybrid is not None:
        hybrid.save(args.save_floor)
    elif args.save_floor:
        Path(args.save_floor).write_text(SymptomFloor.fit(trajectories).to_json(), encoding="utf-8")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_floor_report(report, ", ".join(spec.paths)))
        extra = [f"{dropped['skipped_records']} malformed record(s) skipped"] if dropped["skipped_records"] else []
        if dropped["unlabeled_left_out"]:
            extra.append(f"{dropped['unlabeled_left_out']} unlabeled trajectories left out")
        if dropped["labels_not_in_data"]:
            extra.append(f"{dropped['labels_not_in_data']} label(s) for ids not in the data ignored")
        judged = report.get("judge") or {}
        if judged.get("missing"):
            extra.append(f"{judged['missing']} labeled item(s) have no verdict in {judged['source']}: left out of the "
                         "hybrid's fit, and fails in its rows")
        for line in extra:
            print(f"note: {line}")
        if args.save_floor:
            print(f"{'hybrid stage' if hybrid is not None else 'floor'} written to: {args.save_floor}")
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
    p.add_argument("--save-floor", default=None,
                   help="write the floor fit on all the data here (plain JSON); with a judge, the hybrid stage")
    p.add_argument("--judge-verdicts", default=None, metavar="V.jsonl",
                   help="a judge's verdicts on the data (verdict-line schema, any tool): add the judge and the hybrid "
                        "(the floor's model with the judge's verdict and score as inputs) to the report")
    p.add_argument("--judge", default=None, metavar="PROGRAM",
                   help="a frozen judge program, run live on the data (one LM call per labeled item) instead of "
                        "--judge-verdicts")
    p.add_argument("--concurrency", type=int, default=4, help="threads of the live --judge's calls")
    add_lm_arguments(p, reflection=False)
    p.set_defaults(func=cmd_floor)
