"""The HTTP/1.1 upstream core both ways to a replica share: one connection, one pool.

    Http1Connection ── httptools ──▶ sink.upstream_head / _body / _flush / _done / _lost
    IdlePool.take(origin) ── an idle connection (LIFO, dropped when stale) │ None
    IdlePool.put_back ────── kept idle: at most ``max_idle_per_origin``, closed after
                             ``idle_timeout`` (swept, also for a replica that left)
    stale_retry(...) ─────── whether a request that found its pooled connection closed
                             goes once more on a fresh one

Two drivers sit on it, as httpx's sync and async faces sit on one httpcore pool:

* the ASGI path's ``backend/client.py``: its connection is its own sink and turns the
  callbacks into futures a coroutine awaits (``ConnectionPool.request``, ``Response``);
* the fast lane's ``fastlane/exchange.py``: the exchange is the sink and answers the
  client from the callback that parsed each byte (no future, no task per response).

Framing follows RFC 9112: Content-Length, chunked, or a body that ends when the replica
closes; HEAD answers never have a body; 1xx answers are skipped; a status httptools
accepts but HTTP has not (600-999) is an invalid answer. Anything after the answer, or
on an idle connection, makes the connection unusable (closed). A failure in a sink's
callback is the sink's (``fail``), not the replica's: httptools would report it as an
invalid answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Generic, Protocol, TypeVar, cast
from urllib.parse import urlsplit

import httptools

__all__ = [
    "Http1Connection",
    "IdlePool",
    "Origin",
    "Sink",
    "request_head",
    "stale_retry",
]

#: methods safe to send again when the pooled connection had gone stale
_STALE_RETRYABLE: Final = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE"})


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


def stale_retry(method: bytes, *, reused: bool, received_any: bool, has_body: bool) -> bool:
    """Whether a request whose connection closed before any answer goes once more, on a
    fresh connection: only when the connection came from the pool (it had gone stale,
    the request likely never reached the app), and the request is safe to repeat.

    >>> stale_retry(b"GET", reused=True, received_any=False, has_body=False)
    True
    >>> stale_retry(b"POST", reused=True, received_any=False, has_body=False)
    False
    """
    return reused and not received_any and not has_body and method in _STALE_RETRYABLE


class Sink(Protocol):
    """What a driver hears from its connection during one exchange."""

    def upstream_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_flush(self) -> None: ...  # the end of one read from the socket
    def upstream_done(self) -> None: ...
    def upstream_lost(self, reason: str) -> None: ...  # closed or broken before the end
    def upstream_paused(self, paused: bool) -> None: ...  # its send buffer is full / drained
    def fail(self, exc: Exception) -> None: ...  # a bug surfaced in one of the above


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection to a replica; one exchange (one sink) at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sink: Sink | None = None
        self.closed = False
        self.idle_since = 0.0
        self.head_request = False
        self.received_any = False
        self.head_done = False
        self.complete = False
        self.until_close = False  # the body ends when the replica closes the connection
        self.keep_alive = False
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        #: the driver's memo of the last answer's head (the fast lane's business)
        self.head_memo: tuple[Any, ...] | None = None

    def begin(self, sink: Sink, *, head_request: bool = False) -> None:
        """Start an exchange: answers go to ``sink`` until it is done or lost."""
        self.sink = sink
        self.head_request = head_request
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
        if status >= 600:  # httptools reads any three digits; HTTP has none of these
            self._lost(f"the app's answer is not valid HTTP: status {status}")
            return
        self.status = status
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()
        if self.head_request:
            self.keep_alive = False  # the parser would wait for a body: use it no more
            if self.sink is not None:
                self.sink.upstream_head(status, self.headers)
            self.on_message_complete()
            return
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
        if self.complete:  # (a HEAD answer ended at its head)
            return
        self.complete = True
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.upstream_done()


class _Pooled(Protocol):
    closed: bool
    idle_since: float

    def close(self) -> None: ...


_K = TypeVar("_K")
_C = TypeVar("_C", bound=_Pooled)


class IdlePool(Generic[_K, _C]):
    """Idle keep-alive connections per origin; a driver adds how to open one."""

    def __init__(self, *, max_idle_per_origin: int = 256, idle_timeout: float = 30.0) -> None:
        self._max_idle = max_idle_per_origin
        self._idle_timeout = idle_timeout
        self._idle: dict[_K, list[_C]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep_handle: asyncio.TimerHandle | None = None

    def take(self, origin: _K) -> _C | None:
        """An idle connection that still looks usable, or None."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._idle_timeout:
                return conn
            conn.close()
        return None

    def put_back(self, origin: _K, conn: _C) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        idle.append(conn)
        if self._sweep_handle is None:
            self._loop = loop
            self._sweep_handle = loop.call_later(self._idle_timeout, self._sweep)

    def _sweep(self) -> None:
        """Close what has been idle too long (no request may come for it again: its
        replica may have left the route), while anything is idle."""
        assert self._loop is not None
        self._sweep_handle = None
        oldest = self._loop.time() - self._idle_timeout
        for origin, idle in list(self._idle.items()):
            kept: list[_C] = []
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
