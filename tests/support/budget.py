"""A scripted LM that reports the worst usage a byte-level tokenizer could: every UTF-8 byte of the messages it is
sent (and of the structured-output schema) a prompt token, and every answer as long as ``max_tokens`` allows. A
token budget's bound must hold against it (`lm.budget`: a prompt's bound is its bytes plus the template's
allowance)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from dspy import lm15

from rubricforge_dspy.testing.scripted import ScriptedEngine, ScriptedLM, request_messages


class WorstCaseEngine(ScriptedEngine):
    """`ScriptedEngine` whose usage is the worst case (module docstring); `sent` sums the prompt bytes reported."""

    def complete(self, request: lm15.Request) -> lm15.Response:
        response = super().complete(request)
        sent = sum(len(str(m["content"]).encode("utf-8")) for m in request_messages(request))
        schema = getattr(request.config, "response_format", None) or getattr(request.config, "output", None)
        if schema is not None:
            sent += len(json.dumps(schema, default=str).encode("utf-8"))
        answer = int(self.owner.kwargs.get("max_tokens") or 0)
        with self.owner._lock:
            self.owner.prompt_bytes.append(sent)
        return dataclasses.replace(response, usage=lm15.Usage(input_tokens=sent, output_tokens=answer))


class WorstCaseLM(ScriptedLM):
    """A `ScriptedLM` reporting the worst-case usage (`WorstCaseEngine`); ``prompt_bytes`` lists each request's."""

    def __init__(self, respond: Any, **kwargs: Any):
        super().__init__(respond, **kwargs)
        self.prompt_bytes: list[int] = []
        self._use(WorstCaseEngine(self))

    def _use(self, engine: WorstCaseEngine) -> None:
        from rubricforge_dspy.testing.scripted import AsyncScriptedEngine

        self._engine_spec, self._async_engine_spec = engine, AsyncScriptedEngine(engine)

    def copy(self, **kwargs: Any) -> "WorstCaseLM":
        copied: WorstCaseLM = super().copy(**kwargs)
        copied.prompt_bytes = self.prompt_bytes  # one list for every copy a run makes
        engine = WorstCaseEngine(copied)
        copied._use(engine)
        return copied
