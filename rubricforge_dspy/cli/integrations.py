"""The command line's MLflow options and what they do: ``--from-mlflow URI --experiment NAME [--filter F]
[--label-name NAME]`` reads trajectories (and their HUMAN labels) from an MLflow server instead of
``--data``, each assessment's source a labeler, resolved by ``--label-resolve`` (with ``--label-values`` and
``--adjudicator``, as for a labels file; their agreement and disagreements said on stderr,
``--disagreements-out`` lists them); ``--to-mlflow URI [--assessment-name NAME]`` writes the verdicts back as
assessments; label-next's picks are tagged there. MLflow is imported only when one of the flags is used (it is an
optional extra), so the other commands do not pay for it.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rubricforge_dspy.cli.data_options import data_spec, label_reading, write_disagreement_lines
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.spec import DataSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from rubricforge_dspy.core.trajectory import Trajectory

__all__ = ["add_mlflow_source_arguments", "add_mlflow_sink_arguments", "from_mlflow_requested", "require_input",
           "load_from_mlflow", "spool_from_mlflow", "reads_from_mlflow", "write_verdicts_to_mlflow",
           "mlflow_label_reading", "pull_from_mlflow", "labelers_of", "say_labelers",
           "tag_label_next_in_mlflow", "tag_escalated_in_mlflow"]

SPOOL_SUFFIX = ".from-mlflow.jsonl"
SHOWN = 20  # judges' own traces listed one per line

INSTALL_HINT = 'the MLflow flags need the extra: pip install "rubricforge-dspy[mlflow]"'


def add_mlflow_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--from-mlflow URI``, ``--experiment NAME``, ``--filter F``, ``--label-name NAME``, ``--mlflow-page-size N``."""
    group = parser.add_argument_group("MLflow source (instead of --data)")
    group.add_argument("--from-mlflow", metavar="URI", default=None,
                       help="read the traces of an MLflow tracking server (http://127.0.0.1:5000) instead of --data")
    group.add_argument("--experiment", metavar="NAME", default=None, help="the MLflow experiment (name or id)")
    group.add_argument("--filter", dest="mlflow_filter", metavar="F", default=None,
                       help="an MLflow trace search filter, e.g. \"tag.split = 'test'\"")
    group.add_argument("--label-name", default="label",
                       help="the HUMAN feedback assessment that holds the label (default: label); other sources "
                            "(LLM judges, code) are never labels; several people's are resolved by --label-resolve")
    group.add_argument("--mlflow-page-size", type=int, default=100, metavar="N",
                       help="traces per request (default 100)")


def add_mlflow_sink_arguments(parser: argparse.ArgumentParser) -> None:
    """``--to-mlflow URI`` and ``--assessment-name NAME``."""
    group = parser.add_argument_group("MLflow write-back")
    group.add_argument("--to-mlflow", metavar="URI", default=None,
                       help="log each verdict as an LLM-judge assessment on its MLflow trace (idempotent per "
                            "trace and program; a person's assessments are never touched)")
    group.add_argument("--assessment-name", default="rubricforge",
                       help="the name of the verdict assessments (default: rubricforge)")


def from_mlflow_requested(args: argparse.Namespace) -> bool:
    """True when ``--from-mlflow`` was given; checks the flags that go with it.

    Raises:
        InputError: ``--from-mlflow`` without ``--experiment``, together with ``--data``, or ``--experiment``
            / ``--filter`` without ``--from-mlflow``.
    """
    uri = getattr(args, "from_mlflow", None)
    if uri is None:
        if getattr(args, "experiment", None) or getattr(args, "mlflow_filter", None):
            raise InputError("--experiment and --filter go with --from-mlflow URI")
        return False
    if not getattr(args, "experiment", None):
        raise InputError("--from-mlflow needs --experiment NAME (the MLflow experiment whose traces to read)")
    if getattr(args, "data", None):
        raise InputError("give --data or --from-mlflow, not both")
    if getattr(args, "mlflow_page_size", 100) < 1:
        raise InputError(f"--mlflow-page-size must be >= 1, got {args.mlflow_page_size}")
    return True


def require_input(args: argparse.Namespace) -> None:
    """A command that reads trajectories has ``--data`` or ``--from-mlflow``; neither is an `InputError`, and
    so is an MLflow flag without the ``[mlflow]`` extra: both found before any trace is read or LM called."""
    if not getattr(args, "data", None) and getattr(args, "from_mlflow", None) is None:
        raise InputError("give --data FILE... (or --from-mlflow URI --experiment NAME: the traces of an MLflow "
                         "experiment)")
    from_mlflow_requested(args)
    if getattr(args, "from_mlflow", None) is not None or getattr(args, "to_mlflow", None) is not None:
        _mlflow()


def _mlflow() -> Any:
    try:
        from rubricforge_dspy.integrations import mlflow as integration  # the optional extra, imported on use
    except ImportError as exc:
        raise InputError(f"{INSTALL_HINT} ({exc})") from exc
    return integration


def mlflow_label_reading(args: argparse.Namespace) -> Any:
    """How ``--from-mlflow`` reads its HUMAN assessments: the `LabelReading` of ``--label-values``,
    ``--label-resolve`` and ``--adjudicator`` (`data_options.label_reading`), None for the default (0/1 words,
    ``first``) or when a ``--labels`` file is given (the flags then read that file)."""
    if getattr(args, "labels", None):
        return None
    return label_reading(args)


def labelers_of(labels: Any) -> dict[str, Any] | None:
    """``--from-mlflow``'s HUMAN labels as `data.stats.labeler_report` reports a labels file's (agreement, rule,
    disagreements), None unless some trace holds the labels of several sources."""
    if labels is None or not any(len(r) > 1 for r in labels.ratings.values()):
        return None
    from rubricforge_dspy.data.stats import labeler_report

    return labeler_report(labels)


def say_labelers(labels: Any, stream: IO[str]) -> None:
    """With several sources on a trace: their agreement and disagreements on `stream`, in the lines ``stats
    --labels`` prints for a labels file (`data.stats.format_labeler_report`)."""
    report = labelers_of(labels)
    if report is not None:
        from rubricforge_dspy.data.stats import format_labeler_report

        print("\n".join(format_labeler_report(report)), file=stream)


def _list_disagreements(args: argparse.Namespace, labels: Any, stream: IO[str]) -> None:
    """``--disagreements-out FILE`` with ``--from-mlflow`` (no ``--labels``): the sources' disagreements as JSONL."""
    out = getattr(args, "disagreements_out", None)
    if labels is not None and out and getattr(args, "labels", None) is None:
        write_disagreement_lines(labels, out, stream)


def load_from_mlflow(args: argparse.Namespace, stream: IO[str] | None = None) -> list[Trajectory]:
    """The trajectories ``--from-mlflow`` names, with the load's counts printed (labeled, unlabeled,
    skipped with reasons, non-human assessments ignored as labels).

    Raises:
        InputError: bad flags, an unknown experiment, a bad label; ServerError: MLflow unreachable.
    """
    stream = stream or sys.stderr
    from_mlflow_requested(args)
    integration = _mlflow()
    report = integration.MlflowLoadReport()
    trajectories = list(integration.load_mlflow_traces(
        args.from_mlflow, args.experiment, filter_string=args.mlflow_filter, label_name=args.label_name,
        page_size=args.mlflow_page_size, on_error="skip" if getattr(args, "skip_bad", False) else "raise",
        report=report, reading=mlflow_label_reading(args)))
    print(report.summary(), file=stream)
    say_labelers(report.labels, stream)
    _list_disagreements(args, report.labels, stream)
    for trace_id, why in report.judge_calls[1:SHOWN]:  # the first is named in the summary
        print(f"  left out trace {trace_id}: {why}", file=stream)
    for trace_id, problem in report.skipped:
        print(f"  skipped trace {trace_id}: {problem}", file=stream)
    if not trajectories:
        raise InputError(f"--from-mlflow {args.from_mlflow} --experiment {args.experiment!r}: no traces "
                         f"{'match the filter' if args.mlflow_filter else 'in it'}")
    return trajectories


def spool_from_mlflow(args: argparse.Namespace, spec: DataSpec, beside: str | Path,
                      stream: IO[str] | None = None) -> DataSpec:
    """`pull_from_mlflow`, and the HUMAN sources' agreement and disagreements said on `stream` (`say_labelers`)."""
    spool, report = pull_from_mlflow(args, spec, beside, stream)
    if report is not None:
        say_labelers(report.labels, stream or sys.stderr)
    return spool


def pull_from_mlflow(args: argparse.Namespace, spec: DataSpec, beside: str | Path,
                     stream: IO[str] | None = None) -> tuple[DataSpec, Any]:
    """``--from-mlflow``: stream the experiment's traces, with their HUMAN labels, one page at a time into the
    generic JSONL file ``<beside>.from-mlflow.jsonl`` (replaced on each run); the returned spec reads it.

    The command then reads that file as it reads any input: the same whole-input check before any LM call,
    the same job file and resume (a pull whose traces or labels changed is other input data: use a new
    ``--out``). Memory stays bounded by one page; the file also records exactly what was judged.

    Args:
        args: the parsed command line (``--from-mlflow``, ``--experiment``, ``--filter``, ``--label-name``).
        spec: the command's data spec (its label options are kept; its paths and format become the spool's).
        beside: the command's output path; the spool file is named after it.
        stream: where the load's counts are printed (stderr).

    Returns:
        A new spec reading the spool file and the load's `MlflowLoadReport` (its ``labels``: every source's label
        and the disagreements, also written to ``--disagreements-out``), or ``(spec, None)`` without
        ``--from-mlflow``.

    Raises:
        InputError: bad flags, an unknown experiment, a bad label, no trace at all; ServerError: MLflow unreachable.
    """
    if not from_mlflow_requested(args):
        return spec, None
    from rubricforge_dspy.data.export import convert_trajectories

    stream = stream or sys.stderr
    integration = _mlflow()
    report = integration.MlflowLoadReport()
    spool = Path(f"{beside}{SPOOL_SUFFIX}")
    spool.unlink(missing_ok=True)  # this command's own spool from an earlier run, named after its output
    n = convert_trajectories(integration.load_mlflow_traces(
        args.from_mlflow, args.experiment, filter_string=args.mlflow_filter, label_name=args.label_name,
        page_size=args.mlflow_page_size, on_error="skip" if getattr(args, "skip_bad", False) else "raise",
        report=report, reading=mlflow_label_reading(args)), spool)
    print(f"{report.summary()} -> {spool}", file=stream)
    _list_disagreements(args, report.labels, stream)
    for trace_id, why in report.judge_calls[1:SHOWN]:  # the first is named in the summary
        print(f"  left out trace {trace_id}: {why}", file=stream)
    for trace_id, problem in report.skipped:
        print(f"  skipped trace {trace_id}: {problem}", file=stream)
    if not n:
        spool.unlink(missing_ok=True)
        raise InputError(f"--from-mlflow {args.from_mlflow} --experiment {args.experiment!r}: no traces "
                         f"{'match the filter' if args.mlflow_filter else 'in it'}")
    return spec.replace(paths=(str(spool),), format="jsonl", mapping=None), report


def reads_from_mlflow(command: Callable[..., int]) -> Callable[[argparse.Namespace], int]:
    """A command that reads trajectories and writes no file to name a spool after (``stats``, ``convert``)
    takes ``--from-mlflow`` too: the input is checked (`require_input`), and the experiment's traces are
    spooled (`pull_from_mlflow`) into a temporary directory that is removed when the command ends. The command
    is called ``command(args, spec, mlflow_labels)``: the HUMAN labels as a `LabelFile` (None without
    ``--from-mlflow``), for it to report their agreement (`labelers_of`) as it reports a labels file's."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        require_input(args)
        spec = data_spec(args)
        if not from_mlflow_requested(args):
            return command(args, spec, None)
        with tempfile.TemporaryDirectory(prefix="rubricforge-mlflow-") as tmp:
            spool, report = pull_from_mlflow(args, spec, Path(tmp) / "traces")
            return command(args, spool, report.labels)

    return run


def write_verdicts_to_mlflow(args: argparse.Namespace, verdict_path: str | Path, program: Any,
                             stream: IO[str] | None = None) -> Any:
    """``--to-mlflow``: the verdict file's lines logged as assessments; returns the `WriteBackReport`
    (None without the flag)."""
    if getattr(args, "to_mlflow", None) is None:
        return None
    from rubricforge_dspy.core.verdict import read_verdicts

    if program is None:  # `judge` without --program judged with the seed rubric
        from rubricforge_dspy.judge.loading import judge_from

        program = judge_from(None)
    integration = _mlflow()
    report = integration.log_verdicts_to_mlflow(read_verdicts(verdict_path), args.to_mlflow,
                                                name=args.assessment_name, program=program,
                                                allow_unverified=getattr(args, "allow_unverified_program", False))
    print(report.summary(), file=stream or sys.stderr)
    return report


def tag_label_next_in_mlflow(args: argparse.Namespace, chosen: Any, stream: IO[str] | None = None) -> int:
    """label-next with ``--from-mlflow``: tag the chosen traces for labeling there; returns how many."""
    if getattr(args, "from_mlflow", None) is None:
        return 0
    n: int = _mlflow().tag_for_labeling(chosen, args.from_mlflow, label_name=args.label_name,
                                   experiment=args.experiment)
    print(f"MLflow: tagged {n} trace(s) rubricforge.label_next=<rank> (an earlier pick's tags cleared); label them "
          f"in the UI as a feedback named {args.label_name!r}, then re-run with --from-mlflow",
          file=stream or sys.stderr)
    return n


def tag_escalated_in_mlflow(args: argparse.Namespace, queue_path: str | Path, stream: IO[str] | None = None) -> int:
    """``judge --cascade --to-mlflow``: tag the traces the cascade escalated (its labeling queue, in order) for
    labeling in MLflow, as `label-next` tags its picks; returns how many (0 without the flag or escalations)."""
    if getattr(args, "to_mlflow", None) is None:
        return 0
    import orjson

    with open(queue_path, "rb") as handle:
        ids = [orjson.loads(line)["id"] for line in handle if line.strip()]
    if not ids:
        return 0
    n: int = _mlflow().tag_for_labeling(ids, args.to_mlflow, label_name=getattr(args, "label_name", None) or "label",
                                   experiment=getattr(args, "experiment", None))
    print(f"MLflow: tagged {n} escalated trace(s) rubricforge.label_next=<rank> for a person to label",
          file=stream or sys.stderr)
    return n
