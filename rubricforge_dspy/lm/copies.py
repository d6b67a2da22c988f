"""The LM a judge calls, and copies of an LM set up for one job (one attempt per call, a connection pool
sized for the job, a per-call timeout).

A copy never modifies the caller's LM: batch judging, induction and the audit each take their own.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import dspy

from rubricforge_dspy._dspy_compat import engine_specs

# A copy of an LM is of the LM's type (anything not a `dspy.BaseLM` is returned as is).
LMT = TypeVar("LMT")

__all__ = ["resolve_lm", "one_attempt_lm", "sized_lm"]


def resolve_lm(judge: dspy.Module, lm: dspy.BaseLM | None = None) -> dspy.BaseLM | None:
    """The LM `judge` will call: `lm` if given, else its first predictor's LM, else `dspy.settings.lm`
    (None when there is none). The one answer to "which LM does this judge use"."""
    if lm is not None:
        return lm
    for predictor in (judge.predictors() if hasattr(judge, "predictors") else []):
        if getattr(predictor, "lm", None) is not None:
            return predictor.lm
    return dspy.settings.lm


def one_attempt_lm(lm: LMT, timeout: float | None = None, connections: int | None = None) -> LMT:
    """A copy of `lm` that makes one attempt per call (retries belong to
    `rubricforge_dspy.judge.execution.judge_verdict`), with DSPy's response cache off (the verdict cache
    is the one cache) and, if given, a per-call `timeout`. The caller's LM is never modified; a
    non-`dspy.BaseLM` is returned as is."""
    if not isinstance(lm, dspy.BaseLM):
        return lm
    return sized_lm(lm, connections, timeout, num_retries=0, cache=False)


def sized_lm(lm: LMT, connections: int | None = None, timeout: float | None = None, **overrides: Any) -> LMT:
    """A copy of `lm` whose engine's connection pool holds at least `connections` (an engine that saves
    its settings, like `rubricforge_dspy.lm.engine.ChatCompletionsEngine`; a pool never shrinks) and, if
    given, a per-call `timeout`; `overrides` are passed to ``lm.copy``. Returns `lm` itself when nothing
    changes or when it is not a `dspy.BaseLM`."""
    if not isinstance(lm, dspy.BaseLM):
        return lm
    engine, async_engine = engine_specs(lm)
    if engine is None or isinstance(engine, str):  # DSPy's own engine ("auto"), or not a dspy.LM
        if timeout is not None:
            overrides["timeout"] = timeout
    elif hasattr(engine, "dump_state") and hasattr(type(engine), "load_state"):
        state = engine.dump_state()
        changes = {}
        if timeout is not None and "timeout" in state:
            changes["timeout"] = timeout
        if connections and "max_connections" in state and state["max_connections"] < connections:
            changes["max_connections"] = connections
        if changes:
            overrides["engine"] = type(engine).load_state({**state, **changes})
            if async_engine is not None and hasattr(type(async_engine), "load_state"):  # the pair is one unit
                overrides["async_engine"] = type(async_engine).load_state({**async_engine.dump_state(), **changes})
    return cast(LMT, lm.copy(**overrides)) if overrides else lm
