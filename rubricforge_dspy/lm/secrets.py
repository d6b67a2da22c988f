"""Secrets stay secret: keys never pasted where a variable's name belongs, and URLs written redacted.

- `check_api_key_env`: the value of ``--api-key-env`` / ``RUBRICFORGE_API_KEY_ENV`` must be the *name* of an
  environment variable. A value that looks like a key (a known key prefix such as ``sk-``, a long
  high-entropy token, characters no variable name has) is refused with a hint (`InputError`, exit 2),
  naming where it came from and never echoing it.
- `redact_url`: an endpoint with a secret in it (``user:pass@``, ``?key=``/``token=`` and the like, a
  key-shaped path segment) written with the secret replaced by `REDACTED`, for everything that is
  written: job files, fingerprints (verdict lines, manifests, certificates), logs, stderr, error messages.
  Requests still use the real URL.
- `redact_text`: a message with every occurrence of a URL's secret parts replaced (errors from HTTP
  libraries quote the URL they called).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import overload
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from rubricforge_dspy.core.errors import InputError

__all__ = ["REDACTED", "looks_like_a_key", "check_api_key_env", "redact_url", "url_secrets", "redact_text"]

REDACTED = "REDACTED"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Prefixes of API keys and tokens in common use (OpenAI, Anthropic, Stripe, Groq, Hugging Face, GitHub,
# GitLab, Google, AWS, xAI, Replicate, NVIDIA, Perplexity, Slack, JWTs, bearer headers).
_KEY_PREFIXES = ("sk-", "sk_", "pk-", "pk_", "rk_", "rk-", "gsk_", "hf_", "ghp_", "gho_", "ghs_", "github_pat_",
                 "glpat-", "aiza", "akia", "asia", "xai-", "r8_", "nvapi-", "pplx-", "xoxb-", "xoxp-", "eyj",
                 "bearer ", "key-", "api-", "tok_", "ya29.")
_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential|session|bearer|code", re.I)


def _entropy(text: str) -> float:
    """Shannon entropy of `text` in bits per character."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_like_a_key(value: str) -> bool:
    """True when `value` looks like a secret rather than a name: a known key prefix, a long high-entropy
    token (20+ characters mixing letters and digits, not an UPPER_SNAKE variable name), or characters no
    environment variable name has (``-``, ``.``, ``/``, ``:``, spaces, ...)."""
    text = value.strip()
    if not text:
        return False
    if text.lower().startswith(_KEY_PREFIXES) or not _ENV_NAME.match(text):
        return True
    if len(text) >= 20 and any(c.isdigit() for c in text) and any(c.isalpha() for c in text):
        upper_snake = re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*", text) is not None
        return not upper_snake and _entropy(text) >= 3.5
    if len(text) >= 32 and "_" not in text:
        return True  # one long word with no separator: a token, not a variable's name
    return False


def check_api_key_env(value: str | None, where: str = "api_key_env") -> str | None:
    """Return `value` when it can be the name of an environment variable; raise `InputError` (exit 2) when
    it looks like a key (`looks_like_a_key`), naming `where` (the flag or variable it came from) and never
    echoing the value.

    Args:
        value: the variable's name as given (None: not given).
        where: the flag or environment variable it came from, e.g. ``--api-key-env``.

    Returns:
        `value` unchanged.

    Raises:
        InputError: the value looks like a key, or is not a valid variable name.
    """
    if value is None:
        return None
    if looks_like_a_key(value):
        raise InputError(
            f"{where} takes the NAME of the environment variable that holds the key, not the key itself; the "
            f"value given looks like a key (it is not repeated here). Put the key in a variable and pass its "
            f"name, e.g. `export RUBRICFORGE_API_KEY=...` then `{where} RUBRICFORGE_API_KEY` (the default), "
            "and consider rotating a key that was typed on a command line (shell history)")
    return value


def url_secrets(url: str | None) -> list[str]:
    """The secret parts of `url`: its userinfo, the values of secret-named query parameters (and of any
    key-shaped one), key-shaped path segments, and its fragment. Empty when there are none."""
    if not url:
        return []
    try:
        split = urlsplit(url)
    except ValueError:
        return []
    found = []
    if "@" in split.netloc:
        userinfo = split.netloc.rsplit("@", 1)[0]
        password = userinfo.split(":", 1)[1] if ":" in userinfo else ""
        found += [part for part in (userinfo, password) if part]
    for name, value in parse_qsl(split.query, keep_blank_values=True):
        if _secret_param(name, value):
            found += [value, quote(value, safe=""), quote(value)]
    for segment in split.path.split("/"):
        if _key_shaped_segment(unquote(segment)):
            found.append(segment)
    if split.fragment:
        found.append(split.fragment)
    return sorted(set(found), key=len, reverse=True)


def _secret_param(name: str, value: str) -> bool:
    """A query parameter holding a secret: a secret-sounding name (key, token, secret, password, auth,
    signature, ...) or a key-shaped value."""
    return bool(value) and (_SECRET_PARAM.search(name) is not None or _key_shaped_segment(value))


def _key_shaped_segment(segment: str) -> bool:
    """A path segment that is a key (some gateways take it in the path): 20+ characters, with a key prefix
    or high entropy mixing letters and digits."""
    if len(segment) < 20 or not re.fullmatch(r"[A-Za-z0-9_\-.]+", segment):
        return False
    if segment.lower().startswith(_KEY_PREFIXES):
        return True
    return any(c.isdigit() for c in segment) and any(c.isalpha() for c in segment) and _entropy(segment) >= 3.5


@overload
def redact_url(url: str) -> str: ...


@overload
def redact_url(url: None) -> None: ...


def redact_url(url: str | None) -> str | None:
    """`url` with its secrets (`url_secrets`) replaced by `REDACTED`; unchanged when it has none (so a
    fingerprint of an endpoint without secrets is what it always was)."""
    if not url or not url_secrets(url):
        return url
    split = urlsplit(url)
    netloc = split.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(
        f"{quote(name, safe='')}={REDACTED if _secret_param(name, value) else quote(value, safe='')}"
        for name, value in parse_qsl(split.query, keep_blank_values=True))
    secrets = set(url_secrets(url))
    path = "/".join(REDACTED if segment in secrets else segment for segment in split.path.split("/"))
    return urlunsplit((split.scheme, netloc, path, query, REDACTED if split.fragment else ""))


def redact_text(text: str, *urls: str | None) -> str:
    """`text` with every secret part of `urls` (`url_secrets`) replaced by `REDACTED`."""
    for url in urls:
        if url and url in text:
            text = text.replace(url, redact_url(url) or "")
        for secret in url_secrets(url):
            if len(secret) >= 4:  # shorter ones would clobber ordinary words; the URL itself is done above
                text = text.replace(secret, REDACTED)
    return text
