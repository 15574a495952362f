"""One fast-lane exchange: a client's request to a replica and the answer back, by callbacks.

    FastLaneProtocol (client)                FastExchange               Http1Connection
      on_body ─────────── client_body ──▶ (buffered until connected) ──▶ transport.write
      on_message_complete ─ client_body_done
                                          ◀── upstream_head / _body / _done / _lost ──
      transport ◀── one write per read from the replica (head + body + end joined)
      connection_lost ─── client_lost ──▶ close the upstream, release the slot

It stands where uvicorn's ``RequestResponseCycle`` stands (``protocol.cycle``), with the
attributes uvicorn's protocol reads of a cycle (``response_complete``, ``keep_alive``,
``disconnected``, ``message_event``), so keep-alive, pipelining and graceful shutdown
work as for any request. Counters and the balancer slot are kept exactly as the ASGI
path (``frontend/inference.py`` with ``backend/http.py``) keeps them: ``stats.started``
/ ``finished`` around each attempt, ``responded`` at the answer's head, ``traffic`` as
a stream flows, ``failed`` when the replica fails, the slot released after the last
byte. A replica that cannot be connected to (not a byte sent) is reported to the prober
and, for an idempotent request, the request goes once more to another replica.

A bug in the lane is contained where it surfaces: every way in from outside (the
client's protocol, the upstream connection, the connect task, the timers) passes an
exception to :meth:`FastExchange.fail`, which logs it once (type and traceback, not
the request's data), frees the slot, counts it, and answers 502 if nothing went to the
client yet, or else closes the client's connection.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from typing import TYPE_CHECKING, Final

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from appproxy.backend.headers import response_headers
from appproxy.backend.http1 import Http1Connection, stale_retry
from appproxy.pages import (
    APP_NOT_ANSWERING,
    APP_TIMED_OUT,
    PROXY_FAILED,
    Page,
    page_response,
    wants_json,
)

if TYPE_CHECKING:
    from appproxy.fastlane.sides import ClientSide, LaneSide
    from appproxy.inference.balancer import Replica
    from appproxy.inference.store import Endpoint

__all__ = ["FastExchange"]

log = logging.getLogger("appproxy.backend.http")

_HIGH_WATER: Final = 1024 * 1024  # request body held while not yet connected
_CHUNKED: Final = b"transfer-encoding: chunked\r\n"
_CLOSE: Final = b"connection: close\r\n"
_LAST_CHUNK: Final = b"0\r\n\r\n"


class _NoEvent:
    """uvicorn's protocol sets its cycle's ``message_event`` on disconnect; nobody waits here."""

    __slots__ = ()

    def set(self) -> None:
        pass


_NO_EVENT: Final = _NoEvent()


class FastExchange:
    """A request carried from uvicorn's parser callbacks to a replica and back."""

    __slots__ = (
        "_accept",
        "_answering",
        "_body_done",
        "_chunked",
        "_conn",
        "_connecting",
        "_endpoint",
        "_failed",
        "_has_body",
        "_head",
        "_held",
        "_held_size",
        "_holding",
        "_lane",
        "_method",
        "_out",
        "_protocol",
        "_reading_paused",
        "_replica",
        "_retry",
        "_reused",
        "_sent_at",
        "_transport",
        "disconnected",
        "finished",
        "keep_alive",
        "response_complete",
    )
    message_event: Final = _NO_EVENT

    def __init__(
        self,
        lane: LaneSide,
        protocol: ClientSide,
        endpoint: Endpoint,
        replica: Replica,
        *,
        method: bytes,
        head: bytes,
        has_body: bool,
        keep_alive: bool,
        retry: bool,
        accept: str,
    ) -> None:
        self._lane = lane
        self._protocol = protocol
        self._transport = protocol.corked
        self._endpoint = endpoint
        self._replica = replica
        self._method = method
        self._head = head
        self._accept = accept
        self._retry = retry  # once, on another replica, when nothing could be sent
        # what uvicorn's protocol reads of its cycle
        self.keep_alive = keep_alive
        self.response_complete = False
        self.disconnected = False
        # the request body: held until connected, then written as it comes
        self._held: list[bytes] = []
        self._held_size = 0
        self._body_done = not has_body
        self._has_body = has_body
        # the attempt in progress
        self._conn: Http1Connection | None = None
        self._reused = False
        self._connecting: asyncio.Task[Http1Connection] | None = None
        self._sent_at = 0.0
        # the answer
        self._answering = False  # the head has gone to the client
        self._chunked = False
        self._out: list[bytes] = []
        self._reading_paused = False
        self._holding = True  # a slot of ``_replica`` is ours
        self._failed = False  # fail() ran: a bug was logged
        self.finished = False

    # -- attempts -----------------------------------------------------------------------------
    def start(self) -> None:
        try:
            replica = self._replica
            replica.stats.started()
            self._sent_at = self._lane.loop.time()
            conn = self._lane.pool.take(replica.upstream or "")
            if conn is None:
                self._connect()
            else:
                self._send_on(conn, reused=True)
        except Exception as exc:
            self.fail(exc)

    def _connect(self) -> None:
        task = self._lane.loop.create_task(self._lane.pool.open(self._replica.upstream or ""))
        task.add_done_callback(self._connected)
        self._connecting = task

    def _connected(self, task: asyncio.Task[Http1Connection]) -> None:
        if task is not self._connecting:  # the client left; it was cancelled
            if not task.cancelled() and task.exception() is None:
                task.result().close()
            return
        self._connecting = None
        try:
            try:
                conn = task.result()
            except (OSError, TimeoutError, ValueError) as exc:
                self._connect_failed(exc)
                return
            self._send_on(conn, reused=False)
        except Exception as exc:
            self.fail(exc)

    def _send_on(self, conn: Http1Connection, *, reused: bool) -> None:
        self._conn = conn
        self._reused = reused
        self._reading_paused = False  # (a connection of its own: not paused)
        conn.begin(self)
        transport = conn.transport
        assert transport is not None
        if self._held:
            held, self._held, self._held_size = self._held, [], 0
            # before the write: a replica slow to read pauses the client again in it
            self._protocol.flow.resume_reading()
            transport.write(b"".join((self._head, *held)))
        else:
            transport.write(self._head)
        self._arm()
        if self._protocol.flow.write_paused:  # the client has not taken the last answer yet
            self.client_writable(False)

    def _connect_failed(self, exc: BaseException) -> None:
        replica, endpoint = self._replica, self._endpoint
        replica.failed()
        self._lane.prober.connect_failed(endpoint, replica, "a request could not connect")
        self._give_back_slot()
        nxt = endpoint.balancer.try_acquire(exclude=replica) if self._retry else None
        self._retry = False
        if nxt is None:
            log.info("app at %s not answering: %s", replica.upstream, _reason(exc))
            self._page(APP_NOT_ANSWERING)
            return
        self._replica = nxt
        self._holding = True
        self.start()

    # -- timers ---------------------------------------------------------------------------------
    def _arm(self) -> None:
        timeout = self._lane.read_timeout
        if timeout is not None:
            self._lane.timers.arm(self, timeout, self._timed_out)

    def _timed_out(self) -> None:
        conn = self._conn
        if conn is None or self.finished:
            return
        try:
            conn.detach()
            self._replica.failed()
            if self._answering:
                log.info("app at %s broke off: no answer in time", self._replica.upstream)
                self._break()
            else:
                log.info("app at %s not answering: no answer in time", self._replica.upstream)
                self._page(APP_TIMED_OUT)
        except Exception as exc:
            self.fail(exc)

    # -- the client's side (FastLaneProtocol calls these) -------------------------------------
    def client_body(self, data: bytes) -> None:
        conn = self._conn
        if conn is not None and conn.transport is not None:
            conn.transport.write(data)
            return
        self._held.append(data)
        self._held_size += len(data)
        if self._held_size > _HIGH_WATER:
            self._protocol.flow.pause_reading()

    def client_body_done(self) -> None:
        self._body_done = True

    def client_writable(self, writable: bool) -> None:
        """The client's send buffer drained (True) or filled up (False)."""
        conn = self._conn
        if conn is None or conn.transport is None or conn.closed:
            return
        if writable and self._reading_paused:
            self._reading_paused = False
            conn.transport.resume_reading()
            self._arm()
        elif not writable and not self._reading_paused:
            self._reading_paused = True
            conn.transport.pause_reading()
            self._lane.timers.disarm(self)  # a slow client is not a silent app

    def client_lost(self) -> None:
        """The client went away before the end: the exchange with the replica goes too."""
        self.disconnected = True
        if self.finished:
            return
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._conn is not None:
            self._conn.detach()
        self._release()

    # -- the replica's side (Http1Connection calls these) -------------------------------------
    def upstream_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._replica.responded(self._lane.loop.time() - self._sent_at, status)
        conn = self._conn
        assert conn is not None
        key = (status, self.keep_alive, *headers)
        memo = conn.head_memo  # a replica tends to answer with the same head each time
        if memo is None or memo[0] != key:
            memo = conn.head_memo = (key, *self._client_head(status, headers))
        self._out.append(memo[1])
        self._chunked = memo[2]
        self._answering = True

    def _client_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
        """The answer's head for the client, and whether its body goes out in chunks."""
        out = [STATUS_LINE[status]]
        for name, value in self._protocol.server_state.default_headers:
            out += (name, b": ", value, b"\r\n")
        framed = status in (204, 304)
        for name, value in response_headers(headers):
            if name == b"content-length":
                framed = True
            out += (name, b": ", value, b"\r\n")
        if not self.keep_alive:
            out.append(_CLOSE)
        if not framed:  # as uvicorn: no length given, so chunks
            out.append(_CHUNKED)
        out.append(b"\r\n")
        return b"".join(out), not framed

    def upstream_body(self, data: bytes) -> None:
        if self._chunked:
            self._out += (b"%x\r\n" % len(data), data, b"\r\n")
        else:
            self._out.append(data)

    def upstream_flush(self) -> None:
        if self.finished or not self._out:
            return
        self._arm()
        self._replica.traffic()  # a stream: the session is not idle
        self._write_out()  # may pause reading (client_writable) if the client is slow

    def upstream_done(self) -> None:
        if self._chunked:
            self._out.append(_LAST_CHUNK)
        self._write_out()
        conn = self._conn
        assert conn is not None
        if self._reading_paused and conn.transport is not None:
            self._reading_paused = False
            conn.transport.resume_reading()
        if conn.keep_alive and self._body_done and not conn.closed:
            self._lane.pool.put_back(self._replica.upstream or "", conn)
        else:
            conn.detach()
        self._complete()

    def upstream_lost(self, reason: str) -> None:
        if self.finished:
            return
        conn = self._conn
        if self._answering:
            self._replica.failed()
            log.info("app at %s broke off: %s", self._replica.upstream, reason)
            self._break()
            return
        self._conn = None
        if conn is not None and stale_retry(
            self._method,
            reused=self._reused,
            received_any=conn.received_any,
            has_body=self._has_body,
        ):
            self._connect()  # the pooled connection had gone stale: once on a fresh one
            return
        self._replica.failed()
        log.info("app at %s not answering: %s", self._replica.upstream, reason)
        self._page(APP_NOT_ANSWERING)

    def upstream_paused(self, paused: bool) -> None:
        """The replica reads the body slower than the client sends it."""
        if paused:
            self._protocol.flow.pause_reading()
        else:
            self._protocol.flow.resume_reading()

    # -- endings ---------------------------------------------------------------------------------
    def _write_out(self) -> None:
        out = self._out
        self._out = []
        self._transport.write_now(out[0] if len(out) == 1 else b"".join(out))

    def _give_back_slot(self) -> None:
        if self._holding:
            self._holding = False
            replica = self._replica
            replica.stats.finished()
            self._endpoint.balancer.release(replica)

    def _release(self) -> None:
        """The exchange is over: its timer, counters and balancer slot go."""
        self.finished = True
        self._lane.timers.disarm(self)
        self._give_back_slot()
        self._protocol.fast_done(self)

    def _complete(self) -> None:
        """The whole answer has been written: what uvicorn does at the end of a response."""
        self._release()
        self.response_complete = True
        if not self.keep_alive:
            self._transport.close()
        self._protocol.fast_response_complete(self._lane.timers)

    def _page(self, page: Page) -> None:
        """Answer with one of the proxy's pages instead of the replica's."""
        self._conn = None
        as_json = wants_json(self._accept, api_client=True)
        status, headers, body = page_response(page, as_json=as_json)
        out = [STATUS_LINE[status]]
        for name, value in (*self._protocol.server_state.default_headers, *headers):
            out += (name, b": ", value, b"\r\n")
        if not self.keep_alive:
            out.append(_CLOSE)
        out += (b"\r\n", body)
        self._transport.write_now(b"".join(out))
        self._complete()

    def _break(self) -> None:
        """The replica broke off mid-answer: the client's connection is cut, as uvicorn
        does when an ASGI app fails after starting its response (a cut body must show)."""
        self._out = []
        self._release()
        self._transport.close()

    def fail(self, exc: Exception) -> None:
        """A bug in the lane (not the replica's doing) surfaced in a callback: logged once
        (no message: it may hold request data), the replica's connection closed, the slot
        freed and the failure counted; the client gets the 502 page if nothing went to it
        yet, and its connection is closed either way."""
        if self._failed:  # failing again while failing: just cut the connection
            self._transport.close()
            return
        self._failed = True
        self._lane.failures += 1
        log.error(
            "fast lane: a request to %s failed on a bug in the proxy (%s)\n%s",
            self._replica.upstream,
            type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._conn is not None:
            self._conn.detach()
            self._conn = None
        if not self.finished:
            self._replica.stats.failed()
            self._release()
        self.keep_alive = False
        if self._answering or self.response_complete or self.disconnected:
            self._out = []
            self._transport.close()
        else:
            self._page(PROXY_FAILED)  # closes the connection after it (keep_alive is off)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no connection to the app in time"
    if isinstance(exc, OSError):
        return f"cannot connect to the app: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__
