"""Load reports: every ``LOAD_REPORT_INTERVAL`` this proxy's view of each endpoint's load.

    every second, and at once when a queue empties (nudge):
                 one pipeline ─ HSET jobgate:endpoint-load:{id} {proxy_id} LoadReport
                               │   (in flight, queued, req/s: the endpoint's and per replica)
                               └ EXPIRE … LOAD_REPORT_TTL        (per endpoint it knows)

The autoscaler sums the fresh reports of all proxy processes. Idle endpoints are
reported too (zero load is what lets an endpoint scale down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

from appproxy.inference.store import Endpoint, EndpointStore
from contract.endpoints import LOAD_REPORT_INTERVAL, LOAD_REPORT_TTL, LoadReport
from contract.keys import endpoint_load_key

__all__ = ["LoadReporter", "load_report"]

log = logging.getLogger(__name__)
#: the least time between two reports when nudged
NUDGE_GAP_S = 0.1


def load_report(endpoint: Endpoint, now: float) -> LoadReport:
    load = endpoint.load
    clock = time.monotonic()
    replicas = endpoint.balancer.replicas.values()
    return LoadReport(
        at=now,
        in_flight=load.in_flight,
        queued=load.queued,
        requests_total=load.requests,
        rps=round(load.rate(clock), 3),
        per_replica_in_flight={r.session_id: r.in_flight for r in replicas},
        per_replica_rps={r.session_id: round(r.rate(clock), 3) for r in replicas},
    )


class LoadReporter:
    def __init__(
        self,
        redis: Redis,
        store: EndpointStore,
        proxy_id: str,
        *,
        interval: float = LOAD_REPORT_INTERVAL,
    ) -> None:
        self._redis = redis
        self._store = store
        self._proxy_id = proxy_id
        self._interval = interval
        self._nudged = asyncio.Event()

    def nudge(self) -> None:
        """Report now rather than at the next interval (a request left the queue: the
        figure `endpoints show` and the autoscaler read drops when it is answered)."""
        self._nudged.set()

    async def report(self) -> None:
        endpoints = list(self._store)
        if not endpoints:
            return
        now = time.time()
        ttl = max(1, math.ceil(LOAD_REPORT_TTL))
        async with self._redis.pipeline(transaction=False) as pipe:
            for endpoint in endpoints:
                key = endpoint_load_key(endpoint.route.endpoint_id)
                pipe.hset(key, self._proxy_id, load_report(endpoint, now).model_dump_json())
                pipe.expire(key, ttl)
            await pipe.execute()

    async def run(self) -> None:
        while True:
            self._nudged.clear()
            try:
                await self.report()
            except (RedisError, OSError) as exc:
                log.warning("cannot write load reports: %s", type(exc).__name__)
            reported = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudged.wait(), self._interval)
            # nudged: a queue that fills and empties all the time reports a few times a
            # second at most
            await asyncio.sleep(max(0.0, reported + NUDGE_GAP_S - time.monotonic()))
