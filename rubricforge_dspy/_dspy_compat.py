"""DSPy's private hooks, in one place: the only module of the package that touches a DSPy name with a
leading underscore.

The package relies on five things DSPy does not document as public (checked against `CHECKED_WITH`; the
contract test, tests/test_dspy_compat.py, exercises each against the installed DSPy, so an upgrade that
changes one breaks that test, naming the hook, rather than a judge or a loader somewhere else):

- ``dspy.Example._input_keys``: which fields `with_inputs` marked as inputs (None when never called), read
  before ``example.inputs()`` would raise, to refuse a label marked as an input (`input_keys`);
- ``dspy.LM._engine_spec`` / ``_async_engine_spec``: the engines an LM was built with, to copy an LM with
  a resized connection pool and to close its pools (`engine_specs`);
- ``dspy.JSONAdapter._prepare_response_format(lm, lm_kwargs, signature)``: the structured-output format
  the JSON adapter plans for a signature, called to compute it once per signature
  (`json_response_format`) and overridden to reuse it (`PlannedResponseFormat`);
- ``dspy.clients._deprecation._adapter_call`` / ``adapter_message_call``: the mark by which DSPy 3.4 tells its
  adapters' ``lm(messages=...)`` calls from a user's (which warn), passed on by a wrapper LM to the LM it calls
  (`relay_adapter_call`, for `lm.budgeted.BudgetedLM`).

Root-level and free of package imports (like `rubricforge_dspy._lazy`), so every stage may use it; DSPy
is imported only inside the functions that need it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from types import SimpleNamespace
from typing import Any

__all__ = ["CHECKED_WITH", "input_keys", "engine_specs", "json_response_format", "PlannedResponseFormat",
           "relay_adapter_call"]

CHECKED_WITH = "3.4.1"  # the DSPy release these hooks were read from (pyproject pins it)


def input_keys(example: Any) -> frozenset[str] | None:
    """The fields `example.with_inputs(...)` marked as inputs, or None when it was never called (or
    `example` is not a `dspy.Example`)."""
    keys = getattr(example, "_input_keys", None)
    return None if keys is None else frozenset(keys)


def engine_specs(lm: Any) -> tuple[Any, Any]:
    """``(engine, async_engine)`` a `dspy.LM` was built with: an engine object, a string naming DSPy's
    built-in choice (``"auto"``) or None (not given, or `lm` is not a `dspy.LM`)."""
    return getattr(lm, "_engine_spec", None), getattr(lm, "_async_engine_spec", None)


def relay_adapter_call(outer: Any, inner: Any, messages: Any) -> AbstractContextManager[Any]:
    """Within the returned context, `inner`'s ``messages=`` call is marked as its adapter's exactly when `outer`'s
    was (DSPy's adapter marked the call to `outer` with these `messages`): a wrapper LM calling `inner` warns
    about ``messages=`` when a call to `outer` would, and only then."""
    import dspy.clients._deprecation

    deprecation = dspy.clients._deprecation
    origin = deprecation._adapter_call.get()
    if origin is not None and origin[0] is outer and origin[1] is messages:
        relayed: AbstractContextManager[Any] = deprecation.adapter_message_call(inner, messages)
        return relayed
    return nullcontext()


def json_response_format(adapter: Any, signature: Any, *, supports_response_format: bool = True,
                         supports_schema: bool = True) -> Any:
    """The ``response_format`` DSPy's JSON adapter plans for `signature` when it calls an LM with the
    given capabilities: a pydantic model class (structured outputs), ``{"type": "json_object"}``, or None.

    Args:
        adapter: a `dspy.JSONAdapter` (its `use_native_function_calling` matters); its own override of
            the hook, if any, is bypassed: this is DSPy's plan.
        signature: the `dspy.Signature` of the call.
        supports_response_format: the LM accepts ``response_format``.
        supports_schema: the LM accepts a JSON schema in it.
    """
    import dspy

    lm = SimpleNamespace(supported_params=frozenset({"response_format"} if supports_response_format else ()),
                         supports_response_schema=supports_schema)
    kwargs: dict[str, Any] = {}
    dspy.JSONAdapter._prepare_response_format(adapter, lm, kwargs, signature)
    return kwargs.get("response_format")


class PlannedResponseFormat:
    """Mixin for a `dspy.JSONAdapter` subclass (listed before it): DSPy asks the adapter for each call's
    response format through a private hook; the mixin hands that to the subclass's public
    ``plan_response_format(lm, lm_kwargs, signature)``, which sets ``lm_kwargs["response_format"]``."""

    def plan_response_format(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def _prepare_response_format(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:
        self.plan_response_format(lm, lm_kwargs, signature)
