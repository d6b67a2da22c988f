"""The trust commands of `rubricforge`: ``certify``, ``show``, ``gate`` and ``label-next`` (what a
user runs before a judge gates a deploy, and to decide what to label next). `rubricforge_dspy.cli.main`
registers them; docs/CERTIFICATE.md describes them."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any, Mapping

from rubricforge_dspy.cli.cost_options import add_cost_arguments, cost_options
from rubricforge_dspy.cli.data_options import add_data_arguments, data_spec, load_data
from rubricforge_dspy.cli.integrations import (
    add_mlflow_source_arguments,
    require_input,
    spool_from_mlflow,
    tag_label_next_in_mlflow,
)
from rubricforge_dspy.cli.lm_options import add_lm_arguments, add_token_budget_argument, lm_from_args
from rubricforge_dspy.cli.stage_options import add_allow_import_argument, allow_import
from rubricforge_dspy.core.errors import AnswerIsNo, InputError
from rubricforge_dspy.core.files import writable_file
from rubricforge_dspy.core.terminal import terminal_safe, terminal_safe_strings
from rubricforge_dspy.data.spec import DataSpec
from rubricforge_dspy.lm.config import lm_name

if TYPE_CHECKING:
    from rubricforge_dspy.core.trajectory import Trajectory

__all__ = ["add_certify_parsers", "add_gate_parser", "add_label_next_parser"]


def cmd_certify(args: argparse.Namespace) -> int:
    """Exit 0 when certified (or, with ``--recheck``, when the judge is not significantly worse); 4 when the
    recheck finds it worse (`AnswerIsNo`); 2 for bad input (a `CertificateError` among them)."""
    from rubricforge_dspy.judge.cascade import is_cascade_file
    from rubricforge_dspy.trust.certificate import format_certificate
    from rubricforge_dspy.trust.certify import certify_program, recheck_program

    for flag, given in (("--token-budget", args.token_budget), ("--cost-budget", args.cost_budget),
                        ("--price", args.price)):
        if given is not None and (args.recheck or is_cascade_file(args.program)):
            raise InputError(f"{flag} goes with certifying a program (not --recheck, not a cascade, yet)")
    _budget_needs_verdicts_out(args, "the program")
    if is_cascade_file(args.program):
        return _certify_cascade(args)
    if not args.recheck:  # the certificate is written into this program: refuse it before anything is paid
        writable_file(args.out_program or args.program, "certified program")
    spec = data_spec(args)
    trajectories = load_data(spec, need_labels=True, command="certify").trajectories
    where = ", ".join(spec.paths)
    labelers = _labelers(spec)
    with lm_from_args(args) as lm:
        print(f"judge LM: {lm_name(lm)}", file=sys.stderr)
        if args.recheck:
            result = recheck_program(args.program, trajectories, lm=lm, verdicts_out=args.verdicts_out,
                                     alpha=args.alpha, concurrency=args.concurrency, where=where)
            print(result.format())
            if result.worse:
                raise AnswerIsNo(f"{args.program}: the judge's false-pass rate on {where} is significantly higher "
                                 "than certified")
            return 0
        certificate = certify_program(args.program, trajectories, lm=lm, out_program=args.out_program,
                                      verdicts_out=args.verdicts_out, concurrency=args.concurrency,
                                      confidence=1.0 - args.alpha, seed=args.seed,
                                      resamples=args.resamples, where=where, labelers=labelers,
                                      token_budget=args.token_budget, on_summary=_say_cost, **cost_options(args))
    print("\n".join(format_certificate(certificate)))
    if "labelers" in certificate:
        from rubricforge_dspy.trust.certify import format_judge_vs_labelers

        print("\n".join(format_judge_vs_labelers(certificate["labelers"])))
    print(f"written to: {args.out_program or args.program}")
    return 0


def _budget_needs_verdicts_out(args: argparse.Namespace, judged: str) -> None:
    """Refuse ``--token-budget`` or ``--cost-budget`` without ``--verdicts-out`` (where a run stopped at the budget
    keeps what it judged, for the re-run to resume) or without a program judged now (``--price`` too: it prices the
    calls of judging it)."""
    for flag, given in (("--token-budget", args.token_budget), ("--cost-budget", args.cost_budget),
                        ("--price", args.price)):
        if given is None:
            continue
        if not getattr(args, "program", None):
            raise InputError(f"{flag} goes with the LM calls of judging {judged}: give {judged} or drop {flag}")
        if args.verdicts_out is None and flag != "--price":
            raise InputError(f"{flag} needs --verdicts-out: a run stopped at the budget keeps its verdicts there, "
                             "and the same command with a larger budget resumes from them")


def _say_cost(summary: Any) -> None:
    """The judging run's tokens per item, cost (or that it is unknown) and budget, on stderr
    (`apply.summary.BatchSummary.cost_lines`)."""
    for line in summary.cost_lines():
        print(line, file=sys.stderr)


def _labelers(spec: DataSpec) -> dict[str, dict[str, int | None]] | None:
    """Each item's labels by labeler when ``--labels`` has a labeler column (`LabelFile.ratings`), else None."""
    if spec.labels_path is None:
        return None
    from rubricforge_dspy.data.labels import read_label_file

    return read_label_file(spec.labels_path).ratings or None


def _certify_cascade(args: argparse.Namespace) -> int:
    """`certify CASCADE.json --data HELD_OUT`: coverage per stage and realized risks on labeled held-out data
    (`trust.cascade.measure_cascade`); the cascade file is not changed (its guarantee is its fit's)."""
    import tempfile
    from pathlib import Path

    from rubricforge_dspy.cli.cascade import use_cascade_label_rule
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.trust.cascade import format_cascade_summary, measure_cascade

    if args.recheck or args.out_program:
        raise InputError(f"{args.program} is a cascade: its guarantee is its fit's (`rubricforge cascade fit`); "
                         "certify measures it on held-out data without --recheck or --out-program")
    cascade = load_judge(args.program, allow_import=allow_import(args))
    spec = use_cascade_label_rule(data_spec(args), cascade.guarantee,
                                  f"the cascade {args.program}")  # labels by its fit's rule
    if _labelers(spec):
        print("note: the agreement with each labeler is reported for a program's certificate, not yet for a "
              "cascade's; `rubricforge stats --labels` gives the labelers' own agreement", file=sys.stderr)
    trajectories = load_data(spec, need_labels=True, command="certify").trajectories
    needs_lm = any(stage.predictors() for stage in cascade.stages)
    with contextlib.ExitStack() as stack:
        out = args.verdicts_out or str(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "cascade.jsonl")
        lm = stack.enter_context(lm_from_args(args)) if needs_lm else None
        if lm is not None:
            print(f"judge LM: {lm_name(lm)} (for the cascade's LLM stages)", file=sys.stderr)
        summary = measure_cascade(cascade, trajectories, out, lm=lm, concurrency=args.concurrency,
                                  cascade_file=args.program)
    print(format_cascade_summary(summary))
    if args.verdicts_out:
        print(f"verdicts: {args.verdicts_out}; escalated (to label): {summary['escalated_queue']}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """What a program or a cascade file holds. Every text taken from the file (names, models, dates, methods)
    is printed escaped (`core.terminal.terminal_safe`): a file cannot drive the terminal or add a line."""
    from rubricforge_dspy.judge.cascade import is_cascade_file
    from rubricforge_dspy.trust.certificate import describe_program

    if is_cascade_file(args.program):
        from rubricforge_dspy.judge.loading import load_judge
        from rubricforge_dspy.trust.cascade import format_fit_report

        cascade = load_judge(args.program, check_certificate=False, allow_unverified=args.allow_unverified_program,
                             allow_import=allow_import(args))
        print(f"cascade {terminal_safe(args.program)}: " + " -> ".join(terminal_safe(r.name) for r in cascade.rules)
              + " -> a person")
        print(terminal_safe(format_fit_report(terminal_safe_strings(cascade.fit_report),
                                              terminal_safe_strings(cascade.guarantee)), keep_newlines=True)
              if cascade.fit_report else "hand-set thresholds: no guarantee (fit them with `rubricforge cascade fit`)")
        return 0
    print(terminal_safe(describe_program(args.program, allow_unverified=args.allow_unverified_program),
                        keep_newlines=True))
    return 0


# -- gate (issue 11) --------------------------------------------------------------------------------

def cmd_gate(args: argparse.Namespace) -> int:
    """Exit 0 when the candidate may replace the baseline, 4 (`AnswerIsNo`) when not, 2 on bad input, 3 when
    the judge LM cannot be used; 1 is a bug's, never the gate's answer."""
    import tempfile

    from rubricforge_dspy.trust.gate import gate_programs, gate_verdict_files, needs_lm

    if args.candidate_verdicts or args.baseline_verdicts:
        if not (args.candidate_verdicts and args.baseline_verdicts) or args.candidate or args.baseline or args.data \
                or args.labels:
            raise InputError("give --candidate-verdicts and --baseline-verdicts together, without "
                             "--candidate/--baseline/--data/--labels (verdict files carry their labels)")
        result = gate_verdict_files(args.candidate_verdicts, args.baseline_verdicts, args.margin, args.alpha,
                                    floor_path=args.floor_verdicts, require_beats_floor=args.require_beats_floor)
    else:
        if not (args.candidate and args.baseline and args.data) or args.floor_verdicts:
            raise InputError("give --candidate, --baseline and --data (or two verdict files; --floor-verdicts goes "
                             "with verdict files)")
        trajectories = load_data(data_spec(args), need_labels=True, command="gate").trajectories
        with contextlib.ExitStack() as stack:
            verdicts_dir = args.verdicts_dir or stack.enter_context(tempfile.TemporaryDirectory())
            # judges that call no LM (floor files) start none
            lm = (stack.enter_context(lm_from_args(args))
                  if needs_lm(args.candidate, args.baseline, allow_import=allow_import(args)) else None)
            result = gate_programs(args.candidate, args.baseline, trajectories, lm=lm, verdicts_dir=verdicts_dir,
                                   margin=args.margin, alpha=args.alpha, concurrency=args.concurrency,
                                   require_beats_floor=args.require_beats_floor, allow_import=allow_import(args))
    print(result.markdown())
    if not result.may_replace:
        raise AnswerIsNo("the candidate may not replace the baseline (the reasons are above)")
    return 0


def add_gate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    exits = "exit 0 yes, 4 no, 2 bad input, 3 judge LM unusable (1 is a bug)"
    p = sub.add_parser("gate", help=f"may a candidate judge replace the baseline? {exits}",
                       description=f"May the candidate judge replace the baseline (docs/CERTIFICATE.md)? {exits}.")
    p.add_argument("--candidate", default=None, help="candidate frozen program (or a floor file)")
    p.add_argument("--baseline", default=None, help="baseline frozen program (or a floor file)")
    add_data_arguments(p, required=False)  # --data: labeled trajectories to judge both on
    p.add_argument("--candidate-verdicts", default=None, help="verdict JSONL of the candidate (instead of --data)")
    p.add_argument("--baseline-verdicts", default=None, help="verdict JSONL of the baseline, same labeled items")
    p.add_argument("--margin", type=float, default=0.05,
                   help="non-inferiority margin on the false-pass rate difference (default 0.05)")
    p.add_argument("--alpha", type=float, default=0.05, help="level of both tests (default 0.05)")
    p.add_argument("--verdicts-dir", default=None, help="keep candidate.jsonl and baseline.jsonl here")
    p.add_argument("--require-beats-floor", action="store_true",
                   help="also require the candidate to get more items right than the symptom floor")
    add_allow_import_argument(p)
    p.add_argument("--floor-verdicts", default=None,
                   help="with verdict files: the floor's verdict JSONL on the same items "
                        "(`rubricforge floor --verdicts-dir DIR` writes DIR/floor.jsonl)")
    p.add_argument("--concurrency", type=int, default=4, help="judge requests in flight (default 4)")
    add_lm_arguments(p, reflection=False)
    p.set_defaults(func=cmd_gate)


# -- label-next (issue 11) --------------------------------------------------------------------------

def cmd_label_next(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from rubricforge_dspy.core.verdict import read_verdicts
    from rubricforge_dspy.trust.label_next import format_picks, pick, rank, write

    if not args.program and not args.verdicts:
        raise InputError("give --program (judged now) and/or --verdicts files")
    _budget_needs_verdicts_out(args, "--program")
    require_input(args)
    if args.audit and not Path(args.out).exists():  # an existing --out is refused by its writer, saying so
        _audit_paths(args)  # refused now, not after judging
    spec = spool_from_mlflow(args, data_spec(args), args.out)
    trajectories = load_data(spec, command="label-next").trajectories
    judges: dict[str, Mapping[str, dict[str, Any]]] = {str(path): read_verdicts(path)
                                                       for path in args.verdicts or []}
    ablations = {Path(path).stem: read_verdicts(path) for path in args.criterion_verdicts or []}
    if args.program:
        from rubricforge_dspy.judge.loading import load_judge
        from rubricforge_dspy.trust.certify import judge_labeled

        with contextlib.ExitStack() as stack:
            out = args.verdicts_out or str(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "v.jsonl")
            lm = stack.enter_context(lm_from_args(args))
            records = judge_labeled(load_judge(args.program, lm=lm, allow_import=allow_import(args)), trajectories, out,
                                    lm=lm, concurrency=args.concurrency, token_budget=args.token_budget,
                                    on_summary=_say_cost, **cost_options(args))
        judges = {args.program: {r["id"]: r for r in records}, **judges}
    main_name = next(iter(judges))
    ids = {t.id for t in trajectories}
    for name, verdicts in {**judges, **ablations}.items():
        missing, extra = len(ids - set(verdicts)), len(set(verdicts) - ids)
        if missing or extra:
            print(f"note: {name}: {missing} trajectories without a verdict, {extra} verdicts for other ids "
                  "(ignored)", file=sys.stderr)
    ranked = rank(trajectories, judges[main_name], judges, ablations)
    chosen = pick(ranked, args.k)
    n = write(chosen, args.out, where=main_name)
    print(f"wrote {n} of {len(trajectories)} trajectories to label (main judge {main_name}) -> {args.out}")
    tag_label_next_in_mlflow(args, chosen)
    if chosen:
        print(format_picks(chosen))
    if args.audit:
        _audit_sample(args, trajectories, judges[main_name])
    print("fill in label (0/1) and reward (or write a CSV id,label), then: rubricforge induce --init PROGRAM "
          "--data LABELED... [--labels CSV]", file=sys.stderr)
    return 0


def _audit_paths(args: argparse.Namespace) -> tuple[str, str]:
    """Where ``--audit`` writes the draw's record and its decided items; refused (exit 2) when either exists, before
    anything is judged or written (a draw is made once, before any label)."""
    from pathlib import Path

    stem = args.out[:-6] if args.out.endswith(".jsonl") else args.out
    record_path = args.audit_out or f"{stem}.audit.json"
    queue_path = f"{record_path[:-5] if record_path.endswith('.json') else record_path}.jsonl"
    for path in (record_path, queue_path):
        if Path(path).exists():
            raise InputError(f"{path} exists: an audit sample is already recorded there; a draw is made once, "
                             "before any label: keep it (give it to `rubricforge review --audit`), or choose another "
                             "--audit-out")
        writable_file(path, "audit sample")
    return record_path, queue_path


def _audit_sample(args: argparse.Namespace, trajectories: list[Trajectory],
                  main: Mapping[str, Mapping[str, Any]]) -> None:
    """``--audit N``: draw the seeded audit sample over the items the main judge judged, write its record and the
    decided items of the draw (generic JSONL, label null) to label beside the escalated queue (docs/CASCADE.md,
    "Recalibration")."""
    from rubricforge_dspy.data.formats.jsonl import to_record, write_records
    from rubricforge_dspy.trust.label_next import decided, draw_audit, write_audit

    record_path, queue_path = _audit_paths(args)
    judged = [t for t in trajectories if t.id in main]
    draw = draw_audit(((t.id, str(main[t.id].get("task_id") or t.task_id or ""), decided(main[t.id]))
                       for t in judged), args.audit, args.audit_seed)
    write_audit(draw, record_path)
    wanted = set(draw.decided)
    write_records((to_record(t, reward=None, label=None, metadata={"audit": {"draw": draw.digest, "seed": draw.seed}})
                   for t in judged if t.id in wanted), queue_path)
    print(f"{draw.summary()} -> {record_path} (the draw), {queue_path} (its decided items, to label). Label them "
          "with `rubricforge review --audit " + record_path + "`: their labels are the ones a refit may calibrate on")


def add_label_next_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("label-next", help="rank unlabeled trajectories by how much a label would teach")
    add_data_arguments(p, required=False)  # --data, or --from-mlflow (the picks are tagged there)
    add_mlflow_source_arguments(p)
    p.add_argument("--program", default=None, help="frozen program whose verdicts lead the ranking (judged now)")
    p.add_argument("--verdicts", nargs="+", default=None,
                   help="verdict files of other judges on the same data (their disagreement ranks items up)")
    p.add_argument("--criterion-verdicts", nargs="+", default=None,
                   help="verdict files of criterion ablations (rubric minus one criterion), named after it")
    p.add_argument("-k", type=int, default=20, help="how many to pick (default 20)")
    add_token_budget_argument(p)
    add_cost_arguments(p)
    p.add_argument("--out", required=True, help="new JSONL file, generic format, label and reward null")
    p.add_argument("--verdicts-out", default=None, help="keep the program's verdicts here")
    p.add_argument("--audit", type=int, default=50, metavar="N",
                   help="also draw a seeded random audit sample of N tasks (items without tasks) over everything "
                        "judged, whose labels a cascade refit may calibrate on (default 50; 0: none)")
    p.add_argument("--audit-seed", type=int, default=0, help="the audit draw's seed (recorded; default 0)")
    p.add_argument("--audit-out", default=None,
                   help="the audit draw's record (default OUT.audit.json; its decided items go to OUT.audit.jsonl)")
    p.add_argument("--concurrency", type=int, default=4, help="judge requests in flight (default 4)")
    add_lm_arguments(p, reflection=False)
    add_allow_import_argument(p)
    p.set_defaults(func=cmd_label_next)


def add_certify_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("certify", help="judge held-out labeled data and write a certificate into the program")
    p.add_argument("program", help="frozen program, saved segments or explorer judge, or cascade (.json)")
    add_data_arguments(p)
    p.add_argument("--out-program", default=None, help="write the certified program here (default: in place)")
    p.add_argument("--recheck", action="store_true",
                   help="re-judge a labeled canary set; exit 4 when the false-pass rate is significantly "
                        "higher than certified (one-sided exact binomial test), 0 when not")
    p.add_argument("--alpha", type=float, default=0.05, help="test level; intervals are (1 - alpha)")
    p.add_argument("--verdicts-out", default=None, help="keep the verdict JSONL here (default: a temp file)")
    p.add_argument("--concurrency", type=int, default=4, help="judge requests in flight (default 4)")
    add_token_budget_argument(p)
    add_cost_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--resamples", type=int, default=2000, help="task-clustered bootstrap resamples")
    add_lm_arguments(p, reflection=False)
    add_allow_import_argument(p)
    p.set_defaults(func=cmd_certify)

    p = sub.add_parser("show", help="rubric summary and certificate of a frozen program")
    p.add_argument("program", help="a frozen program, floor, hybrid, segments or explorer judge, or cascade (.json)")
    p.add_argument("--allow-unverified-program", action="store_true",
                   help="show a program whose manifest cannot verify it (marked UNVERIFIED) instead of refusing it")
    add_allow_import_argument(p)
    p.set_defaults(func=cmd_show)
