"""The session frontend: every request to ``/s/{session}/{app}/...`` (or an app host) passes here.

    request ─▶ address (path or host) ─▶ authenticate ─▶ route (cache/Redis) ─▶ authorise
            ─▶ ended? 410 ─▶ app known? ─▶ token? burn it, 303 + cookie ─▶ forward (HTTP/WS)
               with the session's app secret in the form the app checks (credentials.py)

Checks run in that order so that nobody learns anything about a session before proving
who they are: no credentials is 401 even for a session that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from appproxy.asgi import ASGIApp, Receive, Scope, Send
from appproxy.backend.headers import Credential, Forwarding, request_headers
from appproxy.backend.http import HttpForwarder
from appproxy.backend.upstream import Upstream
from appproxy.backend.websocket import WebSocketForwarder
from appproxy.frontend.addressing import AddSlash, Target, parse_host, parse_path
from appproxy.frontend.auth import Authenticator, Outcome, authorized
from appproxy.frontend.cookies import strip_jobgate_cookies
from appproxy.frontend.credentials import session_credential
from appproxy.frontend.incoming import Incoming, TrustedNetworks
from appproxy.metrics import EndpointCounters
from appproxy.pages import (
    BAD_REQUEST,
    FORBIDDEN,
    LINK_EXPIRED,
    NOT_FOUND,
    ROUTES_UNAVAILABLE,
    SESSION_ENDED,
    UNKNOWN_APP,
    UNKNOWN_SESSION,
    Page,
    deny_websocket,
    send_page,
    wants_json,
)
from appproxy.routes import RouteStore, RoutesUnavailable
from contract.routes import AppRoute

__all__ = ["SessionGate"]

INTERNAL_PREFIX: Final = "/_jobgate/"
_LINK_IN_WEBSOCKET: Final = BAD_REQUEST.with_detail(
    "Sign-in links open in a browser; a WebSocket needs the cookie or an API key."
)


@dataclass(frozen=True, slots=True)
class _Redirect:
    location: str
    set_cookie: bytes | None = None


@dataclass(frozen=True, slots=True)
class _Admitted:
    app: AppRoute
    outcome: Outcome


class SessionGate:
    """Pure-ASGI app: addresses, authenticates and forwards; ``internal`` serves /_jobgate/."""

    def __init__(
        self,
        *,
        routes: RouteStore,
        auth: Authenticator,
        http: HttpForwarder,
        websocket: WebSocketForwarder,
        counters: EndpointCounters,
        trusted: TrustedNetworks,
        base_domain: str | None,
        internal: ASGIApp,
        app_key: str = "",
    ) -> None:
        self._routes = routes
        self._auth = auth
        self._http = http
        self._websocket = websocket
        self._counters = counters
        self._trusted = trusted
        self._base_domain = base_domain
        self._internal = internal
        self._app_key = app_key  # the proxy secret: app secrets derive from it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        req = Incoming(scope, self._trusted)
        target = self._address(req)
        if target is None and req.raw_path.startswith(INTERNAL_PREFIX):
            await self._internal(scope, receive, send)
            return
        if req.websocket:
            await receive()  # websocket.connect
        decision: Page | _Redirect | _Admitted
        if target is None:
            decision = NOT_FOUND
        elif isinstance(target, AddSlash):
            decision = _Redirect(target.location)
        else:
            decision = await self._admit(req, target)
        if isinstance(decision, _Admitted):
            assert isinstance(target, Target)
            await self._forward(req, receive, send, target, decision)
        elif isinstance(decision, _Redirect):
            await _redirect(req, send, decision)
        else:
            await _refuse(req, send, decision)

    def _address(self, req: Incoming) -> Target | AddSlash | None:
        if self._base_domain:
            target = parse_host(req.host, self._base_domain, req.raw_path)
            if target is not None:
                return target
        return parse_path(req.raw_path, req.query)

    async def _admit(self, req: Incoming, target: Target) -> Page | _Redirect | _Admitted:
        outcome = await self._auth.authenticate(req, target)
        if outcome.refusal is not None or outcome.principal is None:
            return outcome.refusal or FORBIDDEN
        try:
            route = await self._routes.get(target.session_id)
        except RoutesUnavailable:
            return ROUTES_UNAVAILABLE
        if route is None:
            return UNKNOWN_SESSION
        if not authorized(outcome.principal, route):
            return FORBIDDEN
        if route.status == "ended":
            self._counters.forget(route.session_id)
            return SESSION_ENDED
        app = route.apps.get(target.app)
        if app is None:
            return UNKNOWN_APP
        exchange = outcome.exchange
        if exchange is None:
            return _Admitted(app, outcome)
        if req.websocket:
            return _LINK_IN_WEBSOCKET
        try:
            redeemed = await self._auth.redeem(exchange.token)
        except RoutesUnavailable:
            return ROUTES_UNAVAILABLE
        if not redeemed:
            return LINK_EXPIRED
        return _Redirect(exchange.location, exchange.set_cookie)

    async def _forward(
        self, req: Incoming, receive: Receive, send: Send, target: Target, admitted: _Admitted
    ) -> None:
        app = admitted.app
        path = target.upstream_path(app.strip_prefix)
        request_target = path + (f"?{req.query}" if req.query else "")
        forwarding = Forwarding(req.host, req.scheme, req.forwarded_for, target.prefix)
        principal = admitted.outcome.principal
        headers = request_headers(
            req.scope["headers"],
            forwarding,
            cookie_filter=strip_jobgate_cookies,
            hide_authorization=principal is not None and principal.via == "bearer",
            credential=self._credential(target.session_id, app),
        )
        stats = self._counters.stats(target.session_id, target.app)
        upstream = Upstream(app.upstream, request_target, headers, stats)
        as_json = _as_json(req)
        stats.started()
        try:
            if req.websocket:
                await self._websocket.forward(req.scope, receive, send, upstream, as_json=as_json)
            else:
                await self._http.forward(req.scope, receive, send, upstream, as_json=as_json)
        finally:
            stats.finished()

    def _credential(self, session_id: str, app: AppRoute) -> Credential | None:
        """The session's app secret, as the app checks it (never the client's own)."""
        if not self._app_key:
            return None
        return session_credential(self._app_key, session_id, app.credential)


def _as_json(req: Incoming) -> bool:
    return wants_json(req.accept, api_client=req.jobgate_key is not None)


async def _refuse(req: Incoming, send: Send, page: Page) -> None:
    if req.websocket:
        await deny_websocket(req.scope, send, page, as_json=_as_json(req))
    else:
        await send_page(send, page, as_json=_as_json(req))


async def _redirect(req: Incoming, send: Send, redirect: _Redirect) -> None:
    if req.websocket:
        await deny_websocket(req.scope, send, NOT_FOUND, as_json=_as_json(req))
        return
    headers = [
        (b"location", redirect.location.encode("latin-1")),
        (b"cache-control", b"no-store"),
        (b"content-length", b"0"),
    ]
    if redirect.set_cookie is not None:
        headers.append((b"set-cookie", redirect.set_cookie))
    status = 303 if redirect.set_cookie is not None else 308
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
