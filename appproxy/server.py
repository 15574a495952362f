"""Assembling and running the proxy: :func:`create_app` for tests, :func:`serve` for ``jobgate``.

    FastLaneProtocol ── the common /e/{name}/… request ──▶ FastLane (fastlane/) ──▶ replica
      │ anything else
    ProxyApp (lifespan: start/stop everything below)
      └─ InferenceGate (/e/{name}/…) ─ EndpointStore (Redis + pub/sub task), Balancer per
         │                             endpoint, ReadinessProber, LoadReporter (task)
         │  anything else ▼
      └─ SessionGate ── /_jobgate/* ─▶ InternalEndpoints (healthz, metrics)
            ├─ Authenticator ─ UserDirectory (gateway /v1/users/me), Redis (one-time tokens)
            ├─ RouteStore (Redis + cache, pub/sub task)
            ├─ HttpForwarder ─ ConnectionPool (lean HTTP/1.1 client, keep-alive)
            ├─ WebSocketForwarder ─ pool.connect, handshake, then a byte Tunnel (upgrade.py)
            └─ EndpointCounters ─ ActivityRecorder (Redis, flush task)

uvicorn runs it with uvloop and httptools when installed, without its own ``server`` and
``date`` headers (the app's pass through), with its access log off unless asked for,
and then with link tokens redacted. Two protocol classes replace uvicorn's defaults:
:class:`~appproxy.fastlane.protocol.FastLaneProtocol` (uvicorn's HTTP protocol with
corked writes: a response's head and body in one write) serves the common inference
request without the ASGI cycle (``fastlane/``), and
:class:`~appproxy.upgrade.UpgradeProtocol` tunnels WebSockets instead of parsing their
frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import re
import secrets
import signal
import socket
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from redis.asyncio import Redis

from appproxy.activity import ActivityRecorder
from appproxy.asgi import Receive, Scope, Send
from appproxy.backend.client import ConnectionPool
from appproxy.backend.http import HttpForwarder
from appproxy.backend.websocket import WebSocketForwarder
from appproxy.fastlane.compat import unsupported as unsupported_uvicorn
from appproxy.fastlane.lane import FastLane
from appproxy.fastlane.protocol import FastLaneProtocol
from appproxy.frontend.auth import Authenticator
from appproxy.frontend.gate import SessionGate
from appproxy.frontend.incoming import TrustedNetworks
from appproxy.frontend.inference import InferenceGate
from appproxy.frontend.users import UserDirectory
from appproxy.inference.prober import ReadinessProber
from appproxy.inference.reports import LoadReporter
from appproxy.inference.store import EndpointStore
from appproxy.internal import InternalEndpoints
from appproxy.metrics import ProxyMetrics
from appproxy.routes import RouteStore
from appproxy.settings import ProxySettings
from appproxy.upgrade import UpgradeProtocol
from contract.acl import PROXY_USER, proxy_redis_password
from plumbing.redis_login import with_login

__all__ = ["ProxyApp", "RedactTokens", "create_app", "redis_url", "serve"]

log = logging.getLogger(__name__)


def redis_url(s: ProxySettings) -> str:
    """The proxy's Redis URL: with ``JOBGATE_REDIS_USERS``, logged in as the proxies' own
    user (the gateway makes it), whatever login the configured URL names."""
    if not s.redis_users:
        return s.redis_url
    password = proxy_redis_password(s.proxy_secret.get_secret_value())
    return with_login(s.redis_url, PROXY_USER, password)


class ProxyApp:
    """The ASGI application; everything it needs is created at startup, in the server's loop."""

    def __init__(self, settings: ProxySettings, *, freeze_heap: bool = False) -> None:
        self.settings = settings
        self._freeze_heap = freeze_heap
        self.gate: InferenceGate | None = None
        #: read by FastLaneProtocol for each request (None: everything takes the ASGI path)
        self.fast_lane: FastLane | None = None
        self.routes: RouteStore | None = None
        self.endpoints: EndpointStore | None = None
        #: this process's name in readiness verdicts and load reports
        self.proxy_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.activity: ActivityRecorder | None = None
        self.metrics: ProxyMetrics | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self.gate is None:
            raise RuntimeError("the proxy has not started: run it with the ASGI lifespan on")
        await self.gate(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    raise
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        s = self.settings
        stack = contextlib.AsyncExitStack()
        self._stack = stack
        redis = Redis.from_url(redis_url(s), health_check_interval=30)
        stack.push_async_callback(redis.aclose)
        pool = ConnectionPool(
            connect_timeout=s.proxy_upstream_connect_timeout,
            read_timeout=s.proxy_upstream_read_timeout,
            max_idle_per_origin=s.proxy_upstream_pool_size,
        )
        stack.callback(pool.close)
        users = UserDirectory(s.gateway_url, ttl=s.proxy_user_cache_ttl)
        await users.start()
        stack.push_async_callback(users.close)
        self.routes = routes = RouteStore(
            redis, max_entries=s.proxy_route_cache_size, ttl=s.proxy_route_cache_ttl
        )
        self.activity = activity = ActivityRecorder(redis, interval=s.proxy_activity_interval)
        self.metrics = metrics = ProxyMetrics(activity.touch)
        for job in (routes.run(), activity.run()):
            stack.push_async_callback(_cancel, asyncio.create_task(job))
        auth = Authenticator(
            secret=s.proxy_secret.get_secret_value(),
            users=users,
            redis=redis,
            cookie_lifetime=s.proxy_cookie_lifetime,
            always_secure=s.secure_public_url,
        )
        internal = InternalEndpoints(
            redis=redis,
            routes=routes,
            metrics=metrics,
            metrics_allow=TrustedNetworks(s.proxy_metrics_allow),
        )
        http = HttpForwarder(pool)
        websocket = WebSocketForwarder(pool)
        trusted = TrustedNetworks(s.proxy_trusted_proxies)
        sessions = SessionGate(
            routes=routes,
            auth=auth,
            http=http,
            websocket=websocket,
            counters=metrics.counters,
            trusted=trusted,
            base_domain=s.proxy_base_domain,
            internal=internal,
            app_key=s.proxy_secret.get_secret_value(),
        )
        self.endpoints = endpoints = EndpointStore(redis, metrics.counters)
        prober = ReadinessProber(pool, redis, self.proxy_id)
        endpoints.set_replica_listener(prober.replicas_changed)
        metrics.add_inference(lambda: [(e.name, e.load, e.balancer.ready_count) for e in endpoints])
        stack.push_async_callback(endpoints.close)
        stack.push_async_callback(prober.close)
        reporter = LoadReporter(redis, endpoints, self.proxy_id)
        endpoints.set_load_listener(reporter.nudge)
        for job in (endpoints.run(), reporter.run()):
            stack.push_async_callback(_cancel, asyncio.create_task(job))
        self.gate = InferenceGate(
            store=endpoints,
            prober=prober,
            users=users,
            http=http,
            websocket=websocket,
            trusted=trusted,
            base_domain=s.proxy_base_domain,
            public_host=urlsplit(s.public_url).hostname or "",
            fallback=sessions,
        )
        lane_off = unsupported_uvicorn() if s.proxy_fast_lane else None
        if lane_off is not None:
            log.warning("fast lane off: %s; every request takes the ASGI path", lane_off)
        elif s.proxy_fast_lane:
            self.fast_lane = lane = FastLane(
                store=endpoints,
                prober=prober,
                trusted=trusted,
                base_domain=s.proxy_base_domain,
                public_host=urlsplit(s.public_url).hostname or "",
                connect_timeout=s.proxy_upstream_connect_timeout,
                read_timeout=s.proxy_upstream_read_timeout,
                pool_size=s.proxy_upstream_pool_size,
            )
            stack.callback(lane.close)
        if self._freeze_heap:
            # What exists now lives as long as the proxy process: keep the collector from
            # walking it again and again (a full collection of it took ~35 ms; wrk's p99
            # went from ~48 ms to ~12 ms). Only for a process of its own (serve()): in a
            # shared one, frozen garbage would never be collected.
            gc.freeze()

    async def shutdown(self) -> None:
        self.gate = None
        self.fast_lane = None
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def create_app(settings: ProxySettings, *, freeze_heap: bool = False) -> ProxyApp:
    return ProxyApp(settings, freeze_heap=freeze_heap)


class RedactTokens(logging.Filter):
    """Replaces link tokens in log records (uvicorn's access log prints full URLs)."""

    _TOKEN = re.compile(r"(jobgate_token=)[^&\s\"]+")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                self._TOKEN.sub(r"\1[redacted]", a) if isinstance(a, str) else a
                for a in record.args
            )
        if isinstance(record.msg, str):
            record.msg = self._TOKEN.sub(r"\1[redacted]", record.msg)
        return True


def uvicorn_config(
    settings: ProxySettings, *, freeze_heap: bool = False, **overrides: Any
) -> uvicorn.Config:
    """uvicorn settings for the proxy; ``overrides`` are for tests and benchmarks."""
    options: dict[str, Any] = {
        "host": settings.proxy_host,
        "port": settings.proxy_port,
        "lifespan": "on",
        "server_header": False,
        "date_header": False,
        "proxy_headers": False,
        "access_log": settings.proxy_access_log,
        "http": FastLaneProtocol,
        "ws": UpgradeProtocol,
        "log_level": "info",
    }
    options.update(overrides)
    config = uvicorn.Config(create_app(settings, freeze_heap=freeze_heap), **options)
    # uvicorn configured its loggers just now: the filter goes on after that
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactTokens) for f in access.filters):
        access.addFilter(RedactTokens())
    return config


def _run_worker(settings: ProxySettings, sock: socket.socket) -> None:
    uvicorn.Server(uvicorn_config(settings, freeze_heap=True)).run(sockets=[sock])


def serve(settings: ProxySettings | None = None) -> None:
    """Run the proxy until SIGINT/SIGTERM (``jobgate proxy serve`` calls this)."""
    settings = settings or ProxySettings()
    if settings.proxy_workers == 1:
        uvicorn.Server(uvicorn_config(settings, freeze_heap=True)).run()
        return
    # Several processes accept on one listening socket, as uvicorn's own workers do.
    family = socket.AF_INET6 if ":" in settings.proxy_host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.proxy_host, settings.proxy_port))
    sock.listen(2048)
    sock.set_inheritable(True)
    spawn = multiprocessing.get_context("spawn")
    workers = [
        spawn.Process(target=_run_worker, args=(settings, sock), daemon=False)
        for _ in range(settings.proxy_workers)
    ]
    for worker in workers:
        worker.start()

    def stop(signum: int, frame: object) -> None:
        for worker in workers:
            worker.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for worker in workers:
        worker.join()
    sock.close()
