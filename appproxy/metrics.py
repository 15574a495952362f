"""Per-endpoint counters (read by the autoscaler) and their Prometheus view.

:class:`EndpointCounters` keeps plain numbers per (session, app): requests, in-flight
calls, failures, last request time, and per app a latency histogram (time to the app's
response headers). The request path only increments them - no locks, no label look-ups,
a bisect for the histogram - and the Prometheus collector turns them into metric
families when ``/_jobgate/metrics`` is scraped. The inference autoscaler can read
:meth:`EndpointCounters.snapshot` directly, in process.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

__all__ = [
    "EndpointCounters",
    "EndpointSnapshot",
    "EndpointStats",
    "InferenceLoad",
    "Latency",
    "ProxyMetrics",
    "RequestRate",
]

_RATE_WINDOW: Final = 10.0  # seconds an inference endpoint's request rate is taken over
_IDLE_FORGET: Final = 86_400.0  # endpoints quiet this long drop out of the counters
BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Latency:
    """A histogram with fixed buckets (seconds); ``counts[-1]`` is the +Inf bucket."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    session_id: str
    app: str
    requests: int
    in_flight: int
    failures: int
    last_request_at: float


class EndpointStats:
    """The live counters of one endpoint; forwarders call these through ``Meter``."""

    __slots__ = (
        "_latency",
        "_touch",
        "app",
        "failures",
        "in_flight",
        "last_request_at",
        "requests",
        "session_id",
    )

    def __init__(
        self, session_id: str, app: str, latency: Latency, touch: Callable[[str], None]
    ) -> None:
        self.session_id = session_id
        self.app = app
        self.requests = 0
        self.in_flight = 0
        self.failures = 0
        self.last_request_at = 0.0
        self._latency = latency
        self._touch = touch

    def started(self) -> None:
        self.requests += 1
        self.in_flight += 1
        self.last_request_at = time.time()
        self._touch(self.session_id)

    def finished(self) -> None:
        self.in_flight -= 1

    def responded(self, seconds: float, status: int) -> None:
        self._latency.observe(seconds)

    def traffic(self) -> None:
        self._touch(self.session_id)

    def failed(self) -> None:
        self.failures += 1


class EndpointCounters:
    """All endpoints' counters; ``touch`` records session activity (idle timeouts)."""

    def __init__(self, touch: Callable[[str], None]) -> None:
        self._touch = touch
        self._stats: dict[tuple[str, str], EndpointStats] = {}
        self.latency: dict[str, Latency] = {}  # by app name: few, and they stay

    def stats(self, session_id: str, app: str) -> EndpointStats:
        key = (session_id, app)
        found = self._stats.get(key)
        if found is None:
            latency = self.latency.get(app)
            if latency is None:
                latency = self.latency[app] = Latency()
            found = self._stats[key] = EndpointStats(session_id, app, latency, self._touch)
        return found

    def forget(self, session_id: str) -> None:
        """Drop an ended session's endpoints (ones still carrying traffic stay)."""
        for key, stats in list(self._stats.items()):
            if key[0] == session_id and stats.in_flight == 0:
                del self._stats[key]

    def snapshot(self) -> list[EndpointSnapshot]:
        cutoff = time.time() - _IDLE_FORGET
        for key, stats in list(self._stats.items()):
            if stats.in_flight == 0 and stats.last_request_at < cutoff:
                del self._stats[key]
        return [
            EndpointSnapshot(
                s.session_id, s.app, s.requests, s.in_flight, s.failures, s.last_request_at
            )
            for s in self._stats.values()
        ]


class RequestRate:
    """Requests per second of a growing count, over about the last ``_RATE_WINDOW`` seconds
    (sampled once per call: call it at a steady pace, as the load reporter does)."""

    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def of(self, count: int, now: float) -> float:
        samples = self._samples
        samples.append((now, count))
        while len(samples) > 1 and now - samples[0][0] > _RATE_WINDOW:
            samples.popleft()
        first_at, first = samples[0]
        return (count - first) / (now - first_at) if now > first_at else 0.0


class InferenceLoad:
    """One inference endpoint's traffic through this proxy process (the replicas' own
    counters are :class:`EndpointStats` under app ``inference``); read by load reports."""

    __slots__ = ("_rate", "held", "in_flight", "queued", "rejected", "requests", "wakes")

    def __init__(self) -> None:
        self.requests = 0  # taken in (answered, refused for load, or still going)
        self.in_flight = 0  # on a replica now (a stream counts until it ends)
        self.queued = 0  # waiting for a replica slot, or for a replica at zero
        self.rejected = 0  # refused with 503: queue full, or no replica in time
        self.held = 0  # requests that arrived with no ready replica
        self.wakes = 0  # wake-ups this proxy asked the controller for
        self._rate = RequestRate()

    def rate(self, now: float) -> float:
        """Requests taken in per second (see :class:`RequestRate`)."""
        return self._rate.of(self.requests, now)


InferenceSource = Callable[[], Iterable[tuple[str, InferenceLoad, int]]]


class _InferenceCollector(Collector):
    """Per inference endpoint: (name, load, ready replicas) from ``source``."""

    def __init__(self, source: InferenceSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        labels = ["endpoint"]
        requests = CounterMetricFamily(
            "jobgate_endpoint_requests", "Requests taken in, by inference endpoint", labels=labels
        )
        rejected = CounterMetricFamily(
            "jobgate_endpoint_rejected",
            "Requests refused with 503 (queue full, no replica in time)",
            labels=labels,
        )
        held = CounterMetricFamily(
            "jobgate_endpoint_held",
            "Requests that arrived while no replica was ready",
            labels=labels,
        )
        in_flight = GaugeMetricFamily(
            "jobgate_endpoint_in_flight", "Requests on a replica now", labels=labels
        )
        queued = GaugeMetricFamily(
            "jobgate_endpoint_queued", "Requests waiting for a replica", labels=labels
        )
        ready = GaugeMetricFamily(
            "jobgate_endpoint_ready_replicas",
            "Replicas taking traffic (ready, serving)",
            labels=labels,
        )
        for name, load, ready_count in self._source():
            requests.add_metric([name], load.requests)
            rejected.add_metric([name], load.rejected)
            held.add_metric([name], load.held)
            in_flight.add_metric([name], load.in_flight)
            queued.add_metric([name], load.queued)
            ready.add_metric([name], ready_count)
        yield from (requests, rejected, held, in_flight, queued, ready)


class _CountersCollector(Collector):
    def __init__(self, counters: EndpointCounters) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        labels = ["session", "app"]
        requests = CounterMetricFamily(
            "jobgate_proxy_requests", "Requests and WebSockets taken in, by endpoint", labels=labels
        )
        in_flight = GaugeMetricFamily(
            "jobgate_proxy_in_flight",
            "Requests and WebSockets open now, by endpoint",
            labels=labels,
        )
        failures = CounterMetricFamily(
            "jobgate_proxy_upstream_failures",
            "Apps not answering or breaking off, by endpoint",
            labels=labels,
        )
        for snap in self._counters.snapshot():
            values = [snap.session_id, snap.app]
            requests.add_metric(values, snap.requests)
            in_flight.add_metric(values, snap.in_flight)
            failures.add_metric(values, snap.failures)
        latency = HistogramMetricFamily(
            "jobgate_proxy_upstream_latency_seconds",
            "Time from sending a request to an app to its response headers",
            labels=["app"],
        )
        for app, histogram in sorted(self._counters.latency.items()):
            latency.add_metric([app], histogram.cumulative(), histogram.total)
        yield requests
        yield in_flight
        yield failures
        yield latency


class ProxyMetrics:
    """One registry per proxy app (tests run several in one process)."""

    content_type: Final = CONTENT_TYPE_LATEST

    def __init__(self, touch: Callable[[str], None]) -> None:
        self.registry = CollectorRegistry()
        self.counters = EndpointCounters(touch)
        self.registry.register(_CountersCollector(self.counters))

    def add_inference(self, source: InferenceSource) -> None:
        """Export inference endpoints' counters too (``source`` is read at each scrape)."""
        self.registry.register(_InferenceCollector(source))

    def render(self) -> bytes:
        return generate_latest(self.registry)
