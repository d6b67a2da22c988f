"""The review page's safety model: a per-run token, a CSRF check, a strict Content-Security-Policy.

- **Token.** Every request must carry the run's random token: the URL printed at start holds it
  (``?token=...``); the first request with it sets an ``HttpOnly; SameSite=Strict`` cookie and is
  redirected to the same URL without it (as Jupyter does), so the token never stays in the address bar,
  the history or a Referer. A request with neither a valid cookie nor a valid ``?token`` is refused (403).
  The cookie is named after the port (`ReviewServer`); a browser still sends it to every port of the
  host, so another server on 127.0.0.1 the browser visits receives it (docs/SECURITY.md).
- **CSRF.** A state-changing request (POST) needs the cookie *and* the CSRF token (a separate value,
  derived from the run token) in the form field ``csrf`` or the header ``X-CSRF-Token``; the
  ``SameSite=Strict`` cookie alone would already keep other sites out, the second check keeps out a
  request forged by anything that can only make the browser send cookies.
- **Host.** The ``Host`` header must name the address the server listens on (or ``localhost``): a page
  on another site that rebinds its DNS name to 127.0.0.1 is refused.
- **Headers.** ``Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self';
  img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'`` (no inline script,
  no inline style, nothing from elsewhere), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy:
  no-referrer``, ``Cache-Control: no-store``.
- **Inert text.** Every piece of untrusted text the pages print (ids, task, agent and stage names, reasons,
  notes, labeler names, file names, rubric and criterion names, figure names, trajectory steps) goes through
  one filter, `inert` (the templates' ``|inert``, and ``|u``, which also isolates it in a
  ``<bdi dir="ltr" class="u">``): control characters (C0, C1), bidirectional overrides, embeddings and
  isolates, zero-width and other format characters, and line/paragraph separators are shown as their escapes
  (``\\u202e``, ``\\x1b``: visible, and inert) by `core.terminal.terminal_safe`, the package's one helper
  for it; line breaks and tabs are kept. So text from a file can neither reorder the page's own sentences
  nor hide a character; Jinja2's autoescape then makes it HTML-inert.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import unicodedata
from typing import Mapping
from urllib.parse import urlencode

from markupsafe import Markup
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from rubricforge_dspy.core.terminal import terminal_safe

__all__ = ["CSP", "COOKIE", "Guard", "new_token", "inert", "isolated", "attribute"]

COOKIE = "rubricforge_review"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'; connect-src 'self'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY", "Cross-Origin-Opener-Policy": "same-origin"}


def new_token() -> str:
    """A fresh run token (256 random bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class Guard:
    """The token, CSRF and host checks of one run.

    Args:
        token: the run token (`new_token`).
        hosts: the ``host[:port]`` values a request's Host header may hold.
        cookie: the cookie's name (one per port: a browser sends 127.0.0.1's cookies to every port, so two
            pages open at once would otherwise overwrite each other's token).
    """

    def __init__(self, token: str, hosts: set[str] | None = None, cookie: str = COOKIE):
        if len(token) < 16:
            raise ValueError("a review token has at least 16 characters")
        self.token = token
        self.cookie = cookie
        self.csrf = hmac.new(token.encode(), b"rubricforge review csrf", hashlib.sha256).hexdigest()
        self.hosts = set(hosts or ())

    def _same(self, given: str | None, expected: str) -> bool:
        return given is not None and given != "" and hmac.compare_digest(given.encode(), expected.encode())

    def host_ok(self, host: str | None) -> bool:
        return not self.hosts or (host or "") in self.hosts

    def cookie_ok(self, cookies: Mapping[str, str]) -> bool:
        return self._same(cookies.get(self.cookie), self.token)

    def csrf_ok(self, value: str | None) -> bool:
        return self._same(value, self.csrf)

    def admit(self, request: Request) -> Response | None:
        """None when a GET may go on; else the response to send (403, or the redirect that sets the cookie)."""
        if not self.host_ok(request.headers.get("host")):
            return refuse("this server answers only requests addressed to the host it listens on")
        query = request.query_params.get("token")
        if query is not None:
            if not self._same(query, self.token):
                return refuse("wrong token: open the URL the review command printed")
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            path = "/" + request.url.path.lstrip("/")  # never "//host": a redirect stays on this server
            target = URL(path + (f"?{urlencode(rest)}" if rest else ""))
            response = RedirectResponse(str(target), status_code=303)
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            return response
        if not self.cookie_ok(request.cookies):
            return refuse("no token: open the URL the review command printed (it holds ?token=...)")
        return None


def refuse(why: str) -> Response:
    return PlainTextResponse(f"403 Forbidden: {why}\n", status_code=403, headers=HEADERS)


def inert(value: object) -> str:
    """`value` as text with every control, format (bidi, zero-width) and line-separator character shown as its
    escape (`core.terminal.terminal_safe`), line breaks and tabs kept: the one filter of untrusted text on the
    review pages (``|inert`` in the templates). None is ``""``.

    Args:
        value: any value from a file (a string, a number, None).

    Returns:
        The text, with nothing that can reorder or hide what is around it (``"a\u202eb"`` becomes
        ``"a\\u202eb"``, shown as ``a\u202eb``).
    """
    text = "" if value is None else str(value)
    if text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable():
        return text
    return "\n".join("\t".join(terminal_safe(piece) for piece in line.split("\t")) for line in text.split("\n"))


def isolated(value: object) -> Markup:
    """`inert` text in its own left-to-right bidi isolate (``<bdi dir="ltr" class="u">``), escaped: the
    templates' ``|u`` for untrusted text inside the page's own sentences and cells."""
    return Markup('<bdi dir="ltr" class="u">{}</bdi>').format(inert(value))


_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]|[^\x00-\x7f]")


def attribute(value: object) -> Markup:
    """`value` for an HTML attribute whose value must reach the server as it is (a filter's ``<option
    value>``, a hidden field): escaped, and every control, format or separator character written as a
    character reference (``&#x202e;``), so the page's source holds none while the form still sends the value."""
    def reference(match: re.Match[str]) -> str:
        char = match.group()
        return f"&#x{ord(char):x};" if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") else char

    escaped = Markup.escape("" if value is None else str(value))
    return Markup(_HIDDEN.sub(reference, str(escaped)))
