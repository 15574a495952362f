"""Keep-alive HTTP/1.1 connections to replicas that report to a callback sink, not a task.

    UpstreamPool.take(origin) ── an idle connection (LIFO, dropped when stale) │ None
    UpstreamPool.put_back ──── kept idle: at most ``max_idle_per_origin``, closed after
                               ``idle_timeout`` (swept, also for a replica that left)
    UpstreamPool.open(origin) ── a new one (coroutine: connect timeout, TLS for https)
    UpstreamConnection ── httptools ──▶ sink.upstream_head / _body / _done / _lost

The fast lane's exchange is the sink: every byte from the replica is handled in the
callback that parsed it, with no future, no task and no coroutine per response.
Framing follows RFC 9112 as in ``backend/client.py``: Content-Length, chunked, or a body
that ends when the replica closes; 1xx answers are skipped. (HEAD requests never come
here, so a bodiless answer is never waited on.) A status httptools accepts but HTTP has
not (600-999) is an invalid answer. A failure in a sink's callback is the sink's
(``fail``), not the replica's: httptools would report it as an invalid answer.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Protocol, cast

import httptools

from appproxy.backend.client import Origin

__all__ = ["Sink", "UpstreamConnection", "UpstreamPool"]


class Sink(Protocol):
    """What an exchange hears from its upstream connection."""

    def upstream_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_flush(self) -> None: ...  # the end of one read from the socket
    def upstream_done(self) -> None: ...
    def upstream_lost(self, reason: str) -> None: ...  # closed or broken before the end
    def upstream_paused(self, paused: bool) -> None: ...  # its send buffer is full / drained
    def fail(self, exc: Exception) -> None: ...  # a bug surfaced in one of the above


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection to a replica; one exchange (one sink) at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sink: Sink | None = None
        self.closed = False
        self.idle_since = 0.0
        self.received_any = False
        self.head_done = False
        self.complete = False
        self.until_close = False
        self.keep_alive = False
        self.headers: list[tuple[bytes, bytes]] = []
        #: the sink's memo of the last answer's head (the exchange's business)
        self.head_memo: tuple[Any, ...] | None = None

    def begin(self, sink: Sink) -> None:
        """Start an exchange: answers go to ``sink`` until it is done or lost."""
        self.sink = sink
        self.received_any = self.head_done = self.complete = self.until_close = False
        self.headers = []

    def detach(self) -> None:
        """The exchange gives up on this connection: nothing more is reported; closed."""
        self.sink = None
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        if sink is None:  # idle, or given up on: nothing to say to anyone
            self.close()
            return
        self.received_any = True
        try:
            self.parser.feed_data(data)
            sink.upstream_flush()
        except httptools.HttpParserCallbackError as exc:  # raised in a callback: a bug
            self._failed(sink, exc.__context__ if isinstance(exc.__context__, Exception) else exc)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._lost(f"the app's answer is not valid HTTP: {exc}")
        except Exception as exc:
            self._failed(sink, exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        sink = self.sink
        if sink is None:
            return
        try:
            if self.head_done and self.until_close:
                self.on_message_complete()  # the close is the end of this body
            else:
                self._lost("the app closed the connection")
        except Exception as error:
            self._failed(sink, error)

    def pause_writing(self) -> None:
        self._paused(True)

    def resume_writing(self) -> None:
        self._paused(False)

    def _paused(self, paused: bool) -> None:
        sink = self.sink
        if sink is not None:
            try:
                sink.upstream_paused(paused)
            except Exception as exc:
                self._failed(sink, exc)

    def _failed(self, sink: Sink, exc: Exception) -> None:
        self.detach()
        sink.fail(exc)

    def _lost(self, reason: str) -> None:
        sink = self.sink
        self.detach()
        if sink is not None:
            sink.upstream_lost(reason)

    # -- httptools callbacks --------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.sink is None:  # more after the answer, in the same read: nobody asked
            self.close()  # the next exchange would read it as its answer: not reusable

    def on_header(self, name: bytes, value: bytes | None) -> None:
        self.headers.append((name, value or b""))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            return  # informational (103 Early Hints...): the real answer follows
        if status >= 600:
            self._lost(f"the app's answer is not valid HTTP: status {status}")
            return
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()
        if status not in (204, 304):
            framed = False
            for name, _ in self.headers:
                lower = name.lower()
                if lower == b"content-length" or lower == b"transfer-encoding":
                    framed = True
                    break
            self.until_close = not framed
        if self.sink is not None:
            self.sink.upstream_head(status, self.headers)

    def on_body(self, body: bytes) -> None:
        if self.sink is not None:
            self.sink.upstream_body(body)

    def on_message_complete(self) -> None:
        if not self.head_done:  # the end of an informational answer
            self.headers = []
            return
        self.complete = True
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.upstream_done()


class UpstreamPool:
    """Idle keep-alive connections per origin (``http://host:port``)."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        max_idle_per_origin: int = 256,
        idle_timeout: float = 30.0,
    ) -> None:
        self.connect_timeout = connect_timeout
        self._max_idle = max_idle_per_origin
        self._idle_timeout = idle_timeout
        self._idle: dict[str, list[UpstreamConnection]] = {}
        self._tls: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep_handle: asyncio.TimerHandle | None = None

    def take(self, origin: str) -> UpstreamConnection | None:
        """An idle connection that still looks usable, or None."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        loop = self._loop or asyncio.get_running_loop()
        now = loop.time()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._idle_timeout:
                return conn
            conn.close()
        return None

    async def open(self, origin: str) -> UpstreamConnection:
        """A new connection within the connect timeout (OSError or TimeoutError if not)."""
        parsed = Origin.parse(origin)  # ValueError for what is not http(s)://host[:port]
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if parsed.scheme == "https":
            tls = self._tls = self._tls or ssl.create_default_context()
        async with asyncio.timeout(self.connect_timeout):
            _, conn = await loop.create_connection(
                UpstreamConnection, parsed.host, parsed.port, ssl=tls
            )
        return conn

    def put_back(self, origin: str, conn: UpstreamConnection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        idle.append(conn)
        if self._sweep_handle is None:
            self._sweep_handle = loop.call_later(self._idle_timeout, self._sweep)

    def _sweep(self) -> None:
        """Close what has been idle too long (no request may come for it again: its
        replica may have left the route), while anything is idle."""
        assert self._loop is not None
        self._sweep_handle = None
        oldest = self._loop.time() - self._idle_timeout
        for origin, idle in list(self._idle.items()):
            kept: list[UpstreamConnection] = []
            for conn in idle:
                if conn.closed or conn.idle_since <= oldest:
                    conn.close()
                else:
                    kept.append(conn)
            if kept:
                self._idle[origin] = kept
            else:
                del self._idle[origin]
        if self._idle:
            self._sweep_handle = self._loop.call_later(self._idle_timeout, self._sweep)

    def close(self) -> None:
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
