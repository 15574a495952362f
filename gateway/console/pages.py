"""The console's pages: shells rendered here, filled by ``static/console.js`` from ``/v1``.

Pages read the sign-in cookie only (a page is never opened with a Bearer key). What a
page shows beyond the frame comes from the public API with the same cookie, so the
console can do nothing a key could not. The detail pages check ownership here too, so
another user's session, endpoint, folder or template URL is a 404 page, as the ``/v1``
call is a 404. Any other unknown path is the same 404 page for a browser
(``not_found``), and problem+json for everyone else.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api import audit
from gateway.api.deps import State
from gateway.api.problems import http_problem
from gateway.auth import Principal
from gateway.console.chart import Bucket, chart
from gateway.console.cookies import (
    COOKIE,
    Signed,
    same_origin,
    set_cookie,
    sign_in,
    sign_out,
    signed,
)
from gateway.domain.errors import NotFound, Unauthenticated
from gateway.domain.usage import floor
from gateway.services.usage import By
from gateway.services.views import get_owned

__all__ = ["HEADERS", "not_found", "router", "sign_in_error"]

T = TypeVar("T")

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")

#: no inline script, nothing from elsewhere, never framed
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
MAX_FORM = 16 * 1024


async def _signed(request: Request, state: State) -> Signed | None:
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return None
    try:
        return await signed(state.pool, state.db, state.keys, cookie)
    except Unauthenticated:
        return None


def _page(
    request: Request, name: str, sign: Signed | None, status: int = 200, **context: Any
) -> HTMLResponse:
    context |= {"who": sign.principal if sign else None, "csrf": sign.csrf if sign else ""}
    return templates.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)


def _missing(request: Request, sign: Signed | None, heading: str, detail: str) -> HTMLResponse:
    return _page(
        request,
        "not_found.html",
        sign,
        404,
        page="error",
        title="Not found",
        heading=heading,
        detail=detail,
    )


def _to_sign_in() -> Response:
    return RedirectResponse("/sign-in", status_code=303, headers=HEADERS)


async def _listing(request: Request, state: State, page: str, title: str) -> Response:
    """A page whose rows the browser loads from ``/v1``: its shell for whoever is signed
    in, the sign-in page for anyone else."""
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    return _page(request, f"{page}.html", sign, page=page, title=title)


async def _detail(
    request: Request,
    state: State,
    page: str,
    *,
    find: Callable[[AsyncSession, Principal], Awaitable[T]],
    missing: tuple[str, str],
    shown: Callable[[T], dict[str, Any]],
) -> Response:
    """One object's page: the sign-in page for anyone not signed in; *missing* (heading,
    detail) as a 404 page when *find* raises NotFound (none, or another user's); else
    the page's shell with what *shown* takes from the object."""
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    try:
        async with state.db() as db:
            found = await find(db, sign.principal)
    except NotFound:
        return _missing(request, sign, *missing)
    return _page(request, f"{page}.html", sign, page=page, **shown(found))


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM:
        return {}
    return {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}


@router.get("/", response_class=HTMLResponse)
async def sessions_page(request: Request, state: State) -> Response:
    return await _listing(request, state, "sessions", "Sessions")


async def sign_in_error(request: Request, state: State, status: int, error: str) -> Response:
    """The sign-in page again, saying what went wrong."""
    return _page(
        request,
        "sign_in.html",
        None,
        status,
        page="sign-in",
        title="Sign in",
        error=error,
        providers=await _providers(state),
    )


async def _providers(state: State) -> list[dict[str, Any]]:
    try:
        return await state.oidc.public()
    except Exception:  # the key form must show even when the database does not answer
        return []


@router.get("/sign-in", response_class=HTMLResponse)
async def sign_in_page(request: Request, state: State) -> Response:
    if await _signed(request, state) is not None:
        return RedirectResponse("/", status_code=303, headers=HEADERS)
    return _page(
        request,
        "sign_in.html",
        None,
        page="sign-in",
        title="Sign in",
        providers=await _providers(state),
    )


@router.post("/sign-in", response_class=HTMLResponse, operation_id="console-sign-in")
async def sign_in_submit(request: Request, state: State) -> Response:
    if not same_origin(request.headers.get("origin"), request.headers.get("host")):
        return _page(
            request,
            "sign_in.html",
            None,
            403,
            page="sign-in",
            title="Sign in",
            error="Sign in from this site's own page.",
        )
    key = (await _form(request)).get("key", "")
    try:
        async with state.db() as db:
            cookie, sign = await sign_in(
                state.pool, db, state.keys, key, state.settings.console_session_s
            )
    except Unauthenticated as exc:
        audit.note_refused(request, key)
        return await sign_in_error(request, state, 401, exc.detail)
    audit.note_principal(request, sign.principal)
    response = RedirectResponse("/", status_code=303, headers=HEADERS)
    set_cookie(
        response, cookie, state.settings.console_session_s, https=request.url.scheme == "https"
    )
    del sign
    return response


@router.post("/sign-out", operation_id="console-sign-out")
async def sign_out_submit(request: Request, state: State) -> Response:
    cookie = request.cookies.get(COOKIE)
    sign = await _signed(request, state)
    if sign is not None:
        audit.note_principal(request, sign.principal, "console")
    token = (await _form(request)).get("csrf", "")
    if cookie and sign is not None:
        if not secrets.compare_digest(token.encode(), sign.csrf.encode()):
            return _page(
                request,
                "not_found.html",
                sign,
                403,
                page="error",
                title="Refused",
                heading="Refused",
                detail="Sign out from the console's own button.",
            )
        await sign_out(state.pool, cookie)
        if sign.sso:  # a single sign-on made its key for this sign-in alone
            await state.users.api_keys.revoke(sign.principal, None, key_id=sign.principal.key_id)
    response = _to_sign_in()
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
async def session_page(session_id: str, request: Request, state: State) -> Response:
    return await _detail(
        request,
        state,
        "session",
        find=lambda db, who: get_owned(db, who, session_id),
        missing=("No such session", f"You have no session {session_id[:36]}."),
        shown=lambda session: {"title": session.name or session.id[:8], "session_id": session.id},
    )


@router.get("/nodes", response_class=HTMLResponse)
async def nodes_page(request: Request, state: State) -> Response:
    return await _listing(request, state, "nodes", "Nodes")


#: the days the usage page charts, today included
USAGE_DAYS = 14


@router.get("/usage", response_class=HTMLResponse)
async def usage_page(request: Request, state: State, by: str = "project") -> Response:
    """Usage per day of the last two weeks, one stacked-bar chart per slot, drawn here
    as SVG (``chart.py``) from the report ``GET /v1/usage`` gives the same caller."""
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    by_key: By = "user" if by == "user" else "project"
    now = datetime.now(UTC)
    start = floor(now, "day") - timedelta(days=USAGE_DAYS - 1)
    report = await state.usage.report(sign.principal, by_key, "day", start, None)
    days = [start + timedelta(days=i) for i in range(USAGE_DAYS)]
    buckets = [Bucket(b.start, b.key, b.slots) for b in report.buckets]
    order = {"cpu": 0, "mem": 1}
    charts = [
        chart(slot, report.units[slot], days, buckets)
        for slot in sorted(report.units, key=lambda s: (order.get(s, 2), s))
    ]
    return _page(request, "usage.html", sign, page="usage", title="Usage", by=by_key, charts=charts)


@router.get("/admin", response_class=HTMLResponse)
async def admin_page(request: Request, state: State) -> Response:
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    if not sign.principal.is_admin:
        return _missing(request, sign, "Nothing here", "Administration is for administrators.")
    return _page(request, "admin.html", sign, page="admin", title="Admin")


@router.get("/endpoints", response_class=HTMLResponse)
async def endpoints_page(request: Request, state: State) -> Response:
    return await _listing(request, state, "endpoints", "Endpoints")


@router.get("/endpoints/{name}", response_class=HTMLResponse)
async def endpoint_page(name: str, request: Request, state: State) -> Response:
    return await _detail(
        request,
        state,
        "endpoint",
        find=lambda db, who: state.endpoints.get_owned(db, who, name),
        missing=("No such endpoint", f"You have no endpoint {name[:64]}."),
        shown=lambda endpoint: {"title": endpoint.name, "subject": endpoint.name},
    )


@router.get("/folders", response_class=HTMLResponse)
async def folders_page(request: Request, state: State) -> Response:
    return await _listing(request, state, "folders", "Data folders")


@router.get("/folders/{name}", response_class=HTMLResponse)
async def folder_page(name: str, request: Request, state: State) -> Response:
    return await _detail(
        request,
        state,
        "folder",
        find=lambda db, who: state.folders.resolve(db, who, name),
        missing=("No such folder", f"You have no data folder {name[:64]}."),
        shown=lambda found: {
            "title": found[0].name,
            "subject": found[0].name,
            "folder_id": found[0].id,
        },
    )


@router.get("/templates", response_class=HTMLResponse)
async def templates_page(request: Request, state: State) -> Response:
    return await _listing(request, state, "templates", "Templates")


@router.get("/templates/{name}", response_class=HTMLResponse)
async def template_page(name: str, request: Request, state: State) -> Response:
    return await _detail(
        request,
        state,
        "template",
        find=lambda _db, who: state.templates.get(who, name),
        missing=("No such template", f"You have no template {name[:64]}."),
        shown=lambda template: {"title": template.name, "subject": template.name},
    )


async def not_found(request: Request, exc: Exception) -> Response:
    """A 404 nothing answered: the console's page for a browser outside ``/v1``,
    problem+json (as everywhere else) for API clients."""
    browser = "text/html" in request.headers.get("accept", "")
    if browser and not request.url.path.startswith("/v1/"):
        sign = await _signed(request, request.app.state.jobgate)
        detail = f"There is no page {request.url.path[:200]}."
        return _missing(request, sign, "Nothing here", detail)
    return await http_problem(request, exc)
