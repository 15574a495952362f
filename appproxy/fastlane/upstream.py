"""The fast lane's pool of keep-alive connections to replicas (``backend/http1.py``'s).

    UpstreamPool.take(origin) ── an idle connection (LIFO, dropped when stale) │ None
    UpstreamPool.put_back ──── kept idle, swept after ``idle_timeout``
    UpstreamPool.open(origin) ── a new one (coroutine: connect timeout, TLS for https)
    Http1Connection ── httptools ──▶ the exchange: upstream_head / _body / _done / _lost

Parsing, framing, the keep-alive decision and the pool's bookkeeping are the shared
core's (``appproxy.backend.http1``, as the ASGI path's client uses them); the lane adds
only how it opens a connection (no future per response: the exchange is the sink).
HEAD requests never come here.
"""

from __future__ import annotations

import asyncio
import ssl

from appproxy.backend.http1 import Http1Connection, IdlePool, Origin

__all__ = ["UpstreamPool"]


class UpstreamPool(IdlePool[str, Http1Connection]):
    """Idle keep-alive connections per origin (``http://host:port``)."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        max_idle_per_origin: int = 256,
        idle_timeout: float = 30.0,
    ) -> None:
        super().__init__(max_idle_per_origin=max_idle_per_origin, idle_timeout=idle_timeout)
        self.connect_timeout = connect_timeout
        self._tls: ssl.SSLContext | None = None

    async def open(self, origin: str) -> Http1Connection:
        """A new connection within the connect timeout (OSError or TimeoutError if not)."""
        parsed = Origin.parse(origin)  # ValueError for what is not http(s)://host[:port]
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if parsed.scheme == "https":
            tls = self._tls = self._tls or ssl.create_default_context()
        async with asyncio.timeout(self.connect_timeout):
            _, conn = await loop.create_connection(
                Http1Connection, parsed.host, parsed.port, ssl=tls
            )
        return conn
