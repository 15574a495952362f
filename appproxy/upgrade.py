"""uvicorn's WebSocket protocol for the proxy: upgrade requests become tunnels, not frames.

    uvicorn HTTP protocol ── "Upgrade: websocket" ──▶ UpgradeProtocol(transport, request head)
        ASGI scope (type "websocket", extensions "jobgate.tunnel", "websocket.http.response")
        ──▶ SessionGate: refuse ─▶ "websocket.http.response.*" ─▶ an HTTP answer, closed
                       admit  ─▶ WebSocketForwarder: handshake with the app
                                 ─▶ "jobgate.tunnel" {tunnel, head} ─▶ bytes both ways

A normal ASGI WebSocket server parses every frame from the client, hands it to the app
as a message, and frames it again on the way out; a proxy does not need any of that
once the app has accepted. uvicorn accepts a protocol class for upgraded connections
(``Config(ws=...)``); this one runs the ASGI app only for the decision, and then gives
the raw connection to the :class:`~appproxy.backend.tunnel.Tunnel` the forwarder sends.
An app that sends ``websocket.accept`` itself is an error here: this server only tunnels.
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import unquote

import httptools

from appproxy.asgi import Message, Scope
from appproxy.backend.tunnel import TUNNEL_EXTENSION, Tunnel
from appproxy.corked import uncorked

__all__ = ["UpgradeProtocol"]

log = logging.getLogger(__name__)
access_log = logging.getLogger("uvicorn.access")  # uvicorn's, with RedactTokens on it

_END_OF_HEAD: Final = b"\r\n\r\n"
_MAX_HEAD: Final = 65536
_MAX_EARLY: Final = 65536


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def _address(transport: asyncio.Transport, name: str) -> tuple[str, int] | None:
    info = transport.get_extra_info(name)
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


class UpgradeProtocol(asyncio.Protocol):
    """One upgraded connection: decide with the ASGI app, then tunnel or answer and close."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any]) -> None:
        if not config.loaded:
            config.load()
        self._app = config.loaded_app
        self._root_path: str = config.root_path
        self._access_log: bool = config.access_log
        self._app_state = app_state
        self._connections: set[Any] = server_state.connections
        self._tasks: set[asyncio.Task[None]] = server_state.tasks
        self._transport: asyncio.Transport | None = None
        self._head = b""
        self._early: list[bytes] = []  # client bytes after the head, before the tunnel
        self._started = False
        self._answered = False  # an HTTP answer went out, or the tunnel took over
        self._lost = False
        self._lost_waiter: asyncio.Future[None] | None = None
        self._response: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self._tunnel: Tunnel | None = None
        self._scope: Scope | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = uncorked(transport)  # a tunnel writes as soon as bytes arrive
        self._connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._tunnel is not None:
            self._tunnel.from_client(data)
        elif self._started:
            self._early.append(data)
            self._hold_early()
        else:
            self._head += data
            head, found, rest = self._head.partition(_END_OF_HEAD)
            if found:
                self._start(head, rest)
            elif len(self._head) > _MAX_HEAD:
                self._answer(431, [], b"")

    def _hold_early(self) -> None:
        """A client that talks before the app has accepted waits (nothing piles up here)."""
        if self._transport is not None and sum(map(len, self._early)) > _MAX_EARLY:
            self._transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._connections.discard(self)
        if self._tunnel is not None:
            self._tunnel.client_lost()
        if self._lost_waiter is not None and not self._lost_waiter.done():
            self._lost_waiter.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself

    def pause_writing(self) -> None:
        if self._tunnel is not None:
            self._tunnel.pause_app()

    def resume_writing(self) -> None:
        if self._tunnel is not None:
            self._tunnel.resume_app()

    def shutdown(self) -> None:
        """uvicorn is stopping: a tunnel says goodbye (1001); a pending decision gets 503."""
        if self._tunnel is not None:
            self._tunnel.shutdown()
        elif not self._answered:
            self._answer(503, [], b"")

    # -- the decision -------------------------------------------------------------------------
    def _start(self, head: bytes, rest: bytes) -> None:
        self._started = True
        if rest:
            self._early.append(rest)
            self._hold_early()
        assert self._transport is not None
        lines = head.split(b"\r\n")
        _, target, _ = lines[0].split(b" ", 2)
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers.append((name.strip().lower(), value.strip()))
        url = httptools.parse_url(target)
        raw_path = url.path or b"/"
        subprotocols = [
            token.strip()
            for name, value in headers
            if name == b"sec-websocket-protocol"
            for token in value.decode("latin-1").split(",")
            if token.strip()
        ]
        root = self._root_path
        scope: Scope = {
            "type": "websocket",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "scheme": "wss" if self._transport.get_extra_info("sslcontext") else "ws",
            "server": _address(self._transport, "sockname"),
            "client": _address(self._transport, "peername"),
            "root_path": root,
            "path": root + unquote(raw_path.decode("latin-1")),
            "raw_path": root.encode("ascii") + raw_path,
            "query_string": url.query or b"",
            "headers": headers,
            "subprotocols": subprotocols,
            "state": self._app_state.copy(),
            "extensions": {"websocket.http.response": {}, TUNNEL_EXTENSION: {}},
        }
        self._scope = scope
        task = asyncio.get_running_loop().create_task(self._run(scope))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, scope: Scope) -> None:
        connected = False

        async def receive() -> Message:
            nonlocal connected
            if not connected:
                connected = True
                return {"type": "websocket.connect"}
            if not self._lost:
                self._lost_waiter = asyncio.get_running_loop().create_future()
                await self._lost_waiter
            return {"type": "websocket.disconnect", "code": 1006}

        try:
            await self._app(scope, receive, self._send)
        except Exception:
            log.exception("the proxy failed to handle a WebSocket request")
        if not self._answered:
            self._answer(500, [], b"")

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "jobgate.tunnel":
            tunnel: Tunnel = message["tunnel"]
            if self._lost or self._answered or self._transport is None:
                tunnel.client_lost()  # the client left, or was answered (shutdown): no tunnel
                return
            self._answered = True
            self._tunnel = tunnel
            self._log_access(101)
            tunnel.attach(self._transport, message["head"], b"".join(self._early))
            self._early = []
            self._transport.resume_reading()
            await tunnel.done
        elif kind == "websocket.http.response.start":
            self._response = (int(message["status"]), list(message.get("headers", [])))
        elif kind == "websocket.http.response.body":
            if self._response is None:
                raise RuntimeError("websocket.http.response.body before its start")
            if not message.get("more_body", False):
                status, headers = self._response
                self._answer(status, headers, bytes(message.get("body", b"")))
            else:
                raise RuntimeError("the proxy answers refused WebSockets in one body")
        elif kind == "websocket.close":
            if not self._answered:
                self._answer(403, [], b"")
        else:
            raise RuntimeError(f"{kind!r}: this server only tunnels WebSockets (jobgate.tunnel)")

    def _log_access(self, status: int) -> None:
        """One access-log line per WebSocket, as uvicorn writes one per HTTP request."""
        if not self._access_log or self._scope is None:
            return
        client = self._scope["client"]
        path = self._scope["raw_path"].decode("latin-1")
        query = self._scope["query_string"].decode("latin-1")
        access_log.info(
            '%s - "WebSocket %s" %d',
            f"{client[0]}:{client[1]}" if client else "-",
            f"{path}?{query}" if query else path,
            status,
        )

    def _answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """An HTTP answer instead of an upgrade; the connection closes after it."""
        self._answered = True
        if self._transport is None or self._lost:
            return
        self._log_access(status)
        out = [_status_line(status)]
        for name, value in headers:
            if name.lower() not in (b"content-length", b"connection"):
                out += [name, b": ", value, b"\r\n"]
        out.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        out.append(body)
        self._transport.write(b"".join(out))
        self._transport.close()
