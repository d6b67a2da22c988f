"""The command line's data options (``--data --format --map --label-threshold --labels --skip-bad``) and the
load every command that reads trajectories does with them: load, join labels, and say what happened
(skipped records with their reasons, ignored files, the label join, label warnings) on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule, Trajectory, labeled_only, parse_label_rule
from rubricforge_dspy.data.label_checks import LabelTally, no_labels_error
from rubricforge_dspy.data.scan import require_trajectories
from rubricforge_dspy.data.sessions import SESSION_ID
from rubricforge_dspy.data.spec import DataSpec

if TYPE_CHECKING:
    from rubricforge_dspy.data.formats import LoadReport, TrajectoryCounts
    from rubricforge_dspy.data.labels import JoinReport, LabelFile, LabelReading

__all__ = ["DATA_GROUP", "format_arg", "add_format_arguments", "data_spec", "as_spec", "label_reading",
           "add_data_arguments", "load_data",
           "add_session_argument", "group_by_session", "spool_sessions",
           "print_load_problems", "label_rule_arg", "LoadedData", "SHOWN", "stream_data"]

SESSIONS_SUFFIX = ".sessions.jsonl"  # `spool_sessions`: the grouped input of a command that reads it by path
SHOWN = 20  # problems listed one per line before "... and N more"


def label_rule_arg(text: str) -> LabelRule:
    """argparse type of ``--label-threshold``: T (reward > T), '>T' or '>=T'."""
    try:
        return parse_label_rule(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def format_arg(name: str) -> str:
    """argparse type of ``--format``: "auto" or a format name, checked without importing a plugin when it can be:
    "auto" and a registered name (a built-in's) are taken as they are; any other name discovers the installed
    plugins (it may be a plugin's) and is refused, naming the entry point, when its plugin was skipped
    (`rubricforge_dspy.data.formats.plugins`), or as unknown with the names there are."""
    if name == "auto":
        return name
    from rubricforge_dspy.data.formats._registry import format_named, format_names

    try:
        if format_named(name) is not None:
            return name
    except InputError as exc:  # a plugin that cannot be used: its entry point and why (argparse exits 2)
        raise argparse.ArgumentTypeError(str(exc)) from None
    raise argparse.ArgumentTypeError(f"unknown format {name!r}: auto or one of {', '.join(format_names())} "
                                     "(`rubricforge formats` lists them; --map MAP reads any other log)")


DATA_GROUP = "data (the trajectories read and their labels; docs/FORMAT.md, docs/MAPPING.md)"


def add_format_arguments(parser: argparse._ActionsContainer) -> None:
    """``--format`` and ``--map`` (a declarative mapping of a log no built-in format reads: docs/MAPPING.md)."""
    parser.add_argument("--format", default="auto", type=format_arg, metavar="FORMAT",
                        help="the input format (default: auto-detect; `rubricforge formats` lists them)")
    parser.add_argument("--map", default=None, metavar="MAP",
                        help="a mapping file (.json or .yaml) that says where a log's records and fields are "
                             "(docs/MAPPING.md; `rubricforge map check` tries it); instead of --format")


def data_spec(args: argparse.Namespace) -> DataSpec:
    """The `DataSpec` the data flags say (``--data --format --map --label-threshold --labels --labels-key``, the
    label-reading flags, ``--limit``, ``--skip-bad``, ``--session-key``); ``args`` is only read, never changed.

    ``--map`` registers the mapping as a format (the spec's ``format`` is its name). A mapping that gives no reward
    (its label from a value set, or no label) has nothing a ``--label-threshold`` could apply to in the data: with
    ``--labels`` the threshold goes with the labels file (the spec's ``labels_rule``: it labels the file's rewards;
    its ``label_rule`` is then None); without, or when the labels file has no reward either, it is refused
    naming both. A command without some of these flags gets the default of each.

    Raises:
        InputError: --map beside a --format other than auto; a mapping that does not validate (`MappingError`);
            --labels-key or a label-reading flag without --labels; a --label-threshold with no reward to apply to.
    """
    labels, key = getattr(args, "labels", None), getattr(args, "labels_key", None)
    reading = label_reading(args)
    if key is not None and not labels:
        raise InputError(f"--labels-key {key!r} says how to read a labels file: give the file with --labels FILE")
    mapping = getattr(args, "map", None)
    data_format = getattr(args, "format", None) or "auto"
    rule = getattr(args, "label_threshold", None)
    labels_rule = None
    if mapping is not None:
        if data_format != "auto":
            raise InputError(f"--map {mapping} and --format {data_format} both say how to read the data: give one")
        from rubricforge_dspy.data.formats.mapping import register_mapping

        registered = register_mapping(mapping)  # the same file again returns the record held
        data_format = registered.name
        if rule is not None and "reward" not in registered.mapping.fields:
            if not labels:
                raise InputError(f"--label-threshold {rule}: the mapping {mapping} gives no 'reward' (its label "
                                 f"is {registered.mapping.label_rule or 'absent'}), so there is no reward to label; "
                                 "drop the threshold, or join rewards with --labels FILE")
            rule, labels_rule = None, rule  # it labels the labels file's rewards, not the data's
    data, limit = getattr(args, "data", None), getattr(args, "limit", None)
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1, got {limit}: nothing would be judged")
    spec = DataSpec(paths=_paths(data), format=data_format, mapping=mapping, label_rule=rule, labels=labels or None,
                    labels_key=key, labels_rule=labels_rule,
                    label_reading=reading if labels else None,  # else --from-mlflow's (`mlflow_label_reading`)
                    limit=limit,
                    on_error="skip" if getattr(args, "skip_bad", False) else "raise",
                    session_key=getattr(args, "session_key", None))
    if labels_rule is not None:
        from rubricforge_dspy.data.labels import read_label_file

        read = read_label_file(spec.labels_path or labels)
        if not any(entry.reward is not None for entry in read.entries.values()):
            raise InputError(f"--label-threshold {labels_rule}: neither the mapping {mapping} nor the labels file "
                             f"{labels} gives a reward to label (the file gives labels only); drop the threshold")
    return spec


def as_spec(source: DataSpec | argparse.Namespace) -> DataSpec:
    """``source`` itself when it is a `DataSpec`, else the spec its flags say (`data_spec`)."""
    return source if isinstance(source, DataSpec) else data_spec(source)


def _paths(data: object) -> tuple[str, ...]:
    if data is None:
        return ()
    if isinstance(data, (str, Path)):
        return (str(data),)
    return tuple(str(path) for path in data)  # type: ignore[attr-defined]


def add_data_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--data``, ``--format``/``--map``, the label flags, ``--skip-bad`` and ``--session-key``, in one argument
    group (`DATA_GROUP`) shared by every command that reads trajectories; `data_spec` reads them into a `DataSpec`
    (format names are checked when the command line is parsed, a plugin discovered only for a name not
    registered: `format_arg`)."""
    group = parser.add_argument_group(DATA_GROUP)
    group.add_argument("--data", required=required, nargs="+", default=None, help="trajectory file(s) or directory")
    add_format_arguments(group)
    add_label_arguments(group)
    group.add_argument("--skip-bad", action="store_true",
                       help="skip (and list) malformed records instead of stopping at the first one")
    add_session_argument(group)


def add_session_argument(parser: argparse._ActionsContainer) -> None:
    """``--session-key [EXPR]``: judge the traces of one session as one trajectory (`data.sessions`)."""
    parser.add_argument("--session-key", nargs="?", const=SESSION_ID, default=None, metavar="EXPR",
                        help="group the traces of one session into one trajectory, in start order, whose id is "
                             "the session id (labels join and verdicts are per session). Alone: the platform's "
                             "session attribute (MLflow mlflow.trace.session, OpenTelemetry session.id / "
                             "gen_ai.conversation.id, Langfuse sessionId, a mapping's hidden session_id); "
                             "EXPR: a JMESPath expression on each trace's hidden fields (e.g. userId, "
                             "metadata.conversation). The whole input is then held in memory")


def add_label_arguments(parser: argparse._ActionsContainer) -> None:
    parser.add_argument("--label-threshold", type=label_rule_arg, default=None, metavar="T",
                        help="label = reward > T ('>=T': reward >= T); default: each format's own rule "
                             "(reward 1 for tau-bench, tau2, WebShop, ADaPT; reward > 0 for generic JSONL)")
    parser.add_argument("--labels", default=None, metavar="FILE",
                        help="labels joined by trajectory id: CSV (id,label|reward), JSONL "
                             "({\"id\", \"label\"|\"reward\"}) or a SWE-bench results.json; docs/FORMAT.md")
    parser.add_argument("--labels-key", default=None, metavar="EXPR",
                        help="the labels file's records are keyed by this JMESPath expression (on each JSONL record "
                             "or CSV row), not by an 'id': e.g. \"join(':', [model, to_string(task_id)])\"; "
                             "docs/MAPPING.md")
    add_labeler_arguments(parser)


# -- labels from several people (issue 41 item 2): text values, a labeler column, the resolution rule ----------

def add_labeler_arguments(parser: argparse._ActionsContainer) -> None:
    """``--label-column``, ``--label-values``, ``--labeler-column``, ``--label-resolve``, ``--adjudicator`` (how a
    CSV/JSONL labels file's values are read; `data.labels.LabelReading`)."""
    from rubricforge_dspy.data.labels import RESOLVE_RULES

    parser.add_argument("--label-column", default=None, metavar="NAME",
                        help="the labels file's column (or JSONL member) holding the label (default: label)")
    parser.add_argument("--label-values", default=None, metavar="MAP|EXPR",
                        help="how the label column's values become labels: 'Successful=1,Unsuccessful=0,Unsure=skip' "
                             "(skip: no label, counted) or a JMESPath expression on each row giving 0/1/true/false or "
                             "null (no label); default: 1/0, true/false, pass/fail, yes/no")
    parser.add_argument("--labeler-column", default=None, metavar="NAME",
                        help="the column naming who labeled each row: an id may then have one row per labeler "
                             "(default: 'labeler' when the file has one); `stats --labels` reports their agreement")
    parser.add_argument("--label-resolve", default="first", choices=RESOLVE_RULES,
                        help="which label an id gets when its labelers disagree: first (first labeled row), majority "
                             "(a tie gives no label), unanimous (a disagreement gives no label), adjudicated (the "
                             "--adjudicator's row wins; a disagreement without it gives no label); default first. "
                             "With --from-mlflow: each HUMAN assessment's source is a labeler (first: the earliest)")
    parser.add_argument("--adjudicator", default=None, metavar="NAME",
                        help="with --label-resolve adjudicated: the labeler whose label wins (--from-mlflow: a "
                             "source id)")
    parser.add_argument("--disagreements-out", default=None, metavar="FILE",
                        help="write the ids where labelers disagree, with each labeler's label, as JSONL here")


# the label-reading flags that say nothing about MLflow's HUMAN assessments (their value is the label, their
# source id the labeler)
_FILE_ONLY = ("--label-column", "--labeler-column")


def label_reading(args: argparse.Namespace) -> LabelReading | None:
    """The `LabelReading` the label flags of `add_labeler_arguments` say (None when none is given): a labels file's
    (``--labels``), or else ``--from-mlflow``'s HUMAN assessments' (``--label-values``, ``--label-resolve``,
    ``--adjudicator``; the same rule, `integrations.mlflow.trace_label`); refused with neither, and the file-only
    flags (``--label-column``, ``--labeler-column``) refused with ``--from-mlflow`` alone."""
    flags = {"--label-column": getattr(args, "label_column", None),
             "--label-values": getattr(args, "label_values", None),
             "--labeler-column": getattr(args, "labeler_column", None),
             "--adjudicator": getattr(args, "adjudicator", None),
             "--disagreements-out": getattr(args, "disagreements_out", None)}
    resolve = getattr(args, "label_resolve", "first") or "first"
    given = [name for name, value in flags.items() if value is not None] + (
        ["--label-resolve"] if resolve != "first" else [])
    if not given:
        return None
    if not getattr(args, "labels", None):
        if getattr(args, "from_mlflow", None) is None:
            raise InputError(f"{', '.join(given)} say how to read a labels file (or --from-mlflow's HUMAN "
                             "assessments): give the file with --labels FILE")
        misplaced = [name for name in _FILE_ONLY if name in given]
        if misplaced:
            raise InputError(f"{', '.join(misplaced)} name a labels file's columns; --from-mlflow reads each HUMAN "
                             "assessment's value as the label and its source id as the labeler: drop them (or give "
                             "the file with --labels FILE)")
    from rubricforge_dspy.data.labels import LabelReading

    return LabelReading(column=flags["--label-column"] or "label", values=flags["--label-values"],
                        labeler_column=flags["--labeler-column"], resolve=resolve,
                        adjudicator=flags["--adjudicator"])


def write_disagreements(spec: DataSpec, out: str | None, stream: IO[str] | None = None) -> None:
    """With ``--disagreements-out FILE`` (``out``): the labels file's disagreements as JSONL (``{"id", "labels":
    {labeler: label}}``), said on stderr."""
    labels = spec.labels_path
    if not out or labels is None:
        return
    from rubricforge_dspy.data.labels import read_label_file

    write_disagreement_lines(read_label_file(labels), out, stream)


def write_disagreement_lines(read: LabelFile, out: str, stream: IO[str] | None = None) -> None:
    """`read`'s disagreements (a labels file's, or ``--from-mlflow``'s HUMAN assessments') as JSONL in `out`
    (``{"id", "labels": {labeler: label}, "resolved"}``), said on stderr."""
    import json

    with open(out, "w", encoding="utf-8") as handle:
        for rid in read.disagreements:
            handle.write(json.dumps({"id": rid, "labels": read.ratings[rid],
                                     "resolved": (read.entries[rid].label if rid in read.entries else None)}) + "\n")
    print(f"{len(read.disagreements)} disagreement(s) between labelers -> {out}", file=stream or sys.stderr)


_Items = TypeVar("_Items", bound=Iterable[Any])


@dataclass
class LoadedData(Generic[_Items]):
    trajectories: _Items  # a list (`load_data`) or a one-pass iterator (`stream_data`)
    report: LoadReport
    join: JoinReport | None = None
    tally: LabelTally = field(default_factory=LabelTally)
    left_out: int = 0  # unlabeled trajectories left out by a command that needs labels

    def to_dict(self) -> dict[str, Any]:
        return {"skipped": len(self.report.skipped), "ignored_files": len(self.report.ignored_files),
                "label_rules_by_format": dict(self.report.label_rules),
                "labels_join": self.join.to_dict() if self.join is not None else None,
                **self.tally.to_dict()}


def print_load_problems(report: LoadReport, join: JoinReport | None = None, stream: IO[str] | None = None) -> None:
    """Each skipped record and ignored file with its reason (the first `SHOWN` of each), then the join."""
    stream = stream or sys.stderr
    from rubricforge_dspy.data.formats._registry import not_candidate

    unopened = not_candidate(discover=False)  # counted, not listed one by one (the scan's own reason: no discovery)
    not_json = [f for f, p in report.ignored_files if p == unopened]
    for what, rows in (("skipped", [(f, r, p) for f, r, p in report.skipped]),
                       ("ignored file", [(f, None, p) for f, p in report.ignored_files if p != unopened])):
        for file, record, problem in rows[:SHOWN]:
            where = file if record is None else f"{file}, record {record}"
            print(f"{what}: {where}: {problem}", file=stream)
        if len(rows) > SHOWN:
            print(f"{what}: ... and {len(rows) - SHOWN} more", file=stream)
    if not_json:
        print(f"ignored {len(not_json)} file(s): {unopened} (e.g. {not_json[0]})", file=stream)
    if report.skipped:
        print(f"{len(report.skipped)} record(s) skipped (--skip-bad)", file=stream)
    if join is not None:
        print(join.summary(), file=stream)


def print_label_warnings(tally: LabelTally, stream: IO[str] | None = None) -> None:
    for warning in tally.warnings():
        print(f"WARNING: {warning}", file=stream or sys.stderr)


@overload
def stream_data(source: DataSpec | argparse.Namespace, *, warn: bool = True,
                counts: Literal[False] = False) -> LoadedData[Iterator[Trajectory]]: ...


@overload
def stream_data(source: DataSpec | argparse.Namespace, *, warn: bool = True,
                counts: Literal[True]) -> LoadedData[Iterator[TrajectoryCounts]]: ...


def stream_data(source: DataSpec | argparse.Namespace, *, warn: bool = True,
                counts: bool = False) -> LoadedData[Iterator[Any]]:
    """The data of ``source`` (a `DataSpec`, or the flags `data_spec` reads one from) as a stream: a
    `LoadedData` whose ``trajectories`` is an iterator yielding each trajectory (``--labels`` joined, tallied)
    as it is read, so a file of any length is read in bounded memory. When the iterator is exhausted, the
    load's problems and label warnings are printed (as `load_data` prints them) and an input without any
    trajectory raises `EmptyInputError` naming it; ``report``, ``join`` and ``tally`` are complete only then.

    counts: yield `TrajectoryCounts` instead of trajectories (`iter_trajectory_counts`: every record
    checked the same, no steps built), for a command that only counts (``stats``)."""
    from rubricforge_dspy.data.formats import LoadReport, iter_trajectories, iter_trajectory_counts
    from rubricforge_dspy.data.labels import LabelJoin

    spec = as_spec(source)
    report = LoadReport()
    labels = spec.labels_path
    joiner = LabelJoin(labels, spec.label_rule) if labels is not None else None
    data: LoadedData[Iterator[Any]] = LoadedData(iter(()), report)

    def stream() -> Iterator[Any]:
        options = {**spec.read_options(), "report": report}
        loaded: Iterator[Any]
        if spec.session_key is not None:  # a session's traces may lie anywhere in the input: all read, then grouped
            loaded = iter(group_by_session(list(iter_trajectories(spec.paths, **options)), spec.session_key))
        else:
            loaded = (iter_trajectory_counts if counts else iter_trajectories)(spec.paths, **options)
        for trajectory in loaded:
            if joiner is not None:
                trajectory = joiner.apply(trajectory)
            data.tally.add(trajectory)
            yield trajectory
        if not data.tally.trajectories:
            print_load_problems(report)
            require_trajectories(0, list(spec.paths), report)  # an empty input is named (exit 2), never 0
        data.join = joiner.finish() if joiner is not None else None
        print_load_problems(report, data.join)
        if warn:
            print_label_warnings(data.tally)

    data.trajectories = stream()
    return data


def group_by_session(trajectories: list[Trajectory], key: str, stream: IO[str] | None = None) -> list[Trajectory]:
    """``--session-key``: the traces of each session as one trajectory (`data.sessions.group_sessions`), with
    what was grouped said on stderr (the trajectory id is the session id)."""
    from rubricforge_dspy.data.sessions import SessionReport, group_sessions

    report = SessionReport(key=key)
    grouped = group_sessions(trajectories, key, report)
    print(report.summary(), file=stream or sys.stderr)
    return grouped


def spool_sessions(spec: DataSpec, beside: str | Path, *, to_mlflow: str | None = None) -> DataSpec:
    """``--session-key`` for a command that reads its input by path (``judge``): the input's sessions, each one
    trajectory (`group_by_session`), written as generic JSONL to ``<beside>.sessions.jsonl`` (replaced on each
    run); labels (``--labels``) are joined by the command, per session.

    Returns:
        A new spec reading the spool (generic JSONL, no session key), or ``spec`` itself without a session key.

    Raises:
        InputError: ``--to-mlflow`` beside it (assessments are per trace), an input without trajectories,
            traces of one session that disagree (`data.sessions.SessionError`).
    """
    key = spec.session_key
    if key is None:
        return spec
    if to_mlflow is not None:
        raise InputError("--to-mlflow logs one assessment per MLflow trace, but with --session-key a verdict is "
                         "per session (its id is the session id, not a trace id): drop one of the two")
    from rubricforge_dspy.data.export import convert_trajectories
    from rubricforge_dspy.data.formats import LoadReport, iter_trajectories

    report = LoadReport()
    traces = list(iter_trajectories(spec.paths, **spec.read_options(), report=report))
    print_load_problems(report)
    require_trajectories(len(traces), list(spec.paths), report)
    spool = Path(f"{beside}{SESSIONS_SUFFIX}")
    spool.unlink(missing_ok=True)
    n = convert_trajectories(group_by_session(traces, key), spool)
    print(f"{n} session trajectory(ies) -> {spool}", file=sys.stderr)
    return spec.replace(paths=(str(spool),), format="jsonl", mapping=None, session_key=None)


def warn_left_out(left_out: int, labeled: int) -> None:
    """Say on stderr how many unlabeled trajectories a command that needs labels left out."""
    if left_out:
        print(f"WARNING: {left_out} unlabeled trajectories left out (no label in the data or the labels "
              f"file); using the {labeled} labeled ones", file=sys.stderr)


def load_data(source: DataSpec | argparse.Namespace, *, need_labels: bool = False, warn: bool = True,
              command: str | None = None) -> LoadedData[list[Trajectory]]:
    """Load the data of ``source`` (a `DataSpec`, or the flags `data_spec` reads one from), join its labels file,
    print problems and warnings (`stream_data`, held in a list).

    An input without any trajectory raises `EmptyInputError` naming it (exit 2).

    need_labels: leave unlabeled trajectories out (said on stderr with their count) and refuse when
    none is labeled."""
    if isinstance(source, argparse.Namespace):
        command = command or getattr(source, "command", None)
    streamed = stream_data(source, warn=warn)
    trajectories = list(streamed.trajectories)
    data = LoadedData(trajectories, streamed.report, streamed.join, streamed.tally)
    if need_labels:
        labeled = labeled_only(trajectories)
        data.left_out = len(trajectories) - len(labeled)
        if not labeled:
            raise no_labels_error(command, len(trajectories), trajectories[0] if trajectories else None)
        warn_left_out(data.left_out, len(labeled))
        data.trajectories = labeled
    return data
