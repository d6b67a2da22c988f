"""Format plugins: third-party packages that add a trajectory format through a Python entry point.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."rubricforge_dspy.formats"]
    my_format = "my_package.rubricforge_format:FORMAT"

where the object (or a zero-argument callable returning it) is either

* a `Format` record, the type the shipped formats use (``sniff(sample)`` on a `FileSample`,
  ``read(path, label_rule)``, ``label_rule``, ``priority``, ``extensions``...): the preferred form; or
* any object with ``name`` (str), ``sniff(path) -> bool`` (True when the file at `path` is of this format;
  read a prefix, never the whole file, and answer False for a file of another format),
  ``read(path, rule) -> Iterator[(record index, Trajectory | TrajectoryFormatError)]`` (a bad record
  yielded as an error naming the file and record, never raised) and ``label_rule`` (a `LabelRule`, or
  None when the format gives labels itself); optionally ``priority`` (default 200: after the shipped
  formats), ``extensions`` (default ``(".json",)``) and ``description``. It is adapted to a `Format`.
  Name the entry point as the format: a command that names a format no plugin could give is told which
  entry point of that name failed.

The registry discovers plugins only when it needs them (`_registry.load_plugins`): to detect a file's format,
to list the formats, or to look up a name that is not registered yet (``--format <a plugin's format>``);
reading with a registered format (``--format jsonl``) never imports a plugin. `plugin_entries` returns the
plugins with where each came from (importlib.metadata), `plugin_formats` their `Format` records.

Containment. A plugin is a third party's code run in this process, so everything the package calls of it
(importing the entry point, calling its factory, checking its fields, ``sniff`` and ``sniff_record``) runs
through `call_bounded`: in a daemon thread the caller waits on for at most `plugin_timeout` seconds
(`PLUGIN_TIMEOUT`, 10 s; the environment variable ``RUBRICFORGE_PLUGIN_TIMEOUT`` sets another bound).
Whatever it raises, `BaseException`s included (``SystemExit(0)``, a ``KeyboardInterrupt`` it raises itself),
and a call that does not finish in time become a `PluginError` naming the entry point and its distribution;
the registry then skips that plugin with one `PluginWarning` and carries on with the other formats, and a
command that names its format exits 2 naming it. The user's own Ctrl-C is told apart by the thread it
arrives in: Python delivers SIGINT to the main thread only, so a ``KeyboardInterrupt`` raised in the worker
thread is the plugin's, while a real Ctrl-C interrupts the caller's wait and propagates as usual.

A thread cannot be killed in-process: the worker of a call that did not finish is abandoned, still running
(a daemon thread: it does not keep the process alive). Its module stays half-imported with its import lock
held, so importing that module (or a module inside it) again would block too: a later entry point in it is
skipped at once (`PluginError` "still being imported"), never waited for a second time. Other modules'
imports are not blocked. An abandoned thread that finishes later may not register a format (`register_format`
refuses it).

Bounded in total. The registry imports every plugin side by side (`side_by_side`), and when a detection
reaches the plugins' sniffers it asks them all side by side too, so a detection takes at most about one bound
however many plugins hang (one after the other, two hanging plugins took two bounds). A non-daemon thread a
plugin starts (which would keep the process alive after the command printed its output) is remembered
(`lingering_threads`): the command line ends with a warning naming the plugin and exits without waiting for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

from rubricforge_dspy.core.errors import InputError, RubricForgeWarning
from rubricforge_dspy.data.formats._format import ABANDONED, FileSample, Format

ENTRY_POINT_GROUP = "rubricforge_dspy.formats"
REQUIRED = ("name", "sniff", "read", "label_rule")
PLUGIN_PRIORITY = 200  # an adapted plugin sniffs after the shipped formats (a `Format` record sets its own)
PLUGIN_TIMEOUT = 10.0  # seconds a plugin's import, factory or sniff may take before it is skipped
PLUGIN_TIMEOUT_ENV = "RUBRICFORGE_PLUGIN_TIMEOUT"  # overrides PLUGIN_TIMEOUT (seconds; tests set it low)

_T = TypeVar("_T")
_HUNG_MODULES: set[str] = set()  # modules whose import did not finish: their import lock is still held
_PLUGIN_THREADS: dict[threading.Thread, set[str]] = {}  # a non-daemon thread a plugin started -> its plugin(s)


class PluginError(InputError):
    """A format plugin that cannot be used: names the entry point, its package and the problem."""


class PluginWarning(RubricForgeWarning):
    """A format plugin was skipped (it could not be loaded, or its sniffer raised or did not answer in time):
    the message names the entry point, its distribution and the problem. Given once per plugin."""


@dataclass(frozen=True)
class Plugin:
    """A format found through an entry point: the object it gave (`format`, with ``name``, ``sniff``,
    ``read``, ``label_rule``), the entry point's name and value, and the distribution that declared it."""

    format: Any
    entry_point: str
    value: str
    distribution: str | None

    @property
    def name(self) -> str:
        name: str = self.format.name
        return name

    @property
    def origin(self) -> str:
        """``plugin (<distribution>)`` (the entry point's value when no distribution is known)."""
        return f"plugin ({self.distribution or self.value})"

    @property
    def where(self) -> str:
        """The entry point, its group and its package, as error messages name them."""
        return _where(self.entry_point, self.value, self.distribution)


def plugin_timeout() -> float:
    """The seconds a plugin's import, factory or sniff may take: ``RUBRICFORGE_PLUGIN_TIMEOUT`` when set,
    else `PLUGIN_TIMEOUT` (10).

    Raises:
        InputError: the variable is set to something other than a positive number (it names the variable).
    """
    text = os.environ.get(PLUGIN_TIMEOUT_ENV, "").strip()
    if not text:
        return PLUGIN_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise InputError(f"{PLUGIN_TIMEOUT_ENV}={text!r}: give the seconds a format plugin may take to load or "
                         f"sniff, a positive number (unset: {PLUGIN_TIMEOUT:g})")
    return seconds


def call_bounded(call: Callable[[], _T], what: str, where: str, *, hint: str = "",
                 on_timeout: Callable[[], None] | None = None) -> _T:
    """``call()`` run in a daemon thread, waited for at most `plugin_timeout` seconds.

    The thread is abandoned when the bound passes (a thread cannot be stopped from outside; as a daemon it
    does not keep the process alive), and marked so that `register_format` refuses what it registers later.
    A Ctrl-C of the user reaches the calling thread (Python delivers signals to the main thread) and
    interrupts the wait as usual; whatever the call raises in its own thread, `BaseException`s included, is
    the plugin's.

    Args:
        call: the plugin's code to run.
        what: what it does, for the message ("loading it", "sniff(<file>)").
        where: the entry point and its distribution (`entry_where`).
        hint: appended to the message of an exception the call raised.
        on_timeout: called (in the calling thread) when the bound passed.

    Returns:
        What `call` returned.

    Raises:
        PluginError: the call raised (a `PluginError` it raised is passed on as is; any other exception is
            named with its type) or did not finish within the bound.
    """
    seconds = plugin_timeout()
    box: dict[str, Any] = {}

    def run() -> None:
        before = set(threading.enumerate())
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt raised by a plugin: contained
            box["error"] = exc
        finally:  # the threads it started that would keep the process alive (calls side by side: each may be named)
            for started in set(threading.enumerate()) - before:
                if not started.daemon:
                    _PLUGIN_THREADS.setdefault(started, set()).add(where)

    thread = threading.Thread(target=run, name=f"rubricforge format plugin: {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        setattr(thread, ABANDONED, where)
        if on_timeout is not None:
            on_timeout()
        raise PluginError(f"{where}: {what} did not finish within {seconds:g} s (abandoned; {PLUGIN_TIMEOUT_ENV} "
                          "sets the bound)")
    error = box.get("error")
    if isinstance(error, PluginError):
        raise error
    if error is not None:
        raise PluginError(f"{where}: {what} raised {type(error).__name__}: {error}{hint}") from error
    result: _T = box["result"]
    return result


def side_by_side(calls: Sequence[Callable[[], _T]]) -> list[tuple[_T | None, BaseException | None]]:
    """Every call run at once, each in a daemon thread, and waited for together: ``(result, None)`` or
    ``(None, exception)`` per call, in order. Each call bounds itself (`call_bounded`), so the whole takes
    about one `plugin_timeout`, however many plugins hang (a call still running a second past that is a
    `PluginError`). The caller's wait is interrupted by the user's Ctrl-C as usual."""
    if len(calls) == 1:  # nothing to overlap: the caller's thread
        try:
            return [(calls[0](), None)]
        except Exception as exc:  # noqa: BLE001 - returned to the caller, as the threaded calls' are
            return [(None, exc)]
    deadline = time.monotonic() + plugin_timeout() + 1.0
    boxes: list[dict[str, Any]] = [{} for _ in calls]

    def run(call: Callable[[], _T], box: dict[str, Any]) -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    threads = [threading.Thread(target=run, args=(call, box), name="rubricforge format plugins", daemon=True)
               for call, box in zip(calls, boxes, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [(box.get("result"), box.get("error") if "result" in box or "error" in box
             else PluginError(f"a plugin call did not finish within {plugin_timeout():g} s"))
            for box in boxes]


def lingering_threads() -> list[tuple[threading.Thread, tuple[str, ...]]]:
    """The non-daemon threads a plugin's code started that are still running, each with the plugin(s) it may
    belong to (`entry_where`; two when their calls ran side by side). Such a thread would keep the process
    alive after its command ended: the command line warns and exits without waiting for it
    (`rubricforge_dspy.cli.main.main`)."""
    return [(thread, tuple(sorted(wheres))) for thread, wheres in list(_PLUGIN_THREADS.items())
            if thread.is_alive() and not thread.daemon]


def _distribution(entry: EntryPoint) -> str | None:
    dist = getattr(entry, "dist", None)
    return None if dist is None else f"{dist.metadata['Name']} {dist.version}"


def _where(name: str, value: str, dist: str | None) -> str:
    where = f"entry point {name!r} = {value!r} (group {ENTRY_POINT_GROUP!r}"
    return where + (f", package {dist})" if dist else ")")


def entry_where(entry: EntryPoint) -> str:
    """The entry point, its group and its distribution, as messages name a plugin (without importing it)."""
    return _where(entry.name, entry.value, _distribution(entry))


def installed_entry_points(group: str = ENTRY_POINT_GROUP) -> list[EntryPoint]:
    """The entry points of `group` installed in this environment, sorted by name and value (nothing imported)."""
    return sorted(entry_points(group=group), key=lambda entry: (entry.name, entry.value))


def load_plugin(entry: EntryPoint) -> Plugin:
    """The `Plugin` of one entry point, imported and checked within the bound (`call_bounded`).

    Raises:
        PluginError: it cannot be imported (whatever its import raised, `SystemExit` included), its import
            or factory did not finish within `plugin_timeout` seconds, its module is still being imported by
            an earlier entry point that did not finish, or the object lacks a field.
    """
    dist = _distribution(entry)
    where = _where(entry.name, entry.value, dist)
    module = entry.value.split(":")[0].strip()
    hung = next((name for name in _HUNG_MODULES if module == name or module.startswith(name + ".")), None)
    if hung is not None:
        raise PluginError(f"{where}: not loaded: module {hung} is still being imported by an entry point that "
                          "did not finish in time")
    obj = call_bounded(lambda: _load(entry, where), "loading it", where, on_timeout=lambda: _HUNG_MODULES.add(module))
    return Plugin(format=obj, entry_point=entry.name, value=entry.value, distribution=dist)


def _load(entry: EntryPoint, where: str) -> Any:
    """The checked object of an entry point (run in `call_bounded`'s thread: every step is the plugin's code)."""
    try:
        obj = entry.load()
    except BaseException as exc:  # noqa: BLE001 - a third party's import error of any kind, SystemExit included
        raise PluginError(f"{where}: cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if isinstance(obj, Format):  # checked when it was built
        return obj
    if callable(obj) and not all(hasattr(obj, key) for key in REQUIRED):
        try:
            obj = obj()
        except BaseException as exc:  # noqa: BLE001 - as above
            raise PluginError(f"{where}: calling the factory failed: {type(exc).__name__}: {exc}") from exc
        if isinstance(obj, Format):
            return obj
    missing = [key for key in REQUIRED if not hasattr(obj, key)]
    if missing:
        raise PluginError(f"{where}: the object has no {', '.join(missing)} (a format needs name, sniff, read, "
                          "label_rule: see rubricforge_dspy.data.formats.plugins)")
    if not isinstance(obj.name, str) or not obj.name:
        raise PluginError(f"{where}: name must be a non-empty string, got {obj.name!r}")
    if not callable(obj.sniff) or not callable(obj.read):
        raise PluginError(f"{where}: sniff and read must be callable")
    return obj


def plugin_entries(group: str = ENTRY_POINT_GROUP) -> list[Plugin]:
    """Every format plugin installed in this environment with where it came from, sorted by name (strict:
    the first plugin that cannot be used raises; the registry skips such a plugin instead).

    Args:
        group: the entry point group (default ``rubricforge_dspy.formats``).

    Returns:
        The `Plugin`s (the format object, the entry point, the distribution that declared it).

    Raises:
        PluginError: a plugin cannot be loaded or lacks a field (`load_plugin`), or two plugins share a name.
    """
    plugins = [load_plugin(entry) for entry in installed_entry_points(group)]
    names: dict[str, Plugin] = {}
    for plugin in plugins:
        other = names.setdefault(plugin.name, plugin)
        if other is not plugin:
            raise PluginError(f"two format plugins are named {plugin.name!r}: {other.value} "
                              f"({other.distribution}) and {plugin.value} ({plugin.distribution})")
    return sorted(plugins, key=lambda p: p.name)


def discover_plugins(group: str = ENTRY_POINT_GROUP) -> list[Any]:
    """The format objects of every installed plugin (``name``, ``sniff``, ``read``, ``label_rule``), sorted by
    name, as `plugin_entries` loads them (strict).

    Args:
        group: the entry point group (default ``rubricforge_dspy.formats``).

    Returns:
        The plugins' format objects (`plugin_entries` gives them with their provenance).

    Raises:
        PluginError: a plugin cannot be loaded or lacks a field, or two plugins share a name.
    """
    return [plugin.format for plugin in plugin_entries(group)]


def as_format(plugin: Plugin) -> Format:
    """The `Format` record of a plugin, with ``origin`` ``plugin (<distribution>)``: a `Format` it gave as is,
    any other object adapted (``sniff(path)`` called with the sample's path). Either way its ``sniff`` (and a
    record's ``sniff_record``) run through `call_bounded`: one that raises or does not answer in time is a
    `PluginError` naming the plugin (a sniffer must answer False for a file of another format).

    Raises:
        PluginError: the object's fields do not make a valid `Format` (a bad name, a non-callable reader...).
    """
    obj, where = plugin.format, plugin.where
    if isinstance(obj, Format):
        sniff = None if obj.sniff is None else _guarded(obj.sniff, where, lambda sample: sample)
        record = None if obj.sniff_record is None else _guarded_record(obj.sniff_record, where)
        return replace(obj, sniff=sniff, sniff_record=record, origin=plugin.origin)
    try:
        return Format(name=obj.name, read=obj.read, sniff=_guarded(obj.sniff, where, lambda sample: sample.path),
                      label_rule=obj.label_rule, priority=getattr(obj, "priority", PLUGIN_PRIORITY),
                      extensions=tuple(getattr(obj, "extensions", (".json",))),
                      description=getattr(obj, "description", "") or f"a {obj.name} file ({plugin.origin})",
                      origin=plugin.origin)
    except InputError as exc:
        raise PluginError(f"{where}: {exc}") from None


_SNIFF_HINT = " (a sniffer must answer False for a file of another format)"


def _guarded(sniff: Callable[[Any], Any], where: str,
             argument: Callable[[FileSample], Any]) -> Callable[[FileSample], bool]:
    """`sniff` called with ``argument(sample)`` through `call_bounded` (an error or a hang names `where`)."""
    def sniff_sample(sample: FileSample) -> bool:
        return call_bounded(lambda: bool(sniff(argument(sample))), f"sniff({sample.path})", where, hint=_SNIFF_HINT)
    return sniff_sample


def _guarded_record(sniff_record: Callable[[dict[str, Any]], Any],
                    where: str) -> Callable[[dict[str, Any]], bool]:
    """A record sniffer called through `call_bounded`."""
    def sniff_line(obj: dict[str, Any]) -> bool:
        return call_bounded(lambda: bool(sniff_record(obj)), "sniff_record(a JSON line)", where, hint=_SNIFF_HINT)
    return sniff_line


def load_format(entry: EntryPoint) -> Format:
    """The `Format` of one entry point (`load_plugin`, then `as_format`): what the registry registers.

    Raises:
        PluginError: as `load_plugin` and `as_format` raise it.
    """
    return as_format(load_plugin(entry))


def plugin_formats(group: str = ENTRY_POINT_GROUP) -> Iterator[tuple[Format, str]]:
    """``(Format, where)`` of every installed plugin (`as_format`; `where` names its entry point and package),
    sorted by name (strict, as `plugin_entries`).

    Raises:
        PluginError: as `plugin_entries` and `as_format` raise it.
    """
    for plugin in plugin_entries(group):
        yield as_format(plugin), plugin.where
