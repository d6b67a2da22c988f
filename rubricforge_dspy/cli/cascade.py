"""`rubricforge cascade fit`: fit a certified cascade (docs/CASCADE.md) from saved stages and labeled
calibration data, and save it beside its stages. `rubricforge judge --cascade` judges with it.

    rubricforge cascade fit --stage floor.json --stage judge.json --data cal.jsonl [--labels L]
        --alpha 0.1 [--max-false-pass 0.05] --delta 0.1 [--order-data fit.jsonl] [--bound per-stage|pooled]
        [--method ordered_sequence] --out cascade.json

A stage is a saved judge (a floor, a frozen program, a hybrid, a cascade), or recorded verdicts (docs/CASCADE.md,
"Any judge as a stage"): a verdict JSONL (``rubricforge judge``'s, or any tool's lines in the verdict-line
schema), ``mlflow:<experiment>/<assessment name>`` (``--mlflow-uri``), or ``inspect:<log.eval>:<scorer>``; a
recorded stage looks each trajectory up by id and makes no LM call; an id it has no verdict for is handed on
(counted in the output).

Every labeled trajectory is used; the task is the statistical unit (its trials' losses are averaged). A stage the
certified thresholds leave deciding nothing is dropped from the saved cascade (the output says so).

The label rule (``--label-threshold``, else each format's own, and the ``--labels`` file) is recorded in the
cascade's guarantee; ``judge --cascade``, ``certify`` and ``report`` read labels against the cascade by it (another
``--label-threshold`` there is refused, exit 2).

Exit 2 when nothing can be certified (`CascadeCalibrationError`: the message says how many labels the
requested alpha would need), 3 when an LLM stage's LM fails on the calibration items (`CascadeStageError`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any

from rubricforge_dspy.cli.cost_options import add_cost_arguments, budget_cost_line, lm_budget, one_budget
from rubricforge_dspy.cli.data_options import add_data_arguments, data_spec, load_data
from rubricforge_dspy.cli.lm_options import add_lm_arguments, add_token_budget_argument, lm_from_args
from rubricforge_dspy.cli.stage_options import add_allow_import_argument
from rubricforge_dspy.core.errors import InputError, RubricForgeError
from rubricforge_dspy.core.files import writable_file
from rubricforge_dspy.core.terminal import check_name
from rubricforge_dspy.data.spec import DataSpec
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.metrics.risk_methods import (
    DEFAULT_BOUND,
    DEFAULT_FALSE_PASS,
    DEFAULT_METHOD,
    FALSE_PASS_RATES,
    LTT_METHODS,
    P_VALUES,
)

if TYPE_CHECKING:
    from rubricforge_dspy.judge.contract import BaseJudge

FIT_DESCRIPTION = """\
Fit a certified cascade: each stage decides only where its thresholds are certified, on labeled
calibration data, so that with probability >= 1 - delta, for every stage that decides, the
disagreement among the items it decides is <= alpha and its false-pass rate (passed among the
failed items it decides) <= --max-false-pass (default alpha / 2); --bound pooled bounds the
disagreement over everything decided instead. What no stage decides goes to a person. Stages run
cheapest first; a stage certified to decide nothing is dropped.

The threshold vectors are tested in a fixed order that never depends on alpha: from --order-data
(labeled trajectories the calibration never sees, e.g. the fit split the floor was fit on: the
floor's out-of-fold probabilities, the other stages' verdicts on them; an LLM stage is run on
them), else label-free. A certificate at alpha is then one at every larger alpha.

A stage is a saved judge (a floor, a frozen program, a hybrid, a cascade) or recorded verdicts:
a verdict .jsonl (rubricforge judge's, or any tool's lines in the verdict-line schema),
mlflow:<experiment>/<assessment name>, or inspect:<log.eval>:<scorer>. A recorded stage looks each
trajectory up by id and makes no LM call; an id it has no verdict for is handed on (counted).

Every labeled trajectory is used; the task is the statistical unit (its trials' losses averaged).
The label rule (--label-threshold, else each format's own) is recorded in the cascade: labels
read against it later (judge --cascade, certify, report) use it, and another rule is refused."""

FIT_EPILOG = """\
example:
  rubricforge floor --data fit.jsonl --save-floor floor.json
  rubricforge cascade fit --stage floor.json --stage judge.json --data cal.jsonl \\
      --order-data fit.jsonl --alpha 0.1 --delta 0.1 --out cascade.json
  rubricforge judge --cascade cascade.json --data runs.jsonl --out preds.jsonl

exit codes: 0 saved; 2 bad input, or nothing certified (the message says what was used and
about how many labeled tasks the requested alpha needs); 3 an LLM stage's LM failed; 5 stopped before
--token-budget or --cost-budget would be crossed (no cascade written).
docs/CASCADE.md has the theorem, its assumptions and the benchmark."""

__all__ = ["add_cascade_parser", "cmd_cascade_fit", "load_stage", "use_cascade_label_rule"]


def use_cascade_label_rule(spec: DataSpec, guarantee: dict[str, Any] | None, what: str) -> DataSpec:
    """Read labels against a cascade by the rule it was certified with: the returned spec's ``label_rule`` is the
    cascade's rule when none was given (said in one line on stderr); another rule is refused
    (`report.cascade.LabelRuleMismatchError`, exit 2, naming both)."""
    from rubricforge_dspy.core.cascade import cascade_label_rule

    rule, note = cascade_label_rule(guarantee, spec.label_rule, what)
    if note:
        print(note, file=sys.stderr)
    return spec.replace(label_rule=rule)


def _check(args: argparse.Namespace) -> None:
    if not 0 < args.alpha < 1 or not 0 < args.delta < 1:
        raise InputError(f"--alpha and --delta must be in (0, 1), got {args.alpha} and {args.delta}")
    if args.max_false_pass is not None and not 0 < args.max_false_pass < 1:
        raise InputError(f"--max-false-pass must be in (0, 1), got {args.max_false_pass}")
    if not args.out.endswith(".json"):
        raise InputError(f"--out {args.out}: a cascade is a .json file")
    for name in args.name or ():  # before any work: a name is stored, printed and makes a file name
        check_name(name, "--name")


def _budget_needs_an_llm_stage(args: argparse.Namespace, needs_lm: bool) -> None:
    """Refuse ``--token-budget``, ``--cost-budget`` or ``--price`` when no stage calls an LM (nothing to cap)."""
    for flag, given in (("--token-budget", args.token_budget), ("--cost-budget", args.cost_budget),
                        ("--price", args.price)):
        if given is not None and not needs_lm:
            raise InputError(f"{flag} caps and prices the LM calls of the fit's LLM stages, and no --stage calls an "
                             f"LM (floors and recorded verdicts are free): drop {flag}")


def load_stage(spec: str, args: argparse.Namespace) -> BaseJudge:
    """The stage a ``--stage`` value names (`judge.loading.stage_from_spec`: a registered stage kind's prefix or
    suffix, e.g. a verdict JSONL or ``mlflow:``/``inspect:`` as a recorded stage, else a saved judge). Every
    verdict line is checked here, before any work (exit 2 naming the file and line)."""
    import rubricforge_dspy.integrations.recorded  # noqa: F401  (registers the mlflow: and inspect: stage kinds)
    from rubricforge_dspy.judge.loading import stage_from_spec

    return stage_from_spec(spec, mlflow_uri=args.mlflow_uri, allow_unverified=args.allow_unverified_program,
                           allow_import=args.allow_import_stage)


def _missing_notes(names: list[str], stages: list[BaseJudge]) -> list[str]:
    """One line per recorded stage (or hybrid over one) that had no verdict for some calibration items, and one
    per recorded stage some of whose lines have a score that contradicts their verdict (handed on)."""
    notes = []
    for name, stage in zip(names, stages, strict=False):
        part: Any = getattr(stage, "llm", stage)
        if getattr(part, "n_missing", 0):
            notes.append(f"note: stage {name!r}: {part.n_missing} of {part.n_lookups} calibration item(s) have no "
                         f"verdict in {part.source}: handed on (the first: {part.missing_ids[0]})")
        if getattr(part, "n_contradictions", 0):  # the tool's own verdict is kept; a contradicting line is not one
            notes.append(f"warning: stage {name!r}: {part.contradiction_note()}")
    return notes


def cmd_cascade_fit(args: argparse.Namespace) -> int:
    """Exit 0 with the cascade saved; 2 when the calibration set cannot certify anything (with the labels
    needed) or for bad input; 3 when an LLM stage's LM fails."""
    from rubricforge_dspy.data.label_journal import exchangeable_labels
    from rubricforge_dspy.lm.budgeted import BudgetedLM, budget_report, spending, stops_at_budget
    from rubricforge_dspy.trust.cascade import FitOptions, fit_cascade, format_fit_report, stage_names

    _check(args)
    one_budget(args, "cascade fit")
    writable_file(args.out, "cascade")
    stages = [load_stage(stage, args) for stage in args.stage]
    data = data_spec(args)
    trajectories = load_data(data, need_labels=True, command="cascade fit").trajectories
    selection = exchangeable_labels(trajectories, data.labels_path, data=list(data.paths), data_format=data.format,
                                    label_threshold=data.label_rule)  # issue 39.6: only exchangeable labels
    trajectories = selection.kept
    if selection.journal is not None:
        print(selection.summary())
    order = None
    if args.order_data is not None:
        order = load_data(data.replace(paths=args.order_data), need_labels=True,
                          command="cascade fit --order-data").trajectories
    needs_lm = any(stage.predictors() for stage in stages)
    _budget_needs_an_llm_stage(args, needs_lm)
    spent: dict[str, Any] | None = None
    with (lm_from_args(args) if needs_lm else contextlib.nullcontext()) as lm:
        budget = lm_budget(args, lm) if lm is not None else None
        judge_lm = lm if budget is None else BudgetedLM(lm, budget, "judge")  # refused here without max_tokens
        if lm is not None:
            print(f"judge LM: {lm_name(lm)} (for the LLM stages)", file=sys.stderr)
            for stage in stages:
                if stage.predictors():
                    stage.set_lm(judge_lm)
        flag = "--cost-budget" if args.cost_budget is not None else "--token-budget"
        with stops_at_budget(budget, [judge_lm],
                             "The fit stopped there: no cascade was written, and the fit keeps no verdicts (its "
                             f"stages' confidences live in memory): the same command with a larger {flag} judges "
                             "the calibration items again"):
            cascade = fit_cascade(stages, trajectories, FitOptions(
                args.alpha, args.delta, args.max_false_pass, args.method, names=args.name, seed=args.seed,
                num_threads=args.concurrency, p_values=args.p_values, one_per_task=args.one_per_task,
                label_rule=data.label_rule, labels=data.labels_path, bound=args.bound.replace("-", "_"),
                false_pass=args.false_pass.replace("-", "_"), order_trajectories=order))
        if budget is not None:
            spent = budget_report(budget, [judge_lm])
    if cascade.fit_report is None:  # fit_cascade records its report: a cascade without one is a bug here
        raise RubricForgeError("cascade fit: the fitted cascade carries no fit report")
    cascade.fit_report["labels_selected"] = selection.to_dict()
    if spent is not None:  # what the fit's LM calls spent of the cap, kept with the fit's other counts
        cascade.fit_report["budget"] = spent
    cascade.save(args.out)
    print(format_fit_report(cascade.fit_report, cascade.guarantee))
    if spent is not None:
        print(f"{'cost' if 'cap_usd' in spent else 'token'} budget: {spending(spent)}", file=sys.stderr)
    if lm is not None:
        print(budget_cost_line(args, lm, spent, "the fit's LM calls"), file=sys.stderr)
    names = args.name if args.name is not None else stage_names(stages)
    for note in _missing_notes(names, stages):
        print(note)
    print(f"written to: {args.out} (stages beside it: "
          + ", ".join(f"{args.out[:-5]}.{rule.name}.json" for rule in cascade.rules) + ")")
    return 0


def add_cascade_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cascade", help="a certified cascade: the free floor, then LLM judges, then a person")
    commands = p.add_subparsers(dest="cascade_command", required=True)
    f = commands.add_parser("fit", help="fit per-stage thresholds on labeled calibration data (Learn-then-Test)",
                            description=FIT_DESCRIPTION, epilog=FIT_EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("--stage", action="append", required=True,
                   help="a saved judge (floor file, frozen program, hybrid), or recorded verdicts: a verdict .jsonl, "
                        "mlflow:<experiment>/<assessment name>, inspect:<log.eval>:<scorer>; cheapest first; repeat "
                        "per stage")
    f.add_argument("--mlflow-uri", default=None, metavar="URI",
                   help="the MLflow server of an mlflow: stage (default: $MLFLOW_TRACKING_URI)")
    add_allow_import_argument(f)
    f.add_argument("--name", action="append", default=None,
                   help="stage names, one per --stage (default: floor, judge, judge2...)")
    add_data_arguments(f)
    f.add_argument("--alpha", type=float, required=True, help="bound on disagreement among decided items")
    f.add_argument("--max-false-pass", type=float, default=None,
                   help="beta: the bound on the false-pass rate among decided failed items (default: alpha / 2 per "
                        "stage with --bound per-stage; not bounded with --bound pooled)")
    f.add_argument("--delta", type=float, default=0.1, help="the bounds hold with probability >= 1 - delta")
    f.add_argument("--method", choices=LTT_METHODS, default=DEFAULT_METHOD,
                   help=f"how the threshold vectors are tested (default {DEFAULT_METHOD}: every calibration task "
                        "tests them in an order from --order-data, or label-free, never from alpha; holm/bonferroni: "
                        "every distinct vector at once; split_fixed_sequence: 20%% of the tasks order them at alpha, "
                        "the rest test them (not monotone in alpha); fail_first_sequence: fail-only vectors first)")
    f.add_argument("--bound", choices=("per-stage", "pooled"), default=DEFAULT_BOUND.replace("_", "-"),
                   help="per-stage (default): every stage that decides has disagreement <= alpha and false-pass rate "
                        "<= --max-false-pass (default alpha / 2); pooled: over everything decided")
    f.add_argument("--false-pass", choices=tuple(r.replace("_", "-") for r in FALSE_PASS_RATES),
                   default=DEFAULT_FALSE_PASS.replace("_", "-"),
                   help="which false-pass rate --max-false-pass bounds per stage: among-failed (default: passes among "
                        "the failed items a stage decides, beta default alpha / 2) or among-passes (failures among a "
                        "stage's passes, beta default alpha: more power on small sets, weaker against a stage that "
                        "passes many failures beside many successes; docs/CASCADE.md)")
    f.add_argument("--order-data", default=None, metavar="FIT.jsonl",
                   help="labeled trajectories the calibration never sees (the fit split; no task in both), read with "
                        "the same data options, that order the tested vectors (--method ordered_sequence)")
    f.add_argument("--p-values", choices=("auto", *P_VALUES), default="auto",
                   help="auto (default): exact binomial with one trial per task, else betting over task means")
    f.add_argument("--one-per-task", action="store_true",
                   help="keep one drawn trial per task (the rest are counted as dropped); default: every trial")
    f.add_argument("--seed", type=int, default=0,
                   help="the order of the tasks, the split's ordering share, the trial kept with --one-per-task")
    f.add_argument("--concurrency", type=int, default=4, help="threads of each stage's calibration batch")
    add_token_budget_argument(f, help_text=(
        "the most tokens (prompt + completion, as the LM reports them) the fit's LM calls may spend: every call of "
        "its LLM stages on the calibration and --order-data items reserves its worst case (its prompt's bytes + "
        "--max-tokens, every attempt) first; the fit stops before the cap would be crossed (exit 5) and writes no "
        "cascade. The fit keeps no verdicts: a re-run judges the items again"))
    add_cost_arguments(f)
    f.add_argument("--allow-unverified-program", action="store_true",
                   help="load a stage whose manifest cannot verify it, with a warning; refused otherwise")
    f.add_argument("--out", required=True, help="the cascade .json (its stages are saved beside it)")
    add_lm_arguments(f, reflection=False)
    f.set_defaults(func=cmd_cascade_fit)
