"""`rubricforge judge`: judge a file of trajectories into a JSONL of verdicts, with a program or a cascade
(``--cascade``), locally, on Ray (``--ray``) or through the endpoint's Batch API (``--batch-api``); every path
reads the input as a stream (by path), goes through the one job runner (`apply.stream`) and ends with one
epilogue (`_epilogue`).
`rubricforge_dspy.cli.main` registers the command and its flags."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rubricforge_dspy.cli.cost_options import cost_options
from rubricforge_dspy.cli.data_options import data_spec, spool_sessions
from rubricforge_dspy.cli.integrations import (
    require_input,
    spool_from_mlflow,
    tag_escalated_in_mlflow,
    write_verdicts_to_mlflow,
)
from rubricforge_dspy.cli.lm_options import lm_from_args
from rubricforge_dspy.cli.read_options import reading_judge
from rubricforge_dspy.cli.stage_options import allow_import
from rubricforge_dspy.core.errors import ENVIRONMENT_ERRNOS, InputError
from rubricforge_dspy.lm.config import lm_name

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Any

    from rubricforge_dspy.core.presets import Preset
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.label_checks import LabelTally
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.data.spec import DataSpec
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.contract import BaseJudge

__all__ = ["cmd_judge"]


def _epilogue(summary: Any, report: LoadReport, join: LabelJoin | None, tally: LabelTally) -> None:
    """What every judging path (local, Ray, Batch API) says when it ends: the load's problems and the label
    join, label warnings, the run's summary; then `JudgeUnavailableError` (exit 3) when the run produced no
    verdict: every line of this run an abstention, whatever the kind (LM errors, truncated, unparsable
    answers), with the counts by kind. Nothing judged because every item was judged already is said and
    is not an error. An escalation (a cascade's item that no stage was sure of) is not a failure of the
    judge: a run whose every item was escalated ends with exit 0 and says that everything went to a person."""
    from rubricforge_dspy.cli.data_options import print_label_warnings, print_load_problems
    from rubricforge_dspy.lm.circuit import JudgeUnavailableError

    print_load_problems(report, join.finish() if join else None)
    print_label_warnings(tally)
    print(summary.format(), file=sys.stderr)
    if not summary.judged:
        if summary.resumed:
            print(f"nothing to do: all {summary.resumed} item(s) were judged already in {summary.out_path}",
                  file=sys.stderr)
        return
    escalated = summary.abstained.get("escalated", 0)
    if escalated and escalated == summary.judged:
        print(f"every item ({escalated}) was escalated: no stage was sure enough, all of them went to a person "
              f"(the labeling queue: {getattr(summary, 'escalated_path', 'see above')})", file=sys.stderr)
    if summary.n_abstained - escalated < summary.judged:
        return
    kinds = ", ".join(f"{kind}={n}" for kind, n in sorted(summary.abstained.items()))
    example = "; ".join(f"{kind}: {(error.strip().splitlines() or [''])[0][:200]}"
                        for kind, error in sorted(summary.errors.items()))
    raise JudgeUnavailableError(
        f"no verdict was produced: every judge call failed; all {summary.judged} item(s) of this run abstained "
        f"({kinds}). {example}. The lines are in {summary.out_path}; fix the server or the judge's settings (e.g. "
        "a larger --max-tokens for truncated answers) and judge again into a new --out")


def cmd_judge(args: argparse.Namespace) -> int:
    """Exit 0 when this run produced a verdict (or had nothing left to judge); 3 when it produced none
    (every item abstained, whatever the kind, with the counts by kind) or when too many calls failed in
    a row (`--max-consecutive-errors`); 2 for bad input, found before the first LM call."""
    require_input(args)
    spec = spool_from_mlflow(args, data_spec(args), args.out)  # --from-mlflow: the traces, this run's input file
    spec = spool_sessions(spec, args.out, to_mlflow=args.to_mlflow)  # --session-key: one trajectory per session
    try:
        judge, cascade = _judge(args, spec)
    except OSError as error:  # a write beside --out refused (a full disk): name where, for the one line
        if error.filename is not None or error.errno not in ENVIRONMENT_ERRNOS:
            raise
        raise OSError(error.errno, error.strerror, f"{Path(args.out).parent} (beside {args.out})") from error
    # --to-mlflow: one assessment per trace and program; a cascade's escalated traces tagged for labeling there
    write_verdicts_to_mlflow(args, args.out, cascade or judge)
    if cascade is not None:
        from rubricforge_dspy.apply.cascade import escalated_path

        tag_escalated_in_mlflow(args, args.escalated_out or escalated_path(args.out))
    return 0


def _cascade_path(args: argparse.Namespace) -> str | None:
    """The cascade file of this run: ``--cascade``, or a ``--program`` that is a cascade file."""
    from rubricforge_dspy.judge.cascade import is_cascade_file

    if args.cascade is not None:
        if args.program is not None:
            raise InputError("give --cascade or --program, not both")
        return str(args.cascade)
    if args.program is not None and is_cascade_file(args.program):
        return str(args.program)
    if args.escalated_out is not None:
        raise InputError("--escalated-out goes with --cascade")
    return None


def _judge(args: argparse.Namespace, spec: DataSpec) -> tuple[BaseJudge | None, str | None]:
    """Judge ``spec``'s input (the run as `args` say); returns the judge used (None: the seed) and the cascade file
    (None: a program).

    Every path (local, Ray, Batch API; a program or a cascade) runs through the one job runner
    (`apply.stream.run_judge_file`, with the Ray or Batch API back end's calls), reading the input as a stream (by
    path: never loaded whole)."""
    from rubricforge_dspy.apply.stream import judged_already
    from rubricforge_dspy.cli.presets import judge_render, resolve
    from rubricforge_dspy.cli.ray_options import check_endpoints, run_ray_judge
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.data.label_checks import LabelTally
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.judge.loading import load_judge

    cascade = _cascade_path(args)
    if args.read != "budget" and (args.batch_api or args.ray is not None):
        raise InputError(f"--read {args.read} runs here only (not with --batch-api or --ray): its judge makes several "
                         "dependent LM calls per item, which one batch request per item cannot carry")
    if cascade is not None and args.read != "budget":
        raise InputError(f"--read {args.read} goes with --program, not a cascade: a cascade's stages read as they "
                         "were saved (save a segments or explorer judge as a stage of the cascade instead)")
    report, tally = LoadReport(), LabelTally()
    preset = resolve(args)
    unverified = args.allow_unverified_program
    judge: BaseJudge | None
    if cascade is not None:
        from rubricforge_dspy.apply.cascade import check_outputs
        from rubricforge_dspy.apply.cascade_job import check_bound
        from rubricforge_dspy.cli.cascade import use_cascade_label_rule

        check_outputs(args.out, args.escalated_out)  # before anything is read, started or paid
        check_bound(args.out, cascade)  # an output another cascade wrote is never "done" for this one
        judge, render = load_judge(cascade, allow_unverified=unverified, allow_import=allow_import(args)), None
        spec = use_cascade_label_rule(spec, judge.guarantee, f"the cascade {cascade}")  # labels by its fit's rule
    else:
        # The program is loaded once, here (with the override if given); the library gets the judge. A frozen
        # program keeps the render it was induced with (None), but for the sizes the flags give.
        judge = None if args.program is None else load_judge(args.program, allow_unverified=unverified,
                                                             allow_import=allow_import(args))
        render = judge_render(args, preset, lambda: judge.render_config if judge is not None else None)
        if args.read != "budget":  # a segments or explorer judge from the program's rubric and render
            judge = reading_judge(judge, args.read, render, args.program or "the seed rubric")
            render = None  # the reading judge was made with it (an explorer's caps are sized from it)
    check_endpoints(args)
    join = LabelJoin(spec.labels_path, spec.label_rule) if spec.labels_path is not None else None
    common = {**spec.read_options(), "labels": join, "load_report": report,
              "on_trajectory": tally.add, "limit": spec.limit, "cache": False if args.no_cache else True}
    if cascade is not None:
        common.update(escalated_out=args.escalated_out, cascade_file=cascade)
    if args.token_budget is not None:
        if args.batch_api or args.ray is not None:
            raise InputError("--token-budget is enforced by local runs only: a Ray or Batch API run cannot stop its "
                             "calls in flight before the cap; drop --ray/--batch-api or --token-budget")
        common["token_budget"] = args.token_budget
    if args.cost_budget is not None and (args.batch_api or args.ray is not None):
        raise InputError("--cost-budget is enforced by local runs only: a Ray or Batch API run cannot stop its "
                         "calls in flight before the cap; drop --ray/--batch-api or --cost-budget")
    common.update(cost_options(args))  # --price, --cost-budget
    if args.batch_api:
        summary = _judge_batch_api(args, spec, judge, render, common)
    elif args.ray is not None:
        summary = run_ray_judge(args, spec, preset, judge, render, common)
    elif (judged := judged_already(spec, args.out)) is not None:
        # nothing left to judge: said so without starting the embedded llama.cpp server (or calling an endpoint)
        print(f"nothing to do: all {judged} item(s) were judged already in {args.out} (no LM started)",
              file=sys.stderr)
        return judge, cascade
    else:
        summary = _judge_here(args, spec, judge, render, preset, cascade is not None, common)
    _epilogue(summary, report, join, tally)
    return judge, cascade


def _judge_here(args: argparse.Namespace, spec: DataSpec, judge: BaseJudge | None, render: RenderConfig | None,
                preset: Preset, for_cascade: bool, common: dict[str, Any]) -> Any:
    """`judge` on this machine: the judge LM started (`_lm`) and named on stderr, then the one job runner
    (`apply.stream.run_judge_file`) over ``spec``'s input; its `BatchSummary`."""
    from rubricforge_dspy.apply.stream import run_judge_file

    with _lm(args, judge) as lm:
        if not for_cascade:
            reads = ("the program's" if render is None else str(render.max_tokens)) + " tokens"
            if args.read != "budget" and judge is not None:  # the reading judge holds the render
                reads = f"--read {args.read}, {judge.render_config.max_tokens} tokens per call"
            print(f"judge LM: {lm_name(lm)}; preset {preset.name}: concurrency {preset.concurrency}, render "
                  f"{reads}", file=sys.stderr)
        elif lm is not None:
            print(f"judge LM: {lm_name(lm)} (for the cascade's LLM stages)", file=sys.stderr)
        return run_judge_file(judge, list(spec.paths), args.out, lm=lm, render_config=render,
                              concurrency=preset.concurrency,
                              max_consecutive_lm_errors=args.max_consecutive_errors or None, **common)


def _lm(args: argparse.Namespace, judge: BaseJudge | None) -> AbstractContextManager[Any]:
    """The judge LM's context (`lm_from_args`: it may start the embedded server), or none for a cascade whose
    stages make no LM call."""
    from rubricforge_dspy.judge.cascade import Cascade

    if isinstance(judge, Cascade) and not judge.predictors():
        return contextlib.nullcontext()
    return lm_from_args(args)


def _judge_batch_api(args: argparse.Namespace, spec: DataSpec, judge: BaseJudge | None,
                     render: RenderConfig | None, common: dict[str, Any]) -> Any:
    """`judge --batch-api`: the one job runner (`apply.stream.run_judge_file`) with each LLM stage's calls in one
    batch (`apply.openai_batch.BatchCalls`; a cascade's floors locally, a batch per chunk); a plain judge's pending
    batch is recorded beside ``--out`` and its summary is a `BatchApiSummary`. A batch that failed, expired or was
    cancelled raises `BatchJobFailed` (a `ServerError`: exit 3)."""
    from rubricforge_dspy.apply.openai_batch import BatchCalls
    from rubricforge_dspy.apply.stream import run_judge_file
    from rubricforge_dspy.judge.cascade import Cascade
    from rubricforge_dspy.judge.loading import judge_from

    def status(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    judge = judge_from(judge)
    cascade = isinstance(judge, Cascade)
    with _lm(args, judge) as lm:
        if lm is not None:
            print(f"judge LM: {lm_name(lm)} through the Batch API of its endpoint"
                  + (" (the cascade's LLM stages)" if cascade else ""), file=sys.stderr)
        calls = BatchCalls(poll_interval=args.poll_interval, on_status=status, out_path=None if cascade else args.out)
        summary = run_judge_file(judge, list(spec.paths), args.out, lm=lm, calls=calls, render_config=render,
                                 **common)
    return summary if cascade else calls.summary_of(summary)
