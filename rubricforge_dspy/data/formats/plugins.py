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

The registry registers every plugin's format through `register_format` (``origin`` ``plugin (<distribution>)``)
the first time it is asked what it holds (`_registry.load_plugins`). `plugin_entries` returns the plugins
with where each came from (importlib.metadata), `plugin_formats` their `Format` records. A plugin that fails
to load, lacks a field, or whose sniffer raises is a `PluginError` naming the entry point and its package,
never a silently missing format.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.formats._registry import FileSample, Format

ENTRY_POINT_GROUP = "rubricforge_dspy.formats"
REQUIRED = ("name", "sniff", "read", "label_rule")
PLUGIN_PRIORITY = 200  # an adapted plugin sniffs after the shipped formats (a `Format` record sets its own)


class PluginError(InputError):
    """A format plugin that cannot be used: names the entry point, its package and the problem."""


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
        return self.format.name

    @property
    def origin(self) -> str:
        """``plugin (<distribution>)`` (the entry point's value when no distribution is known)."""
        return f"plugin ({self.distribution or self.value})"

    @property
    def where(self) -> str:
        """The entry point, its group and its package, as error messages name them."""
        return _where(self.entry_point, self.value, self.distribution)


def _distribution(entry: EntryPoint) -> str | None:
    dist = getattr(entry, "dist", None)
    return None if dist is None else f"{dist.metadata['Name']} {dist.version}"


def _where(name: str, value: str, dist: str | None) -> str:
    where = f"entry point {name!r} = {value!r} (group {ENTRY_POINT_GROUP!r}"
    return where + (f", package {dist})" if dist else ")")


def load_plugin(entry: EntryPoint) -> Plugin:
    """The `Plugin` of one entry point; `PluginError` when it cannot be imported or lacks a field."""
    dist = _distribution(entry)
    where = _where(entry.name, entry.value, dist)
    try:
        obj = entry.load()
    except Exception as exc:  # a third party's import error of any kind: reported with where it came from
        raise PluginError(f"{where}: cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if isinstance(obj, Format):  # checked when it was built
        return Plugin(format=obj, entry_point=entry.name, value=entry.value, distribution=dist)
    if callable(obj) and not all(hasattr(obj, key) for key in REQUIRED):
        try:
            obj = obj()
        except Exception as exc:
            raise PluginError(f"{where}: calling the factory failed: {type(exc).__name__}: {exc}") from exc
        if isinstance(obj, Format):
            return Plugin(format=obj, entry_point=entry.name, value=entry.value, distribution=dist)
    missing = [key for key in REQUIRED if not hasattr(obj, key)]
    if missing:
        raise PluginError(f"{where}: the object has no {', '.join(missing)} (a format needs name, sniff, read, "
                          "label_rule: see rubricforge_dspy.data.formats.plugins)")
    if not isinstance(obj.name, str) or not obj.name:
        raise PluginError(f"{where}: name must be a non-empty string, got {obj.name!r}")
    if not callable(obj.sniff) or not callable(obj.read):
        raise PluginError(f"{where}: sniff and read must be callable")
    return Plugin(format=obj, entry_point=entry.name, value=entry.value, distribution=dist)


def plugin_entries(group: str = ENTRY_POINT_GROUP) -> list[Plugin]:
    """Every format plugin installed in this environment with where it came from, sorted by name.

    Args:
        group: the entry point group (default ``rubricforge_dspy.formats``).

    Returns:
        The `Plugin`s (the format object, the entry point, the distribution that declared it): what
        ``rubricforge formats`` lists.

    Raises:
        PluginError: a plugin cannot be loaded or lacks a field, or two plugins share a name.
    """
    plugins = [load_plugin(entry) for entry in entry_points(group=group)]
    names: dict[str, Plugin] = {}
    for plugin in plugins:
        other = names.setdefault(plugin.name, plugin)
        if other is not plugin:
            raise PluginError(f"two format plugins are named {plugin.name!r}: {other.value} "
                              f"({other.distribution}) and {plugin.value} ({plugin.distribution})")
    return sorted(plugins, key=lambda p: p.name)


def discover_plugins(group: str = ENTRY_POINT_GROUP) -> list[Any]:
    """The format objects of every installed plugin (``name``, ``sniff``, ``read``, ``label_rule``), sorted by
    name: what the format registry registers beside the shipped formats.

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
    any other object adapted (``sniff(path)`` called with the sample's path). Either way a sniffer that raises
    is a `PluginError` naming the plugin (a sniffer must answer False for a file of another format).

    Raises:
        PluginError: the object's fields do not make a valid `Format` (a bad name, a non-callable reader...).
    """
    obj, where = plugin.format, plugin.where
    if isinstance(obj, Format):
        sniff = None if obj.sniff is None else _guarded(obj.sniff, where, lambda sample: sample)
        return replace(obj, sniff=sniff, origin=plugin.origin)
    try:
        return Format(name=obj.name, read=obj.read, sniff=_guarded(obj.sniff, where, lambda sample: sample.path),
                      label_rule=obj.label_rule, priority=getattr(obj, "priority", PLUGIN_PRIORITY),
                      extensions=tuple(getattr(obj, "extensions", (".json",))),
                      description=getattr(obj, "description", "") or f"a {obj.name} file ({plugin.origin})",
                      origin=plugin.origin)
    except InputError as exc:
        raise PluginError(f"{where}: {exc}") from None


def _guarded(sniff, where: str, argument):
    """`sniff` called with ``argument(sample)``; an exception it raises becomes a `PluginError` naming `where`."""
    def sniff_sample(sample: FileSample) -> bool:
        try:
            return bool(sniff(argument(sample)))
        except Exception as exc:  # a third party's sniffer: whatever it raised, say whose it was
            raise PluginError(f"{where}: sniff({sample.path}) raised {type(exc).__name__}: {exc} (a sniffer must "
                              "answer False for a file of another format)") from exc
    return sniff_sample


def plugin_formats(group: str = ENTRY_POINT_GROUP) -> Iterator[tuple[Format, str]]:
    """``(Format, where)`` of every installed plugin (`as_format`; `where` names its entry point and package),
    sorted by name: what the format registry registers beside the shipped formats.

    Raises:
        PluginError: as `plugin_entries` and `as_format` raise it.
    """
    for plugin in plugin_entries(group):
        yield as_format(plugin), plugin.where
