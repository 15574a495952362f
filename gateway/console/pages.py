"""The console's pages: shells rendered here, filled by ``static/console.js`` from ``/v1``.

Pages read the sign-in cookie only (a page is never opened with a Bearer key). What a
page shows beyond the frame comes from the public API with the same cookie, so the
console can do nothing a key could not. The detail page checks ownership here too, so
another user's session URL is a 404 page, as ``GET /v1/sessions/{id}`` is a 404.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from gateway.api.deps import State
from gateway.console.cookies import COOKIE, Signed, same_origin, sign_in, sign_out, signed
from gateway.domain.errors import NotFound, Unauthenticated
from gateway.services.views import get_owned

__all__ = ["router"]

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


def _to_sign_in() -> Response:
    return RedirectResponse("/sign-in", status_code=303, headers=HEADERS)


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM:
        return {}
    return {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}


@router.get("/", response_class=HTMLResponse)
async def sessions_page(request: Request, state: State) -> Response:
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    return _page(request, "sessions.html", sign, page="sessions", title="Sessions")


@router.get("/sign-in", response_class=HTMLResponse)
async def sign_in_page(request: Request, state: State) -> Response:
    if await _signed(request, state) is not None:
        return RedirectResponse("/", status_code=303, headers=HEADERS)
    return _page(request, "sign_in.html", None, page="sign-in", title="Sign in")


@router.post("/sign-in", response_class=HTMLResponse)
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
        return _page(
            request, "sign_in.html", None, 401, page="sign-in", title="Sign in", error=exc.detail
        )
    response = RedirectResponse("/", status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=state.settings.console_session_s,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    del sign
    return response


@router.post("/sign-out")
async def sign_out_submit(request: Request, state: State) -> Response:
    cookie = request.cookies.get(COOKIE)
    sign = await _signed(request, state)
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
    response = _to_sign_in()
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
async def session_page(session_id: str, request: Request, state: State) -> Response:
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    try:
        async with state.db() as db:
            session = await get_owned(db, sign.principal, session_id)
    except NotFound:
        return _page(
            request,
            "not_found.html",
            sign,
            404,
            page="error",
            title="Not found",
            heading="No such session",
            detail=f"You have no session {session_id[:36]}.",
        )
    return _page(
        request,
        "session.html",
        sign,
        page="session",
        title=session.name or session.id[:8],
        session_id=session.id,
    )


@router.get("/nodes", response_class=HTMLResponse)
async def nodes_page(request: Request, state: State) -> Response:
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    return _page(request, "nodes.html", sign, page="nodes", title="Nodes")


@router.get("/admin", response_class=HTMLResponse)
async def admin_page(request: Request, state: State) -> Response:
    sign = await _signed(request, state)
    if sign is None:
        return _to_sign_in()
    if not sign.principal.is_admin:
        return _page(
            request,
            "not_found.html",
            sign,
            404,
            page="error",
            title="Not found",
            heading="Nothing here",
            detail="Administration is for administrators.",
        )
    return _page(request, "admin.html", sign, page="admin", title="Admin")
