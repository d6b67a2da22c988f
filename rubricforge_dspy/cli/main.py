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
    rubricforge cascade fit --stage floor.json --stage judge.json --data CAL --alpha 0.1 --out cascade.json
    rubricforge judge --cascade cascade.json --data D --out V.jsonl   decided per stage, the rest to a person

Every command that reads trajectories takes --labels FILE (CSV, JSONL or SWE-bench results.json,
joined by id) and --label-threshold (default: each format's own rule); see docs/FORMAT.md.

Exit codes: 0 done; 2 bad input or environment (a file, a flag, a full disk, a path that cannot be
written: one line says which and what to do); 3 a judge LM or server that cannot be used; 4 the answer
is no (gate: the candidate may not replace the baseline; certify --recheck: the judge got worse);
5 stopped before --token-budget or --cost-budget would be crossed (judge, certify, label-next: what was judged is
kept, re-run with a larger budget; induce, cascade fit: nothing is written);
1 a bug (its traceback is printed); 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from rubricforge_dspy.cli.cost_options import add_cost_arguments, budget_cost_line, lm_budget, one_budget
from rubricforge_dspy.cli.data_commands import cmd_convert, cmd_render, cmd_stats
from rubricforge_dspy.cli.data_options import (
    DATA_GROUP,
    add_data_arguments,
    add_label_arguments,
    data_spec,
    load_data,
    write_disagreements,
)
from rubricforge_dspy.cli.integrations import (
    add_mlflow_sink_arguments,
    add_mlflow_source_arguments,
    require_input,
    spool_from_mlflow,
)
from rubricforge_dspy.cli.judge import cmd_judge
from rubricforge_dspy.cli.lm_options import add_lm_arguments, add_token_budget_argument, lm_from_args
from rubricforge_dspy.cli.ray_options import add_ray_arguments
from rubricforge_dspy.cli.read_options import add_read_argument, reading_judge
from rubricforge_dspy.cli.serve import cmd_serve
from rubricforge_dspy.cli.stage_options import add_allow_import_argument
from rubricforge_dspy.core.errors import (
    ENVIRONMENT_ERRNOS,
    EXIT_BUDGET,
    EXIT_BUG,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NO,
    EXIT_SERVER,
    AnswerIsNo,
    BudgetExhausted,
    InputError,
    RubricForgeDeprecationWarning,
    ServerError,
)
from rubricforge_dspy.core.files import writable_file
from rubricforge_dspy.core.progress import requested as progress_requested
from rubricforge_dspy.core.terminal import terminal_safe
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.formats import LoadReport, plugins
from rubricforge_dspy.data.spec import DataSpec
from rubricforge_dspy.lm.config import lm_name

if TYPE_CHECKING:
    from types import FrameType
    from typing import Any


def _add_data_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    add_data_arguments(parser, required=required)


def _load(spec: DataSpec, command: str, need_labels: bool = False,
          warn: bool = True) -> tuple[list[Trajectory], LoadReport]:
    data = load_data(spec, need_labels=need_labels, warn=warn, command=command)
    return data.trajectories, data.report


def cmd_induce(args: argparse.Namespace) -> int:
    from rubricforge_dspy.cli.presets import render_from_args, resolve
    from rubricforge_dspy.induction.inducer import InductionConfig
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.pipeline.induce_job import induction_split, run_induce_job

    require_input(args)
    one_budget(args, "induce")
    if args.read != "budget":  # before anything is read or paid
        for flag, given in (("--hybrid", args.hybrid), ("--max-false-pass", args.max_false_pass is not None)):
            if given:
                raise InputError(f"induce --read {args.read} does not take {flag}: the {args.read} judge has no "
                                 "operating point (calibration, pass threshold, hybrid stack) yet")
    writable_file(args.out, "program (--out)")  # before anything is paid: not after the search
    spec = spool_from_mlflow(args, data_spec(args), args.out)
    trajectories, _ = _load(spec, "induce", need_labels=True)
    split = induction_split(trajectories, sample_tasks=args.sample_tasks, seed=args.seed)
    for name, part in split.summary().items():
        print(f"{name:>5}: {part}", file=sys.stderr)
    preset = resolve(args)
    init = (load_judge(args.init, check_certificate=False, allow_unverified=args.allow_unverified_program)
            if args.init else TrajectoryJudge())
    render = render_from_args(args, preset, init.render_config if args.init else None)
    print(f"preset {preset.name}: render {render.max_tokens} tokens, {preset.num_threads} GEPA "
          f"threads, budget {preset.budget}", file=sys.stderr)
    if args.read != "budget":
        init = reading_judge(init, args.read, render, args.init or "the seed rubric") or init
    elif getattr(init, "read_mode", "budget") != "budget":
        raise InputError(f"{args.init} is a {init.read_mode} judge: induce it with --read {init.read_mode}")
    config = InductionConfig(budget=preset.budget, minibatch=args.minibatch or preset.minibatch, seed=args.seed,
                             fp_weight=args.fp_weight, num_threads=preset.num_threads,
                             max_false_pass=args.max_false_pass,
                             calibration=None if args.calibration == "none" else args.calibration)
    if args.read != "budget":
        return _induce_reading(args, split, init, config)
    with lm_from_args(args, reflection=True) as (judge_lm, reflection_lm):
        job = run_induce_job(split, args.out, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                             init=init, render=render, hybrid=args.hybrid, certify=args.certify,
                             log_dir=args.log_dir, concurrency=preset.concurrency, lm_name=lm_name(judge_lm),
                             token_budget=lm_budget(args, judge_lm))
    notes = job.summary()
    if notes:
        print(notes, file=sys.stderr)
    print(budget_cost_line(args, judge_lm, job.token_budget, "the job's LM calls"), file=sys.stderr)
    print(job.format_sweep())
    print(f"frozen: {args.out}")
    return 0


def _induce_reading(args: argparse.Namespace, split: Any, init: Any, config: Any) -> int:
    """`induce --read segments|explore`: GEPA evolves the long-episode judge's instruction (every predictor), the
    best is frozen in its own format (`load_judge` loads it). No operating point, hybrid stack or certificate
    (`rubricforge certify` certifies it afterwards): said on stderr."""
    from rubricforge_dspy.induction.inducer import induce
    from rubricforge_dspy.lm.budgeted import spending
    from rubricforge_dspy.pipeline.induce_job import InduceJobResult

    with lm_from_args(args, reflection=True) as (judge_lm, reflection_lm):
        result = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                        init=init, log_dir=args.log_dir, out_path=args.out, lm_name=lm_name(judge_lm),
                        token_budget=lm_budget(args, judge_lm))
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if result.token_budget is not None:
        kind = "cost budget" if "cap_usd" in result.token_budget else "token budget"
        print(f"{kind}: {spending(result.token_budget)}", file=sys.stderr)
    print(budget_cost_line(args, judge_lm, result.token_budget, "the job's LM calls"), file=sys.stderr)
    if args.certify:
        print(f"not certified: induce does not certify a {args.read} judge yet (the test split is left unused); "
              f"certify it with `rubricforge certify {args.out} --data HELD_OUT`", file=sys.stderr)
    print(InduceJobResult(split=split, induction=result, program=Path(args.out)).format_sweep())
    print(f"frozen: {args.out} (a {args.read} judge)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rubricforge_dspy.pipeline.report_job import report_main
    from rubricforge_dspy.report.cascade import report_label_rule

    spec = data_spec(args)
    _, note = report_label_rule(args.predictions, spec.labels_path, spec.label_rule)  # exit 2 on another rule
    if note:
        print(note, file=sys.stderr)
    path = report_main(args.predictions, args.out, labels=spec.labels_path, label_threshold=spec.label_rule,
                       floor_data=args.floor_data)
    print(f"report: {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Induce and evaluate on the demo data into ``--out`` (default outside any source tree)."""
    from rubricforge_dspy.cli.presets import resolve
    from rubricforge_dspy.pipeline.demo import (
        EMBEDDED_REFLECTION_TOKENS,
        SMALL_MODEL_NOTE,
        default_out_dir,
        demo_header,
        demo_sample,
        run_demo,
    )

    preset = resolve(args)
    embedded = preset.name == "embedded"
    spec = data_spec(args)
    sample, data = demo_sample(args.data, args.tasks or preset.demo_tasks, labels=spec.labels_path,
                               label_threshold=spec.label_rule)
    out = Path(args.out) if args.out else default_out_dir()
    # a 135M model rambles to the cap otherwise
    reflection_tokens = EMBEDDED_REFLECTION_TOKENS if embedded else None
    with lm_from_args(args, reflection=True, reflection_max_tokens=reflection_tokens) as (judge_lm, reflection_lm):
        print(demo_header(sample, preset, judge_lm=judge_lm, reflection_lm=reflection_lm, data_name=data.name),
              file=sys.stderr)
        run_dir, program = run_demo(sample, out, judge_lm=judge_lm, reflection_lm=reflection_lm, preset=preset,
                                    data_name=data.name, program=args.program, resume=args.resume)
    from rubricforge_dspy.pipeline.demo_cascade import cascade_lead

    lead = json.loads((run_dir / "cascade_fit.json").read_text(encoding="utf-8"))
    print("\n".join(cascade_lead(lead, embedded)[2:]).rstrip())
    print(f"\ndemo output: {out}\nreport: {run_dir / 'report.md'}\nfrozen judge: {program}\n")
    if embedded:
        print(SMALL_MODEL_NOTE)
    return 0


# -- certify / show (issue 11) ---------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from rubricforge_dspy.cli.presets import add_preset_arguments
    from rubricforge_dspy.cli.trust import add_certify_parsers, add_gate_parser, add_label_next_parser
    from rubricforge_dspy.core.presets import EMBEDDED, JUDGING_MAX_CONSECUTIVE_LM_ERRORS, SERVER

    parser = argparse.ArgumentParser(prog="rubricforge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log progress, and print the traceback of an error (bad input: exit 2, "
                             "server: exit 3) too")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stats", help="counts of a trajectory file")
    _add_data_arguments(p, required=False)  # --data, or --from-mlflow
    add_mlflow_source_arguments(p)
    p.add_argument("--json", action="store_true", help="print the counts as JSON (with the label rules and warnings)")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("convert", help="write any supported input as the generic JSONL (docs/FORMAT.md)")
    _add_data_arguments(p, required=False)  # --data, or --from-mlflow
    add_mlflow_source_arguments(p)
    p.add_argument("--out", required=True, help="new .jsonl file (never overwritten)")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("render", help="print exactly what `judge` sends for an item (same preset, sizes and program)")
    _add_data_arguments(p)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--index", type=int, default=0, help="the item to print, by position in the input (default 0)")
    group.add_argument("--all", action="store_true", help="print every item, each under a line with its index and id")
    p.add_argument("--program", default=None,
                   help="frozen program whose render to use, as `judge --program` (default: the preset's)")
    p.add_argument("--allow-unverified-program", action="store_true",
                   help="load a program whose manifest cannot verify it (no program_sha256, or edited since it "
                        "was frozen), with a warning; refused otherwise")
    p.add_argument("--api-base", default=None,
                   help="the judge's endpoint, as given to `judge`: picks the server preset (default: "
                        "RUBRICFORGE_API_BASE; neither: the embedded preset); nothing is sent to it")
    add_preset_arguments(p, judging=False, deprecated_render_tokens=("--max-tokens",))
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("judge", help="judge a file of trajectories into a JSONL of verdicts")
    _add_data_arguments(p, required=False)  # --data, or --from-mlflow
    add_mlflow_source_arguments(p)
    add_mlflow_sink_arguments(p)
    p.add_argument("--program", default=None, help="frozen program (default: the seed rubric); a cascade file is "
                                                   "judged as with --cascade")
    p.add_argument("--cascade", default=None,
                   help="a fitted cascade (`rubricforge cascade fit`): each item's verdict line names the deciding "
                        "stage; later stages run only on what earlier ones left; the same command again resumes "
                        "(docs/CASCADE.md)")
    p.add_argument("--escalated-out", default=None,
                   help="--cascade: the labeling queue of escalated items (default OUT.escalated.jsonl)")
    p.add_argument("--allow-unverified-program", action="store_true",
                   help="load a program whose manifest cannot verify it (no program_sha256, or edited since it "
                        "was frozen), with a warning; refused otherwise")
    add_allow_import_argument(p)
    p.add_argument("--out", required=True,
                   help="the verdict JSONL (one line per item; the same --out again resumes where a run stopped)")
    p.add_argument("--limit", type=int, default=None, help="judge only the first N items of the input")
    add_preset_arguments(p)
    add_read_argument(p)
    p.add_argument("--no-cache", action="store_true",
                   help="no verdict cache at all (DSPy's own response cache is always off for judging)")
    p.add_argument("--max-consecutive-errors", type=int, default=JUDGING_MAX_CONSECUTIVE_LM_ERRORS,
                   help="stop (exit 3, output resumable) after this many calls in a row fail with LM/network "
                        "errors; 0 never stops")
    add_token_budget_argument(p)
    add_cost_arguments(p)
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
                   help=f"max judge calls (metric calls; embedded preset {EMBEDDED.budget}, "
                        f"server preset {SERVER.budget})")
    p.add_argument("--minibatch", type=int, default=None,
                   help="GEPA reflection minibatch: training items per proposal (default: the preset's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split by task and of GEPA (default 0)")
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
    add_token_budget_argument(p, help_text=(
        "the most tokens (prompt + completion, as the LMs report them) every LM call of the induction may spend "
        "together: GEPA's judge and reflection calls, the validation pass and the test split's certification. Each "
        "call reserves its worst case (its prompt's bytes + --max-tokens, every attempt) first; the run stops before "
        "the cap would be crossed (exit 5) and writes no program (stopped in the certification: the program is "
        "written, not certified). Not --budget (GEPA's judge calls)"))
    add_cost_arguments(p)
    add_preset_arguments(p, induction=True)
    add_read_argument(p)
    p.add_argument("--sample-tasks", type=int, default=None,
                   help="use one trial of N seeded-random tasks (quick runs on slow LMs)")
    add_lm_arguments(p)
    p.set_defaults(func=cmd_induce)

    p = sub.add_parser("report", help="render the report of a persisted run or of verdict files")
    p.add_argument("--predictions", required=True, nargs="+",
                   help="a run directory (holding predictions/), or verdict files of `rubricforge judge`, "
                        "one per judge (judge name = file stem); layout: docs/REPORT.md")
    # --labels for verdict files of unlabeled data (a reward is labeled by > 0 unless T)
    add_label_arguments(p.add_argument_group(DATA_GROUP))
    p.add_argument("--floor-data", nargs="+", default=None,
                   help="with verdict files: the labeled trajectories they judged; adds the floor and length-only "
                        "rows (task-grouped cross-validation on those items, docs/FLOOR.md)")
    p.add_argument("--out", required=True,
                   help="the markdown report; report.json (every number) and figures/ are written beside it")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="the main job: induce and evaluate on bundled tau-bench data")
    p.add_argument("--out", default=None,
                   help="directory the demo writes (default: $XDG_CACHE_HOME/rubricforge/demo, i.e. "
                        "~/.cache/rubricforge/demo); the committed example run is artifacts/demo/")
    p.add_argument("--program", default=None, help="where to freeze (default: OUT/induced.json)")
    p.add_argument("--tasks", type=int, default=None, help="number of tasks sampled (default: small)")
    p.add_argument("--data", default=None,
                   help="tau-bench results file to sample from (default: the bundled GPT-4o airline sample)")
    add_label_arguments(p.add_argument_group(DATA_GROUP))
    p.add_argument("--budget", type=int, default=None,
                   help="max judge calls of the GEPA search (default: the preset's)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted demo instead of starting over")
    add_preset_arguments(p, induction=True)
    add_lm_arguments(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("serve", help="launch an SGLang (GPU) or embedded llama.cpp server")
    p.add_argument("--engine", choices=("sglang", "embedded"), default="embedded",
                   help="embedded: the bundled CPU model on llama.cpp (default); sglang: an SGLang GPU server")
    p.add_argument("--model", default=None, help="HF id or path (sglang)")
    p.add_argument("--revision", default=None, help="sglang: the model's revision (a commit or tag) to serve")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=None, help="default: a free port (embedded), 30000 (sglang)")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="embedded: context tokens (default: the embedded model's trained context)")
    p.add_argument("--threads", type=int, default=None, help="embedded: llama.cpp threads (default: cores - 1)")
    p.add_argument("--tp", type=int, default=1, help="sglang: tensor-parallel GPUs per worker (default 1)")
    p.add_argument("--dp", type=int, default=1, help="sglang: data-parallel workers (default 1)")
    p.add_argument("--served-model-name", default=None, help="default: <model>@<revision>")
    p.add_argument("--router-workers", nargs="+", default=None,
                   help="launch an sglang_router (cache_aware) over these worker URLs instead of a worker")
    p.add_argument("--health-timeout", type=float, default=900.0,
                   help="seconds to wait for the server to answer /health before giving up (default 900)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the launch command and exit: nothing is started (embedded and sglang)")
    p.set_defaults(func=cmd_serve)

    add_certify_parsers(sub)
    add_gate_parser(sub)
    add_label_next_parser(sub)
    from rubricforge_dspy.cli.floor import add_floor_parser

    add_floor_parser(sub)
    from rubricforge_dspy.cli.cascade import add_cascade_parser
    from rubricforge_dspy.cli.review import add_review_parser

    add_review_parser(sub)
    add_cascade_parser(sub)
    from rubricforge_dspy.cli.mapping import add_mapping_parsers

    add_mapping_parsers(sub)
    return parser


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # SystemExit unwinds the context managers, so an embedded server this process started is stopped.
    raise SystemExit(128 + signum)


# The one place the package's errors become exit codes and one line on stderr (`rubricforge_dspy.core.errors`);
# a command raises where it finds the problem and never returns an error's code itself.
_EXITS: tuple[tuple[type[BaseException], int, str], ...] = (
    (InputError, EXIT_INPUT, "error: {error}"),
    (ServerError, EXIT_SERVER, "error: {kind}: {error}"),
    (AnswerIsNo, EXIT_NO, "no: {error}"),
    (BudgetExhausted, EXIT_BUDGET, "stopped: {error}"),
)


def main(argv: list[str] | None = None) -> int:
    """Run one command (`_run`). A non-daemon thread a format plugin started and left running would keep the
    process alive after the command ended: it is named in a warning on stderr, and when this is the process's
    command (`argv` None: ``rubricforge ...``, ``python -m rubricforge_dspy``) the process exits with the
    command's code without waiting for it (`os._exit`, after flushing stdout and stderr)."""
    code = _run(argv)
    lingering = plugins.lingering_threads()
    for thread, wheres in lingering:
        print(f"warning: format plugin {terminal_safe(' or '.join(wheres))} left a thread running "
              f"({terminal_safe(repr(thread.name))}): still running "
              "when the command ended; exiting without waiting for it", file=sys.stderr)
    if lingering and argv is None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can be said there
                pass
        os._exit(code)
    return code


def _run(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes (`rubricforge_dspy.core.errors`, mapped here only: `_EXITS`): 0 done,
    2 bad input (`InputError`: ``error: <message>``) or an environment that refuses (an `OSError` in
    `ENVIRONMENT_ERRNOS`: a full disk, a read-only file: ``error: <file>: <what> ...``), 3 a judge LM or
    server that cannot be used (`ServerError`), 4 the answer is no (`AnswerIsNo`: `gate`, `certify
    --recheck`), 5 stopped at the token budget (`BudgetExhausted`: ``stopped: <message>``), 130 Ctrl-C; any
    other exception is a bug: its traceback is printed and the exit code is
    1. With -v the traceback of an expected error is printed too, and so are DSPy's per-call error logs
    (`_quiet_dspy_call_errors`)."""
    try:
        args = _parse(argv)
    except InputError as error:  # a format plugin that cannot be used, found when --format is checked
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        _quiet_dspy_call_errors()
    try:
        spec = data_spec(args)  # every data flag checked (and --map registered) before the command starts
        write_disagreements(spec, getattr(args, "disagreements_out", None))  # on every command reading labels
        with progress_requested():  # long loops report on stderr (core.progress), never on stdout
            code: int = args.func(args)
            return code
    except (InputError, ServerError, AnswerIsNo, BudgetExhausted) as error:
        kind, code, line = next(entry for entry in _EXITS if isinstance(error, entry[0]))
        _report(error, line.format(error=error, kind=type(error).__name__),
                args.verbose and kind not in (AnswerIsNo, BudgetExhausted))
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader of stdout went away (`rubricforge render ... | head`): not a bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not fail again
        return 128 + signal.SIGPIPE
    except OSError as error:
        if error.errno not in ENVIRONMENT_ERRNOS:
            return _bug()
        _report(error, f"error: {_environment_problem(error)}", args.verbose)
        return EXIT_INPUT
    except Exception:  # noqa: BLE001 - not an expected error: a bug, reported as one
        return _bug()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line; a deprecated flag's `RubricForgeDeprecationWarning` is printed on stderr
    (``warning: ...``) and then warned again, so the filters in force (a test suite's) see it too."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RubricForgeDeprecationWarning)
        args = build_parser().parse_args(argv)
    for warning in caught:
        if issubclass(warning.category, RubricForgeDeprecationWarning):
            print(f"warning: {warning.message}", file=sys.stderr)
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return args


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
