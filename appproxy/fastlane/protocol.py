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
"""

from __future__ import annotations

import asyncio

from appproxy.corked import CorkedHttpProtocol, CorkedTransport
from appproxy.fastlane.exchange import FastExchange

__all__ = ["FastLaneProtocol"]


class FastLaneProtocol(CorkedHttpProtocol):
    """``Config(http=FastLaneProtocol)``; behaves as :class:`CorkedHttpProtocol` when the
    app has no fast lane."""

    fast: FastExchange | None = None
    corked: CorkedTransport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.corked = self.transport  # type: ignore[assignment]

    def on_headers_complete(self) -> None:
        lane = getattr(self.app, "fast_lane", None)
        if lane is None or not lane.try_start(self):
            super().on_headers_complete()

    def fast_done(self, exchange: FastExchange) -> None:
        if self.fast is exchange:
            self.fast = None

    def on_body(self, body: bytes) -> None:
        cycle: object = self.cycle  # a FastExchange stands where uvicorn keeps its cycle
        if isinstance(cycle, FastExchange):
            if not cycle.finished:
                cycle.client_body(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle: object = self.cycle
        if isinstance(cycle, FastExchange):
            cycle.client_body_done()
            return
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        fast = self.fast
        if fast is not None:
            fast.client_lost()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.fast is not None:
            self.fast.client_writable(False)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.fast is not None:
            self.fast.client_writable(True)
