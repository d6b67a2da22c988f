"""Format plugins: third-party packages that add a trajectory format through a Python entry point.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."rubricforge_dspy.formats"]
    my_format = "my_package.rubricforge_format:FORMAT"

where the object (or a zero-argument callable returning it) has:

* ``name``: the format name (str; what ``--format`` and ``rubricforge formats`` show);
* ``sniff(path) -> bool``: True when the file at `path` is of this format (read a prefix, never the
  whole file; it must not raise for a file of another format);
* ``read(path, rule) -> Iterator[(record index, Trajectory | TrajectoryFormatError)]``: the records of
  one file, a bad record as an error naming the file and record (never raised), as the shipped
  readers do;
* ``label_rule``: the `LabelRule` applied to its rewards (e.g. ``FULL_REWARD``), or None.

The shipped formats' `Format` record has these fields, so a plugin may simply build one. `discover_plugins`
returns their format objects and `plugin_entries`
the same with where each came from (importlib.metadata); a plugin that fails to load, or lacks a field, is an error naming the
entry point and its package, never a silently missing format.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rubricforge_dspy.core.errors import InputError

ENTRY_POINT_GROUP = "rubricforge_dspy.formats"
REQUIRED = ("name", "sniff", "read", "label_rule")


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


def _distribution(entry: EntryPoint) -> str | None:
    dist = getattr(entry, "dist", None)
    return None if dist is None else f"{dist.metadata['Name']} {dist.version}"


def load_plugin(entry: EntryPoint) -> Plugin:
    """The `Plugin` of one entry point; `PluginError` when it cannot be imported or lacks a field."""
    where = f"entry point {entry.name!r} = {entry.value!r} (group {ENTRY_POINT_GROUP!r}"
    dist = _distribution(entry)
    where += f", package {dist})" if dist else ")"
    try:
        obj = entry.load()
    except Exception as exc:  # a third party's import error of any kind: reported with where it came from
        raise PluginError(f"{where}: cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if callable(obj) and not all(hasattr(obj, key) for key in REQUIRED):
        try:
            obj = obj()
        except Exception as exc:
            raise PluginError(f"{where}: calling the factory failed: {type(exc).__name__}: {exc}") from exc
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
