"""The console's single sign-on: Authorization Code with PKCE (docs/auth.md).

::

    GET /sign-in/oidc/P ──▶ state, nonce, PKCE verifier (SET jobgate:console:sso:{sha256(state)},
                            10 min, with the SHA-256 of a browser cookie bound to it)
                       ◀── 303 to P's authorization endpoint (code_challenge S256)
    P ──▶ GET /sign-in/oidc/P/callback?code&state ──▶ the record, whose browser cookie
          must match (a login CSRF carries someone else's code), DEL'd (once only) ──▶
          token endpoint (code + verifier) ──▶ ID token checked (nonce too) ──▶ an API key
          of the user ──▶ the console's sign-in cookie, as a pasted key makes it
                       ◀── 200 "signed in" page that moves on to / itself: the sign-in
                           cookie is SameSite=Strict, which a redirect chain that began
                           at the provider would not send

The verifier and nonce never reach the browser; ``state`` is single use.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import secrets
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from contract.keys import console_sso_key
from gateway.api import audit
from gateway.api.deps import State
from gateway.console.cookies import set_cookie, sign_in
from gateway.console.pages import HEADERS, sign_in_error
from gateway.domain.errors import JobgateError

__all__ = ["FLOW_COOKIE", "router"]

router = APIRouter(include_in_schema=False)

FLOW_COOKIE = "jobgate_sso"
FLOW_S = 600


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _callback_url(request: Request, provider: str) -> str:
    return str(request.url_for("console-sso-callback", provider=provider))


@router.get("/sign-in/oidc/{provider}", name="console-sso-start")
async def start(provider: str, request: Request, state: State) -> Response:
    try:
        url, pending = await state.oidc.authorization_url(
            provider[:64], _callback_url(request, provider[:64])
        )
    except JobgateError as exc:
        return await sign_in_error(request, state, exc.status, exc.detail)
    # one browser, one binding: a second tab's sign-in keeps the first one's working
    browser = request.cookies.get(FLOW_COOKIE) or secrets.token_urlsafe(32)
    pending["browser"] = _digest(browser[:128])
    await state.pool.set(
        console_sso_key(_digest(pending.pop("state"))), json.dumps(pending), ex=FLOW_S
    )
    response = RedirectResponse(url, status_code=303, headers=HEADERS)
    response.set_cookie(
        FLOW_COOKIE,
        browser,
        max_age=FLOW_S,
        path="/sign-in/oidc/",
        httponly=True,
        samesite="lax",  # it must come back with the provider's top-level redirect
        secure=request.url.scheme == "https",
    )
    return response


@router.get(
    "/sign-in/oidc/{provider}/callback",
    name="console-sso-callback",
    operation_id="console-sso-callback",
)
async def callback(provider: str, request: Request, state: State) -> Response:
    query = request.query_params
    if "error" in query:  # its code only: a crafted link must not put words on our page
        code = re.sub(r"[^a-z_]", "", query["error"].lower())[:64] or "error"
        return await sign_in_error(request, state, 401, f"The provider refused: {code}.")
    pending = await _take(request, state, provider)
    if pending is None:
        return await sign_in_error(
            request, state, 401, "This sign-in expired or was not started here; try again."
        )
    try:
        done = await state.oidc.finish(
            pending, query.get("code", "")[:2048], state.settings.console_session_s
        )
        async with state.db() as db:
            cookie, sign = await sign_in(
                state.pool, db, state.keys, done.key, state.settings.console_session_s, sso=True
            )
    except JobgateError as exc:
        return await sign_in_error(request, state, exc.status, exc.detail)
    audit.note_sign_in(request, done.user, provider, done.key_name)
    page = (
        '<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/">'
        f"<title>Signed in</title><p>Signed in as {html.escape(sign.principal.name)}. "
        '<a href="/">Continue to the console</a>.</p>'
    )
    # no Referer: the move to / must not carry this URL's (spent) code and state anywhere
    response = HTMLResponse(page, headers=HEADERS | {"Referrer-Policy": "no-referrer"})
    set_cookie(
        response, cookie, state.settings.console_session_s, https=request.url.scheme == "https"
    )
    response.delete_cookie(FLOW_COOKIE, path="/sign-in/oidc/")
    return response


async def _take(request: Request, state: State, provider: str) -> dict[str, Any] | None:
    """The pending sign-in this callback finishes, taken once; None when there is none,
    it was for another provider, or it was started in another browser (whose attempt
    leaves it for the browser that started it)."""
    given = request.query_params.get("state", "")
    browser = request.cookies.get(FLOW_COOKIE, "")
    if not given or not browser:
        return None
    key = console_sso_key(_digest(given[:512]))
    raw = await state.pool.get(key)
    if raw is None:
        return None
    pending: dict[str, Any] = json.loads(raw)
    if pending.get("provider") != provider:
        return None
    if not secrets.compare_digest(str(pending.get("browser", "")), _digest(browser)):
        return None
    if await state.pool.delete(key) != 1:
        return None  # a callback racing this one took it first
    return pending
