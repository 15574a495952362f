"""Prometheus metrics of the node daemon, served when ``JOBGATE_WORKER_METRICS_PORT`` is set.

::

    KernelRun ─ events ─▶ MeteredReporter ──report()──▶ starts / exits by outcome
                                  └──── once Redis took them ──▶ events shipped by kind
    KernelLogUploader ─▶ MeteredLogClient ── bytes the gateway acknowledged ──▶ log bytes
    NodeAgent.stats / .kernels ─────── read when scraped ──▶ device gauges, kernels running
                                                                   │
                          GET http://HOST:PORT/metrics ◀───────────┘  (aiohttp, in the loop)

Counting costs a dictionary look-up per event and is always on; serving is off unless
a port is configured (``JOBGATE_WORKER_METRICS_HOST`` defaults to 127.0.0.1: set it
to 0.0.0.0 for a Prometheus on another machine). Every figure comes from what the
worker already holds, so a scrape does no I/O: device utilisation and memory are the
accelerator stats sampled with each heartbeat.

=========================================================  ================  ==============
metric                                                     labels            type
=========================================================  ================  ==============
``jobgate_worker_device_utilization_percent``              node, device      gauge
``jobgate_worker_device_memory_used_bytes``                node, device      gauge
``jobgate_worker_device_memory_total_bytes``               node, device      gauge
``jobgate_worker_kernels_running``                         node              gauge
``jobgate_worker_kernel_starts_total``                     outcome           counter
``jobgate_worker_kernel_exits_total``                      outcome           counter
``jobgate_worker_events_shipped_total``                    kind              counter
``jobgate_worker_log_bytes_shipped_total``                 stream            counter
=========================================================  ================  ==============

Start outcomes: ``started``, ``failed`` (the platform could not start it), ``cancelled``
(stopped before it started). Exit outcomes: ``succeeded``, ``failed`` (non-zero exit),
``stopped`` (after a stop request), ``oom_killed``, ``lost`` (its container vanished
while the worker was down).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from arq.connections import ArqRedis
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from contract.messages import EventBatch, ImageCommitted, KernelEvent, NodeInfo
from plugins.runtimes.base import LogChunk
from plumbing.metrics_http import MetricsListener
from workers.reporter import EventReporter, Report
from workers.shipper import LogClient

__all__ = [
    "EXIT_OUTCOMES",
    "START_OUTCOMES",
    "MeteredLogClient",
    "MeteredReporter",
    "MetricsError",
    "NodeView",
    "RunView",
    "WorkerMetrics",
    "exit_outcome",
    "start_outcome",
]

log = logging.getLogger(__name__)

START_OUTCOMES = ("started", "failed", "deferred", "cancelled")
EXIT_OUTCOMES = ("succeeded", "failed", "stopped", "oom_killed", "lost")
_STARTS = {"running": "started", "start_failed": "failed", "not_started": "cancelled"}


class MetricsError(RuntimeError):
    """The metrics endpoint cannot be served (the port is taken ...)."""


def start_outcome(event: KernelEvent) -> str | None:
    """How a start ended, for events that end one (None for the others)."""
    if event.kind == "start_failed" and event.deferred:
        return "deferred"  # not now: its session is placed again
    return _STARTS.get(event.kind)


def exit_outcome(event: KernelEvent) -> str | None:
    """How a kernel that ran ended, for events that say so (None for the others)."""
    if event.kind == "lost":
        return "lost"
    if event.kind != "exited":
        return None
    if event.oom_killed:
        return "oom_killed"
    if event.requested_stop:
        return "stopped"
    return "succeeded" if event.exit_code == 0 else "failed"


class RunView(Protocol):
    """What the collector reads of a :class:`workers.kernel.KernelRun`."""

    @property
    def handle(self) -> object: ...  # None until its container started

    @property
    def done(self) -> asyncio.Event: ...


class NodeView(Protocol):
    """What the collector reads of a :class:`workers.node.NodeAgent`."""

    @property
    def kernels(self) -> Mapping[str, RunView]: ...

    @property
    def stats(self) -> Sequence[Mapping[str, Any]]: ...


class _NodeCollector(Collector):
    """Gauges built at scrape time from the agent's own state (no I/O, no locks)."""

    def __init__(self, nodes: Callable[[], Mapping[str, NodeView]]) -> None:
        self._nodes = nodes

    def collect(self) -> Iterator[Metric]:
        labels = ["node", "device"]
        util = GaugeMetricFamily(
            "jobgate_worker_device_utilization_percent",
            "Percent of the device's processing units busy (last heartbeat sample).",
            labels=labels,
        )
        used = GaugeMetricFamily(
            "jobgate_worker_device_memory_used_bytes",
            "Device memory in use (last heartbeat sample).",
            labels=labels,
        )
        total = GaugeMetricFamily(
            "jobgate_worker_device_memory_total_bytes", "Device memory in all.", labels=labels
        )
        running = GaugeMetricFamily(
            "jobgate_worker_kernels_running",
            "Kernels whose container runs on this node now.",
            labels=["node"],
        )
        for node_id, node in sorted(self._nodes().items()):
            runs = list(node.kernels.values())
            running.add_metric(
                [node_id], sum(r.handle is not None and not r.done.is_set() for r in runs)
            )
            for row in list(node.stats):
                key = [node_id, str(row["device_id"])]
                util.add_metric(key, float(row["utilization"]))
                used.add_metric(key, float(row["memory_used"]))
                total.add_metric(key, float(row["memory_total"]))
        yield from (util, used, total, running)


class WorkerMetrics:
    """The worker's registry, its counters, and the optional HTTP endpoint."""

    def __init__(self, nodes: Callable[[], Mapping[str, NodeView]]) -> None:
        self.registry = CollectorRegistry()
        self.starts = Counter(
            "jobgate_worker_kernel_starts",
            "Kernel starts by outcome: started, failed, deferred, cancelled.",
            ["outcome"],
            registry=self.registry,
        )
        self.exits = Counter(
            "jobgate_worker_kernel_exits",
            "Kernel ends by outcome: succeeded, failed, stopped, oom_killed, lost.",
            ["outcome"],
            registry=self.registry,
        )
        self.events = Counter(
            "jobgate_worker_events_shipped",
            "Kernel events and registrations handed to Redis, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.log_bytes = Counter(
            "jobgate_worker_log_bytes_shipped",
            "Bytes of session output the gateway acknowledged, by stream.",
            ["stream"],
            registry=self.registry,
        )
        for outcome in START_OUTCOMES:  # present at 0 from the first scrape
            self.starts.labels(outcome)
        for outcome in EXIT_OUTCOMES:
            self.exits.labels(outcome)
        self.registry.register(_NodeCollector(nodes))
        self._listener = MetricsListener(
            "worker metrics", self._render, CONTENT_TYPE_LATEST, MetricsError
        )

    # -- counting ---------------------------------------------------------------------
    def observe(self, event: Report) -> None:
        """An event as the worker reports it: starts and exits are counted here."""
        if not isinstance(event, KernelEvent):  # registrations, commits
            return
        if (outcome := start_outcome(event)) is not None:
            self.starts.labels(outcome).inc()
        if (outcome := exit_outcome(event)) is not None:
            self.exits.labels(outcome).inc()

    def shipped(self, items: Sequence[Report]) -> None:
        for item in items:
            if isinstance(item, EventBatch):  # a registration with the ends it carries
                kind = "registration"
            elif isinstance(item, ImageCommitted):
                kind = "image_committed"
            else:
                kind = "registration" if isinstance(item, NodeInfo) else item.kind
            self.events.labels(kind).inc()

    def logs_shipped(self, chunks: Sequence[LogChunk]) -> None:
        for chunk in chunks:
            self.log_bytes.labels(chunk.stream).inc(len(chunk.data))

    def reporter(self, pool: ArqRedis, node_id: str | None = None) -> EventReporter:
        return MeteredReporter(pool, self, node_id)

    def log_client(self, gateway_url: str, credential: str) -> LogClient:
        return MeteredLogClient(gateway_url, credential, self)

    def render(self) -> bytes:
        """The exposition text, as a scrape gets it."""
        return generate_latest(self.registry)

    # -- serving ----------------------------------------------------------------------
    async def serve(self, host: str, port: int | None) -> None:
        """Serve ``/metrics`` on *host*:*port*; None: not served."""
        await self._listener.start(host, port)

    async def _render(self) -> bytes:
        return self.render()

    async def close(self) -> None:
        await self._listener.close()


class MeteredReporter(EventReporter):
    """An :class:`EventReporter` that counts what it is given and what it shipped."""

    def __init__(self, pool: ArqRedis, metrics: WorkerMetrics, node_id: str | None) -> None:
        super().__init__(pool, node_id=node_id)
        self.metrics = metrics

    def report(self, event: Report) -> None:
        self.metrics.observe(event)
        super().report(event)

    async def _send(self, items: list[Report]) -> None:
        # the parent's _send returns only once every batch is in Redis (it retries)
        await super()._send(items)
        self.metrics.shipped(items)


class MeteredLogClient(LogClient):
    """A :class:`LogClient` that counts the bytes of every upload the gateway took."""

    def __init__(self, gateway_url: str, credential: str, metrics: WorkerMetrics) -> None:
        super().__init__(gateway_url, credential)
        self.metrics = metrics

    async def upload(
        self, kernel_id: str, session_id: str, chunks: list[LogChunk], attempt: int | None = None
    ) -> dict[str, int]:
        offsets = await super().upload(kernel_id, session_id, chunks, attempt)
        self.metrics.logs_shipped(chunks)
        return offsets
