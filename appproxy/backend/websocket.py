"""Forward a WebSocket: the client's handshake goes to the app; on 101, a byte tunnel.

    client ══ upgrade request ══▶ proxy ── same request, proxy's headers ──▶ app
           ◀═ app's 101 (its subprotocol, extensions, accept key) ═════════╡
           ◀═════════════ frames, both ways, as bytes (tunnel.py) ═════════▶

The client's own ``Sec-WebSocket-Key``, ``-Version``, ``-Protocol`` and ``-Extensions``
go to the app and the app's answer comes back, so subprotocols, permessage-deflate and
close codes are agreed end to end. A refusing or absent app is reported as an HTTP
answer (the app's own 4xx status, or a 502/504 page) rather than as an
open-then-closed socket.

The server must offer the ``jobgate.tunnel`` ASGI extension (``appproxy.upgrade``,
which :func:`appproxy.server.uvicorn_config` installs).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from appproxy.asgi import Receive, Scope, Send
from appproxy.backend.client import (
    ConnectionPool,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from appproxy.backend.headers import response_headers
from appproxy.backend.http1 import Origin, request_head
from appproxy.backend.tunnel import TUNNEL_EXTENSION, AppConnection, Tunnel
from appproxy.backend.upstream import Upstream
from appproxy.pages import APP_NOT_ANSWERING, APP_TIMED_OUT, Page, deny_websocket

__all__ = ["WebSocketForwarder"]

log = logging.getLogger(__name__)

_UPGRADE: Final = [(b"connection", b"upgrade"), (b"upgrade", b"websocket")]


class WebSocketForwarder:
    """Carries WebSockets as byte tunnels once the app has accepted; connects through the
    HTTP pool's ``connect`` (same TLS, timeouts and errors), but never pools the socket."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    async def forward(
        self, scope: Scope, receive: Receive, send: Send, upstream: Upstream, *, as_json: bool
    ) -> None:
        """Carry one WebSocket; the client's ``websocket.connect`` has been received."""
        if TUNNEL_EXTENSION not in scope.get("extensions", {}):
            raise RuntimeError("WebSockets need a server with jobgate.tunnel (appproxy.upgrade)")
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            app = await self._handshake(upstream)
        except (UpstreamUnavailable, TimeoutError, OSError, ValueError) as exc:
            upstream.meter.failed()
            log.info("app at %s not answering a WebSocket: %s", upstream.origin, exc)
            timed_out = isinstance(exc, UpstreamTimeout | TimeoutError)
            page = APP_TIMED_OUT if timed_out else APP_NOT_ANSWERING
            await deny_websocket(scope, send, page, as_json=as_json)
            return
        upstream.meter.responded(loop.time() - started, app.status)
        if app.status != 101:
            app.close()
            await deny_websocket(scope, send, _refused(app.status), as_json=as_json)
            return
        head = [b"HTTP/1.1 101 Switching Protocols\r\n"]
        for name, value in [*response_headers(app.headers), *_UPGRADE]:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"\r\n")
        tunnel = Tunnel(app, upstream.meter)
        try:
            await send({"type": TUNNEL_EXTENSION, "tunnel": tunnel, "head": b"".join(head)})
        finally:
            app.close()

    async def _handshake(self, upstream: Upstream) -> AppConnection:
        """Connect, send the upgrade request, wait for the answer's head."""
        head = request_head(
            b"GET", upstream.target.encode("latin-1"), [*upstream.headers, *_UPGRADE]
        )
        loop = asyncio.get_running_loop()
        app = await self._pool.connect(Origin.parse(upstream.origin), lambda: AppConnection(loop))
        app.send(head)
        try:
            async with asyncio.timeout(self._pool.read_timeout):
                await app.answered
        except BaseException:
            app.close()
            raise
        return app


def _refused(status: int) -> Page:
    if 400 <= status < 500:
        detail = f"The app refused this WebSocket connection (HTTP {status})."
        return Page(status, "app-refused-websocket", "The app refused the connection", detail)
    return APP_NOT_ANSWERING
