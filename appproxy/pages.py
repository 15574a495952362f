"""The proxy's own answers: small HTML pages for people, RFC 7807 problem+json for programs.

Every refusal says what happened and what to do next, in the format the client asked
for (``Accept``); API clients that authenticate with a Bearer key get JSON unless they
ask for HTML. Pages are never cached and never echo a token, a cookie or a key.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

from appproxy.asgi import Scope, Send

__all__ = [
    "APP_NOT_ANSWERING",
    "APP_TIMED_OUT",
    "BAD_REQUEST",
    "ENDPOINT_BUSY",
    "ENDPOINT_STARTING",
    "ENDPOINT_TOKEN_REFUSED",
    "ENDPOINT_TOKEN_REQUIRED",
    "FORBIDDEN",
    "GATEWAY_UNAVAILABLE",
    "KEY_LACKS_SCOPE",
    "LINK_EXPIRED",
    "NOT_FOUND",
    "NOT_SIGNED_IN",
    "PROXY_FAILED",
    "ROUTES_UNAVAILABLE",
    "SESSION_ENDED",
    "UNKNOWN_APP",
    "UNKNOWN_ENDPOINT",
    "UNKNOWN_SESSION",
    "Page",
    "deny_websocket",
    "page_response",
    "render",
    "send_page",
    "wants_json",
]


@dataclass(frozen=True, slots=True)
class Page:
    status: int
    code: str  # stable, machine-readable: the tail of the problem "type"
    title: str
    detail: str

    def with_detail(self, detail: str) -> Page:
        return replace(self, detail=detail)


_OPEN_AGAIN: Final = (
    "Open the app again from jobgate: the Open button on the session's page in the web "
    "console (the gateway's address, e.g. http://127.0.0.1:8420/), or jobgate apps open."
)

NOT_SIGNED_IN = Page(
    401,
    "not-signed-in",
    "Sign-in needed",
    f"This address needs a sign-in link from jobgate. {_OPEN_AGAIN}",
)
LINK_EXPIRED = Page(
    401,
    "link-expired",
    "This link has expired",
    f"This link has expired or was already used. {_OPEN_AGAIN}",
)
FORBIDDEN = Page(
    403,
    "forbidden",
    "Not your session",
    "Only the session's owner (and administrators) can open its apps.",
)
KEY_LACKS_SCOPE = Page(
    403,
    "key-lacks-scope",
    "This key may not do that",
    "This API key lacks the scope this needs. Use a key with it (jobgate keys create).",
)
NOT_FOUND = Page(
    404, "not-found", "Nothing here", "Apps live under /s/<session>/<app>/ on this proxy."
)
UNKNOWN_SESSION = Page(
    404, "unknown-session", "No such session", "jobgate knows no running session with this id."
)
UNKNOWN_APP = Page(
    404, "unknown-app", "No such app", "This session does not offer an app by this name."
)
SESSION_ENDED = Page(
    410,
    "session-ended",
    "This session has ended",
    "The session has ended, so its apps are gone. Start a new session.",
)
BAD_REQUEST = Page(400, "bad-request", "Bad request", "The proxy could not read this request.")
APP_NOT_ANSWERING = Page(
    502,
    "app-not-answering",
    "The app is not answering",
    "The app is starting or has stopped. Try again in a few seconds.",
)
PROXY_FAILED = Page(
    502,
    "proxy-failed",
    "The proxy failed",
    "The proxy failed while carrying this request (it has been logged). Try again.",
)
APP_TIMED_OUT = Page(
    504,
    "app-timed-out",
    "The app did not answer in time",
    "The app took too long to answer. Try again, or check the session.",
)
ROUTES_UNAVAILABLE = Page(
    503,
    "routes-unavailable",
    "The proxy cannot find its routes",
    "The proxy cannot reach its route store right now. Try again soon.",
)
GATEWAY_UNAVAILABLE = Page(
    503,
    "gateway-unavailable",
    "Cannot check your key",
    "The proxy cannot reach jobgate to check this key. Try again soon.",
)
# ---- inference endpoints (/e/{name}/...) --------------------------------------------------
ENDPOINT_TOKEN_REQUIRED = Page(
    401,
    "endpoint-token-required",
    "Token needed",
    "Call this endpoint with Authorization: Bearer <endpoint token> (jobgate endpoints "
    "tokens create NAME) or with your jobgate API key.",
)
ENDPOINT_TOKEN_REFUSED = Page(
    401,
    "endpoint-token-refused",
    "Token not accepted",
    "This token is not valid here: it is wrong, expired or revoked, or the endpoint "
    "does not exist. Create a new one with jobgate endpoints tokens create NAME.",
)
UNKNOWN_ENDPOINT = Page(
    404, "unknown-endpoint", "No such endpoint", "You have no inference endpoint by this name."
)
ENDPOINT_BUSY = Page(
    503,
    "endpoint-busy",
    "The endpoint is busy",
    "Every replica is at its concurrency limit and the queue is full. Retry after the "
    "time in Retry-After; the endpoint scales up under load.",
)
ENDPOINT_STARTING = Page(
    503,
    "endpoint-starting",
    "No replica is ready yet",
    "The endpoint has no ready replica (it is starting, or scaled to zero and waking "
    "up). Retry after the time in Retry-After.",
)

_HTML: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{status} {title} - jobgate</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;\
padding:0 1rem;color:#222}}h1{{font-size:1.4rem}}small{{color:#777}}</style></head>
<body><h1>{title}</h1><p>{detail}</p><p><small>{status} &middot; jobgate app proxy\
</small></p></body></html>
"""

_JSON_TYPES: Final = frozenset({"application/json", "application/problem+json"})


def _quality(params: str) -> float:
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def wants_json(accept: str, *, api_client: bool = False) -> bool:
    """JSON if ``Accept`` prefers it to HTML; an API client decides when neither is named."""
    if "json" not in accept and "html" not in accept:
        return api_client  # the common */* (or nothing): no need to parse
    json_q = html_q = 0.0  # q=0 (or an unreadable q) means "not acceptable"
    for part in accept.split(","):
        media, _, params = part.partition(";")
        media = media.strip().lower()
        if media in _JSON_TYPES:
            json_q = max(json_q, _quality(params))
        elif media == "text/html":
            html_q = max(html_q, _quality(params))
    if json_q <= 0 and html_q <= 0:
        return api_client
    return json_q > html_q


def render(page: Page, *, as_json: bool) -> tuple[bytes, bytes]:
    """The body and its content type."""
    if as_json:
        problem: dict[str, Any] = {
            "type": f"urn:jobgate:proxy:{page.code}",
            "title": page.title,
            "status": page.status,
            "detail": page.detail,
        }
        return json.dumps(problem).encode(), b"application/problem+json"
    body = _HTML.format(
        status=page.status, title=html.escape(page.title), detail=html.escape(page.detail)
    )
    return body.encode(), b"text/html; charset=utf-8"


def _headers(
    page: Page, body: bytes, content_type: bytes, extra: Iterable[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *extra,
    ]
    if page.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="jobgate"'))
    return headers


def page_response(
    page: Page, *, as_json: bool, headers: Iterable[tuple[bytes, bytes]] = ()
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) of the answer that is ``page``."""
    body, content_type = render(page, as_json=as_json)
    return page.status, _headers(page, body, content_type, headers), body


async def send_page(
    send: Send, page: Page, *, as_json: bool, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Answer an HTTP request with ``page``."""
    status, head, body = page_response(page, as_json=as_json, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def deny_websocket(scope: Scope, send: Send, page: Page, *, as_json: bool) -> None:
    """Refuse a WebSocket handshake (its "websocket.connect" already received) with ``page``.

    Servers without the ASGI "websocket.http.response" extension can only close (1008);
    the client then sees a bare 403.
    """
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": page.title})
        return
    body, content_type = render(page, as_json=as_json)
    await send(
        {
            "type": "websocket.http.response.start",
            "status": page.status,
            "headers": _headers(page, body, content_type, ()),
        }
    )
    await send({"type": "websocket.http.response.body", "body": body})
