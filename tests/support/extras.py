"""The package's modules imported one by one, and the rule for the ones that import an optional extra (Ray,
MLflow, Inspect) when imported themselves."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import types

import rubricforge_dspy

EXTRAS = ("ray", "mlflow", "inspect_ai")  # what the [ray], [mlflow] and [inspect] extras install
# The modules that import their platform when imported: module -> (the platform's import name, the extra).
IMPORTS_ITS_EXTRA = {"rubricforge_dspy.integrations.mlflow": ("mlflow", "mlflow"),
                     "rubricforge_dspy.integrations.mlflow_labels": ("mlflow", "mlflow"),
                     "rubricforge_dspy.integrations.mlflow_assessments": ("mlflow", "mlflow"),
                     "rubricforge_dspy.integrations.inspect": ("inspect_ai", "inspect")}


def import_every_module() -> tuple[dict[str, types.ModuleType], dict[str, str]]:
    """Import every module of the package (walked from the files, ``__main__`` aside).

    Returns:
        (the modules that imported, by name; ``{name: "ErrorType: message"}`` for those that did not).
    """
    modules, failed = {}, {}
    for info in pkgutil.walk_packages(rubricforge_dspy.__path__, "rubricforge_dspy.",
                                      onerror=lambda name: failed.setdefault(name, "the package did not import")):
        if info.name.endswith("__main__"):
            continue
        try:
            modules[info.name] = importlib.import_module(info.name)
        except Exception as error:  # noqa: BLE001 - recorded, and judged by the caller
            failed[info.name] = f"{type(error).__name__}: {error}"
    return modules, failed


def refused_for_a_missing_extra(name: str, error: str) -> bool:
    """Whether `name` failed to import only because its extra is absent, saying how to install it."""
    platform, extra = IMPORTS_ITS_EXTRA.get(name, (None, None))
    return (platform is not None and importlib.util.find_spec(platform) is None
            and error.startswith(("ImportError", "ModuleNotFoundError")) and f"rubricforge-dspy[{extra}]" in error)
