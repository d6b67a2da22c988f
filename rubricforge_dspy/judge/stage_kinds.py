"""Stage kinds: how a cascade stage of each kind is read from a saved file or named on the command line.

A stage kind is one frozen record, `StageKind`, registered once (`register_stage_kind`), as formats are
(`data.formats`). Its ``name`` is the top-level ``"kind"`` of the JSON document a stage of that kind saves
(its class declares the same ``kind``, `judge.contract.BaseJudge`), so `judge.loading.load_judge` (and so a
cascade file's stages) reads it with the kind's ``load``; a ``--stage`` value that starts with its ``prefix``
(``mlflow:``, ``inspect:``) or ends with its ``suffix`` (``.jsonl``, a verdict file) is made by its
``from_spec`` (`judge.loading.stage_from_spec`). What the cascade reads of a stage (its name, cost per item,
confidence levels, whether it calls an LM) is declared on the stage's class, never here.

A new stage kind is one module and one registration::

    class MyJudge(BaseJudge):
        kind = "my_package.my_stage"
        ...  # forward, aforward, save (writes {"kind": kind, ...}), from_file

    register_stage_kind(MyJudge.kind, load=lambda data, path, **_: MyJudge.from_file(path))

The package's own kinds (floors, recorded stages and hybrids over them, Python stages) are registered by
`judge.loading`; the platforms' (``mlflow:``, ``inspect:``) by `integrations.recorded`.

Third-party kinds. A package declares, in its ``pyproject.toml``::

    [project.entry-points."rubricforge.stage_kinds"]
    my_stage = "my_package.stages:STAGE_KIND"

where the object is a `StageKind` (or a zero-argument callable returning one); name the entry point as the
kind (or its prefix without the colon). Entry points are read once, when a kind or a prefix is looked up that
is not registered yet, or when every kind is listed (`stage_kinds`). They are contained like format plugins
(`data.formats.plugins.call_bounded`): importing one and calling its factory run in a daemon thread waited
for at most the plugin bound (10 s, ``RUBRICFORGE_PLUGIN_TIMEOUT``); whatever it raises, `BaseException`s
included, or a bound passed skips that entry point with one `StageKindWarning` naming it, and a command that
names the skipped kind (a stage file of that ``kind``, a ``--stage`` with its prefix) exits 2 naming the
entry point (`StageKindError`).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rubricforge_dspy.core.errors import InputError, RubricForgeWarning
from rubricforge_dspy.data.formats.plugins import call_bounded

__all__ = ["STAGE_KINDS_GROUP", "StageKind", "StageKindError", "StageKindWarning", "register_stage_kind",
           "stage_kind", "stage_kinds", "spec_kind"]

STAGE_KINDS_GROUP = "rubricforge.stage_kinds"

_LOCK = threading.RLock()
_KINDS: dict[str, StageKind] = {}
_SKIPPED: dict[str, str] = {}  # entry point name -> why it was skipped
_DISCOVERED = False


class StageKindError(InputError):
    """A stage kind that cannot be used (exit 2): unknown, registered twice, malformed, or a third-party kind's
    entry point that was skipped (the message names it)."""


class StageKindWarning(RubricForgeWarning):
    """A third-party stage kind's entry point was skipped (it could not be imported, its factory raised or did
    not answer in time, or it gave no `StageKind`): the message names the entry point. Given once per entry
    point."""


@dataclass(frozen=True)
class StageKind:
    """How stages of one kind are read.

    Attributes:
        name: the ``"kind"`` of the JSON document a stage of this kind saves (and its class's ``kind``).
        load: ``load(data, path, *, allow_unverified, allow_import) -> BaseJudge``: the stage a saved document
            (`data`, the parsed JSON of the file at `path`) describes; None: not read from a file.
        prefix: a ``--stage`` value starting with it (``"mlflow:"``) names a stage of this kind (`from_spec`).
        suffix: a ``--stage`` value ending with it (``".jsonl"``) names a stage of this kind (`from_spec`).
        from_spec: ``from_spec(spec, **options) -> BaseJudge``: the stage a ``--stage`` value names (options:
            ``mlflow_uri``, ``allow_unverified``, ``allow_import``; a kind ignores the others).
        description: one line for listings.
        origin: where it came from: ``"rubricforge_dspy"``, or the entry point that gave it.
    """

    name: str
    load: Callable[..., Any] | None = None
    prefix: str | None = None
    suffix: str | None = None
    from_spec: Callable[..., Any] | None = None
    description: str = ""
    origin: str = "rubricforge_dspy"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or not self.name.isprintable():
            raise StageKindError(f"a stage kind's name is a non-empty printable string, got {self.name!r}")
        if self.load is None and self.from_spec is None:
            raise StageKindError(f"stage kind {self.name!r}: give load (read a saved stage) or from_spec (a "
                                 "--stage value), or both")
        if (self.prefix is not None or self.suffix is not None) and self.from_spec is None:
            raise StageKindError(f"stage kind {self.name!r}: a prefix or suffix needs from_spec")
        for what in ("load", "from_spec"):
            value = getattr(self, what)
            if value is not None and not callable(value):
                raise StageKindError(f"stage kind {self.name!r}: {what} must be callable, got {value!r}")

    def matches(self, spec: str) -> bool:
        """Whether a ``--stage`` value names a stage of this kind (its prefix or suffix)."""
        return bool((self.prefix and spec.startswith(self.prefix)) or (self.suffix and spec.endswith(self.suffix)))


def register_stage_kind(name: str | StageKind, *, load: Callable[..., Any] | None = None, prefix: str | None = None,
                        suffix: str | None = None, from_spec: Callable[..., Any] | None = None,
                        description: str = "", replace: bool = False) -> StageKind:
    """Register a stage kind (a `StageKind`, or its fields).

    Args:
        name: the kind's name (the ``"kind"`` of its saved documents), or a whole `StageKind`.
        load, prefix, suffix, from_spec, description: `StageKind`'s fields.
        replace: replace a kind of that name already registered (else refused).

    Returns:
        The registered `StageKind`.

    Raises:
        StageKindError: a kind of that name (or with that prefix) is registered already, or malformed fields.
    """
    kind = name if isinstance(name, StageKind) else StageKind(name, load, prefix, suffix, from_spec, description)
    with _LOCK:
        if not replace and kind.name in _KINDS:
            raise StageKindError(f"stage kind {kind.name!r} is registered already ({_KINDS[kind.name].origin})")
        clash = [k.name for k in _KINDS.values() if k.name != kind.name and kind.prefix and k.prefix == kind.prefix]
        if clash:
            raise StageKindError(f"stage kind {kind.name!r}: the prefix {kind.prefix!r} is {clash[0]!r}'s")
        _KINDS[kind.name] = kind
    return kind


def _unregister(name: str) -> None:
    """Forget a kind (tests)."""
    with _LOCK:
        _KINDS.pop(name, None)


def _entry_where(entry: EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    where = f"entry point {entry.name!r} = {entry.value!r} (group {STAGE_KINDS_GROUP!r}"
    return where + (f", package {dist.metadata['Name']} {dist.version})" if dist is not None else ")")


def _load_entry(entry: EntryPoint, where: str) -> StageKind:
    def load() -> StageKind:
        value = entry.load()
        if callable(value) and not isinstance(value, StageKind):
            value = value()
        if not isinstance(value, StageKind):
            raise StageKindError(f"{where}: gave {type(value).__name__}, not a StageKind")
        return value

    kind: StageKind = call_bounded(load, "loading it", where)
    return StageKind(kind.name, kind.load, kind.prefix, kind.suffix, kind.from_spec, kind.description, where)


def discover(refresh: bool = False) -> None:
    """Read the ``rubricforge.stage_kinds`` entry points once (again with `refresh`): each one's kind registered,
    or the entry point skipped with one `StageKindWarning` (anything it raised, or the bound passed)."""
    global _DISCOVERED
    with _LOCK:
        if _DISCOVERED and not refresh:
            return
        _DISCOVERED = True
        entries = sorted(entry_points(group=STAGE_KINDS_GROUP), key=lambda e: (e.name, e.value))
    for entry in entries:
        where = _entry_where(entry)
        try:
            kind = _load_entry(entry, where)
            with _LOCK:
                if kind.name in _KINDS and _KINDS[kind.name].origin != where:
                    raise StageKindError(f"{where}: stage kind {kind.name!r} is registered already "
                                         f"({_KINDS[kind.name].origin})")
            register_stage_kind(kind, replace=True)
        except InputError as error:  # PluginError (raised, hung) and StageKindError are both InputErrors
            with _LOCK:
                first = entry.name not in _SKIPPED
                _SKIPPED[entry.name] = str(error)
            if first:
                warnings.warn(f"stage kind skipped: {error}", StageKindWarning, stacklevel=2)


def _skipped(name: str) -> None:
    """Raise `StageKindError` when `name` is an entry point that was skipped."""
    why = _SKIPPED.get(name)
    if why is not None:
        raise StageKindError(f"stage kind {name!r} is unavailable: its plugin was skipped ({why})")


def stage_kind(name: str) -> StageKind | None:
    """The kind registered under `name` (the entry points read first when it is not registered yet), or None.

    Raises:
        StageKindError: `name` is an entry point that was skipped (its message says why).
    """
    with _LOCK:
        kind = _KINDS.get(name)
    if kind is not None:
        return kind
    discover()
    with _LOCK:
        kind = _KINDS.get(name)
    if kind is None:
        _skipped(name)
    return kind


def spec_kind(spec: str) -> StageKind | None:
    """The kind whose prefix or suffix a ``--stage`` value has (the entry points read first when none
    registered matches), or None (a saved stage file).

    Raises:
        StageKindError: the value's prefix (``name:``) names an entry point that was skipped.
    """
    for attempt in range(2):
        with _LOCK:
            found = [kind for kind in _KINDS.values() if kind.matches(spec)]
        if found:
            return max(found, key=lambda k: len(k.prefix or k.suffix or ""))
        if attempt == 0:
            discover()
    head, colon, _ = spec.partition(":")
    if colon and len(head) > 1:  # (a one-letter head is a Windows drive)
        _skipped(head)
    return None


def stage_kinds() -> list[StageKind]:
    """Every registered kind, the entry points' included (read first), sorted by name."""
    discover()
    with _LOCK:
        return sorted(_KINDS.values(), key=lambda k: k.name)
