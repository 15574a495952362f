"""A lean HTTP/1.1 client for forwarding: keep-alive pool, bodies streamed both ways.

    pool[(scheme, host, port)] ── idle connections (LIFO, bounded, dropped when stale)
    request ── write head (+ body task) ──▶ app
    Response ◀── httptools parser: head future, then body chunks (flow-controlled) ◀── app

Chosen by measurement (2 cores, uvloop, small GETs to a local app, CPU per request):
aiohttp's client took ~160 us, a bare httptools protocol ~25 us - on a request path
whose whole cost, uvicorn included, is now ~150 us (docs/appproxy.md). This module
keeps to what a reverse proxy needs: no redirects, no cookies, no decompression, bytes
in and bytes out. Parsing, framing (RFC 9112), keep-alive, the pool's bookkeeping and
the stale-connection retry rule are the core's (``http1.py``, shared with the fast
lane); this module is the driver that turns its callbacks into futures: a request that
found its pooled connection closed by the app is retried once on a fresh one when it is
safe to (no body, idempotent method), and a status of 600-999 is no answer (502).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Final, TypeVar

from appproxy.backend.http1 import Http1Connection, IdlePool, Origin, request_head, stale_retry
from appproxy.backend.timers import CoarseTimers

__all__ = [
    "ConnectionPool",
    "Response",
    "UpstreamBroken",
    "UpstreamTimeout",
    "UpstreamUnavailable",
]

_HIGH_WATER: Final = 1024 * 1024  # stop reading from the app above this much unsent body


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


_P = TypeVar("_P", bound=asyncio.BaseProtocol)


class _Connection(Http1Connection):
    """The shared core's connection, its own sink: the answer's parts wait here for the
    coroutine that reads them (one exchange at a time)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timers: CoarseTimers) -> None:
        super().__init__()
        self.loop = loop
        self.timers = timers
        self._can_write: asyncio.Future[None] | None = None
        self.start_exchange(head_request=False)

    def start_exchange(self, *, head_request: bool) -> None:
        self.begin(self, head_request=head_request)
        self.status = 0
        self.keep_alive = False
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.reading_paused = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)
        self._can_write = None

    # -- the sink: what the core reports --------------------------------------------------------
    def upstream_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._wake()

    def upstream_body(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > _HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake()

    def upstream_flush(self) -> None:
        pass

    def upstream_done(self) -> None:
        self._wake()

    def upstream_lost(self, reason: str) -> None:
        self.fail(UpstreamBroken(reason))

    def upstream_paused(self, paused: bool) -> None:
        if paused:
            self._can_write = self.loop.create_future()
        else:
            self._wake_writer()

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


class ConnectionPool(IdlePool[Origin, _Connection]):
    """Keep-alive connections per origin; connect and read timeouts in seconds."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float | None,
        max_idle_per_origin: int = 256,
        idle_timeout: float = 30.0,
    ) -> None:
        super().__init__(max_idle_per_origin=max_idle_per_origin, idle_timeout=idle_timeout)
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
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
            retry = stale_retry(
                method, reused=reused, received_any=conn.received_any, has_body=body is not None
            )
            if not retry:
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
        conn = None if fresh else self.take(origin)
        if conn is not None:
            return conn, True
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

    def close(self) -> None:
        self._timers.close()
        super().close()


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
