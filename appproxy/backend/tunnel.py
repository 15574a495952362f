"""A WebSocket after its handshake: bytes both ways between client and app, unparsed.

    client transport ──data_received──▶ Tunnel.from_client ──write──▶ app transport
    client transport ◀──write── Tunnel.from_app (+ FrameBoundary) ◀──data_received── app

Once the app has answered ``101 Switching Protocols``, the proxy has nothing left to
decide: frames, masks, extensions (permessage-deflate) and close codes are the two
ends' business, so the proxy copies bytes, as nginx does. That costs two callbacks and
two writes per message instead of parsing and re-framing every message twice.

It follows just enough of the app's stream (frame headers, never payloads) to know
where a frame ends, so that it can still speak for the app when the app cannot: if the
app's connection drops without a close frame, the client gets close code 1011 (not an
abrupt 1006); when the proxy shuts down, 1001. Flow control is end to end: a side whose
send buffer fills stops reading from the other.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Final, cast

import httptools

from appproxy.backend.upstream import Meter

__all__ = ["TUNNEL_EXTENSION", "AppConnection", "FrameBoundary", "Tunnel", "close_frame"]

# The ASGI scope extension (and message type) of a server that can hand over a connection.
TUNNEL_EXTENSION: Final = "jobgate.tunnel"

APP_LOST: Final = 1011
GOING_AWAY: Final = 1001
_OP_CLOSE: Final = 0x8


def close_frame(code: int, reason: str) -> bytes:
    """An unmasked close frame, as a server sends it.

    >>> close_frame(1011, "gone")
    b'\\x88\\x06\\x03\\xf3gone'
    """
    payload = struct.pack("!H", code) + reason.encode()[:123]
    return bytes((0x80 | _OP_CLOSE, len(payload))) + payload


class FrameBoundary:
    """Follows WebSocket frame headers in one direction, skipping payloads.

    >>> frames = FrameBoundary()
    >>> frames.feed(b"\\x81\\x05hel"); frames.at_boundary
    False
    >>> frames.feed(b"lo\\x88"); frames.at_boundary
    False
    >>> frames.feed(b"\\x02\\x03\\xe8"); frames.at_boundary, frames.closed
    (True, True)
    """

    __slots__ = ("_partial", "_skip", "closed")

    def __init__(self) -> None:
        self._skip = 0  # payload bytes of the current frame still to come
        self._partial = b""  # the start of a frame header cut by a read
        self.closed = False  # a close frame went by

    @property
    def at_boundary(self) -> bool:
        return not self._skip and not self._partial

    def feed(self, data: bytes) -> None:
        end = len(data)
        pos = self._skip
        if pos >= end:
            self._skip = pos - end
            return
        self._skip = 0
        if self._partial:
            data = self._partial + data[pos:]
            self._partial = b""
            pos, end = 0, len(data)
        while pos < end:
            if end - pos < 2:
                self._partial = data[pos:]
                return
            first, second = data[pos], data[pos + 1]
            length = second & 0x7F
            head = 2 + (4 if second & 0x80 else 0)
            if length == 126:
                head += 2
            elif length == 127:
                head += 8
            if end - pos < head:
                self._partial = data[pos:]
                return
            if length == 126:
                length = int.from_bytes(data[pos + 2 : pos + 4], "big")
            elif length == 127:
                length = int.from_bytes(data[pos + 2 : pos + 10], "big")
            if first & 0x0F == _OP_CLOSE:
                self.closed = True
            pos += head + length
        self._skip = pos - end


class AppConnection(asyncio.Protocol):
    """The connection to the app: first the handshake's answer, then tunnel traffic.

    ``answered`` resolves once the answer's head has arrived; bytes after a 101 head
    (the app may speak first) wait in ``early`` until a tunnel takes the connection.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.transport: asyncio.Transport | None = None
        self.answered: asyncio.Future[None] = loop.create_future()
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.early: list[bytes] = []
        self.tunnel: Tunnel | None = None
        self.lost = False
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.tunnel is not None:
            self.tunnel.from_app(data)
        elif self._parser is None:
            self.early.append(data)
        else:
            self._parse(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.answered.done():
            self.answered.set_exception(ConnectionResetError("the app closed the connection"))
        if self.tunnel is not None:
            self.tunnel.app_lost()

    def pause_writing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.pause_client()

    def resume_writing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.resume_client()

    # -- httptools callbacks -------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes | None) -> None:
        self.headers.append((name, value or b""))

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.headers = []  # informational: the real answer follows
            return
        self.status = status
        if not self.answered.done():
            self.answered.set_result(None)

    def _parse(self, data: bytes) -> None:
        assert self._parser is not None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._parser = None
            rest = data[upgrade.args[0] :] if upgrade.args else b""
            if rest:
                self.early.append(rest)
        except httptools.HttpParserError as exc:
            if not self.answered.done():
                self.answered.set_exception(ConnectionResetError(f"not HTTP: {exc}"))
            self.close()

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.lost:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Tunnel:
    """Joins a client's transport and an :class:`AppConnection` until either side ends."""

    def __init__(self, app: AppConnection, meter: Meter) -> None:
        self._app = app
        self._meter = meter
        self._client: asyncio.Transport | None = None
        self._frames = FrameBoundary()
        self._closed = False
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def attach(self, client: asyncio.Transport, head: bytes, early: bytes = b"") -> None:
        """Start: ``head`` (the 101 answer) and any ``early`` client bytes are passed on."""
        self._client = client
        client.write(head)
        if early:
            self._app.send(early)
        self._app.tunnel = self
        for chunk in self._app.early:
            self.from_app(chunk)
        self._app.early = []
        if self._app.lost:
            self.app_lost()

    # -- traffic -------------------------------------------------------------------------------
    def from_client(self, data: bytes) -> None:
        self._app.send(data)
        self._meter.traffic()

    def from_app(self, data: bytes) -> None:
        assert self._client is not None
        self._frames.feed(data)
        self._client.write(data)
        self._meter.traffic()

    # -- flow control: a full send buffer stops reading on the other side -------------------
    def pause_client(self) -> None:
        if self._client is not None:
            self._client.pause_reading()

    def resume_client(self) -> None:
        if self._client is not None:
            self._client.resume_reading()

    def pause_app(self) -> None:
        if self._app.transport is not None and not self._app.lost:
            self._app.transport.pause_reading()

    def resume_app(self) -> None:
        if self._app.transport is not None and not self._app.lost:
            self._app.transport.resume_reading()

    # -- the end -----------------------------------------------------------------------------------
    def client_lost(self) -> None:
        self._app.close()
        self._finish()

    def app_lost(self) -> None:
        """The app's side ended: if it did not say goodbye, say it for the app (1011)."""
        if self._closed:
            return  # the client left first, and we closed the app's side
        if not self._frames.closed:
            self._meter.failed()
        self._close_client(APP_LOST, "the app's connection was lost")

    def shutdown(self) -> None:
        """The proxy is stopping: tell the client (1001) and close both sides."""
        self._close_client(GOING_AWAY, "the proxy is shutting down")
        self._app.close()

    def _close_client(self, code: int, reason: str) -> None:
        if self._client is not None and not self._closed:
            if not self._frames.closed and self._frames.at_boundary:
                self._client.write(close_frame(code, reason))
                self._frames.closed = True
            self._client.close()
        self._finish()

    def _finish(self) -> None:
        self._closed = True
        if not self.done.done():
            self.done.set_result(None)
