"""The inference frontend: ``/e/{name}/...`` (or ``{name}.{base_domain}``) to a replica.

    request ─▶ address ─▶ endpoint (EndpointStore, in memory) ─▶ authorise (Bearer only)
            ─▶ balancer.acquire: a replica slot, a place in the queue, or a held request
            ─▶ forward (HTTP or WebSocket, the session frontend's backend)
               connection refused before a byte was sent and the request is idempotent
               ─▶ once more on another replica
            ─▶ release the slot (after the last byte of a stream)

Who may call: anyone for a public endpoint; otherwise a live endpoint token
(``Authorization: Bearer jge_…``, compared by SHA-256 digest), or the owner's (or an
administrator's) jobgate API key with the ``endpoints`` scope (:data:`CALL_ENDPOINTS`:
a key that may make the endpoint's tokens; a ``read`` key is 403). A wrong, expired or
revoked token or key is 401 whether or not the endpoint exists; a valid key of another
user is 404. Everything else goes to
the session frontend (``fallback``).
"""

from __future__ import annotations

import hmac
import math
import time
from typing import Final

from appproxy.asgi import ASGIApp, Receive, Scope, Send
from appproxy.backend.headers import Forwarding, request_headers
from appproxy.backend.http import HttpForwarder
from appproxy.backend.upstream import Upstream
from appproxy.backend.websocket import WebSocketForwarder
from appproxy.frontend.addressing import (
    ENDPOINT_ROOT,
    EndpointTarget,
    endpoint_target,
)
from appproxy.frontend.cookies import strip_jobgate_cookies
from appproxy.frontend.incoming import Incoming, TrustedNetworks
from appproxy.frontend.users import GatewayUnavailable, UserDirectory
from appproxy.inference.balancer import NoReplica, Overloaded, Replica
from appproxy.inference.prober import ReadinessProber
from appproxy.inference.store import Endpoint, EndpointStore
from appproxy.pages import (
    APP_NOT_ANSWERING,
    ENDPOINT_BUSY,
    ENDPOINT_STARTING,
    ENDPOINT_TOKEN_REFUSED,
    ENDPOINT_TOKEN_REQUIRED,
    GATEWAY_UNAVAILABLE,
    KEY_LACKS_SCOPE,
    ROUTES_UNAVAILABLE,
    UNKNOWN_ENDPOINT,
    Page,
    deny_websocket,
    send_page,
    wants_json,
)
from appproxy.routes import RoutesUnavailable
from contract.endpoints import ENDPOINT_TOKEN_PREFIX, EndpointRoute, token_digest

__all__ = [
    "CALL_ENDPOINTS",
    "IDEMPOTENT_METHODS",
    "InferenceGate",
    "admitted_at_once",
    "token_allowed",
    "token_valid_until",
]

#: the scope a jobgate API key needs to call a private endpoint (as to make its tokens)
CALL_ENDPOINTS: Final = "endpoints"
_NO_ENDPOINTS_SCOPE: Final = KEY_LACKS_SCOPE.with_detail(
    f"This API key lacks the {CALL_ENDPOINTS!r} scope, which calling a private endpoint "
    "with a key needs. Use an endpoint token (jobgate endpoints tokens create NAME) or a "
    f"key with the scope (jobgate keys create NAME --scope {CALL_ENDPOINTS})."
)
#: methods retried on another replica when the first could not be connected to
IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_BUSY_RETRY_AFTER: Final = b"1"
_STARTING_RETRY_AFTER: Final = b"5"
_ENDPOINT_ROOT_BYTES: Final = ENDPOINT_ROOT.encode()


def token_valid_until(route: EndpointRoute, token: str, now: float) -> float:
    """Until when ``token`` is one of the endpoint's live tokens: ``math.inf`` for a grant
    that never expires, 0.0 for none (digests compared in constant time, every grant
    looked at)."""
    digest = token_digest(token)
    until = 0.0
    for grant in route.tokens:
        if hmac.compare_digest(grant.digest, digest):
            expires = math.inf if grant.expires_at is None else grant.expires_at
            if expires > now and expires > until:
                until = expires
    return until


def token_allowed(route: EndpointRoute, token: str, now: float) -> bool:
    """Whether ``token`` is one of the endpoint's live tokens."""
    return token_valid_until(route, token, now) > now


def admitted_at_once(route: EndpointRoute, req: Incoming) -> tuple[bool, float] | None:
    """For a caller admitted without asking anyone (a public endpoint, or a live endpoint
    token): whether to hide ``Authorization`` from the replica, and until when the answer
    holds for this route (``math.inf``: as long as the route is the same). None otherwise:
    refused, or an API key that needs the user look-up."""
    bearer = req.bearer
    if route.public:
        ours = bearer is not None and (
            req.jobgate_key is not None or bearer.startswith(ENDPOINT_TOKEN_PREFIX)
        )
        return ours, math.inf
    if bearer is None or req.jobgate_key is not None:
        return None
    now = time.time()
    until = token_valid_until(route, bearer, now)
    return (True, until) if until > now else None


class InferenceGate:
    """Pure-ASGI app for endpoint traffic; passes everything else to ``fallback``."""

    def __init__(
        self,
        *,
        store: EndpointStore,
        prober: ReadinessProber,
        users: UserDirectory,
        http: HttpForwarder,
        websocket: WebSocketForwarder,
        trusted: TrustedNetworks,
        base_domain: str | None,
        public_host: str,
        fallback: ASGIApp,
    ) -> None:
        self._store = store
        self._prober = prober
        self._users = users
        self._http = http
        self._websocket = websocket
        self._trusted = trusted
        self._base_domain = base_domain
        self._public_host = public_host
        self._fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        raw = scope.get("raw_path")
        on_path = raw.startswith(_ENDPOINT_ROOT_BYTES) if raw else scope["path"].startswith("/e/")
        if not on_path and not self._base_domain:
            await self._fallback(scope, receive, send)
            return
        req = Incoming(scope, self._trusted)
        target = endpoint_target(
            req.host,
            req.raw_path,
            base_domain=self._base_domain,
            public_host=self._public_host,
            on_path=on_path,
        )
        if target is None:
            await self._fallback(scope, receive, send)
            return
        if req.websocket:
            await receive()  # websocket.connect
        endpoint, hide, refusal = await self._admit(req, target)
        if endpoint is None:
            await _refuse(req, send, refusal or UNKNOWN_ENDPOINT)
            return
        await self._serve(req, receive, send, target, endpoint, hide_authorization=hide)

    async def _admit(
        self, req: Incoming, target: EndpointTarget
    ) -> tuple[Endpoint | None, bool, Page | None]:
        """(the endpoint, whether to hide Authorization from it, or why not)."""
        try:
            endpoint = await self._store.get(target.name)
        except RoutesUnavailable:
            return None, False, ROUTES_UNAVAILABLE
        route = endpoint.route if endpoint is not None else None
        if route is not None:
            admitted = admitted_at_once(route, req)
            if admitted is not None:
                return endpoint, admitted[0], None
        bearer = req.bearer
        if bearer is None:
            return None, False, ENDPOINT_TOKEN_REQUIRED
        if req.jobgate_key is not None:
            try:
                user = await self._users.lookup(req.jobgate_key)
            except GatewayUnavailable:
                return None, False, GATEWAY_UNAVAILABLE
            if user is None:
                return None, False, ENDPOINT_TOKEN_REFUSED
            if route is None or not (user.admin or user.id == route.owner_id):
                return None, False, UNKNOWN_ENDPOINT
            if not user.allows(CALL_ENDPOINTS):
                return None, False, _NO_ENDPOINTS_SCOPE
            return endpoint, True, None
        return None, False, ENDPOINT_TOKEN_REFUSED

    async def _serve(
        self,
        req: Incoming,
        receive: Receive,
        send: Send,
        target: EndpointTarget,
        endpoint: Endpoint,
        *,
        hide_authorization: bool,
    ) -> None:
        balancer = endpoint.balancer
        try:
            replica = await balancer.acquire(endpoint.route.wake_timeout_s)
        except Overloaded:
            await _refuse(req, send, ENDPOINT_BUSY, retry_after=_BUSY_RETRY_AFTER)
            return
        except NoReplica:
            await _refuse(req, send, ENDPOINT_STARTING, retry_after=_STARTING_RETRY_AFTER)
            return
        request_target = target.rest + (f"?{req.query}" if req.query else "")
        forwarding = Forwarding(req.host, req.scheme, req.forwarded_for, target.prefix)
        headers = request_headers(
            req.scope["headers"],
            forwarding,
            cookie_filter=strip_jobgate_cookies,
            hide_authorization=hide_authorization,
        )
        retry = not req.websocket and _idempotent(req)
        as_json = _as_json(req)
        current: Replica | None = replica
        while current is not None:
            upstream = Upstream(current.upstream or "", request_target, headers, current)
            current.stats.started()
            try:
                if req.websocket:
                    await self._websocket.forward(
                        req.scope, receive, send, upstream, as_json=as_json
                    )
                    return
                answered = await self._http.forward(
                    req.scope, receive, send, upstream, as_json=as_json, fallback=True
                )
            finally:
                current.stats.finished()
                balancer.release(current)
            if answered:
                return
            self._prober.connect_failed(endpoint, current, "a request could not connect")
            failed, current = current, None
            if retry:
                retry = False
                current = balancer.try_acquire(exclude=failed)
        await send_page(send, APP_NOT_ANSWERING, as_json=as_json)


def _idempotent(req: Incoming) -> bool:
    if req.scope["method"] in IDEMPOTENT_METHODS:
        return True
    return any(name == b"idempotency-key" for name, _ in req.scope["headers"])


def _as_json(req: Incoming) -> bool:
    return wants_json(req.accept, api_client=True)


async def _refuse(req: Incoming, send: Send, page: Page, *, retry_after: bytes = b"") -> None:
    if req.websocket:
        await deny_websocket(req.scope, send, page, as_json=_as_json(req))
        return
    headers = [(b"retry-after", retry_after)] if retry_after else []
    await send_page(send, page, as_json=_as_json(req), headers=headers)
