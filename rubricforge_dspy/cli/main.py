"""`rubricforge`: the command line.

    rubricforge demo                       induce + evaluate on bundled tau-bench data (embedded LM)
    rubricforge judge --data D --out P     judge a trajectory file (resumable, cached)
    rubricforge induce --data D --out programs/NAME.json
    rubricforge report --predictions artifacts/RUN/ --out artifacts/RUN/report.md
    rubricforge stats --data D [--json]    counts of a file
    rubricforge render --data D --index I  exactly what the judge sees
    rubricforge serve --engine sglang --model M
    rubricforge certify PROGRAM --data HELD_OUT   measure the judge on labeled data it never saw
    rubricforge show PROGRAM               rubric summary and certificate
    rubricforge gate --candidate NEW --baseline OLD --data LABELED   may NEW replace OLD? (exit 0 yes, 4 no)
    rubricforge label-next --program P --data UNLABELED -k 20 --out FILE.jsonl
    rubricforge convert --data IN [--labels L] --out OUT.jsonl   any input as the generic JSONL
    rubricforge floor --data LABELED [--json]   the floor every judge must beat (no LM, seconds)

Every command that reads trajectories takes --labels FILE (CSV, JSONL or SWE-bench results.json,
joined by id) and --label-threshold (default: each format's own rule); see docs/FORMAT.md.

Exit codes: 0 done; 2 bad input or environment (a file, a flag, a full disk, a path that cannot be
written: one line says which and what to do); 3 a judge LM or server that cannot be used; 4 the answer
is no (gate: the candidate may not replace the baseline; certify --recheck: the judge got worse);
1 a bug (its traceback is printed); 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import signal
import sys
import threading
import traceback
from pathlib import Path

from rubricforge_dspy.cli.integrations import (add_mlflow_sink_arguments, add_mlflow_source_arguments,
                                               reads_from_mlflow, require_input, spool_from_mlflow,
                                               write_verdicts_to_mlflow)
from rubricforge_dspy.cli.data_options import (FORMAT_CHOICES, add_data_arguments, add_label_arguments, load_data,
                                               stream_data)
from rubricforge_dspy.core.errors import (ENVIRONMENT_ERRNOS, EXIT_BUG, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_SERVER,
                                          InputError, ServerError)
from rubricforge_dspy.core.files import writable_file
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.cli.lm_options import add_lm_arguments, lm_from_args
from rubricforge_dspy.cli.ray_options import add_ray_arguments

FORMATS = FORMAT_CHOICES


def _add_data_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    add_data_arguments(parser, FORMATS, required=required)


def _load(args, need_labels: bool = False, warn: bool = True):
    data = load_data(args, need_labels=need_labels, warn=warn)
    return data.trajectories, data.report


@reads_from_mlflow
def cmd_stats(args) -> int:
    """Counts of the input, read as a stream: memory holds per-task counters, never the trajectories
    (each record is checked as every loading command checks it, but no step is built)."""
    data = stream_data(args, counts=True)
    n = unlabeled = positives = tool_errors = 0
    reward_sum = 0.0
    tasks, domains, agents = set(), set(), set()
    for t in data.trajectories:
        n += 1
        tasks.add((t.domain, t.task_id))
        domains.add(t.domain)
        agents.add(t.agent)
        tool_errors += t.n_tool_errors
        if t.label is None:
            unlabeled += 1
        else:
            positives += t.label
            reward_sum += t.reward
    report = data.report
    labeled = n - unlabeled
    stats = {
        "trajectories": n,
        "unlabeled": unlabeled,
        "positives": positives,
        "tasks": len(tasks),
        "domains": sorted(domains),
        "agents": sorted(agents),
        "skipped": len(report.skipped),
        "mean_reward": round(reward_sum / labeled, 4) if labeled else None,
        "tool_errors": tool_errors,
        "label_rules": ", ".join(f"{fmt}: {rule}" for fmt, rule in report.label_rules.items()),
    }
    if args.json:
        print(json.dumps({**stats, "label_rules": dict(report.label_rules), "warnings": data.tally.warnings(),
                          "labels": data.to_dict()}, indent=2))
    else:
        for key, value in stats.items():
            print(f"{key:>13}: {', '.join(value) if isinstance(value, list) else value}")
    return 0


@reads_from_mlflow
def cmd_convert(args) -> int:
    from rubricforge_dspy.data.export import convert_trajectories

    data = stream_data(args)  # written as read: bounded memory for a file of any length
    n = convert_trajectories(data.trajectories, args.out)
    print(f"wrote {n} trajectories ({data.tally.labeled} labeled, {data.tally.unlabeled} unlabeled) -> {args.out}")
    return 0


def cmd_render(args) -> int:
    """Print the text `judge` sends for the chosen item(s): the render is resolved as `judge` resolves it
    (``--preset``, ``--render-tokens``/``--max-tokens``, ``--step-chars``, ``--api-base`` or
    ``RUBRICFORGE_API_BASE``, ``--program``'s own render); which one it used goes to stderr."""
    from rubricforge_dspy.cli.presets import judge_render, resolve
    from rubricforge_dspy.evidence.render import render_trajectory

    if args.all:
        trajectories, _ = _load(args, warn=False)
    else:  # one record: those before it are skipped without being parsed (data.formats.trajectory_at)
        from rubricforge_dspy.data.formats import trajectory_at
        from rubricforge_dspy.data.scan import require_trajectories

        chosen_one, count = trajectory_at(args.data, max(args.index, 0), format=args.format,
                                          label_threshold=args.label_threshold,
                                          on_error="skip" if args.skip_bad else "raise")
        require_trajectories(count, args.data)
        if args.labels and chosen_one is not None:
            from rubricforge_dspy.data.labels import LabelJoin

            chosen_one = LabelJoin(args.labels, args.label_threshold).apply(chosen_one)
    preset = resolve(args)
    program = None
    if args.program is not None:
        from rubricforge_dspy.judge.loading import load_judge

        program = load_judge(args.program, check_certificate=False, allow_unverified=args.allow_unverified_program)
    config = judge_render(args, preset, lambda: program.render_config)
    if program is None:
        source = f"preset {preset.name}"
    elif config is None:
        config, source = program.render_config, f"{args.program}'s own render"
    else:
        source = f"{args.program}'s render with the sizes given"
    print(f"render: {source}: {config.max_tokens} tokens, step chars {config.max_step_chars}", file=sys.stderr)
    if args.all:
        chosen = list(enumerate(trajectories))
    else:
        if args.index < 0 or chosen_one is None:
            print(f"error: --index {args.index} out of range (0..{count - 1})", file=sys.stderr)
            return 2
        chosen = [(args.index, chosen_one)]
    for i, t in chosen:
        if args.all:
            print(f"===== {i}: {t.id} =====")
        print(render_trajectory(t, config))
    return 0


def _judge_exit(summary) -> int:
    """The exit code of a judging run: 0 when it produced at least one verdict, or when every item was
    judged already (nothing to do, said so); 3 when it produced none (every line of this run an
    abstention, whatever the kind: LM errors, truncated, unparsable answers), with the counts by kind."""
    if not summary.judged:
        if summary.resumed:
            print(f"nothing to do: all {summary.resumed} item(s) were judged already in {summary.out_path}",
                  file=sys.stderr)
        return 0
    if summary.n_abstained < summary.judged:
        return 0
    kinds = ", ".join(f"{kind}={n}" for kind, n in sorted(summary.abstained.items()))
    example = "; ".join(f"{kind}: {(error.strip().splitlines() or [''])[0][:200]}"
                        for kind, error in sorted(summary.errors.items()))
    print(f"error: no verdict was produced: every judge call failed; all {summary.judged} item(s) of this run "
          f"abstained ({kinds}). {example}. The lines are in {summary.out_path}; fix the server or the "
          "judge's settings (e.g. a larger --max-tokens for truncated answers) and judge again into a new --out",
          file=sys.stderr)
    return EXIT_SERVER


def cmd_judge(args) -> int:
    """Exit 0 when this run produced a verdict (or had nothing left to judge); 3 when it produced none
    (every item abstained, whatever the kind, with the counts by kind) or when too many calls failed in
    a row (`--max-consecutive-errors`); 2 for bad input, found before the first LM call."""
    require_input(args)
    spool_from_mlflow(args, args.out)  # --from-mlflow: the traces become this run's input file
    try:
        code = _judge(args)
    except OSError as error:  # a write beside --out refused (a full disk): name where, for the one line
        if error.filename is not None or error.errno not in ENVIRONMENT_ERRNOS:
            raise
        raise OSError(error.errno, error.strerror, f"{Path(args.out).parent} (beside {args.out})") from error
    if code == 0:
        write_verdicts_to_mlflow(args, args.out, args.program)  # --to-mlflow: one assessment per trace and program
    return code


def _judge(args) -> int:
    from rubricforge_dspy.apply.stream import run_judge_file
    from rubricforge_dspy.cli.data_options import print_label_warnings, print_load_problems
    from rubricforge_dspy.data.label_checks import LabelTally
    from rubricforge_dspy.data.labels import LabelJoin
    from rubricforge_dspy.data.formats import LoadReport
    from rubricforge_dspy.cli.presets import judge_render, resolve
    from rubricforge_dspy.cli.ray_options import check_endpoints, run_ray_judge
    from rubricforge_dspy.judge.loading import load_judge

    report, tally = LoadReport(), LabelTally()
    join = LabelJoin(args.labels, args.label_threshold) if args.labels else None

    preset = resolve(args)
    # A frozen program keeps the render it was induced with (None), but for the sizes the flags give.
    unverified = args.allow_unverified_program
    render = judge_render(args, preset, lambda: load_judge(args.program, check_certificate=False,
                                                     allow_unverified=unverified).render_config)
    if unverified and args.program is not None:  # loaded here, with the override; the library gets the judge
        args.program = load_judge(args.program, allow_unverified=True)
    check_endpoints(args)
    if args.batch_api:
        return _judge_batch_api(args, preset, render, report, join, tally)
    if args.ray is not None:
        summary = run_ray_judge(args, preset, render, report, join, tally)
        summary.skipped = len(report.skipped)
        print_load_problems(report, join.finish() if join else None)
        print_label_warnings(tally)
        print(summary.format(), file=sys.stderr)
        return _judge_exit(summary)
    with lm_from_args(args) as lm:
        print(f"judge LM: {lm_name(lm)}; preset {preset.name}: concurrency {preset.concurrency}, "
              f"render {'the program' + chr(39) + 's' if render is None else render.max_tokens} tokens", file=sys.stderr)
        summary = run_judge_file(args.program, args.data, args.out, limit=args.limit, lm=lm, render_config=render,
                                 concurrency=preset.concurrency, on_error="skip" if args.skip_bad else "raise",
                                 format=args.format, label_threshold=args.label_threshold,
                                 cache=False if args.no_cache else True,
                                 max_consecutive_lm_errors=args.max_consecutive_errors or None,
                                 labels=join, load_report=report, on_trajectory=tally.add)
    print_load_problems(report, join.finish() if join else None)
    print_label_warnings(tally)
    print(summary.format(), file=sys.stderr)
    return _judge_exit(summary)


def _judge_batch_api(args, preset, render, report, join, tally) -> int:
    """`judge --batch-api`: exit 0 when the batch produced a verdict (or nothing was left to judge), 3 when
    it failed/expired/was cancelled or every item abstained (`_judge_exit`)."""
    from rubricforge_dspy.apply.openai_batch import BatchJobFailed, run_batch_api
    from rubricforge_dspy.cli.data_options import print_label_warnings, print_load_problems
    from rubricforge_dspy.judge.loading import judge_from

    judge = judge_from(args.program)
    if render is not None:
        judge.render_config = render
    with lm_from_args(args) as lm:
        print(f"judge LM: {lm_name(lm)} through the Batch API of its endpoint", file=sys.stderr)
        try:
            summary = run_batch_api(judge, args.data, args.out, lm=lm, format=args.format,
                                    label_threshold=args.label_threshold,
                                    on_error="skip" if args.skip_bad else "raise",
                                    cache=False if args.no_cache else True, limit=args.limit,
                                    poll_interval=args.poll_interval, load_report=report, labels=join,
                                    on_trajectory=tally.add, on_status=lambda line: print(line, file=sys.stderr,
                                                                                          flush=True))
        except BatchJobFailed as error:
            print(f"error: {error}", file=sys.stderr)
            return 3
    print_load_problems(report, join.finish() if join else None)
    print_label_warnings(tally)
    print(summary.format(), file=sys.stderr)
    return _judge_exit(summary)


def cmd_induce(args) -> int:
    from rubricforge_dspy.induction.inducer import InductionConfig
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.pipeline.induce_job import induction_split, run_induce_job
    from rubricforge_dspy.cli.presets import render_from_args, resolve

    require_input(args)
    writable_file(args.out, "program (--out)")  # before anything is paid: not after the search
    spool_from_mlflow(args, args.out)
    trajectories, _ = _load(args, need_labels=True)
    split = induction_split(trajectories, sample_tasks=args.sample_tasks, seed=args.seed)
    for name, part in split.summary().items():
        print(f"{name:>5}: {part}", file=sys.stderr)
    preset = resolve(args)
    init = (load_judge(args.init, check_certificate=False, allow_unverified=args.allow_unverified_program)
            if args.init else TrajectoryJudge())
    render = render_from_args(args, preset, init.render_config if args.init else None)
    print(f"preset {preset.name}: render {render.max_tokens} tokens, {preset.num_threads} GEPA "
          f"threads, budget {preset.budget}", file=sys.stderr)
    config = InductionConfig(budget=preset.budget, minibatch=args.minibatch or preset.minibatch, seed=args.seed,
                             fp_weight=args.fp_weight, num_threads=preset.num_threads,
                             max_false_pass=args.max_false_pass,
                             calibration=None if args.calibration == "none" else args.calibration)
    with lm_from_args(args, reflection=True) as (judge_lm, reflection_lm):
        job = run_induce_job(split, args.out, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                             init=init, render=render, hybrid=args.hybrid, certify=args.certify,
                             log_dir=args.log_dir, concurrency=preset.concurrency, lm_name=lm_name(judge_lm))
    result, stack, certificate = job.induction, job.hybrid, job.certificate
    if stack is not None:
        print(f"hybrid: LLM score + {len(stack.model.inputs) - 1} symptom features, fit on {stack.fit['n']} "
              f"validation verdicts; passes at p >= {stack.threshold:.3f}", file=sys.stderr)
    if job.not_certified:
        print(job.not_certified, file=sys.stderr)
    for row in result.sweep:
        marker = " <- best" if row["candidate"] == result.best_index else ""
        print(f"candidate {row['candidate']:>2}  val agreement {row['val_agreement']:.3f}  "
              f"score {row['val_score']:.3f}  at call {row['discovered_at_metric_call']}{marker}")
    if result.rejected:
        print(f"rejected {len(result.rejected)} candidate rubric(s) that memorized training episodes "
              f"(e.g. {'; '.join(result.rejected[0]['leaks'][:3])})", file=sys.stderr)
    if result.lm_errors:
        print(f"{result.lm_errors} judge call(s) failed with an LM error and scored as failures", file=sys.stderr)
    if not result.beat_seed:
        print("no candidate beat the seed rubric on validation; the frozen rubric is the seed", file=sys.stderr)
    if certificate is not None:
        fp = certificate["false_pass"]
        low, high = fp["interval"] if isinstance(fp.get("interval"), (list, tuple)) else (None, None)
        cap = f" (cap {args.max_false_pass})" if args.max_false_pass is not None else ""
        print(f"certified on the test split: false-pass rate {fp['rate']} [{low}, {high}] on {fp['n']} failed "
              f"item(s){cap}; see `rubricforge show {args.out}`", file=sys.stderr)
    print(f"frozen: {args.out}")
    return 0


def cmd_report(args) -> int:
    from rubricforge_dspy.pipeline.report_job import report_main

    path = report_main(args.predictions, args.out, labels=args.labels, label_threshold=args.label_threshold,
                       floor_data=args.floor_data)
    print(f"report: {path}")
    return 0


def cmd_demo(args) -> int:
    """Induce and evaluate on the demo data into ``--out`` (default outside any source tree)."""
    from rubricforge_dspy.pipeline.demo import (EMBEDDED_REFLECTION_TOKENS, SMALL_MODEL_NOTE, default_out_dir,
                                                demo_sample, run_demo)
    from rubricforge_dspy.cli.presets import resolve

    preset = resolve(args)
    embedded = preset.name == "embedded"
    sample, data = demo_sample(args.data, args.tasks or preset.demo_tasks, labels=args.labels,
                               label_threshold=args.label_threshold)
    out = Path(args.out) if args.out else default_out_dir()
    # a 135M model rambles to the cap otherwise
    reflection_tokens = EMBEDDED_REFLECTION_TOKENS if embedded else None
    with lm_from_args(args, reflection=True, reflection_max_tokens=reflection_tokens) as (judge_lm, reflection_lm):
        run_dir, program = run_demo(sample, out, judge_lm=judge_lm, reflection_lm=reflection_lm, preset=preset,
                                    data_name=data.name, program=args.program, resume=args.resume)
    print(f"\ndemo output: {out}\nreport: {run_dir / 'report.md'}\nfrozen judge: {program}\n")
    if embedded:
        print(SMALL_MODEL_NOTE)
    return 0


def cmd_serve(args) -> int:
    """Launch a judge server and print its endpoint; Ctrl-C (or SIGTERM) stops it."""
    import time

    from rubricforge_dspy.serve import launch_server, sglang_launch_command, sglang_router_command

    if args.engine == "embedded":
        return _serve_embedded(args)
    port = args.port or 30000
    if args.router_workers:
        cmd = sglang_router_command(args.router_workers, host=args.host, port=port)
    else:
        if not args.model:
            print("error: --model (HF id or path) is required with --engine sglang", file=sys.stderr)
            return 2
        cmd = sglang_launch_command(args.model, host=args.host, port=port, tp=args.tp, dp=args.dp,
                                    revision=args.revision, served_model_name=args.served_model_name)
    print(" ".join(cmd))
    if args.dry_run:
        return 0
    with launch_server(cmd, f"http://{args.host}:{port}/health", timeout=args.health_timeout) as server:
        print(f"endpoint: http://{args.host}:{port}/v1  (export RUBRICFORGE_API_BASE=http://{args.host}:{port}/v1)",
              flush=True)
        while server.running:
            time.sleep(1.0)
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _serve_embedded(args) -> int:
    """`rubricforge serve` (embedded): run the embedded judge server until Ctrl-C or SIGTERM, printing its endpoint."""
    import time

    from rubricforge_dspy.serve import EmbeddedServer

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the server like Ctrl-C
    server = EmbeddedServer(**({"n_ctx": args.n_ctx} if args.n_ctx else {}), n_threads=args.threads, port=args.port)
    with server as config:
        print(f"embedded judge LM: {config.describe()}")
        print(f"export RUBRICFORGE_API_BASE={config.api_base}")
        print(f"export RUBRICFORGE_MODEL={config.model}")
        print(f"export RUBRICFORGE_STRUCTURED_OUTPUT={config.structured_output}")
        print("Ctrl-C stops the server.", flush=True)
        try:
            while server.server is not None and server.server.running:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return 0


# -- certify / show (issue 11) ---------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from rubricforge_dspy.cli.trust import add_certify_parsers, add_gate_parser, add_label_next_parser
    from rubricforge_dspy.cli.presets import add_preset_arguments
    from rubricforge_dspy.core.presets import EMBEDDED, SERVER

    parser = argparse.ArgumentParser(prog="rubricforge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log progress, and print the traceback of an error (bad input: exit 2, "
                             "server: exit 3) too")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stats", help="counts of a trajectory file")
    _add_data_arguments(p, required=False)  # --data, or --from-mlflow
    add_mlflow_source_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("convert", help="write any supported input as the generic JSONL (docs/FORMAT.md)")
    _add_data_arguments(p, required=False)  # --data, or --from-mlflow
    add_mlflow_source_arguments(p)
    p.add_argument("--out", required=True, help="new .jsonl file (never overwritten)")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("render", help="print exactly what `judge` sends for an item (same preset, sizes and program)")
    _add_data_arguments(p)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--index", type=int, default=0)
    group.add_argument("--all", action="store_true")
    p.add_argument("--program", default=None, help="frozen program whose render to use, as `judge --program` (default: the preset's)")
    p.add_argument("--allow-unverified-program", action="store_true",
                   help="load a program whose manifest cannot verify it (no program_sha256, or edited since it "
                        "was frozen), with a warning; refused otherwise")
    p.add_argument("--api-base", default=None,
                   help="the judge's endpoint, as given to `judge`: picks the server preset (default: "
                        "RUBRICFORGE_API_BASE; neither: the embedded preset); nothing is sent to it")
    add_preset_arguments(p, judging=False, render_tokens_aliases=("--max-tokens",))
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("judge", help="judge a file of trajectories into a JSONL of verdicts")
    _add_data_arguments(p, required=False)  # --data, or --from-mlflow
    add_mlflow_source_arguments(p)
    add_mlflow_sink_arguments(p)
    p.add_argument("--program", default=None, help="frozen program (default: the seed rubric)")
    p.add_argument("--allow-unverified-program", action="store_true",
                   help="load a program whose manifest cannot verify it (no program_sha256, or edited since it "
                        "was frozen), with a warning; refused otherwise")
    p.add_argument("--out", required=True)
    p.add_argument("--limit", type=int, default=None)
    add_preset_arguments(p)
    p.add_argument("--no-cache", action="store_true",
                   help="no verdict cache at all (DSPy's own response cache is always off for judging)")
    p.add_argument("--max-consecutive-errors", type=int, default=20,
                   help="stop (exit 3, output resumable) after this many calls in a row fail with LM/network "
                        "errors; 0 never stops")
    p.add_argument("--batch-api", action="store_true",
                   help="judge through the endpoint's OpenAI Batch API (/v1/files + /v1/batches): submit, poll, "
                        "ingest; re-running after a kill resumes the persisted batch (docs/SERVING.md)")
    p.add_argument("--poll-interval", type=float, default=2.0,
                   help="--batch-api: first wait between polls in seconds (doubles up to 60)")
    add_lm_arguments(p, reflection=False)
    add_ray_arguments(p)
    p.set_defaults(func=cmd_judge)

    p = sub.add_parser("induce", help="evolve a rubric with GEPA and freeze the best")
    _add_data_arguments(p, required=False)  # --data, or --from-mlflow
    add_mlflow_source_arguments(p)
    p.add_argument("--out", required=True, help="frozen program path, e.g. programs/NAME.json")
    p.add_argument("--init", default=None, help="start from this frozen program (recompile on new labels)")
    p.add_argument("--allow-unverified-program", action="store_true",
                   help="accept an --init program whose manifest cannot verify it, with a warning")
    p.add_argument("--budget", type=int, default=None,
                   help=f"max judge calls (metric calls; embedded preset {EMBEDDED.budget}, server preset {SERVER.budget})")
    p.add_argument("--minibatch", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fp-weight", type=float, default=1.0, help="cost of a false pass relative to a false fail")
    p.add_argument("--max-false-pass", type=float, default=None, metavar="ALPHA",
                   help="cap the validation false-pass rate: pick the best candidate within ALPHA and a pass "
                        "threshold on the calibrated score that keeps it at most ALPHA")
    p.add_argument("--calibration", choices=("platt", "isotonic", "none"), default="platt",
                   help="map raw scores to calibrated probabilities, fit on validation verdicts")
    p.add_argument("--hybrid", action="store_true",
                   help="freeze a hybrid judge: the LLM score stacked with the symptom floor's features in one "
                        "logistic regression fit on validation verdicts (docs/FLOOR.md); load_judge() returns it")
    p.add_argument("--no-certify", dest="certify", action="store_false",
                   help="do not certify the frozen judge on the test split")
    p.add_argument("--log-dir", default=None, help="GEPA checkpoint dir; re-run with the same dir to resume")
    add_preset_arguments(p, induction=True)
    p.add_argument("--sample-tasks", type=int, default=None,
                   help="use one trial of N seeded-random tasks (quick runs on slow LMs)")
    add_lm_arguments(p)
    p.set_defaults(func=cmd_induce)

    p = sub.add_parser("report", help="render the report of a persisted run or of verdict files")
    p.add_argument("--predictions", required=True, nargs="+",
                   help="a run directory (holding predictions/), or verdict files of `rubricforge judge`, "
                        "one per judge (judge name = file stem); layout: docs/REPORT.md")
    add_label_arguments(p)  # --labels for verdict files of unlabeled data (a reward is labeled by > 0 unless T)
    p.add_argument("--floor-data", nargs="+", default=None,
                   help="with verdict files: the labeled trajectories they judged; adds the floor and length-only "
                        "rows (task-grouped cross-validation on those items, docs/FLOOR.md)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="the main job: induce and evaluate on bundled tau-bench data")
    p.add_argument("--out", default=None,
                   help="directory the demo writes (default: $XDG_CACHE_HOME/rubricforge/demo, i.e. "
                        "~/.cache/rubricforge/demo); the committed example run is artifacts/demo/")
    p.add_argument("--program", default=None, help="where to freeze (default: OUT/induced.json)")
    p.add_argument("--tasks", type=int, default=None, help="number of tasks sampled (default: small)")
    p.add_argument("--data", default=None,
                   help="tau-bench results file to sample from (default: the bundled GPT-4o airline sample)")
    add_label_arguments(p)
    p.add_argument("--budget", type=int, default=None)
    p.add_argument("--resume", action="store_true", help="continue an interrupted demo instead of starting over")
    add_preset_arguments(p, induction=True)
    add_lm_arguments(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("serve", help="launch an SGLang (GPU) or embedded llama.cpp server")
    p.add_argument("--engine", choices=("sglang", "embedded"), default="embedded")
    p.add_argument("--model", default=None, help="HF id or path (sglang)")
    p.add_argument("--revision", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default: a free port (embedded), 30000 (sglang)")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="embedded: context tokens (default: the embedded model's trained context)")
    p.add_argument("--threads", type=int, default=None, help="embedded: llama.cpp threads (default: cores - 1)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--served-model-name", default=None, help="default: <model>@<revision>")
    p.add_argument("--router-workers", nargs="+", default=None,
                   help="launch an sglang_router (cache_aware) over these worker URLs instead of a worker")
    p.add_argument("--health-timeout", type=float, default=900.0)
    p.add_argument("--dry-run", action="store_true", help="print the launch command only")
    p.set_defaults(func=cmd_serve)

    add_certify_parsers(sub)
    add_gate_parser(sub)
    add_label_next_parser(sub)
    from rubricforge_dspy.cli.floor import add_floor_parser

    add_floor_parser(sub, FORMATS)
    return parser


def _exit_on_sigterm(signum, frame):
    # SystemExit unwinds the context managers, so an embedded server this process started is stopped.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes (`rubricforge_dspy.core.errors`): 0 done, 2 bad input (`InputError`:
    ``error: <message>``) or an environment that refuses (an `OSError` in `ENVIRONMENT_ERRNOS`: a full
    disk, a read-only file: ``error: <file>: <what> ...``), 3 a judge LM or server that cannot be used
    (`ServerError`), 4 the answer is no (`gate`, `certify --recheck`), 130 Ctrl-C; any other exception is
    a bug: its traceback is printed and the exit code is 1. With -v the traceback of an expected error
    is printed too, and so are DSPy's per-call error logs (`_quiet_dspy_call_errors`)."""
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        _quiet_dspy_call_errors()
    try:
        return args.func(args)
    except InputError as error:
        _report(error, f"error: {error}", args.verbose)
        return EXIT_INPUT
    except ServerError as error:
        _report(error, f"error: {type(error).__name__}: {error}", args.verbose)
        return EXIT_SERVER
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as error:
        if error.errno not in ENVIRONMENT_ERRNOS:
            return _bug()
        _report(error, f"error: {_environment_problem(error)}", args.verbose)
        return EXIT_INPUT
    except Exception:  # noqa: BLE001 - not an expected error: a bug, reported as one
        return _bug()


def _bug() -> int:
    traceback.print_exc()
    print("error: an unexpected internal error (a bug; the traceback is above)", file=sys.stderr)
    return EXIT_BUG


_WHAT_TO_DO = (
    ({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG},
     "free space (or choose an output on another disk) and run the same command again: `judge` keeps every "
     "verdict written so far and resumes where it stopped"),
    ({errno.EROFS, errno.EACCES, errno.EPERM, errno.ETXTBSY, errno.EBUSY},
     "make the file and its directory writable (or readable), or choose another path"),
    ({errno.ENOTDIR, errno.EISDIR, errno.EEXIST},
     "a part of the path is a file where a directory is needed (or the reverse): check each part of it"),
)


def _environment_problem(error: OSError) -> str:
    """The one line for an `OSError` of the environment: the file, what the OS said, what to do."""
    where = f"{error.filename}: " if error.filename is not None else ""
    if error.errno == errno.EEXIST and error.filename is not None and Path(error.filename).is_file():
        return f"{where}a file where a directory is needed (a parent of the output); choose an output in a directory"
    advice = next((text for numbers, text in _WHAT_TO_DO if error.errno in numbers),
                  "check the path, the disk and the permissions, then run the command again")
    return f"{where}{error.strerror or error}; {advice}"


def _report(error: BaseException, message: str, verbose: bool) -> None:
    if verbose:
        traceback.print_exception(error)
    _close_progress_bars()
    print(message, file=sys.stderr)


def _close_progress_bars() -> None:
    """Close the progress bars still drawn (a run stopped by an error), so the error line starts a line
    of its own and stays the last one. They are found by the garbage collector: DSPy's parallel executor
    clears tqdm's own registry of bars (GEPA's among them)."""
    std = sys.modules.get("tqdm.std")
    if std is None:
        return
    import gc

    for bar in [obj for obj in gc.get_objects() if isinstance(obj, std.tqdm)]:
        try:
            if not bar.disable:
                bar.close()
        except Exception:  # noqa: BLE001 - a bar that cannot be closed only costs a cosmetic line
            pass


class _DebugOnly(logging.Filter):
    """Drops DSPy's per-call error records below -v: each failed call of a parallel evaluation is logged
    at ERROR with the item (a whole rendered trajectory) and its traceback, ~1 KB to 40 KB a call. The
    run counts those calls itself (induction's circuit breaker stops it with one line, exit 3); with -v
    they are shown, tracebacks and all."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Error for ")


def _quiet_dspy_call_errors() -> None:
    logger = logging.getLogger("dspy.utils.parallelizer")
    if not any(isinstance(f, _DebugOnly) for f in logger.filters):
        logger.addFilter(_DebugOnly())


if __name__ == "__main__":
    sys.exit(main())
