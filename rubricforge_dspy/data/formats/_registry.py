"""The format registry: one `Format` record per trajectory format, registered once, from which the load
loop derives everything it knows about formats (the names, the readers, the default label rules, the file
suffixes a directory scan opens, and content sniffing).

A format is one module that ends with ``FORMAT = Format(...)`` and one line that registers it: a built-in
format is named in the list in ``formats/__init__``; a format of your own is registered by
``register_format(my_module.FORMAT)`` (or ``register_format(Format(...))``), the same call. A third-party
plugin (an entry point of group ``rubricforge_dspy.formats``, `plugins`) and a declarative mapping
(``mapping.register_mapping``) register through the same call; each record says where it came from
(`Format.origin`: ``built-in``, ``plugin (<distribution>)``, ``mapping (<file>)``, ``registered (<module>)``).

Plugins are discovered once, lazily, the first time the registry needs them: to list what it holds
(`formats`, `format_names`), to detect a file's format (`detect`, the suffixes of a directory scan), or to
look up a name that is not registered (`format_named`). Importing the package never imports a third party's
code, and neither does reading with a registered format (``format="jsonl"``: `format_named` finds it, and a
directory scan for it passes ``discover=False``). A plugin that cannot be used (its import or factory raises
or hangs, a field is missing, its name is taken, its sniffer raises or hangs: `plugins.call_bounded`) is
skipped with one `plugins.PluginWarning` naming its entry point and distribution, and the other formats
carry on; a lookup of its name (`format_named`) raises its `plugins.PluginError`, so a command that names it
fails naming it. A format is never silently missing.

Detection (`detect`) reads a `FileSample` of the file and asks the formats in two rounds, each in
``priority`` order (lower first, then registration order): first the record sniffers
(``sniff_record``) on the first JSON lines of a file that starts with ``{`` (JSON Lines formats), then the
document sniffers (``sniff``). The first format that answers True is the file's format.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import rubricforge_dspy.data.formats.plugins as plugins
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats._format import ABANDONED, FileSample, Format

_FORMATS: dict[str, Format] = {}


def register_format(fmt: Format, *, origin: str | None = None) -> Format:
    """Make a format known to every loader (``load_trajectories``, ``detect_format``, directory scans,
    the command line's ``--format``, which checks a name when the command line is parsed).

    Args:
        fmt: The format's record.
        origin: Where it comes from (`Format.origin`); None keeps the record's own, else
            ``registered (<module of its reader>)``.

    Returns:
        The record registered (`fmt`, with its origin), so a module may write
        ``FORMAT = register_format(Format(...))``. Registering the very record held already returns it.

    Raises:
        InputError: `fmt` is not a `Format`, or a format of the same name is registered already (the
            message names both; a name is never silently replaced), or the caller is a plugin's import
            that was abandoned for not finishing in time (`plugins.call_bounded`).
    """
    if not isinstance(fmt, Format):
        raise InputError(f"register_format takes a Format record, got {type(fmt).__name__}")
    abandoned = getattr(threading.current_thread(), ABANDONED, None)
    if abandoned is not None:  # a plugin's import that finished after it was skipped: it stays skipped
        raise InputError(f"{abandoned}: cannot register format {fmt.name!r}: the plugin was skipped (it did not "
                         "finish loading in time)")
    held = _FORMATS.get(fmt.name)
    if held is fmt and origin in (None, fmt.origin):
        return held
    if held is not None:
        raise InputError(f"a format named {fmt.name!r} is registered already ({held.origin}, read by "
                         f"{_origin(held.read)}); cannot register another from {_origin(fmt.read)}: "
                         "choose another name")
    origin = origin or fmt.origin or f"registered ({getattr(fmt.read, '__module__', '?')})"
    if not fmt.origin:  # the record as given (a module's FORMAT stays the registered object); origin is not compared
        object.__setattr__(fmt, "origin", origin)
    elif origin != fmt.origin:
        fmt = replace(fmt, origin=origin)
    _FORMATS[fmt.name] = fmt
    return fmt


def unregister_format(name: str) -> Format:
    """Remove a registered format (for tests and plugins that replace a format they registered).

    Raises:
        InputError: no format of that name is registered.
    """
    try:
        return _FORMATS.pop(name)
    except KeyError:
        raise InputError(f"no format named {name!r} is registered") from None


def _origin(function: Callable[..., Any]) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


_PLUGINS: dict[str, Any] = {"loaded": False}
_PLUGIN_OF: dict[str, str] = {}  # a plugin format's name -> where its entry point is (`plugins.entry_where`)
_BROKEN: dict[str, tuple[frozenset[str], Exception]] = {}  # where -> (the names it answers to, its PluginError)


def load_plugins() -> tuple[Format, ...]:
    """Register the format of every installed plugin not registered yet (`plugins.load_format`), skipping, with
    one `plugins.PluginWarning` each, the plugins that cannot be used.

    The registry calls it when it first needs the plugins (detection, the list of formats, a name that is not
    registered); call it again after installing a plugin in a running process. A plugin skipped once is not
    tried again while it stays installed (its warning is not repeated); one no longer installed is forgotten.

    Returns:
        The formats registered by this call.
    """
    _PLUGINS["loaded"] = True  # first: a plugin whose import asks the registry does not discover again
    added = []
    installed = set()
    entries = []
    for entry in plugins.installed_entry_points():
        where = plugins.entry_where(entry)
        installed.add(where)
        if where not in _BROKEN:
            entries.append((entry, where))
    # One bound in all: the first entry point of each module side by side, then the others of those modules
    # (imported by then, or skipped at once as still being imported: a hung module is never waited for twice).
    modules = [entry.value.split(":")[0].strip() for entry, _ in entries]
    first = [index for index, module in enumerate(modules) if modules.index(module) == index]
    rest = [index for index in range(len(entries)) if index not in first]
    loaded: list[tuple[Any, BaseException | None]] = [(None, None)] * len(entries)
    for wave in (first, rest):
        for index, answer in zip(wave, plugins.side_by_side([partial(plugins.load_format, entries[index][0])
                                                              for index in wave]), strict=True):
            loaded[index] = answer
    for (entry, where), (result, error) in zip(entries, loaded, strict=True):
        try:
            if error is not None:
                raise error
            if result is None:
                raise plugins.PluginError(f"{where}: loading it gave nothing")
            fmt = result
            held = _FORMATS.get(fmt.name)
            if held is not None and held.origin == fmt.origin:
                continue  # this plugin's format, registered by an earlier call
            if held is not None and held.read == fmt.read:  # its module registered it on import: say it is a plugin
                _FORMATS[fmt.name] = fmt
            else:
                try:
                    fmt = register_format(fmt)
                except InputError as exc:
                    raise plugins.PluginError(f"{where}: {exc}") from None
        except plugins.PluginError as exc:
            _skip(where, {entry.name}, exc)
            continue
        _PLUGIN_OF[fmt.name] = where
        added.append(fmt)
    for where in set(_BROKEN) - installed:
        _BROKEN.pop(where, None)
    return tuple(added)


def _skip(where: str, names: set[str], error: Exception) -> None:
    """Skip a plugin that cannot be used: remember why (under the names a command may give it), take its
    format out of the registry, and say so once (`plugins.PluginWarning`)."""
    for name in [name for name, held in list(_PLUGIN_OF.items()) if held == where]:
        names.add(name)
        _FORMATS.pop(name, None)
        _PLUGIN_OF.pop(name, None)
    _BROKEN[where] = (frozenset(names), error)
    warnings.warn(plugins.PluginWarning(f"format plugin skipped: {error}"), stacklevel=2)


def _broken(name: str) -> Exception | None:
    """The `PluginError` of the skipped plugin a command names by `name` (its entry point's or format's), or None."""
    return next((error for names, error in _BROKEN.values() if name in names), None)


def _any_record(sniff_record: Callable[[Any], bool], lines: Any) -> bool:
    return any(sniff_record(obj) for obj in lines)


def _asker(ordered: list[Format], question: Callable[[Format], Callable[[], bool] | None]) -> Callable[[Format], bool]:
    """``ask(fmt)``: the answer of `fmt` to `question` (None: it has no such sniffer, so False). A built-in
    format is asked when its turn comes; the first time a plugin's turn comes, every plugin in `ordered` is
    asked side by side (`plugins.side_by_side`: one bound in all, however many hang), and each answer is
    used in its turn. A plugin that raised or hung answers False and is skipped (`_skip`)."""
    answers: dict[str, tuple[bool | None, BaseException | None]] = {}

    def ask(fmt: Format) -> bool:
        call = question(fmt)
        if call is None or _FORMATS.get(fmt.name) is not fmt:
            return False  # no such sniffer, or skipped earlier in this detection
        where = _PLUGIN_OF.get(fmt.name)
        if where is None:
            return call()
        if not answers:
            asked = [other for other in ordered if other.name in _PLUGIN_OF and _FORMATS.get(other.name) is other
                     and question(other) is not None]
            calls: list[Callable[[], bool]] = [question(other) or (lambda: False) for other in asked]
            answers.update(zip([other.name for other in asked], plugins.side_by_side(calls), strict=True))
        answer, error = answers.get(fmt.name) or plugins.side_by_side([call])[0]
        if isinstance(error, plugins.PluginError):
            _skip(where, {fmt.name}, error)
            return False
        if error is not None:
            raise error
        return bool(answer)
    return ask


def _registered(discover: bool = True) -> dict[str, Format]:
    """The registry; with `discover`, the installed plugins are discovered first (once)."""
    if discover and not _PLUGINS["loaded"]:
        load_plugins()
    return _FORMATS


def formats() -> tuple[Format, ...]:
    """The registered formats (built-in, plugin, mapping, your own), in registration order; each says where
    it comes from (`Format.origin`). Installed plugins are discovered first (a broken one is skipped with a
    `plugins.PluginWarning`)."""
    return tuple(_registered().values())


def format_names() -> tuple[str, ...]:
    """The registered format names, in registration order (plugins discovered first, as `formats`)."""
    return tuple(_registered())


def format_named(name: str) -> Format | None:
    """The registered format of that name, or None. A name that is not registered yet discovers the installed
    plugins first (a registered one, a built-in's, never imports a plugin).

    Raises:
        plugins.PluginError: `name` is the format (or entry point name) of a plugin that was skipped: the
            message names its entry point, its distribution and why.
    """
    fmt = _FORMATS.get(name)
    if fmt is None:
        fmt = _registered().get(name)
    if fmt is None and (error := _broken(name)) is not None:
            raise plugins.PluginError(f"format {name!r} cannot be used: its plugin was skipped: {error}")
    return fmt


def candidate_suffixes(*, discover: bool = True) -> tuple[str, ...]:
    """The file suffixes a directory scan opens (every format's extensions, first seen first); `discover`
    False: of the formats registered so far, without discovering plugins."""
    seen: dict[str, None] = {}
    for fmt in _registered(discover).values():
        seen.update(dict.fromkeys((*fmt.extensions, *fmt.binary_extensions)))
    return tuple(seen)


def not_candidate(*, discover: bool = True) -> str:
    """The reason a directory scan gives for a file it does not open (`discover`: as `candidate_suffixes`)."""
    return f"not a {'/'.join(candidate_suffixes(discover=discover))} file"


def _by_priority(discover: bool = True) -> list[Format]:
    return sorted(_registered(discover).values(), key=lambda fmt: fmt.priority)  # stable: ties keep registration order


_ARRAY_HINT = ("; a JSON array is read as tau-bench results (records with 'traj') or as generic records "
               "(objects with 'id', 'task_id', 'messages', 'reward': docs/FORMAT.md)")


def detect(path: Path, *, discover: bool = True) -> str:
    """The name of the format of a regular file, sniffed from its content (see the module docstring).

    Args:
        path: the file.
        discover: discover the installed plugins first (False: ask only the formats registered so far, as a
            directory scan for a named format does).

    Raises:
        TrajectoryFormatError: naming the file when no registered format recognises it.
    """
    ordered = _by_priority(discover)
    claimants = [fmt for fmt in ordered if path.suffix in fmt.binary_extensions]
    if claimants:  # a binary form (a zip): only the formats that read it may look
        sample = FileSample(path, "")
        ask = _asker(claimants, lambda fmt: None if fmt.sniff is None else partial(fmt.sniff, sample))
        for fmt in claimants:
            if ask(fmt):
                return fmt.name
        described = " or ".join(fmt.description or f"a {fmt.name} file" for fmt in claimants)
        raise TrajectoryFormatError(str(path), None, f"a {path.suffix} file that is not {described}")
    sample = FileSample.of(path)
    ask = _asker(ordered, lambda fmt: None if fmt.sniff_record is None else partial(_any_record, fmt.sniff_record,
                                                                                     sample.lines))
    for fmt in ordered:
        if ask(fmt):
            return fmt.name
    ask = _asker(ordered, lambda fmt: None if fmt.sniff is None else partial(fmt.sniff, sample))
    for fmt in ordered:
        if ask(fmt):
            return fmt.name
    hint = _ARRAY_HINT if sample.is_array else ""
    raise TrajectoryFormatError(str(path), None,
                                f"unknown trajectory format (expected one of {tuple(_registered(discover))}){hint}")
