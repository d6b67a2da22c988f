"""Offline LMs for tests: `ScriptedLM` answers through a Python function of the prompt.

Unlike `DummyLM`'s fixed answers, a scripted LM can make its output depend on what it is sent
(the rubric in the system message, the trajectory in the user message), so a test can show that
changing the rubric changes the verdicts, as a real judge would.

`ScriptedLM` is a `dspy.LM` (so a `dspy.BaseLM`) built on DSPy's public custom-engine contract: the
LM owns history, usage tracking, callbacks and copies; its engine (`ScriptedEngine`) turns one
`dspy.lm15.Request` into one `dspy.lm15.Response`, as rubricforge's own `ChatCompletionsEngine` does
for a real server. One private DSPy hook remains, in `format_fields` only: to write a dict answer in
the adapter's output format it uses `dspy.adapters.chat_adapter.FieldInfoWithName` and the adapter's
``format_field_with_value`` (the same hook `dspy.utils.dummies.DummyLM` uses).
`tests/testing/test_testing_doubles.py` fails naming that hook if a DSPy upgrade changes it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator

import dspy
from dspy import lm15

from rubricforge_dspy.lm.truncation import check_finish
from rubricforge_dspy.testing.fake_server import estimate_tokens

Responder = Callable[[list[dict[str, Any]]], "dict[str, Any] | str | Cut"]


@dataclass(frozen=True)
class Cut:
    """A scripted answer the server cut at max_tokens: `text` with finish reason ``length``."""

    text: str


def format_fields(adapter: dspy.Adapter, values: dict[str, Any]) -> str:
    """`values` (output field name -> value) written as `adapter` expects an LM to answer.

    The one place this module uses a private DSPy hook: `FieldInfoWithName` and the adapter's
    ``format_field_with_value(fields_with_values, role="assistant")`` (ChatAdapter takes no `role`).

    Args:
        adapter: The adapter whose output format to mimic (JSONAdapter: a JSON object;
            ChatAdapter: ``[[ ## field ## ]]`` sections).
        values: The output fields and their values.

    Returns:
        The answer text.
    """
    from dspy.adapters.chat_adapter import FieldInfoWithName

    fields = {FieldInfoWithName(name=name, info=dspy.OutputField()): value for name, value in values.items()}
    text: str
    try:
        text = adapter.format_field_with_value(fields, role="assistant")
    except TypeError:
        text = adapter.format_field_with_value(fields)
    return text


def request_messages(request: lm15.Request) -> list[dict[str, Any]]:
    """The chat messages of a canonical `request` as ``{"role", "content"}`` dicts, system first."""
    messages = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
        messages.append({"role": "system", "content": system})
    messages.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
    return messages


class ScriptedEngine:
    """A DSPy custom engine (``complete(Request) -> Response``) that answers with `owner.respond`.

    It counts calls on `owner`, formats dict answers with `owner.adapter`, reports token usage
    estimated as the fake server does (`fake_server.estimate_tokens`), and raises
    `TruncatedCompletionError` for a `Cut` answer (finish reason ``length``), as
    `rubricforge_dspy.lm.engine.ChatCompletionsEngine` does for a real server's truncated reply.
    """

    def __init__(self, owner: "ScriptedLM"):
        self.owner = owner

    def complete(self, request: lm15.Request) -> lm15.Response:
        owner = self.owner
        messages = request_messages(request)
        with owner._lock:
            owner.calls += 1
        answer = owner.respond(messages)
        finish = "length" if isinstance(answer, Cut) else "stop"
        if isinstance(answer, Cut):
            answer = answer.text
        text = answer if isinstance(answer, str) else format_fields(owner.adapter, answer)
        prompt = "".join(m["content"] for m in messages)
        usage = lm15.Usage(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(text))
        response = lm15.Response(id=None, model=owner.model, message=lm15.Message.assistant([lm15.TextPart(text)]),
                                 finish_reason=finish, usage=usage)
        return check_finish(response, "scripted LM", owner.model)

    def stream(self, request: lm15.Request) -> Iterator[Any]:  # lm15's stream events (not exported by DSPy)
        events: Iterator[Any] = lm15.response_to_events(self.complete(request))
        return events

    def close(self) -> None:
        pass


class AsyncScriptedEngine:
    """The async counterpart of a `ScriptedEngine` (``async complete``), so ``acall`` works too."""

    def __init__(self, sync: ScriptedEngine):
        self.sync = sync

    async def complete(self, request: lm15.Request) -> lm15.Response:
        return self.sync.complete(request)

    async def stream(self, request: lm15.Request) -> AsyncIterator[Any]:
        for event in self.sync.stream(request):
            yield event

    async def aclose(self) -> None:
        pass


class ScriptedLM(dspy.LM):  # type: ignore[misc]  # dspy ships no type information (no py.typed)
    """A `dspy.LM` whose answers come from `respond(messages)`, offline and deterministic.

    `respond` gets the chat messages (``{"role", "content"}`` dicts, the system message first) and
    returns the output fields as a dict (written in `adapter`'s format), raw text, or a `Cut` (an
    answer truncated at max_tokens, which the engine reports as `TruncatedCompletionError`).
    `calls` counts the requests answered (a copy starts from the count it was copied at and counts its
    own requests apart). DSPy's response cache is off:
    a responder may answer the same prompt differently on each call.
    """

    def __init__(self, respond: Responder, adapter: dspy.Adapter | None = None, model: str = "scripted",
                 temperature: float = 0.0, max_tokens: int = 1000, **kwargs: Any):
        engine = ScriptedEngine(self)
        super().__init__(model, engine=engine, async_engine=AsyncScriptedEngine(engine), temperature=temperature,
                         max_tokens=max_tokens, cache=False, **kwargs)
        self.respond = respond
        self.adapter = adapter or dspy.JSONAdapter()
        self.calls = 0
        self._lock = threading.Lock()

    def copy(self, **kwargs: Any) -> "ScriptedLM":
        """A copy with its own engine, call counter and history (DSPy's `copy` would share the engine)."""
        engine = ScriptedEngine(self)
        copied: ScriptedLM = super().copy(engine=engine, async_engine=AsyncScriptedEngine(engine), **kwargs)
        engine.owner = copied
        copied._lock = threading.Lock()
        return copied


def system_text(messages: list[dict[str, Any]]) -> str:
    """The system message(s) of `messages` (where DSPy puts the rubric)."""
    return "\n".join(m.get("content") or "" for m in messages if m.get("role") == "system")


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The content of the last user message (where DSPy puts the trajectory)."""
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""
