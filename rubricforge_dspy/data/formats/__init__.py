"""Load agent trajectories from the supported result formats into `Trajectory` records.

Formats (see each module): ``tau_bench`` (tau-bench v1 results, tool-calling and act/react),
``tau2`` (tau2-bench simulations), ``webshop_react`` (ReAct WebShop episodes, JSONL; module ``webshop``), ``adapt``
(ADaPT WebShop dumps), ``jsonl`` (the generic interchange format, docs/FORMAT.md), the traces
``otel``, ``langfuse`` and ``openai_agents`` (the OpenAI Agents SDK's exported records; span mapping in
``spans``/``otel_attrs``), the agent logs ``inspect``
(Inspect AI ``.json``/``.eval``, module ``inspect_ai``) and ``mini_swe``, and the coding-agent runs
``swe_agent``, ``openhands`` and ``atif``. ``dspy_prediction`` turns a live DSPy run into a `Trajectory`
(used by `as_metric`; not a file format).

Each format module declares one `Format` record (``FORMAT = Format(...)``: name, reader, sniffers,
label rule, priority, extensions); the registry (``_registry``) holds them, and the names (`FORMATS`), the
readers, the default label rules and `detect_format` are derived from it. `register_format` adds a format
of your own the same way the built-ins are added (docs/FORMAT.md, "A new format"). The private modules
the readers share: ``_json_stream`` (whole-text and ijson streaming JSON readers), ``_json_lines`` (the
JSON Lines reader), ``_steps`` (step builders), ``_tool_errors`` (tool-error rules), ``_records`` (counts, id
sets, redaction).

In: files, directories or lists of them. Out: `Trajectory` records (`rubricforge_dspy.core`) in a
`Trajectories` list whose ``.report`` is the `LoadReport`.

Errors: with ``on_error="raise"`` the first bad record raises `TrajectoryFormatError(file, record,
problem)`; with ``on_error="skip"`` bad records are skipped and listed in a `LoadReport`, so nothing
is dropped silently. JSONL inputs are streamed line by line; whole documents of 4 MiB or more (tau-bench
and tau2 results, JSON arrays of generic records, Inspect `.json` logs, Langfuse exports) element by
element (`_json_stream.stream_json_array`, after a checking first pass); OTLP span JSON is grouped into traces
across the file, so it is held whole (docs/FORMAT.md, "Large files").

Trajectory ids (unique and stable for a given file layout):

* tau_bench: ``{file_stem}:{task_id}:{trial}``
* tau2: ``{submission_dir}/{file_stem}:{task_id}:{trial}``
* webshop_react: ``{file_stem}:{session}``; adapt: ``{file_stem}:{fixed_i}``
* jsonl: the record's own ``id``
* otel, langfuse, openai_agents: the trace id (one trajectory per trace; see docs/FORMAT.md)
* inspect: ``{eval.task}:{sample.id}:{epoch}``; mini_swe: the instance id (else the file stem)
* swe_agent: the instance id (the ``.traj`` file name); openhands: ``instance_id``, else the file stem;
  atif: ``session_id``, else the trial directory

A ``#{record_index}`` suffix is added when a file repeats the same key, and an id seen twice in one
load is an error.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from rubricforge_dspy.core.errors import InputError, MissingFileError
from rubricforge_dspy.core.files import NotARegularFileError, regular_file
from rubricforge_dspy.core.trajectory import (
    ANY_POSITIVE_REWARD,
    LabelRule,
    Trajectory,
    TrajectoryFormatError,
    parse_label_rule,
)
from rubricforge_dspy.data.formats import jsonl
from rubricforge_dspy.data.formats._format import FileSample, Format, Reader
from rubricforge_dspy.data.formats._records import IdSet, TrajectoryCounts
from rubricforge_dspy.data.formats._registry import (
    candidate_suffixes,
    detect,
    formats,
    load_plugins,
    register_format,
    unregister_format,
)

# Re-exported (``as``) for cli/ and apply/, not public API:
from rubricforge_dspy.data.formats._registry import format_named as format_named
from rubricforge_dspy.data.formats._registry import format_names as format_names
from rubricforge_dspy.data.formats._registry import not_candidate as not_candidate
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error

if TYPE_CHECKING:
    from rubricforge_dspy.data.formats.mapping import Mapping

__all__ = [
    "FORMATS",
    "FileSample",
    "Format",
    "LoadReport",
    "Trajectories",
    "default_label_rule",
    "detect_format",
    "formats",
    "load_plugins",
    "iter_trajectories",
    "iter_trajectory_counts",
    "TrajectoryCounts",
    "load_trajectories",
    "register_format",
    "trajectory_at",
    "looks_like_tool_error",
    "TrajectoryFormatError",
    "unregister_format",
]

# The built-in formats: each module ends with ``FORMAT = Format(...)``; a new built-in format is one
# module and one name here (registration order is the order of `FORMATS`).
_BUILTIN = ("tau_bench", "tau2", "webshop", "adapt", "jsonl", "otel", "langfuse", "inspect_ai", "mini_swe",
            "swe_agent", "openhands", "atif", "openai_agents")
for _module in _BUILTIN:
    register_format(importlib.import_module(f"{__name__}.{_module}").FORMAT, origin="built-in")
del _module


def __getattr__(name: str) -> Any:
    """``FORMATS`` (the registered names) and ``NOT_CANDIDATE`` (the reason a directory scan gives for a
    file it does not open), derived from the registry when read, so they include formats registered later."""
    if name == "FORMATS":
        return format_names()
    if name == "NOT_CANDIDATE":
        return not_candidate()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "FORMATS", "NOT_CANDIDATE"})


PathLike = Union[str, "os.PathLike[str]"]
MappingLike = Union[str, "os.PathLike[str]", "Mapping"]  # a mapping file, or a `mapping.Mapping`


@dataclass
class LoadReport:
    """What a load did: how many trajectories were loaded, which records were skipped and why.

    ``skipped`` holds ``(file, record_index, problem)``; ``record_index`` is None for a problem with
    the whole file. ``ignored_files`` lists ``(file, reason)`` for files of a scanned directory that
    are not of a known format (or not of the requested one).
    """

    loaded: int = 0
    skipped: list[tuple[str, int | str | None, str]] = field(default_factory=list)
    ignored_files: list[tuple[str, str]] = field(default_factory=list)
    label_rules: dict[str, str] = field(default_factory=dict)  # format -> the label rule applied to its rewards

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def summary(self) -> str:
        text = f"loaded {self.loaded} trajectories, skipped {len(self.skipped)} records"
        if self.ignored_files:
            text += f", ignored {len(self.ignored_files)} files"
        return text


class Trajectories(list[Trajectory]):
    """The trajectories of a load: a plain ``list[Trajectory]`` (pass it to a judge, a loop, `len`,
    slicing) that also carries the `LoadReport` of the load as ``.report``.

    Not a tuple: ``trajectories, report = load_trajectories(...)`` (the form before this type) no longer
    works; write ``trajectories = load_trajectories(...)`` and read ``trajectories.report``. Slicing,
    ``+`` and comprehensions give a plain list (the report describes the whole load).
    """

    def __init__(self, items: Iterable[Trajectory] = (), report: LoadReport | None = None):
        super().__init__(items)
        self.report = report if report is not None else LoadReport()

    def __repr__(self) -> str:
        return f"Trajectories({len(self)} trajectories; {self.report.summary()})"


def detect_format(path: PathLike) -> str:
    """The format of a file, sniffed from its content by the registered formats (`Format.sniff`, in
    priority order; the name only matters for an empty ``.jsonl`` and a binary ``.eval``).

    Raises `TrajectoryFormatError` naming the file when the content matches no known format.
    """
    return _detect(Path(path))


def _detect(path: Path, discover: bool = True) -> str:
    """`detect_format`; `discover` False asks only the formats registered so far (no plugin discovered)."""
    if not path.is_file():
        raise TrajectoryFormatError(str(path), None, "not a file")
    try:
        return detect(path, discover=discover)
    except RecursionError:  # a sniffer parsed a value nested deeper than `json` follows
        raise TrajectoryFormatError(str(path), None, _too_deep(None)) from None


def default_label_rule(format: str) -> LabelRule:
    """The label rule a format states (`Format.label_rule`: a mapped format's is its mapping's own, which may
    be a value set on a field, or None when it gives no labels); the generic ``reward > 0`` for a name that
    is not registered."""
    fmt = format_named(format)
    return fmt.label_rule if fmt is not None else ANY_POSITIVE_REWARD


def _registered_format(name: str) -> Format:
    """The registered format named `name`.

    Raises:
        InputError: no format of that name is registered.
    """
    fmt = format_named(name)
    if fmt is None:
        raise InputError(f"unknown format {name!r}; expected 'auto' or one of {format_names()}")
    return fmt


def _check_options(format: str, on_error: str) -> None:
    if format != "auto":
        _registered_format(format)
    if on_error not in ("raise", "skip"):
        raise InputError(f"on_error must be 'raise' or 'skip', got {on_error!r}")


def _files(paths: Iterable[PathLike], format: str,
           report: LoadReport) -> Iterator[tuple[Path, str | TrajectoryFormatError]]:
    """``(file, format)`` for every input: explicit files as given, directories scanned (sorted); a file
    that cannot be read comes with the error instead of its format. A named format (registered: a built-in,
    a mapping, or a plugin already discovered by its lookup) scans directories without discovering plugins."""
    discover = format == "auto"
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            suffixes = candidate_suffixes(discover=discover)
            for child in sorted(p for p in path.rglob("*") if not p.is_dir()):
                if any(part.startswith(".") for part in child.relative_to(path).parts):
                    continue
                if child.suffix not in suffixes:
                    report.ignored_files.append((str(child), not_candidate(discover=discover)))
                    continue
                try:
                    regular_file(child, "data file")  # a FIFO or a device among the data: refused, never opened
                except MissingFileError:  # a symlink to nothing
                    report.ignored_files.append((str(child), "a symlink to a missing file"))
                    continue
                except NotARegularFileError as exc:
                    yield child, TrajectoryFormatError(str(child), None, exc.problem)
                    continue
                try:
                    found = _detect(child, discover)
                except TrajectoryFormatError as exc:
                    report.ignored_files.append((str(child), exc.problem))
                    continue
                except OSError as exc:  # permission denied, vanished...: a data file we could not even sniff
                    yield child, TrajectoryFormatError(str(child), None, f"cannot read file: {exc}")
                    continue
                if format not in ("auto", found):
                    report.ignored_files.append((str(child), f"format {found!r}, not the requested {format!r}"))
                    continue
                yield child, found
        elif path.exists():
            try:
                regular_file(path, "data file", directory=True)  # a FIFO or a device: refused, never opened
                yield path, detect_format(path) if format == "auto" else format
            except NotARegularFileError as exc:
                yield path, TrajectoryFormatError(str(path), None, exc.problem)
            except OSError as exc:
                yield path, TrajectoryFormatError(str(path), None, f"cannot read file: {exc}")
        else:
            raise TrajectoryFormatError(str(path), None, "no such file or directory")


def iter_trajectories(
    path: PathLike | Iterable[PathLike],
    format: str = "auto",
    label_threshold: float | str | LabelRule | None = None,
    on_error: str = "raise",
    report: LoadReport | None = None,
    *,
    mapping: MappingLike | None = None,
) -> Iterator[Trajectory]:
    """Yield the trajectories of a file, a directory (all known-format files, sorted) or a list of those.

    Labels: ``label_threshold=None`` applies each format's own rule (`default_label_rule`: reward 1
    for tau-bench, tau2, WebShop and ADaPT; reward > 0 for the generic JSONL); a number T means
    ``reward > T``, ``">=T"`` means ``reward >= T`` (`parse_label_rule`). The rule applied is stored in
    ``hidden["label_rule"]`` and in ``report.label_rules``. ``on_error="raise"`` raises
    `TrajectoryFormatError(file, record_index, problem)` at the first bad record; ``"skip"`` skips it
    and records it in ``report`` (pass a `LoadReport` to read it afterwards). JSONL files are read
    one line at a time.

    ``mapping=`` (a mapping file or a `mapping.Mapping`; docs/MAPPING.md) reads the paths through that
    declarative mapping (``mapping.iter_mapped``: the same report, errors and duplicate-id checks) instead
    of a registered format; it cannot be combined with a `format` other than "auto". A format registered by
    ``mapping.register_mapping`` is read the same way when named as `format`.
    """
    yield from _iterate(path, format, label_threshold, on_error, report, _reader, mapping)


def iter_trajectory_counts(
    path: PathLike | Iterable[PathLike],
    format: str = "auto",
    label_threshold: float | str | LabelRule | None = None,
    on_error: str = "raise",
    report: LoadReport | None = None,
    *,
    mapping: MappingLike | None = None,
) -> Iterator[TrajectoryCounts]:
    """`iter_trajectories`, yielding `TrajectoryCounts` (id, task, domain, agent, label, reward, step and
    tool-error counts) instead of whole trajectories: what ``rubricforge stats`` counts.

    Every record is read and checked as `iter_trajectories` reads it (the same errors, skipped records,
    duplicate ids and label rules); a generic JSONL record is counted without building its steps (about
    twice as fast), other formats are loaded and then counted.

    Args:
        path: a file, a directory or a list of them.
        format, label_threshold, on_error, report, mapping: as for `iter_trajectories`.

    Returns:
        An iterator of `TrajectoryCounts`, one per trajectory `iter_trajectories` would yield, in order.

    Raises:
        TrajectoryFormatError: as `iter_trajectories` raises it.
        InputError: an unknown `format` or `on_error`, or both `format` and `mapping`.
    """
    yield from _iterate(path, format, label_threshold, on_error, report, _counter, mapping)


def _reader(name: str) -> Reader:
    """The reader of a registered format."""
    return _registered_format(name).read


def _counter(name: str) -> Reader:
    """A reader yielding `TrajectoryCounts`: the format's own (`Format.count`), else its reader's
    trajectories counted (errors pass through)."""
    fmt = _registered_format(name)
    if fmt.count is not None:
        return fmt.count

    def counts(file: Path, rule: LabelRule) -> Iterator[tuple[Any, Any]]:
        for index, result in fmt.read(file, rule):
            yield index, result if isinstance(result, TrajectoryFormatError) else TrajectoryCounts.of(result)
    return counts


def _chosen_mapping(format: str, mapping: MappingLike | None) -> MappingLike | None:
    """The mapping a load reads through: `mapping`, or the `Mapping` of a mapped format named as `format`
    (None for any other format). Checks `format` and refuses both together."""
    if mapping is not None:
        if format not in ("auto", None):
            raise InputError(f"give either format={format!r} or mapping=, not both: a mapping is the format of "
                             "the data it reads (drop format=, or drop mapping= to read a registered format)")
        return mapping
    fmt = format_named(format) if format != "auto" else None
    return None if fmt is None else fmt.mapping


def _iter_mapped(path: PathLike | Iterable[PathLike], mapping: MappingLike,
                 label_threshold: float | str | LabelRule | None,
                 on_error: str, report: LoadReport | None, counts: bool) -> Iterator[Any]:
    """`iter_trajectories` (or, with `counts`, `iter_trajectory_counts`) through a mapping."""
    from rubricforge_dspy.data.formats.mapping import iter_mapped

    loaded = iter_mapped(path, mapping, label_threshold=label_threshold, on_error=on_error, report=report)
    return (TrajectoryCounts.of(t) for t in loaded) if counts else loaded


def _iterate(path: PathLike | Iterable[PathLike], format: str, label_threshold: float | str | LabelRule | None,
             on_error: str,
             report: LoadReport | None, reader: Callable[[str], Reader],
             mapping: MappingLike | None = None) -> Iterator[Any]:
    """The one load loop of `iter_trajectories` and `iter_trajectory_counts`: files, label rules, errors,
    duplicate ids and the report; ``reader(format_name)`` gives the function that reads a file. A mapped
    load is `mapping.iter_mapped`'s loop (the same report, errors and duplicate ids)."""
    mapping = _chosen_mapping(format, mapping)
    _check_options(format, on_error)
    if mapping is not None:
        yield from _iter_mapped(path, mapping, label_threshold, on_error, report, counts=reader is _counter)
        return
    report = report if report is not None else LoadReport()
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    seen_ids = IdSet()  # 8 bytes per id: a file of any length is read in bounded memory

    def fail(exc: TrajectoryFormatError) -> None:
        if on_error == "raise":
            raise exc
        report.skipped.append((exc.file, exc.record, exc.problem))

    explicit = None if label_threshold is None else parse_label_rule(label_threshold)
    for file, fmt in _files(paths, format, report):
        if isinstance(fmt, TrajectoryFormatError):
            fail(fmt)
            continue
        rule = explicit or default_label_rule(fmt)
        report.label_rules.setdefault(fmt, str(rule))
        index = None
        try:
            for index, result in reader(fmt)(file, rule):
                if isinstance(result, TrajectoryFormatError):
                    fail(result)
                elif not seen_ids.add(result.id):
                    fail(TrajectoryFormatError(str(file), index, f"duplicate trajectory id {result.id!r}"))
                else:
                    report.loaded += 1
                    yield _stamped(result, rule)
        except OSError as exc:
            fail(TrajectoryFormatError(str(file), None, f"cannot read file: {exc}"))
        except RecursionError:  # a value nested deeper than the reader follows (the file's rest is not read)
            fail(TrajectoryFormatError(str(file), None, _too_deep(index)))


def _too_deep(index: int | str | None) -> str:
    """The problem of a file whose JSON nests deeper than `json` follows (after record `index`, or None)."""
    where = "" if index is None else f" after record {index}"
    return (f"JSON nested too deeply{where} (deeper than any trajectory; the rest of the file was not read): "
            "not a trajectory file")


_Loaded = TypeVar("_Loaded", Trajectory, TrajectoryCounts)


def _stamped(trajectory: _Loaded, rule: LabelRule) -> _Loaded:
    """The loader's new trajectory with the label rule in ``hidden`` (a fresh dict: a reader's dict is
    never changed). Set on the instance no one else holds yet instead of `dataclasses.replace`, which
    would build (and check) the whole record a second time for every trajectory read."""
    object.__setattr__(trajectory, "hidden", {**(trajectory.hidden or {}), "label_rule": str(rule)})
    return trajectory


def _line_starts(file: Path) -> Iterator[tuple[int, int]]:
    """``(line_index, byte offset)`` of each non-blank line of a JSON Lines file, without parsing any."""
    offset = 0
    with open(file, "rb") as handle:
        for line_index, raw in enumerate(handle):
            if raw.strip():
                yield line_index, offset
            offset += len(raw)


def trajectory_at(
    path: PathLike | Iterable[PathLike],
    index: int,
    format: str = "auto",
    label_threshold: float | str | LabelRule | None = None,
    on_error: str = "raise",
    *,
    mapping: MappingLike | None = None,
) -> tuple[Trajectory | None, int]:
    """The trajectory at position `index` of a load (as `iter_trajectories` yields them), reading the
    records before it as little as possible: in a generic JSON Lines file they are counted by line,
    never parsed, so ``rubricforge render --index N`` costs one record, not N. (Those skipped lines
    are therefore not checked; with ``on_error="skip"`` every record is read, since a bad one shifts
    the positions.)

    Args:
        path: a file, a directory or a list of them.
        index: the position, from 0.
        format, label_threshold, on_error, mapping: as for `iter_trajectories` (a mapped load reads the
            records before `index` through the mapping).

    Returns:
        ``(trajectory, count)``: the trajectory (None when `index` is past the end) and how many
        trajectories were counted (all of them when it is past the end).

    Raises:
        TrajectoryFormatError: with ``on_error="raise"``, the chosen record cannot be read, or a record
            of a file read in full is bad.
    """
    mapping = _chosen_mapping(format, mapping)
    _check_options(format, on_error)
    if on_error != "raise" or mapping is not None:
        count = 0
        for trajectory in (iter_trajectories(path, format, label_threshold, on_error) if mapping is None else
                           _iter_mapped(path, mapping, label_threshold, on_error, None, counts=False)):
            if count == index:
                return trajectory, count + 1
            count += 1
        return None, count
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    explicit = None if label_threshold is None else parse_label_rule(label_threshold)
    count, report = 0, LoadReport()
    for file, fmt in _files(paths, format, report):
        if isinstance(fmt, TrajectoryFormatError):
            raise fmt
        rule = explicit or default_label_rule(fmt)
        if fmt == "jsonl" and not jsonl.is_array(file):
            for line_index, offset in _line_starts(file):
                if count == index:
                    _, result = jsonl.read_line(file, line_index, offset, rule)
                    if isinstance(result, TrajectoryFormatError):
                        raise result
                    return _stamped(result, rule), count + 1
                count += 1
            continue
        for _, result in _reader(fmt)(file, rule):
            if isinstance(result, TrajectoryFormatError):
                raise result
            if count == index:
                return _stamped(result, rule), count + 1
            count += 1
    return None, count


def load_trajectories(
    path_or_paths: PathLike | Iterable[PathLike],
    format: str = "auto",
    label_threshold: float | str | LabelRule | None = None,
    on_error: str = "raise",
    *,
    mapping: MappingLike | None = None,
) -> Trajectories:
    """All trajectories of the given file(s)/directory(ies), with the `LoadReport` of the load.

    Args:
        path_or_paths: a file, a directory (every known-format file in it, sorted) or a list of those.
        format: a name in `FORMATS`, or "auto" to detect each file's format from its content.
        label_threshold: None applies each format's own rule (`default_label_rule`); a number T means
            ``reward > T``, ``">=T"`` means ``reward >= T`` (`parse_label_rule`).
        on_error: "raise" at the first bad record, or "skip" it and list it in the report.
        mapping: a mapping file (``.json``/``.yaml``) or a `mapping.Mapping`: read the data through this
            declarative mapping (docs/MAPPING.md) instead of a format; not with a `format` other than "auto".
            A path may then be a folder of one file per record (the mapping's glob).

    Returns:
        `Trajectories`: a ``list[Trajectory]`` (ids unique; an unlabeled one has ``label=None``) whose
        ``.report`` is the `LoadReport`: how many were loaded, the records skipped with their reasons,
        the files ignored, and the label rule applied per format. (Before, a ``(list, report)`` tuple:
        tuple-unpacking callers must now read ``.report``.)

    Raises:
        TrajectoryFormatError: with ``on_error="raise"``, the first bad record or unreadable file (naming
            the file and record); with either policy, a path that does not exist or a file named
            explicitly whose format is unknown.
        InputError: an unknown `format` or `on_error`, or both `format` and `mapping`.
        MappingError: the mapping file is invalid (the message names the key).
    """
    report = LoadReport()
    return Trajectories(iter_trajectories(path_or_paths, format, label_threshold, on_error, report, mapping=mapping),
                        report)
