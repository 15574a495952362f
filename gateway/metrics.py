"""Prometheus metrics of the gateway, its event consumer and the scheduler.

::

    request ─▶ HttpMetrics.middleware ─▶ FastAPI ... ─▶ response
                  └─ by (method, route template, status): count, latency histogram
    events queue ─▶ handle_events ─▶ ConsumerMetrics: batches by outcome, events
    GET /metrics (gateway app) ── refresh(): the events queue's depth and lag (Redis) ──▶ text
    scheduling pass ─▶ SchedulerMetrics.passed / failed: duration, placements, waiting by code
    GET :PORT/metrics (scheduler) ── refresh(): the scheduler queue's depth (Redis) ──▶ text

Routes are labelled by their *template* (``/v1/sessions/{session_id}``), never the raw
path, so a scan of random URLs adds one ``unmatched`` series, not one per URL. Every
name starts ``jobgate_``; the worker (``jobgate_worker_*``) and the app proxy
(``jobgate_proxy_*``) keep their own modules.

========================================================  ==============================  =========
metric                                                    labels                          type
========================================================  ==============================  =========
``jobgate_gateway_requests_total``                        method, route, status           counter
``jobgate_gateway_request_duration_seconds``              method, route                   histogram
``jobgate_consumer_batches_total``                        outcome (ok, failed)            counter
``jobgate_consumer_events_total``                                                         counter
``jobgate_consumer_queue_depth``                                                          gauge
``jobgate_consumer_lag_seconds``                                                          gauge
``jobgate_scheduler_pass_duration_seconds``               resource_group                  histogram
``jobgate_scheduler_passes_total``                        resource_group, outcome         counter
``jobgate_scheduler_placements_total``                    resource_group                  counter
``jobgate_scheduler_pending_sessions``                    resource_group, reason          gauge
``jobgate_scheduler_queue_depth``                                                         gauge
========================================================  ==============================  =========

``jobgate_consumer_lag_seconds`` is the age of the oldest event batch still waiting in
Redis (0 when none waits): how far behind the database is what the workers reported.
``jobgate_scheduler_pending_sessions`` holds, per group, the codes of the last pass
(``no-fit``, ``quota``, ``blocked`` ...; see plugins/scheduling/reasons.py).
``jobgate_usage_slot_seconds_total`` (:data:`USAGE_SECONDS`, one per process, exposed by
the gateway and the scheduler) grows when a usage record closes, in the process that
closed it: sum it over both (docs/usage.md); a running kernel is not in it until it ends.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from arq.connections import ArqRedis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract.keys import EVENTS_QUEUE, SCHEDULER_QUEUE
from plumbing.metrics_http import MetricsListener

__all__ = [
    "CONTENT_TYPE",
    "USAGE_SECONDS",
    "ConsumerMetrics",
    "HttpMetrics",
    "MetricsMiddleware",
    "MetricsServer",
    "SchedulerMetrics",
    "queue_depth_and_lag",
]

log = logging.getLogger(__name__)

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
UNMATCHED: Final = "unmatched"
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
PASS_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: slot-seconds of closed usage records (gateway/db/usage.py): one per process, not per
#: registry (the records close in database flushes, which know no app), so every
#: registry that serves metrics registers it too (the app's, the scheduler's).
#: Series: projects x slots; "" is the project of sessions without one.
USAGE_SECONDS: Final = Counter(
    "jobgate_usage_slot_seconds",
    "Slot-seconds of kernel attempts that ended (cpu: core-seconds, mem: byte-seconds, "
    "an accelerator slot: its amount times seconds), by project and slot.",
    ["project", "slot"],
    registry=None,
)


async def queue_depth_and_lag(pool: ArqRedis, queue: str) -> tuple[int, float]:
    """Jobs waiting in an arq queue, and how long the oldest has waited (seconds).

    arq scores a queued job by the time it may run (epoch ms), so the smallest score is
    the oldest job that is due; a deferred job (score in the future) counts as no lag.
    """
    depth = int(await pool.zcard(queue))
    oldest = await pool.zrange(queue, 0, 0, withscores=True)
    if not oldest:
        return depth, 0.0
    score = float(oldest[0][1])
    return depth, max(0.0, time.time() - score / 1000.0)


# ---- the HTTP API ---------------------------------------------------------------------
class HttpMetrics:
    """Requests by route template and status, and their latency."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "jobgate_gateway_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "jobgate_gateway_request_duration_seconds",
            "Time to answer an HTTP request (to the end of its body), by route template.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

        #: the series of each (method, route, status) seen: ``labels()`` costs more than
        #: the update itself, on every request
        self._series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        series = self._series.get((method, route, status))
        if series is None:
            series = self._series[(method, route, status)] = (
                self.requests.labels(method, route, str(status)),
                self.duration.labels(method, route),
            )
        series[0].inc()
        series[1].observe(seconds)


def route_template(scope: Scope) -> str:
    """The matched route's path template (set on the scope by the router), or ``unmatched``."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and path:
        return str(scope.get("root_path", "")) + path
    return UNMATCHED


class MetricsMiddleware:
    """Pure ASGI: times every HTTP request and counts it once its response ended.

    A long stream (SSE logs) is counted when it closes; a request that raised counts
    as 500, the status the client got from the server's error handler.
    """

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.observe(
                scope["method"], route_template(scope), status, time.perf_counter() - started
            )


# ---- the event consumer -----------------------------------------------------------------
class ConsumerMetrics:
    """What the gateway's event consumer took from the events queue, and what waits."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.batches = Counter(
            "jobgate_consumer_batches",
            "Event batches handled, by outcome (a failed batch is retried by arq).",
            ["outcome"],
            registry=registry,
        )
        self.events = Counter(
            "jobgate_consumer_events",
            "Kernel events and node registrations applied to the database.",
            registry=registry,
        )
        self.depth = Gauge(
            "jobgate_consumer_queue_depth",
            "Event batches waiting in Redis for a consumer.",
            registry=registry,
        )
        self.lag = Gauge(
            "jobgate_consumer_lag_seconds",
            "Age of the oldest event batch still waiting (0: none waits).",
            registry=registry,
        )
        for outcome in ("ok", "failed"):
            self.batches.labels(outcome)

    def handled(self, events: int, ok: bool) -> None:
        self.batches.labels("ok" if ok else "failed").inc()
        if ok:
            self.events.inc(events)

    async def refresh(self, pool: ArqRedis) -> None:
        depth, lag = await queue_depth_and_lag(pool, EVENTS_QUEUE)
        self.depth.set(depth)
        self.lag.set(lag)


# ---- the scheduler ----------------------------------------------------------------------
class _PendingCollector(Collector):
    """Sessions left waiting by each group's last pass, by reason code."""

    def __init__(self) -> None:
        self.by_group: dict[str, Mapping[str, int]] = {}

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "jobgate_scheduler_pending_sessions",
            "Sessions the last pass of a resource group left pending, by reason code.",
            labels=["resource_group", "reason"],
        )
        for group, codes in sorted(self.by_group.items()):
            for code, count in sorted(codes.items()):
                family.add_metric([group, code], count)
        yield family


class SchedulerMetrics:
    """Scheduling passes: duration, outcome, placements, and why sessions still wait."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = registry or CollectorRegistry()
        self.duration = Histogram(
            "jobgate_scheduler_pass_duration_seconds",
            "Time of one scheduling pass (snapshot, plan, apply), by resource group.",
            ["resource_group"],
            buckets=PASS_BUCKETS,
            registry=registry,
        )
        self.passes = Counter(
            "jobgate_scheduler_passes",
            "Scheduling passes by resource group and outcome (ok, failed).",
            ["resource_group", "outcome"],
            registry=registry,
        )
        self.placements = Counter(
            "jobgate_scheduler_placements",
            "Sessions placed on nodes, by resource group.",
            ["resource_group"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "jobgate_scheduler_queue_depth",
            "Jobs waiting in the scheduler's queue (schedule requests).",
            registry=registry,
        )
        self._pending = _PendingCollector()
        registry.register(self._pending)
        registry.register(USAGE_SECONDS)  # the reconciler closes records of lost nodes

    def passed(self, group: str, seconds: float, placed: int, waiting: Mapping[str, int]) -> None:
        self.duration.labels(group).observe(seconds)
        self.passes.labels(group, "ok").inc()
        self.placements.labels(group).inc(placed)
        self._pending.by_group[group] = dict(waiting)

    def failed(self, group: str, seconds: float) -> None:
        self.duration.labels(group).observe(seconds)
        self.passes.labels(group, "failed").inc()

    async def refresh(self, pool: ArqRedis) -> None:
        depth, _ = await queue_depth_and_lag(pool, SCHEDULER_QUEUE)
        self.queue_depth.set(depth)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def waiting_codes(codes: Mapping[str, str], waiting: Iterable[str]) -> dict[str, int]:
    """Count the reason codes of the sessions a plan left waiting."""
    return dict(Tally(codes.get(sid, "other") for sid in waiting))


class MetricsServer:
    """``GET /metrics`` on a port of its own (the scheduler: it has no HTTP app)."""

    def __init__(self, metrics: SchedulerMetrics, pool: ArqRedis) -> None:
        self.metrics = metrics
        self.pool = pool
        self._listener = MetricsListener("scheduler metrics", self._render, CONTENT_TYPE)

    async def start(self, host: str, port: int | None) -> None:
        await self._listener.start(host, port)

    async def _render(self) -> bytes:
        try:
            await self.metrics.refresh(self.pool)
        except Exception as exc:  # Redis away: still serve what this process knows
            log.warning("scheduler metrics: cannot read the queue: %s", exc)
        return self.metrics.render()

    async def close(self) -> None:
        await self._listener.close()
