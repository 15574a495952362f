"""A lean HTTP/1.1 client for forwarding: keep-alive pool, bodies streamed both ways.

    pool[(scheme, host, port)] ── idle connections (LIFO, bounded, dropped when stale)
    request ── write head (+ body task) ──▶ app
    Response ◀── httptools parser: head future, then body chunks (flow-controlled) ◀── app

Chosen by measurement (2 cores, uvloop, small GETs to a local app, CPU per request):
aiohttp's client took ~160 us, a bare httptools protocol ~25 us - on a request path
whose whole cost, uvicorn included, is now ~150 us (docs/appproxy.md). This module
keeps to what a reverse proxy needs: no redirects, no cookies, no decompression, bytes
in and bytes out. Framing follows RFC 9112: Content-Length or chunked bodies, or a body
that ends when the app closes; HEAD answers never have one; 1xx answers are skipped. A
request that found its pooled connection closed by the app is retried once on a fresh
one when it is safe to (no body, idempotent method).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, TypeVar, cast
from urllib.parse import urlsplit

import httptools

from appproxy.backend.timers import CoarseTimers

__all__ = [
    "ConnectionPool",
    "Origin",
    "Response",
    "UpstreamBroken",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "request_head",
]

_HIGH_WATER: Final = 1024 * 1024  # stop reading from the app above this much unsent body
_RETRYABLE: Final = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE"})


class UpstreamUnavailable(Exception):
    """The app gave no answer: refused, reset, or not HTTP. Nothing reached the client.

    ``nothing_sent`` says that not a byte of the request reached the app (the connection
    could not be made), so even a request with effects may go to another server.
    """

    def __init__(self, message: str, *, nothing_sent: bool = False) -> None:
        super().__init__(message)
        self.nothing_sent = nothing_sent


class UpstreamTimeout(UpstreamUnavailable):
    """The app did not connect or answer within the configured time."""


class UpstreamBroken(Exception):
    """The app broke off in the middle of a response body."""


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int

    @staticmethod
    @lru_cache(maxsize=4096)
    def parse(url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) origin: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return Origin(parts.scheme, parts.hostname, port)


_P = TypeVar("_P", bound=asyncio.BaseProtocol)


def request_head(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """An HTTP/1.1 request head, headers as given; ValueError for a target that would
    break the request line.

    >>> request_head(b"GET", b"/a?b=1", [(b"host", b"app")])
    b'GET /a?b=1 HTTP/1.1\\r\\nhost: app\\r\\n\\r\\n'
    """
    if b"\r" in target or b"\n" in target or b" " in target:
        raise ValueError("a request target cannot hold spaces or line breaks")
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        lines += (name, b": ", value, b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timers: CoarseTimers) -> None:
        self.loop = loop
        self.timers = timers
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self._can_write: asyncio.Future[None] | None = None
        self.start_exchange(head_request=False)

    def start_exchange(self, *, head_request: bool) -> None:
        self.head_request = head_request
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.until_close = False  # the body ends when the app closes the connection
        self.keep_alive = False
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.reading_paused = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.received_any = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(UpstreamBroken(f"the app's answer is not valid HTTP: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and self.until_close and not self.complete:
            self.on_message_complete()  # the close is the end of this body
        elif not self.complete:
            self.fail(ConnectionResetError("the app closed the connection"))
        self._wake_writer()

    def pause_writing(self) -> None:
        self._can_write = self.loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)
        self._can_write = None

    # -- httptools callbacks ------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes | None) -> None:
        self.headers.append((name, value or b""))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            return  # informational (103 Early Hints...): the real answer follows
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        self.head_done = True
        if self.head_request:
            self.keep_alive = False  # the parser would wait for a body: use it no more
            self.on_message_complete()
            return
        if status not in (204, 304):
            names = {name.lower() for name, _ in self.headers}
            self.until_close = b"content-length" not in names and b"transfer-encoding" not in names
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake()

    def on_message_complete(self) -> None:
        if not self.head_done:  # the end of an informational answer
            self.headers = []
            return
        self.complete = True
        self._wake()

    # -- the exchange -----------------------------------------------------------------------------
    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def wait(self, timeout: float | None) -> None:
        """Until something new arrives (head, a chunk, the end) or the exchange fails."""
        if self.error is not None:
            raise self.error
        self.waiter = self.loop.create_future()
        if timeout is not None:
            self.timers.arm(self, timeout, self._timed_out)
        try:
            await self.waiter
        finally:
            self.waiter = None
            if timeout is not None:
                self.timers.disarm(self)

    def _timed_out(self) -> None:
        self.fail(UpstreamTimeout("no answer in time"))

    async def write(self, data: bytes) -> None:
        if self.closed or self.transport is None:
            raise ConnectionResetError("the app closed the connection")
        self.transport.write(data)
        if self._can_write is not None:
            await self._can_write

    def take(self) -> bytes:
        """Every body byte received so far."""
        data = self.chunks.popleft() if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        self.buffered = 0
        if self.reading_paused and self.transport is not None and not self.closed:
            self.transport.resume_reading()
            self.reading_paused = False
        return data


class Response:
    """An app's answer: status and headers now, the body chunk by chunk."""

    def __init__(
        self,
        pool: ConnectionPool,
        key: Origin,
        conn: _Connection,
        sender: asyncio.Task[None] | None,
    ) -> None:
        self._pool = pool
        self._key = key
        self._conn = conn
        self._sender = sender
        self.status = conn.status
        self.headers = conn.headers

    @property
    def at_eof(self) -> bool:
        return self._conn.complete and not self._conn.chunks

    async def read(self) -> bytes:
        """The next part of the body, or b"" at its end; UpstreamBroken if the app broke off."""
        conn = self._conn
        while not conn.chunks and not conn.complete:
            try:
                await conn.wait(self._pool.read_timeout)
            except (OSError, UpstreamUnavailable) as exc:
                raise UpstreamBroken(str(exc) or type(exc).__name__) from exc
        return conn.take() if conn.chunks else b""

    def release(self) -> None:
        """Give the connection back to the pool if it can carry another exchange."""
        conn = self._conn
        reusable = (
            conn.complete
            and conn.keep_alive
            and not conn.closed
            and conn.error is None
            and (self._sender is None or self._sender.done())
        )
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()
        if reusable:
            self._pool.put_back(self._key, conn)
        else:
            conn.close()

    def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        self._conn.close()


class ConnectionPool:
    """Keep-alive connections per origin; connect and read timeouts in seconds."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float | None,
        max_idle_per_origin: int = 256,
        idle_timeout: float = 30.0,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._max_idle = max_idle_per_origin
        self._idle_timeout = idle_timeout
        self._idle: dict[Origin, list[_Connection]] = {}
        self._tls = ssl.create_default_context()
        self._timers = CoarseTimers(resolution=0.1)

    async def request(
        self,
        method: bytes,
        origin: Origin,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterator[bytes] | None = None,
        *,
        chunked: bool = False,
    ) -> Response:
        """Send a request and wait for the answer's head.

        ``headers`` go out as given (the caller frames the body: Content-Length, or
        ``chunked=True`` to have it chunk-encoded here with the header added).
        """
        if chunked:
            headers = [*headers, (b"transfer-encoding", b"chunked")]
        head = request_head(method, target, headers)
        conn, reused = await self._acquire(origin)
        try:
            return await self._exchange(origin, conn, method, head, body, chunked)
        except (ConnectionResetError, BrokenPipeError, UpstreamBroken):
            if not (reused and body is None and method in _RETRYABLE and not conn.received_any):
                raise UpstreamUnavailable("the app closed the connection") from None
        conn, _ = await self._acquire(origin, fresh=True)  # the pooled one had gone stale
        try:
            return await self._exchange(origin, conn, method, head, body, chunked)
        except (ConnectionResetError, BrokenPipeError, UpstreamBroken) as exc:
            raise UpstreamUnavailable("the app closed the connection") from exc

    async def _exchange(
        self,
        origin: Origin,
        conn: _Connection,
        method: bytes,
        head: bytes,
        body: AsyncIterator[bytes] | None,
        chunked: bool,
    ) -> Response:
        conn.start_exchange(head_request=method == b"HEAD")
        sender: asyncio.Task[None] | None = None
        try:
            await conn.write(head)
            if body is not None:
                sender = asyncio.create_task(_send_body(conn, body, chunked))
            while not conn.head_done:
                await conn.wait(self.read_timeout)
        except BaseException:
            if sender is not None:
                sender.cancel()
            conn.close()
            raise
        return Response(self, origin, conn, sender)

    async def _acquire(self, origin: Origin, *, fresh: bool = False) -> tuple[_Connection, bool]:
        idle = self._idle.get(origin)
        now = asyncio.get_running_loop().time()
        while idle and not fresh:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._idle_timeout:
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        return await self.connect(origin, lambda: _Connection(loop, self._timers)), False

    async def connect(self, origin: Origin, protocol: Callable[[], _P]) -> _P:
        """A new connection to ``origin`` (TLS for https) within the connect timeout; the
        WebSocket forwarder opens its own (never pooled) connections here too."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    protocol,
                    origin.host,
                    origin.port,
                    ssl=self._tls if origin.scheme == "https" else None,
                )
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"no connection to the app in {self.connect_timeout}s", nothing_sent=True
            ) from exc
        except OSError as exc:
            raise UpstreamUnavailable(
                f"cannot connect to the app: {exc.strerror or exc}", nothing_sent=True
            ) from exc
        return conn

    def put_back(self, origin: Origin, conn: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        idle.append(conn)

    def close(self) -> None:
        self._timers.close()
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


async def _send_body(conn: _Connection, body: AsyncIterator[bytes], chunked: bool) -> None:
    """Write the client's body to the app as it arrives; a failure ends the exchange."""
    try:
        async for chunk in body:
            if chunked:
                await conn.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                await conn.write(chunk)
        if chunked:
            await conn.write(b"0\r\n\r\n")
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        conn.fail(exc)
