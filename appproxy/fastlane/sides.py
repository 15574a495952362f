"""What an exchange needs of the two sides it stands between, as protocols.

    lane.py ──▶ protocol.py ──▶ exchange.py ──▶ sides.py, head.py, upstream.py
    (each imports only to its right, type-only imports included: pyproject.toml's
    import-linter contract "fast lane layers" fails on a cycle)

:class:`FastExchange` is started by ``FastLane`` on a ``FastLaneProtocol``; it reads
only these few members of them, so it needs neither module.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.server import ServerState

    from appproxy.backend.timers import CoarseTimers
    from appproxy.corked import CorkedTransport
    from appproxy.fastlane.upstream import UpstreamPool
    from appproxy.inference.prober import ReadinessProber

__all__ = ["ClientSide", "LaneSide"]


class LaneSide(Protocol):
    """The lane an exchange runs in (``FastLane``): its loop, pool, timers and counters."""

    loop: asyncio.AbstractEventLoop
    pool: UpstreamPool
    timers: CoarseTimers
    prober: ReadinessProber
    read_timeout: float | None
    failures: int


class ClientSide(Protocol):
    """The client's connection the exchange answers on (``FastLaneProtocol``)."""

    corked: CorkedTransport
    flow: FlowControl
    server_state: ServerState

    def fast_done(self, exchange: object) -> None: ...
    def fast_response_complete(self, timers: CoarseTimers) -> None: ...
