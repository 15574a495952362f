"""The proxy's own endpoints: ``/_jobgate/healthz`` and ``/_jobgate/metrics``.

``healthz`` answers 200 while the proxy can read routes from Redis (503 otherwise) and
says whether route invalidations are live. ``metrics`` is the Prometheus text format,
readable only from the networks in ``JOBGATE_PROXY_METRICS_ALLOW`` because its labels
name sessions.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from appproxy.asgi import Receive, Scope, Send
from appproxy.frontend.incoming import TrustedNetworks
from appproxy.metrics import ProxyMetrics
from appproxy.pages import NOT_FOUND, Page, send_page, wants_json
from appproxy.routes import RouteStore

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["InternalEndpoints"]

_METRICS_DENIED = Page(
    403,
    "metrics-denied",
    "Metrics are not public",
    "Read the proxy's metrics from an allowed network.",
)


class InternalEndpoints:
    def __init__(
        self,
        *,
        redis: Redis,
        routes: RouteStore,
        metrics: ProxyMetrics,
        metrics_allow: TrustedNetworks,
    ) -> None:
        self._redis = redis
        self._routes = routes
        self._metrics = metrics
        self._allow = metrics_allow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        accept = ""
        for name, value in scope["headers"]:
            if name == b"accept":
                accept = value.decode("latin-1")
        as_json = wants_json(accept)
        if scope["type"] != "http":
            return  # a WebSocket here: returning without accepting closes it (403)
        path = scope["path"]
        if path == "/_jobgate/healthz":
            await self._health(send)
        elif path == "/_jobgate/metrics":
            client = scope.get("client")
            if not self._allow.contains(client[0] if client else ""):
                await send_page(send, _METRICS_DENIED, as_json=as_json)
                return
            await _respond(send, 200, self._metrics.render(), ProxyMetrics.content_type.encode())
        else:
            await send_page(send, NOT_FOUND, as_json=as_json)

    async def _health(self, send: Send) -> None:
        try:
            await self._redis.ping()
            redis_ok = True
        except (RedisError, OSError):
            redis_ok = False
        body = {
            "status": "ok" if redis_ok else "unavailable",
            "redis": redis_ok,
            "route_invalidations": self._routes.live.is_set(),
        }
        await _respond(
            send, 200 if redis_ok else 503, json.dumps(body).encode(), b"application/json"
        )


async def _respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
