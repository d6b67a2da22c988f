"""Lazy re-exports for a package's curated `__init__`: public names load on first use.

A stage's `__init__` lists its public names by module and calls `lazy_exports`; importing the package
then costs nothing until a name is touched, so a light command (`rubricforge stats`, `report`) never
pays for DSPy because a sibling module of the stage needs it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping, Sequence


def lazy_exports(
    package: str, modules: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The module-level ``__getattr__``, ``__dir__`` and ``__all__`` of `package`.

    Args:
        package: the package's ``__name__``.
        modules: module path -> the public names it defines, in the order ``__all__`` lists them.

    Returns:
        ``(__getattr__, __dir__, __all__)``: a name is imported from its module on first access and then
        kept on the package, so later lookups are plain attribute reads.
    """
    exports = {name: module for module, names in modules.items() for name in names}
    public = [name for names in modules.values() for name in names]

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(sys.modules[package], name, value)  # resolved once
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__, public


def renamed_constants(module: str, renames: Mapping[str, tuple[str, str]],
                      category: type[Warning] = DeprecationWarning) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of `module` that still answers old names of its constants.

    Args:
        module: the module's ``__name__``.
        renames: old name -> (new name, what the value is), e.g. ``{"DEFAULT_MAX_TOKENS": ("DEFAULT_RENDER_TOKENS",
            "estimated tokens of a whole render")}``.
        category: the warning's class (the package passes `core.errors.RubricForgeDeprecationWarning`; this
            module imports nothing of the package, so every layer may use it).

    Returns:
        ``__getattr__``: an old name returns the new constant's value with a `DeprecationWarning` naming both.
    """

    def __getattr__(name: str) -> Any:
        if name in renames:
            import warnings

            new, what = renames[name]
            warnings.warn(f"{module}.{name} is {new} ({what})", category, stacklevel=2)
            return getattr(sys.modules[module], new)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
