"""uvicorn's HTTP protocol with a fast lane: the common inference request skips ASGI.

    data ─▶ httptools ─▶ on_headers_complete ─▶ FastLane.try_start(self)
                            │ taken: a FastExchange becomes ``self.cycle``; body chunks,
                            │        disconnects and write back-pressure go to it
                            └ not taken: uvicorn's own handling (RequestResponseCycle,
                                         an ASGI task, the app), unchanged

Everything the lane does not take - sessions' ``/s/`` traffic, WebSockets, queued or
held requests, refusals, owner API keys, HTTP/1.0, ``Expect: 100-continue`` - runs
exactly as before. The lane is the running app's ``fast_lane`` (None: off, or not
started), looked up per request.

Each callback that passes something to an exchange contains a failure there
(:meth:`FastExchange.fail`): a bug in the lane never reaches httptools, which would
report it as an invalid request (uvicorn's 400, written after whatever went out).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from appproxy.backend.timers import CoarseTimers
from appproxy.corked import CorkedHttpProtocol, CorkedTransport
from appproxy.fastlane.exchange import FastExchange

if TYPE_CHECKING:
    from appproxy.fastlane.head import ParsedHead

__all__ = ["FastLaneProtocol", "Lane"]


class Lane(Protocol):
    """The app's ``fast_lane`` (``lane.FastLane``), as this protocol calls it."""

    def try_start(self, protocol: FastLaneProtocol) -> bool: ...
    def declined(self, protocol: FastLaneProtocol, exc: Exception) -> None: ...


class FastLaneProtocol(CorkedHttpProtocol):
    """``Config(http=FastLaneProtocol)``; behaves as :class:`CorkedHttpProtocol` when the
    app has no fast lane."""

    fast: FastExchange | None = None  # the exchange in progress
    parsed: ParsedHead | None = None  # the last request head the lane looked at
    corked: CorkedTransport
    _idle_timers: CoarseTimers | None = None  # keep-alive timeout armed after a fast exchange

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.corked = self.transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._idle_timers is not None:
            self._idle_timers.disarm(self)
            self._idle_timers = None
        super().data_received(data)

    def on_headers_complete(self) -> None:
        lane: Lane | None = getattr(self.app, "fast_lane", None)
        if lane is not None:
            try:
                if lane.try_start(self):
                    return
            except Exception as exc:  # before a slot was taken (the exchange contains its own)
                lane.declined(self, exc)
        super().on_headers_complete()

    def fast_done(self, exchange: object) -> None:
        if self.fast is exchange:
            self.fast = None

    def fast_response_complete(self, timers: CoarseTimers) -> None:
        """uvicorn's ``on_response_complete`` after a fast exchange, with the keep-alive
        timeout on the lane's coarse timers (a loop timer per response costs more)."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._idle_timers = timers
            timers.arm(self, self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def on_body(self, body: bytes) -> None:
        cycle: object = self.cycle  # a FastExchange stands where uvicorn keeps its cycle
        if isinstance(cycle, FastExchange):
            if not cycle.finished:
                try:
                    cycle.client_body(body)
                except Exception as exc:
                    cycle.fail(exc)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle: object = self.cycle
        if isinstance(cycle, FastExchange):
            cycle.client_body_done()  # sets a flag
            return
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_timers is not None:
            self._idle_timers.disarm(self)
            self._idle_timers = None
        fast = self.fast
        if fast is not None:
            try:
                fast.client_lost()
            except Exception as error:
                fast.fail(error)
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._writable(False)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._writable(True)

    def _writable(self, writable: bool) -> None:
        fast = self.fast
        if fast is not None:
            try:
                fast.client_writable(writable)
            except Exception as exc:
                fast.fail(exc)
