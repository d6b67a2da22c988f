"""Truncation: a completion cut at ``max_tokens`` is a fragment, never an answer.

Seen from the completion itself (its finish reason, as the LM returned it), never from logs:

- `check_finish`: the engines `make_lm` builds (and the scripted test LM) apply it to every response,
  raising `TruncatedCompletionError` before DSPy could cache or parse the fragment;
- `watch_completions`: for any other `dspy.LM` (lm15 or LiteLLM engines, whose DSPy code only logs the
  cut), a per-call watch that receives the history entry of every LM call made inside it (the response
  object DSPy returned, from the network or from DSPy's memory or disk cache alike) and says whether one
  was cut (`CompletionWatch.cut`). The judge's adapter (`judge.module.StrictJSONAdapter`) wraps each LM
  call in one, so a cut answer is never a verdict, whatever DSPy's logging level or cache.

The watch rides on DSPy's per-module history (``settings.caller_modules``, a context variable): it is
per call and thread-safe, never ``lm.history[-1]`` (which another thread may have appended).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import dspy
from dspy.clients import base_lm
from dspy.utils.exceptions import LMError

from rubricforge_dspy.core.errors import RubricForgeError

if TYPE_CHECKING:
    from dspy import lm15

__all__ = ["TruncatedCompletionError", "CUT_REASONS", "check_finish", "finish_reasons", "CompletionWatch",
           "watch_completions"]

# Finish reasons meaning "stopped at the token limit": OpenAI/lm15 ("length"), Anthropic ("max_tokens"),
# Gemini ("MAX_TOKENS"), OpenAI's Responses API ("max_output_tokens"). Compared lower-cased.
CUT_REASONS = frozenset({"length", "max_tokens", "max_output_tokens"})


class TruncatedCompletionError(LMError, RubricForgeError):  # type: ignore[misc]  # dspy ships no types: LMError is Any
    """The server stopped the completion at ``max_tokens`` (finish reason ``length``): what came back is
    a fragment, never an answer. ``partial`` holds the fragment (for diagnostics and GEPA's feedback).

    A subclass of DSPy's `LMError`, so DSPy passes it through unchanged and never retries it."""

    default_code = "truncated"

    def __init__(self, message: str, partial: str = "", model: str | None = None):
        # dspy ships no types (no py.typed): mypy cannot see that LMError's __init__ takes model=
        super().__init__(message, model=model)  # type: ignore[call-arg]
        self.partial = partial


def check_finish(response: lm15.Response, where: str, model: str | None = None) -> lm15.Response:
    """Return the lm15 `response`, or raise `TruncatedCompletionError` when it was cut at max_tokens."""
    if _is_cut(getattr(response, "finish_reason", None)):
        text = "".join(getattr(part, "text", "") or "" for part in getattr(response.message, "parts", []) or [])
        raise TruncatedCompletionError(f"{where}: completion cut at max_tokens (finish reason 'length')",
                                       partial=text, model=model)
    return response


def _is_cut(reason: Any) -> bool:
    return isinstance(reason, str) and reason.lower() in CUT_REASONS


def _field(obj: Any, key: str, default: Any = None) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)


def finish_reasons(response: Any) -> list[str | None]:
    """The finish reason of each completion in `response`, as DSPy returned it from an LM call.

    Args:
        response: the ``"response"`` of a DSPy history entry: an lm15 `Response`, a sequence of them
            (several candidates), an OpenAI-shaped chat or text completion (a dict or a LiteLLM
            ``ModelResponse``: ``choices[].finish_reason``), or a Responses API object (``status``
            ``incomplete`` for ``max_output_tokens``).

    Returns:
        One finish reason per completion (None where the response does not say).
    """
    if response is None:
        return []
    if isinstance(response, (list, tuple)):
        return [reason for item in response for reason in finish_reasons(item)]
    reason = _field(response, "finish_reason")
    if reason is not None:
        return [str(reason)]
    choices = _field(response, "choices")
    if choices:
        return [None if _field(c, "finish_reason") is None else str(_field(c, "finish_reason")) for c in choices]
    if _field(response, "status") == "incomplete":  # the Responses API
        return [str(_field(_field(response, "incomplete_details"), "reason") or "incomplete")]
    return [None]


class _Entries:
    """A history that keeps every entry it is given: DSPy trims each owner's history to
    ``max_history_size`` (``len`` then ``pop(0)``); this one reports itself empty and never drops."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return 0

    def pop(self, index: int = -1) -> None:
        return None

    def append(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)


class CompletionWatch:
    """Receives the DSPy history entry of every LM call made inside `watch_completions` (in this thread
    or task only). Quacks as a DSPy caller module (a ``history`` DSPy appends to)."""

    def __init__(self) -> None:
        self.history = _Entries()

    @property
    def entries(self) -> list[dict[str, Any]]:
        return self.history.entries

    def cut(self) -> TruncatedCompletionError | None:
        """A `TruncatedCompletionError` for the first completion cut at max_tokens (with its text as
        ``partial``), or None when no call inside the watch was cut."""
        for entry in self.entries:
            reasons = finish_reasons(entry.get("response"))
            for index, reason in enumerate(reasons):
                if _is_cut(reason):
                    return TruncatedCompletionError(
                        f"completion cut at max_tokens (finish reason {reason!r})",
                        partial=_output_text(entry.get("outputs"), index), model=entry.get("model"))
        return None


def _output_text(outputs: Any, index: int) -> str:
    if not isinstance(outputs, (list, tuple)) or not outputs:
        return ""
    output = outputs[min(index, len(outputs) - 1)]
    text = output.get("text") if isinstance(output, dict) else output
    return text if isinstance(text, str) else ""


@contextmanager
def watch_completions() -> Iterator[CompletionWatch]:
    """Within the block, every DSPy LM call made in this thread (or asyncio task) reports its history entry
    to the yielded `CompletionWatch`; `CompletionWatch.cut()` then tells whether one was cut at max_tokens.

    DSPy's history is what carries the entries (``settings.caller_modules``): when the user turned it off
    (``disable_history`` or ``max_history_size=0``), it is turned on inside the block with
    ``max_history_size=1``, and the entries the block added to DSPy's global history are taken out again,
    so the user's setting still keeps no history."""
    watch = CompletionWatch()
    settings = dspy.settings
    overrides: dict[str, Any] = {"caller_modules": [*(settings.caller_modules or []), watch]}
    hidden = bool(settings.disable_history) or settings.max_history_size == 0
    if hidden:
        overrides.update(disable_history=False, max_history_size=1)
    try:
        with dspy.context(**overrides):
            yield watch
    finally:
        if hidden:
            _forget(watch.entries)


def _forget(entries: list[dict[str, Any]]) -> None:
    """Take `entries` out of DSPy's global history (by identity; absent ones are skipped)."""
    history = base_lm.GLOBAL_HISTORY
    for entry in entries:
        for index in range(len(history) - 1, -1, -1):
            try:
                if history[index] is entry:
                    del history[index]
                    break
            except IndexError:  # another thread trimmed it meanwhile
                break
