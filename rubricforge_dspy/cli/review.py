"""``rubricforge review``: serve the review page (see what the judge saw, label it). docs/REVIEW.md.

`rubricforge_dspy.cli.main` registers it with `add_review_parser(sub)`; the command parses flags and
calls `rubricforge_dspy.review.serve` (the library checks every input before the page starts).
"""

from __future__ import annotations

import getpass
import logging
import sys

from rubricforge_dspy.cli.data_options import data_spec

__all__ = ["add_review_parser", "cmd_review"]


def cmd_review(args) -> int:
    from rubricforge_dspy.core.errors import MissingExtraError, ServerError
    from rubricforge_dspy.evidence.render import RenderConfig

    try:
        from rubricforge_dspy.review import ReviewInputs, serve
        from rubricforge_dspy.review import server as _server  # noqa: F401  (imports starlette, uvicorn)
    except ImportError as error:
        raise MissingExtraError(f"rubricforge review needs starlette, jinja2 and uvicorn ({error.name} is missing): "
                                "they are dependencies of rubricforge-dspy: reinstall it (./install.sh, or "
                                "pip install -e .)") from None
    render = None
    if args.render_tokens is not None or args.step_chars is not None:
        base = RenderConfig()
        render = RenderConfig(max_tokens=args.render_tokens or base.max_tokens,
                              max_step_chars=args.step_chars or base.max_step_chars)
    spec = data_spec(args)
    inputs = ReviewInputs(data=list(spec.paths), verdicts=args.verdicts, labels_out=args.labels_out,
                          labeler=args.labeler or getpass.getuser(), program=args.program, run_dir=args.run_dir,
                          labels=spec.labels_path, label_next=args.label_next, figures=args.figures or (),
                          render=render, data_format=spec.format,
                          allow_unverified_program=args.allow_unverified_program, audit=args.audit,
                          audit_size=args.audit_size, audit_seed=args.audit_seed)

    sink = _mlflow_sink(args)

    def announce(url: str) -> None:
        print(f"review page (Ctrl-C to stop): {url}", flush=True)
        also = f", and HUMAN feedback {args.label_name!r} on its trace in MLflow at {args.to_mlflow}" if sink else ""
        print(f"labels go to {args.labels_out}; each label is one appended line{also}", file=sys.stderr, flush=True)

    try:
        state = serve(inputs, host=args.host, port=args.port, allow_remote=args.allow_remote, on_ready=announce,
                      on_label=sink, sink_name=f"MLflow at {args.to_mlflow}" if sink else "the label sink")
    except KeyboardInterrupt:
        return 0
    if sink is None or state.sink is None:
        return 0
    print(sink.report.summary(), file=sys.stderr)
    if state.sink.failed:
        raise ServerError(f"{state.sink.failed} label action(s) are in {args.labels_out} but were NOT logged to "
                          f"MLflow (last: {state.sink.last_error}); ids: "
                          f"{', '.join(dict.fromkeys(state.sink.failed_ids))}")
    return 0


def _mlflow_sink(args):
    """``--to-mlflow``: the `HumanLabelSink` the page sends each label to (MLflow checked now), else None."""
    if args.to_mlflow is None:
        if args.experiment is not None:
            from rubricforge_dspy.core.errors import InputError

            raise InputError("--experiment goes with --to-mlflow URI")
        return None
    from rubricforge_dspy.cli.integrations import INSTALL_HINT
    from rubricforge_dspy.core.errors import InputError

    try:
        from rubricforge_dspy.integrations.mlflow_labels import HumanLabelSink
    except ImportError as exc:
        raise InputError(f"{INSTALL_HINT} ({exc})") from exc
    if not getattr(args, "verbose", False):  # urllib3 logs each retry; the failure itself is reported once (-v: all)
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    return HumanLabelSink(args.to_mlflow, label_name=args.label_name, experiment=args.experiment,
                          journal=str(args.labels_out))


def add_review_parser(sub) -> None:
    """Register ``rubricforge review`` on the subcommand parser `sub`."""
    from rubricforge_dspy.cli.data_options import add_format_arguments

    p = sub.add_parser("review", help="serve a local page to see what the judge saw and label it")
    p.add_argument("--data", required=True, nargs="+", help="the trajectories the verdicts were judged on")
    add_format_arguments(p)
    p.add_argument("--verdicts", required=True, help="the verdict JSONL to review (`rubricforge judge --out`)")
    p.add_argument("--labels-out", default="labels.jsonl",
                   help="the labels file the page appends to (default: labels.jsonl); read it with --labels")
    p.add_argument("--labeler", default=None,
                   help="your name on every label line (default: the login name); several people may label the "
                   "same file (each types a name on the page): the page shows their agreement (raw, Cohen's kappa) "
                   "and queues their disagreements for adjudication")
    p.add_argument("--program", default=None, help="the frozen program that judged (rubric, criteria, render)")
    p.add_argument("--allow-unverified-program", action="store_true",
                   help="show a --program whose manifest cannot verify it, with a warning")
    p.add_argument("--run-dir", default=None, help="an induction run directory (GEPA candidates, figures)")
    p.add_argument("--figures", nargs="+", default=None, help="more directories of report figures (*.png)")
    p.add_argument("--labels", default=None, help="existing labels (CSV/JSONL/SWE-bench): disagreements first")
    p.add_argument("--label-next", default=None, help="a `rubricforge label-next` output file: its order first")
    p.add_argument("--audit", default=None, metavar="FILE",
                   help="the audit sample `rubricforge label-next --audit` drew (its .audit.json); default: the draw "
                        "recorded beside --labels-out, else one the page draws there at start")
    p.add_argument("--audit-size", type=int, default=50, metavar="N",
                   help="tasks (items without tasks) the page's own audit draw takes (default 50; 0: none)")
    p.add_argument("--audit-seed", type=int, default=0, help="the seed of the page's own audit draw (recorded)")
    p.add_argument("--render-tokens", type=int, default=None, help="the judge's render budget (without --program)")
    p.add_argument("--step-chars", type=int, default=None, help="the judge's per-step floor (without --program)")
    mlflow = p.add_argument_group("MLflow (each label also as HUMAN feedback on its trace)")
    mlflow.add_argument("--to-mlflow", metavar="URI", default=None,
                        help="also log each label (a changed mind overrides, a skip or undo clears) as your HUMAN "
                             "feedback on the item's MLflow trace (ids must be trace ids: data from --from-mlflow)")
    mlflow.add_argument("--experiment", metavar="NAME", default=None,
                        help="with --to-mlflow: the experiment the traces must belong to (checked)")
    mlflow.add_argument("--label-name", default="label",
                        help="the feedback name (default: label, what --from-mlflow --label-name reads)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host other than the loopback (warned: plain HTTP, the token guards it)")
    p.set_defaults(func=cmd_review)
