"""The one rule for what an LM call's failure was, and whether it is worth another attempt.

Decided by the exception's *type*, never by its message, building on DSPy's exception classes
(`dspy.utils.exceptions`); lm15's (raised when an engine is called directly) and httpx's (the Batch
API client talks HTTP itself) map to the same kinds:

- `error_kind(error)`: one of `rubricforge_dspy.core.verdict.ERROR_KINDS`;
- `is_transient(error)`: a timeout, a connection error, an HTTP 5xx or an HTTP 429 (`RETRYABLE_KINDS`),
  the errors every retry loop of the package retries;
- ``not_json``: a reply with a success status (2xx) whose body is not a JSON completion, told by the error's
  ``status`` (DSPy's and lm15's provider errors carry it), not its message: an HTML page (a proxy's login
  or error page, a captive portal, a wrong ``--api-base`` serving a web site) or an empty body. It is not
  retried (the same URL serves the same page), but it is an outage: the circuit breaker counts it and a
  resumed run asks again;
- `retry_after(error)`: the wait the server asked for (``Retry-After``, seconds or HTTP-date, read by
  `parse_retry_after`), bounded by `MAX_RETRY_AFTER`; the retry loops wait at least that long;
- `is_outage(error)`, `LM_ERROR_KINDS`: the server did not answer (any LM or network error, as opposed
  to an answer that is not a verdict: parse, truncated, invalid); what a resumed run asks again and
  what the dead-server circuit breaker (`rubricforge_dspy.lm.circuit`) counts.
"""

from __future__ import annotations

import email.utils
import math
import time

import httpx
from dspy import lm15
from dspy.utils import exceptions as dspy_errors

from rubricforge_dspy.core.verdict import RETRYABLE_KINDS

__all__ = ["LM_ERROR_KINDS", "RETRYABLE_KINDS", "MAX_RETRY_AFTER", "error_kind", "status_kind", "is_transient",
           "is_outage", "parse_retry_after", "retry_after"]

# The longest wait a server's Retry-After can impose on one retry (seconds): a larger ask is cut to this,
# so a misbehaving server cannot park a run for hours.
MAX_RETRY_AFTER = 60.0

# Abstentions of these kinds mean the server did not answer: a resumed run asks again, and the circuit
# breaker counts them. The others (parse, truncated, invalid) are answers.
LM_ERROR_KINDS = frozenset({"timeout", "connection", "http_5xx", "rate_limit", "http_4xx", "not_json", "other"})

# Most specific first: a DSPy error class (or lm15's / httpx's) -> kind.
_KINDS_BY_TYPE = (
    (dspy_errors.LMTimeoutError, "timeout"),
    (lm15.TimeoutError, "timeout"),
    (httpx.TimeoutException, "timeout"),
    (TimeoutError, "timeout"),
    (dspy_errors.LMTransportError, "connection"),
    (lm15.TransportError, "connection"),
    (httpx.TransportError, "connection"),
    (ConnectionError, "connection"),
    (dspy_errors.LMServerError, "http_5xx"),
    (lm15.ServerError, "http_5xx"),
    (dspy_errors.LMRateLimitError, "rate_limit"),
    (lm15.RateLimitError, "rate_limit"),
    (dspy_errors.LMProviderError, "http_4xx"),
    (lm15.ProviderError, "http_4xx"),
    (dspy_errors.AdapterParseError, "parse"),
)


def status_kind(status: int) -> str:
    """The kind of an HTTP error status: 429 rate_limit, 408/504 timeout, other 5xx http_5xx, else http_4xx."""
    if status == 429:
        return "rate_limit"
    if status in (408, 504):
        return "timeout"
    if status >= 500:
        return "http_5xx"
    return "http_4xx"


def _success_status(error: BaseException) -> bool:
    status = getattr(error, "status", None)
    return isinstance(status, int) and 200 <= status < 300


def error_kind(error: BaseException) -> str:
    """The kind of an LM call's failure (one of `verdict.ERROR_KINDS`), from its type alone (and, for a
    provider error, the HTTP status it carries: a 2xx one is a reply that is not JSON, ``not_json``)."""
    kind = getattr(error, "kind", None)  # VerdictFormatError: parse | truncated | invalid
    if isinstance(error, dspy_errors.AdapterParseError) and kind:
        return str(kind)
    if getattr(error, "default_code", None) == "truncated":
        return "truncated"
    if isinstance(error, (dspy_errors.LMProviderError, lm15.ProviderError)) and _success_status(error):
        return "not_json"  # a provider "error" with a success status: the body could not be read as a reply
    if isinstance(error, httpx.HTTPStatusError):
        return status_kind(error.response.status_code)
    for cls, name in _KINDS_BY_TYPE:
        if isinstance(error, cls):
            return name
    return "other"


def is_transient(error: BaseException) -> bool:
    """Worth another attempt: a timeout, a connection error, an HTTP 5xx or an HTTP 429."""
    return error_kind(error) in RETRYABLE_KINDS


def is_outage(error: BaseException) -> bool:
    """The LM did not answer (an LM or network error, a reply that is not JSON, or an unknown one); false for
    an answer that is not a verdict (parse, truncated, invalid)."""
    return error_kind(error) in LM_ERROR_KINDS


def parse_retry_after(value: str | float | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value: delay-seconds (``"5"``, ``"1.5"``) or an
    HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``, relative to `now`, default the current time). None when
    absent or unreadable; never negative; at most `MAX_RETRY_AFTER`."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip()
        if not text:
            return None
        try:
            seconds = float(text)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
            if when is None:
                return None
            seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def retry_after(error: BaseException | None) -> float | None:
    """The wait `error`'s server asked for (its ``retry_after``, or an httpx response's ``Retry-After``
    header), bounded by `MAX_RETRY_AFTER`; searched along the exception's causes. None when none was given."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        hint = getattr(error, "retry_after", None)
        if hint is not None:
            return parse_retry_after(hint)
        response = getattr(error, "response", None)
        headers = getattr(response, "headers", None)
        if isinstance(error, httpx.HTTPStatusError) and headers is not None and headers.get("retry-after"):
            return parse_retry_after(headers.get("retry-after"))
        error = error.__cause__ or error.__context__
    return None
