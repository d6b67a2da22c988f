"""The review web app: Starlette routes over a `ReviewState`, Jinja2 templates with autoescaping.

Views: the queue (``/``), an item (``/item/{n}``: n is the item's place in the verdict file, never a
path), its whole trajectory (``/item/{n}/trajectory?page=k``: every step unclipped, in pages), the judge
(``/judge``), a figure (``/figure/{name}``: a name from the list made at start, percent-encoded in links), the
commands that recompile and certify with the labels (``/commands``). Actions (POST, token cookie and
CSRF token required): ``/label`` and ``/undo``. A label names its labeler (the form's ``labeler`` field, kept
in a cookie for the next label; default ``--labeler``) and may be an adjudication (``adjudication=1``: it
resolves a disagreement between labelers, `review.agreement`). ``/healthz`` answers ``ok`` to anyone (a readiness check;
it shows nothing). The safety model is `review.security`'s.

A label the labels file did not take (`review.labels.LabelNotSavedError`: a full or failing disk) is
answered with an error status (507 for a full disk, 500 otherwise) and a page that says "not saved:
<reason>" and links back to the item; a verdict file rewritten while the page runs
(`review.state.VerdictFileChangedError`) is answered 409, and every page says so at its top. The forms
are plain HTML forms (review.js only submits them on a key), so the browser shows that answer as it
shows any page. Repairs of the labels file found at start (`LabelsFile.notices`) are shown on every page.
"""

from __future__ import annotations

import logging
import math
import re
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.review.agreement import agreement
from rubricforge_dspy.review.judge_view import rubric_diff
from rubricforge_dspy.review.labels import SPACE_ERRNOS, LabelNotSavedError, check_labeler
from rubricforge_dspy.review.queue import DISAGREEMENTS, Filters
from rubricforge_dspy.review.security import (
    CSRF_FIELD,
    CSRF_HEADER,
    HEADERS,
    Guard,
    attribute,
    inert,
    isolated,
    refuse,
)
from rubricforge_dspy.review.state import ReviewState, VerdictFileChangedError

logger = logging.getLogger(__name__)

__all__ = ["create_app", "evidence_segments"]

PAGE_SIZE = 50
_PACKAGE = resources.files("rubricforge_dspy.review")


def evidence_segments(text: str) -> list[tuple[str, str]]:
    """The rendered evidence cut into ``(kind, text)``: ``"record"`` (the renderer's own lines),
    ``"tag"`` (a quote tag ``<nonce>``/``</nonce>``) and ``"quote"`` (agent-, tool- or user-written text).
    The nonce is read from the render's first line; every piece is escaped by the template."""
    match = re.match(r"QUOTES: text inside <([a-z]+)>", text)
    if not match:
        return [("record", text)]
    tag = re.compile(f"(</?{re.escape(match[1])}>)")
    header, newline, body = text.partition("\n")
    out, inside = [("header", header), ("record", newline)], False
    for piece in tag.split(body):
        if tag.fullmatch(piece):
            inside = not piece.startswith("</")
            out.append(("tag", piece))
        elif piece:
            out.append(("quote" if inside else "record", piece))
    return out


def _number(value: object, digits: int = 2) -> str:
    """A score as the pages show it: ``—`` for none (None, NaN, not a number), else `digits` decimals."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return "—" if value is None or isinstance(value, float) else inert(value)
    return f"{value:.{digits}f}"


def _environment() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(_PACKAGE.joinpath("templates")))
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["num"] = _number
    env.filters["inert"] = inert  # the one filter of untrusted text (review.security)
    env.filters["u"] = isolated  # the same, in its own left-to-right bidi isolate
    env.filters["attr"] = attribute  # an attribute value sent back as it is (hidden characters as references)
    env.filters["urlpart"] = lambda value: quote(str(value), safe="")  # a name in a link (a figure's)
    env.filters["shown_id"] = lambda value: ascii(str(value))[1:-1]  # every code point of an id, to tell look-alikes
    return env


class _Headers(BaseHTTPMiddleware):
    """The token check on every request but ``/healthz``, and the security headers on every response."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        guard: Guard = request.app.state.guard
        if request.url.path != "/healthz":
            if request.method == "GET" or request.method == "HEAD":
                refused = guard.admit(request)
            elif not guard.host_ok(request.headers.get("host")):
                refused = refuse("this server answers only requests addressed to the host it listens on")
            elif not guard.cookie_ok(request.cookies):
                refused = refuse("no token cookie: open the URL the review command printed")
            else:
                refused = None
            if refused is not None:
                for name, value in HEADERS.items():
                    refused.headers.setdefault(name, value)
                return refused
        enrichment = request.app.state.review.enrichment
        enrichment.hold()
        try:
            response = await call_next(request)
        finally:
            enrichment.release()
        for name, value in HEADERS.items():
            response.headers[name] = value
        return response


def _page(request: Request, template: str, **context: Any) -> Response:
    state: ReviewState = request.app.state.review
    templates: Jinja2Templates = request.app.state.templates
    progress = state.queue.progress()
    return templates.TemplateResponse(request, template, {"csrf": request.app.state.guard.csrf,
                                                          "progress": progress, "title": state.title,
                                                          "sink": state.sink, "notices": state.labels.notices,
                                                          "verdicts_changed": state.verdicts_changed(), **context})


def _labeler(request: Request) -> str:
    """Who labels in this browser: the name the label form last sent (a cookie), else the page's ``--labeler``."""
    state: ReviewState = request.app.state.review
    raw = request.cookies.get(_labeler_cookie(request))
    if raw:
        try:
            return check_labeler(unquote(raw))
        except InputError:
            pass
    return state.labels.labeler


def _labeler_cookie(request: Request) -> str:
    return f"{request.app.state.guard.cookie}-labeler"


def _refused(request: Request, error: Exception, back: str | None) -> Response:
    """The page of an action or view refused: the error's message, a link back, an error status."""
    if isinstance(error, LabelNotSavedError):
        status, heading = (507 if error.errno in SPACE_ERRNOS else 500), "Not saved"
    else:
        status, heading = 409, "The verdict file changed"
    response = _page(request, "refused.html", heading=heading, message=str(error), back=back)
    response.status_code = status
    return response


def _link(path: str, filters: Filters, **more: Any) -> str:
    query = {**filters.query(), **{k: v for k, v in more.items() if v not in (None, "")}}
    return path + (f"?{urlencode(query)}" if query else "")


async def queue_page(request: Request) -> Response:
    state: ReviewState = request.app.state.review
    filters = Filters.from_query(request.query_params)
    items, _ = state.queue.view(filters)
    try:
        page = max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        page = 0
    pages = max(1, math.ceil(len(items) / PAGE_SIZE))
    page = min(page, pages - 1)
    rows = [state.row(index) for index in items[page * PAGE_SIZE:(page + 1) * PAGE_SIZE]]
    nav = {"prev": _link("/", filters, page=page - 1) if page > 0 else None,
           "next": _link("/", filters, page=page + 1) if page + 1 < pages else None,
           "first": _link(f"/item/{items[0]}", filters) if items else None}
    labelers = state.labelers()
    shared = await run_in_threadpool(agreement, labelers.labels) if len(labelers.labels) >= 2 else None
    return _page(request, "queue.html", rows=rows, filters=filters, choices=state.queue.choices(),
                 labelers=labelers, agreement=shared, labeler=_labeler(request),
                 disagreements_link=_link("/", Filters(group=DISAGREEMENTS)),
                 audit=state.audit_status(), audit_link=_link("/", Filters(group="audit")),
                 shown=len(items), page=page + 1, pages=pages, nav=nav, enrichment=state.enrichment_status(),
                 item_link=lambda index: _link(f"/item/{index}", filters))


def _item_index(request: Request) -> int | None:
    state: ReviewState = request.app.state.review
    try:
        index = int(request.path_params["index"])
    except (KeyError, ValueError):
        return None
    return index if 0 <= index < len(state.verdicts) else None


async def item_page(request: Request) -> Response:
    state: ReviewState = request.app.state.review
    index = _item_index(request)
    if index is None:
        return PlainTextResponse("404: no such item in this verdict file\n", status_code=404)
    filters = Filters.from_query(request.query_params)
    items, positions = state.queue.view(filters)
    position = positions.get(index)
    if position is None:  # not in this filtered view (e.g. just labeled under "unlabeled"): the whole queue
        filters = Filters()
        items, positions = state.queue.view(filters)
        position = positions[index]
    prev_link = _link(f"/item/{items[position - 1]}", filters) if position > 0 else None
    next_link = _link(f"/item/{items[position + 1]}", filters) if position + 1 < len(items) else None
    try:
        item = state.item(index)
    except VerdictFileChangedError as error:
        return _refused(request, error, None)
    return _page(request, "item.html", item=item, filters=filters, position=position + 1, shown=len(items),
                 prev_link=prev_link, next_link=next_link, queue_link=_link("/", filters), labeler=_labeler(request),
                 hidden_filters=filters.query(), segments=evidence_segments(item["evidence"])
                 if item["evidence"] is not None else [])


async def _checked_form(request: Request) -> dict[str, str] | Response:
    """The form's text fields (an uploaded file is no field of these forms), or the refusal when its CSRF token
    is missing or wrong."""
    form = await request.form()
    given = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
    if not request.app.state.guard.csrf_ok(given if isinstance(given, str) else None):
        return refuse("missing or wrong CSRF token: reload the page and try again")
    return {key: value for key, value in form.items() if isinstance(value, str)}


async def label_action(request: Request) -> Response:
    form = await _checked_form(request)
    if isinstance(form, Response):
        return form
    state: ReviewState = request.app.state.review
    try:
        index = int(form.get("index", ""))
    except ValueError:
        index = -1
    choice = form.get("choice")
    if not 0 <= index < len(state.verdicts) or choice not in ("pass", "fail", "skip"):
        return PlainTextResponse("400: a label names an item of this file and pass, fail or skip\n", status_code=400)
    note = form.get("note", "")
    given = form.get("labeler")
    try:
        labeler = check_labeler(given) if isinstance(given, str) and given.strip() else _labeler(request)
    except InputError as error:
        return PlainTextResponse(f"400: {error}\n", status_code=400)
    adjudication = form.get("adjudication") == "1"
    try:  # the file, then the sink
        await run_in_threadpool(lambda: state.label(state.verdicts.ids[index], choice, note, labeler=labeler,
                                                    adjudication=adjudication))
    except (LabelNotSavedError, VerdictFileChangedError) as error:
        return _refused(request, error, _link(f"/item/{index}", Filters.from_query(form)))
    filters = Filters.from_query(form)
    items, positions = state.queue.view(Filters(**{**filters.__dict__, "labeled": ""}))
    position = positions.get(index)
    following = items[position + 1] if position is not None and position + 1 < len(items) else index
    response = RedirectResponse(_link(f"/item/{following}", filters), status_code=303)
    response.set_cookie(_labeler_cookie(request), quote(labeler, safe=""), httponly=True, samesite="strict")
    return response


async def undo_action(request: Request) -> Response:
    form = await _checked_form(request)
    if isinstance(form, Response):
        return form
    state: ReviewState = request.app.state.review
    try:
        line = await run_in_threadpool(state.undo, _labeler(request))
    except LabelNotSavedError as error:
        return _refused(request, error, "/")
    filters = Filters.from_query(form)
    if line is None or line.id not in state.verdicts.position:
        return RedirectResponse(_link("/", filters), status_code=303)
    return RedirectResponse(_link(f"/item/{state.verdicts.position[line.id]}", Filters()), status_code=303)


async def judge_page(request: Request) -> Response:
    state: ReviewState = request.app.state.review
    info = state.judge
    versions = info.versions
    diff, pair = [], None
    if len(versions) >= 2:
        def pick(name: str, default: int) -> int:
            try:
                value = int(request.query_params.get(name, default))
            except ValueError:
                value = default
            return value if 0 <= value < len(versions) else default
        a, b = pick("a", 0), pick("b", len(versions) - 1)
        pair = (a, b)
        diff = rubric_diff(versions[a], versions[b])
    return _page(request, "judge.html", info=info, diff=diff, pair=pair, versions=versions,
                 certificate=state.certificate_rows())


async def trajectory_page(request: Request) -> Response:
    state: ReviewState = request.app.state.review
    index = _item_index(request)
    if index is None:
        return PlainTextResponse("404: no such item in this verdict file\n", status_code=404)
    try:
        page = int(request.query_params.get("page", "1")) - 1
    except ValueError:
        page = 0
    try:
        view = await run_in_threadpool(state.trajectory, index, page)
    except VerdictFileChangedError as error:
        return _refused(request, error, None)
    pages = view["pages"]
    nav = {"prev": f"/item/{index}/trajectory?page={view['page']}" if view["page"] > 0 else None,
           "next": f"/item/{index}/trajectory?page={view['page'] + 2}" if view["page"] + 1 < pages else None}
    return _page(request, "trajectory.html", view=view, nav=nav, item_link=f"/item/{index}")


async def figure(request: Request) -> Response:
    # the route's path is percent-decoded by Starlette: the name is looked up in the list made at start
    path = request.app.state.review.judge.figures.get(request.path_params.get("name", ""))
    if path is None:
        return PlainTextResponse("404: no such figure\n", status_code=404)
    return FileResponse(path, media_type="image/png")


async def commands_page(request: Request) -> Response:
    return _page(request, "commands.html", commands=request.app.state.review.commands())


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n")


def create_app(state: ReviewState, token: str, hosts: set[str] | None = None, cookie: str | None = None) -> Starlette:
    """The review app over `state` (`review.state.ReviewState`), guarded by `token`.

    Args:
        state: the open review (verdicts, data, labels file, judge files).
        token: the run's token (`review.security.new_token`); the URL to open is ``/?token=<token>``.
        hosts: the Host header values accepted (``127.0.0.1:PORT``, ``localhost:PORT``); None accepts any
            (tests that do not know the port yet).
        cookie: the token cookie's name (`ReviewServer` names it after the port).

    Returns:
        A Starlette (ASGI) application.
    """
    routes = [
        Route("/", queue_page), Route("/item/{index:int}", item_page), Route("/label", label_action, methods=["POST"]),
        Route("/undo", undo_action, methods=["POST"]), Route("/judge", judge_page),
        Route("/item/{index:int}/trajectory", trajectory_page), Route("/figure/{name:path}", figure),
        Route("/commands", commands_page), Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(_PACKAGE.joinpath("static"))), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(_Headers)])
    app.state.review = state
    app.state.guard = Guard(token, hosts, **({"cookie": cookie} if cookie else {}))
    app.state.templates = Jinja2Templates(env=_environment())
    return app
