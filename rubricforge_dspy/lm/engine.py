"""The engine: one HTTP POST per call to an OpenAI-compatible ``/chat/completions``, in the dialect the
server speaks.

`make_lm(config)` returns a `dspy.LM` whose engine (`ChatCompletionsEngine`, and for ``acall`` its async
twin `AsyncChatCompletionsEngine`) posts to
``{api_base}/chat/completions`` itself, so what is sent is exactly: the messages, ``max_tokens``
(never ``max_completion_tokens``, which llama_cpp.server ignores), ``temperature``, ``seed``, and the
signature's JSON schema as ``response_format`` in the configured dialect
(`rubricforge_dspy.lm.config.structured_response_format`). A reply cut at ``max_tokens`` raises
`rubricforge_dspy.lm.truncation.TruncatedCompletionError`; an HTTP error status becomes the lm15 error
of its kind (`http_error`). Bodies are serialized with orjson (`encode_body`).

The batch's fast path (`CompiledRequest`, `AsyncChatCompletionsEngine.apost`): the body DSPy builds for a
fixed program is the same for every item but the one text it templates in, so it is captured once
(`capture_request`: DSPy builds the request, the engine records its body instead of posting it), split
around a sentinel, and each item's body is the two halves around its JSON-escaped text: the same bytes
the DSPy path would post, at a fraction of the CPU.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import dspy
import orjson
from dspy.utils.exceptions import LMError

from rubricforge_dspy.core.errors import InputError, RubricForgeError
from rubricforge_dspy.lm.config import LMConfig, structured_response_format
from rubricforge_dspy.lm.errors import parse_retry_after
from rubricforge_dspy.lm.secrets import redact_text, redact_url
from rubricforge_dspy.lm.truncation import check_finish

if TYPE_CHECKING:
    import asyncio

    import aiohttp
    import httpx
    from dspy import lm15

__all__ = ["ChatCompletionsEngine", "AsyncChatCompletionsEngine", "make_lm", "http_error", "SHARD_CONNECTIONS",
           "encode_body", "CompiledRequest", "RequestCaptured", "capture_request"]

SHARD_CONNECTIONS = 16  # connections per httpx pool shard of one engine
_JSON = {"Content-Type": "application/json"}
_CAPTURE: ContextVar[bool] = ContextVar("rubricforge_capture_request", default=False)


def encode_body(body: dict[str, Any]) -> bytes:
    """The bytes posted for a JSON `body` (orjson: compact, UTF-8, no ASCII escaping), on every path."""
    return orjson.dumps(body)


class RequestCaptured(LMError, RubricForgeError):  # type: ignore[misc]  # dspy ships no types: LMError is Any
    """Raised by an engine inside `capture_request` instead of posting: ``body`` is what it would have sent.
    A DSPy `LMError`, so DSPy passes it through unchanged (no retry, no cache, no fallback)."""

    def __init__(self, body: dict[str, Any], model: str | None = None):
        # dspy ships no types (no py.typed): mypy cannot see that LMError's __init__ takes model=
        super().__init__("request captured, not sent", model=model)  # type: ignore[call-arg]
        self.body = body


@contextmanager
def capture_request() -> Iterator[None]:
    """Within the block, the engines of this module raise `RequestCaptured` (carrying the body they built)
    instead of posting: how the batch learns the exact body DSPy builds for a program, without a call."""
    token = _CAPTURE.set(True)
    try:
        yield
    finally:
        _CAPTURE.reset(token)


class CompiledRequest:
    """A request body with one templated string: ``body_for(text)`` is ``encode_body`` of the captured body
    with the sentinel replaced by `text`, built by concatenating bytes (JSON escaping of a string does not
    depend on what surrounds it).

    Args:
        make_body: called with a sentinel string, returns the body dict built around it (once per sentinel;
            it is called twice, and the two bodies must differ only where the sentinel is, exactly once).

    Raises:
        ValueError: the body does not hold the sentinel exactly once, or differs elsewhere between calls.
    """

    def __init__(self, make_body: Callable[[str], dict[str, Any]]):
        first, second = (f"RUBRICFORGE-TEMPLATE-{uuid.uuid4().hex}" for _ in range(2))
        data = encode_body(make_body(first))
        mark = orjson.dumps(first)[1:-1]
        if data.count(mark) != 1:
            raise ValueError("the request body does not hold the templated text exactly once")
        self.prefix, self.suffix = data.split(mark)
        if self._join(second) != encode_body(make_body(second)):
            raise ValueError("the request body changes between calls beyond the templated text")

    def _join(self, text: str) -> bytes:
        return self.prefix + orjson.dumps(text)[1:-1] + self.suffix

    def body_for(self, text: str) -> bytes | None:
        """The body for `text`, or None when it cannot be encoded (a lone surrogate: the caller takes the
        ordinary path, which reports it)."""
        try:
            return self._join(text)
        except orjson.JSONEncodeError:
            return None


def _http_error(status: int, text: str, retry_after: str | None, url: str = "") -> lm15.ProviderError:
    """The DSPy (lm15) error for an HTTP error status, as DSPy's own clients raise it: 429 a rate limit
    (with ``Retry-After``), 5xx a server error, other 4xx a request error; the message names the URL."""
    from dspy import lm15

    message = f"{url}: HTTP {status}: {text[:500]}" if url else f"HTTP {status}: {text[:500]}"
    if status in (401, 403):
        cls = lm15.AuthError
    elif status == 429:
        cls = lm15.RateLimitError
    elif status in (408, 504):
        cls = lm15.TimeoutError
    elif status >= 500:
        cls = lm15.ServerError
    elif "context" in text.lower() and ("length" in text.lower() or "window" in text.lower()):
        cls = lm15.ContextLengthError
    else:
        cls = lm15.InvalidRequestError
    after = parse_retry_after(retry_after)
    return cls(message, provider="openai-compatible", status=status, retry_after=after)


def _endpoint(api_base: str, path: str) -> str:
    """`path` appended to the path of `api_base`, before its query string (``?key=...`` stays a query)."""
    split = urlsplit(api_base)
    return urlunsplit(split._replace(path=split.path.rstrip("/") + path))


http_error = _http_error  # the lm15 error for an HTTP status (public: the Batch API replays statuses)


class ChatCompletionsEngine:
    """A DSPy engine (``complete(Request) -> Response``) for one OpenAI-compatible endpoint.

    It serializes DSPy's canonical request with DSPy's own chat dialect, then fixes the three
    things servers disagree on: ``max_tokens`` (renamed from ``max_completion_tokens``),
    ``response_format`` (per `LMConfig.structured_output`) and the model name. One attempt per
    call: DSPy owns retries and the response cache. The key is read at request time.
    """

    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"response_format", "temperature", "max_tokens", "seed", "stop", "top_p"})

    def __init__(self, config: LMConfig):
        if config.is_embedded or not config.model:
            raise InputError("ChatCompletionsEngine needs an api_base and a model name")
        self.config = config
        self._clients: list[httpx.Client] = []  # the connection-pool shards, created on first use
        self._local = threading.local()
        self._lock = threading.Lock()
        self._threads = 0

    @cached_property
    def url(self) -> str:
        """The URL requests go to: ``/chat/completions`` after the endpoint's path, its query kept (secrets
        included: never write it; `shown_url` is the one to write)."""
        api_base = self.config.api_base
        if api_base is None:  # __init__ refuses the embedded config (the config is frozen)
            raise InputError("ChatCompletionsEngine needs an api_base")
        return _endpoint(api_base, "/chat/completions")

    @cached_property
    def shown_url(self) -> str:
        """`url` with any secret in it redacted (`lm.secrets.redact_url`), for messages."""
        return redact_url(self.url)

    def body(self, request: lm15.Request) -> dict[str, Any]:
        """The JSON body sent for a canonical `dspy.lm15.Request`."""
        from dspy.clients.lm15_boundary import request_kwargs

        data = request_kwargs(request, "chat")
        limit = data.pop("max_completion_tokens", None)
        if data.get("max_tokens") is None:
            data["max_tokens"] = limit if limit is not None else self.config.max_tokens
        data["response_format"] = structured_response_format(
            request.config.response_format, self.config.structured_output, self.config.max_string_length)
        if data["response_format"] is None:
            del data["response_format"]
        return {"model": self.config.model, **data}

    def _http(self) -> httpx.Client:
        """This thread's HTTP client. The `max_connections` connections are split over shards of at most
        `SHARD_CONNECTIONS`, and threads are dealt to shards in turn: one big httpx pool scans all its
        connections under one lock on every request and response, which at 64-256 threads cost more
        client CPU than everything else in a call (evals/RESULTS.md, "Saturating a batching server")."""
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is not None:
            return client
        with self._lock:
            if not self._clients:
                import httpx

                total = self.config.max_connections
                shards = max(1, -(-total // SHARD_CONNECTIONS))
                for i in range(shards):
                    size = total // shards + (1 if i < total % shards else 0)
                    self._clients.append(httpx.Client(
                        timeout=self.config.timeout,
                        limits=httpx.Limits(max_connections=size, max_keepalive_connections=size)))
            client = self._clients[self._threads % len(self._clients)]
            self._threads += 1
        self._local.client = client
        return client

    def headers(self) -> dict[str, str]:
        key = self.config.api_key
        return {**_JSON, "Authorization": f"Bearer {key}"} if key else _JSON

    def _captured(self, request: lm15.Request) -> dict[str, Any]:
        body = self.body(request)
        if _CAPTURE.get():
            raise RequestCaptured(body, request.model)
        return body

    def complete(self, request: lm15.Request) -> lm15.Response:
        content = encode_body(self._captured(request))
        with self._transport_errors():
            reply = self._http().post(self.url, content=content, headers=self.headers())
        return self._response(reply, request)

    @contextmanager
    def _transport_errors(self) -> Iterator[None]:
        """httpx's timeout and transport errors as lm15's, with any secret redacted (both engines)."""
        import httpx
        from dspy import lm15

        shown, base = self.shown_url, self.config.api_base
        try:
            yield
        except httpx.TimeoutException as error:
            detail = redact_text(str(error), base) or f"timed out ({type(error).__name__})"  # async ones say nothing
            raise lm15.TimeoutError(f"{shown}: {detail}", provider="openai-compatible") from None
        except httpx.HTTPError as error:
            raise lm15.TransportError(f"{shown}: {type(error).__name__}: {redact_text(str(error), base)}") from None

    def _response(self, reply: httpx.Response | _Reply, request: lm15.Request) -> lm15.Response:
        """The lm15 response of an HTTP `reply`: an HTTP error status as its lm15 error, a body that is not
        JSON as a server error, a completion cut at max_tokens as `TruncatedCompletionError` (both engines)."""
        return self._read(self._payload(reply), request.model)

    def _read(self, payload: dict[str, Any], model: str | None) -> lm15.Response:
        """The lm15 response of a completion's JSON, or `TruncatedCompletionError` when it was cut."""
        from dspy import lm15

        return check_finish(lm15.response_from_openai_chat(payload, model=model), self.shown_url, model)

    def _payload(self, reply: httpx.Response | _Reply) -> dict[str, Any]:
        """The JSON of an HTTP `reply`: an HTTP error status as its lm15 error, a body that is not a JSON
        object as a server error (every path)."""
        from dspy import lm15

        shown = self.shown_url
        if reply.status_code >= 400:
            raise _http_error(reply.status_code, redact_text(reply.text, self.config.api_base),
                              reply.headers.get("retry-after"), shown)
        try:
            payload = orjson.loads(reply.content)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            raise lm15.ServerError(f"{shown}: HTTP {reply.status_code} with a body that is not JSON",
                                   provider="openai-compatible", status=reply.status_code)
        return payload

    def stream(self, request: lm15.Request) -> NoReturn:
        from dspy import lm15

        raise lm15.UnsupportedFeatureError("ChatCompletionsEngine does not stream")

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
            self._local = threading.local()
        for client in clients:
            client.close()

    # Copies (dspy deep-copies programs) get their own connection pool; state holds no key.
    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        ChatCompletionsEngine.__init__(self, state["config"])

    def dump_state(self) -> dict[str, Any]:
        return self.config.to_dict()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> "ChatCompletionsEngine":
        known = {f.name for f in fields(LMConfig)}
        return cls(LMConfig(**{k: v for k, v in state.items() if k in known}))


class AsyncChatCompletionsEngine(ChatCompletionsEngine):
    """The async twin of `ChatCompletionsEngine` (``async complete``, DSPy's ``async_engine=``): the same
    body, headers, error mapping and truncation check, over an `aiohttp.ClientSession`.

    Connections: one `_AsyncPool` per running event loop (a session belongs to the loop it first ran on; a
    loop that has closed drops its pool, so ``asyncio.run`` per batch does not leak).
    """

    def __init__(self, config: LMConfig):
        super().__init__(config)
        self._aclients: dict[asyncio.AbstractEventLoop, _AsyncPool] = {}  # event loop -> its _AsyncPool

    def _apool(self) -> "_AsyncPool":
        import asyncio

        loop = asyncio.get_running_loop()
        pool = self._aclients.get(loop)
        if pool is not None:
            return pool
        with self._lock:
            for dead in [other for other in self._aclients if other.is_closed()]:
                self._aclients.pop(dead)
            pool = self._aclients.get(loop)
            if pool is None:
                pool = self._aclients[loop] = _AsyncPool(self.config.max_connections, self.config.timeout)
        return pool

    async def _apost(self, content: bytes) -> _Reply:
        import asyncio

        import aiohttp
        from dspy import lm15

        try:
            return await self._apool().post(self.url, content, self.headers())
        except asyncio.TimeoutError as error:  # aiohttp's timeouts are TimeoutErrors (some ClientErrors too)
            detail = redact_text(str(error), self.config.api_base) or f"timed out ({type(error).__name__})"
            raise lm15.TimeoutError(f"{self.shown_url}: {detail}", provider="openai-compatible") from None
        except aiohttp.ClientError as error:
            raise lm15.TransportError(f"{self.shown_url}: {type(error).__name__}: "
                                      f"{redact_text(str(error), self.config.api_base)}") from None

    async def complete(self, request: lm15.Request) -> lm15.Response:
        reply = await self._apost(encode_body(self._captured(request)))
        return self._response(reply, request)

    async def apost(self, content: bytes, model: str | None = None) -> tuple[lm15.Response, Any]:
        """Post an encoded body (`CompiledRequest.body_for`): what `complete` does after building the body
        (the same client, headers, error mapping and truncation check).

        Args:
            content: the encoded JSON body.
            model: the request's model, as DSPy names it (carried by errors and the response).

        Returns:
            ``(response, usage)``: the lm15 response, and the reply's ``usage`` object (OpenAI's shape) or
            None.

        Raises:
            TruncatedCompletionError: the completion was cut at max_tokens.
            dspy.lm15 errors: transport failures, timeouts, HTTP error statuses, a body that is not JSON.
        """
        payload = self._payload(await self._apost(content))
        return self._read(payload, model), payload.get("usage")

    async def stream(self, request: lm15.Request) -> AsyncIterator[Any]:  # type: ignore[override]  # DSPy's async engine protocol
        from dspy import lm15

        raise lm15.UnsupportedFeatureError("AsyncChatCompletionsEngine does not stream")
        yield  # pragma: no cover - makes this an async generator, as DSPy expects

    async def aclose(self) -> None:
        """Close this event loop's client."""
        import asyncio

        with self._lock:
            pool = self._aclients.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()

    def __setstate__(self, state: dict[str, Any]) -> None:
        AsyncChatCompletionsEngine.__init__(self, state["config"])


class _Reply:
    """What `_AsyncPool.post` returns: the status, headers and whole body of a reply (the part of an HTTP
    response `ChatCompletionsEngine._payload` reads), read before the connection goes back to the pool."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: Any, content: bytes):
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class _AsyncPool:
    """Keep-alive connections for one event loop: one `aiohttp.ClientSession` whose connector holds at most
    `size` connections (a request waits when all are busy), with no cookie jar.

    httpx's `AsyncClient` cost about 1 ms of client CPU per request on the batch's fast path (its
    connection pool polls each idle connection's socket on every request, and its request and response
    models are pure Python); aiohttp's C-accelerated HTTP parser and O(1) connection pool cost a fraction
    of that (evals/results/client_cpu.json, label s4). Its timeout and transport errors become lm15's in
    `AsyncChatCompletionsEngine._apost`, as httpx's do on the synchronous path."""

    def __init__(self, size: int, timeout: float | None):
        self.size, self.timeout = max(1, size), timeout
        self._session: aiohttp.ClientSession | None = None

    async def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.size, limit_per_host=self.size),
            timeout=aiohttp.ClientTimeout(total=self.timeout), cookie_jar=aiohttp.DummyCookieJar())
        # Closed with its loop: `asyncio.run` closes the async generators a loop started before it ends
        # (``shutdown_asyncgens``), so a caller that never calls `aclose` leaves no session open.
        self._keeper = self._lifetime()
        await self._keeper.__anext__()
        return self._session

    async def _lifetime(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.aclose()

    async def post(self, url: str, content: bytes, headers: dict[str, Any]) -> _Reply:
        session = self._session or await self._open()
        async with session.post(url, data=content, headers=headers) as reply:
            return _Reply(reply.status, reply.headers, await reply.read())

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def make_lm(config: LMConfig) -> dspy.LM:
    """A `dspy.LM` for `config`'s endpoint (an SGLang, vLLM or llama.cpp server).

    The model name should carry its revision: DSPy's cache key ignores the endpoint.
    """
    if config.is_embedded:
        raise ValueError("the embedded default needs a running server: use rubricforge_dspy.serve.open_lm")
    if not config.model:
        raise InputError(f"no model name given for endpoint {redact_url(config.api_base)}")
    return dspy.LM(
        f"openai/{config.model}",
        engine=ChatCompletionsEngine(config),
        async_engine=AsyncChatCompletionsEngine(config),
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        seed=config.seed,
        num_retries=config.num_retries,
        cache=config.cache,
    )
