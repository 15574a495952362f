"""Readiness probes: this proxy's own verdict on every replica that has an address.

    per replica: [initial delay] ─▶ GET {upstream}{probe.path} (timeout) ─▶ 2xx/3xx?
                 success_threshold successes in a row ─▶ ready  ─┐
                 failure_threshold failures in a row  ─▶ not ready├─▶ balancer.refresh()
                 a request that cannot connect        ─▶ not ready┘   HSET readiness hash

A replica the controller lists as ``serving`` is probed at once (it was ready before
this proxy saw it: a restart must not wait out an initial delay); a ``starting`` one
after ``initial_delay_s``. Until its first success (for at most a minute) a replica is probed
every 50 ms rather than every ``interval_s``: the first request after zero waits for the server,
not for the probe's clock. With the default thresholds a replica that stops answering
leaves rotation within two probe intervals; one whose port refuses a request leaves at
once, and one that breaks off a request is probed at once (a failed probe then takes
it out: a replica killed under load stops getting requests within milliseconds). Every
verdict goes to ``endpoint_ready_key`` as a :class:`ReplicaHealth` so the
controller sees it (status, rolling updates, clearing the wake key); a verdict that
changes also pokes the controller on ``ENDPOINT_WAKE_CHANNEL``, so a replica that became
ready is promoted (and a rolling update moves on) at once, not at the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import TYPE_CHECKING, Final

from redis.exceptions import RedisError

from appproxy.backend.client import ConnectionPool, UpstreamUnavailable
from appproxy.backend.http1 import Origin
from appproxy.inference.balancer import Replica
from appproxy.inference.store import Endpoint
from contract.endpoints import ReplicaHealth
from contract.keys import ENDPOINT_WAKE_CHANNEL, endpoint_ready_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["ReadinessProber"]

log = logging.getLogger(__name__)

_USER_AGENT: Final = b"jobgate-proxy-probe"
_STARTUP_INTERVAL: Final = 0.05  # seconds between probes until a replica is first ready
_STARTUP_FOR: Final = 60.0  # ... for at most this long (then interval_s: a broken server)
_HASH_TTL_PROBES: Final = 30  # the readiness hash lives this many probe intervals unrefreshed


class ReadinessProber:
    """One probe task per replica with an upstream, started and stopped as routes change."""

    def __init__(self, pool: ConnectionPool, redis: Redis, proxy_id: str) -> None:
        self._pool = pool
        self._redis = redis
        self._proxy_id = proxy_id
        self._tasks: dict[Replica, asyncio.Task[None]] = {}
        self._checking: set[Replica] = set()  # replicas with a check_now under way

    def replicas_changed(
        self, endpoint: Endpoint, added: list[Replica], removed: list[Replica]
    ) -> None:
        """The store's listener: probe new replicas, stop probing removed ones."""
        for replica in removed:
            task = self._tasks.pop(replica, None)
            if task is not None:
                task.cancel()
        for replica in added:
            if replica.upstream is not None:
                replica.on_failure = functools.partial(self.check_now, endpoint)
                task = asyncio.create_task(self._probe_loop(endpoint, replica))
                task.add_done_callback(_report_crash)
                self._tasks[replica] = task

    def connect_failed(self, endpoint: Endpoint, replica: Replica, reason: str) -> None:
        """A request could not connect: out of rotation now; probes bring it back."""
        if replica.ready:
            self._verdict(endpoint, replica, ready=False, reason=reason)

    def check_now(self, endpoint: Endpoint, replica: Replica) -> None:
        """A request to the replica failed (a killed server drops what it had in flight):
        probe it now, and a failed probe takes it out of rotation without waiting for
        the failure threshold (the request was the first failure)."""
        if replica in self._checking or not replica.ready or replica not in self._tasks:
            return
        self._checking.add(replica)
        endpoint.spawn(self._check(endpoint, replica))

    async def _check(self, endpoint: Endpoint, replica: Replica) -> None:
        try:
            probe = endpoint.route.probe
            reason = await self._probe_once(replica, probe.path, probe.timeout_s)
        finally:
            self._checking.discard(replica)
        if reason is not None and replica.ready and replica in self._tasks:
            reason = f"after a failed request: {reason}"
            self._verdict(endpoint, replica, ready=False, reason=reason)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _probe_loop(self, endpoint: Endpoint, replica: Replica) -> None:
        probe = endpoint.route.probe
        if replica.state == "starting" and probe.initial_delay_s > 0:
            await asyncio.sleep(probe.initial_delay_s)
        successes = failures = 0
        ever_ready = False
        while True:
            probe = endpoint.route.probe  # settings may change with a route update
            started = time.monotonic()
            reason = await self._probe_once(replica, probe.path, probe.timeout_s)
            if reason is None:
                successes, failures = successes + 1, 0
                if not replica.ready and successes >= probe.success_threshold:
                    self._verdict(endpoint, replica, ready=True, reason="")
                elif replica.ready:
                    self._report(endpoint, replica)
            else:
                successes, failures = 0, failures + 1
                if replica.ready and failures >= probe.failure_threshold:
                    self._verdict(endpoint, replica, ready=False, reason=reason)
                else:
                    if not replica.ready:
                        replica.reason = reason
                    self._report(endpoint, replica)
            # until its first success a replica is starting up: probe it often, so that the
            # first request after zero does not wait out a whole interval
            ever_ready = ever_ready or replica.ready
            interval = probe.interval_s
            if not ever_ready and time.monotonic() - replica.seen_at < _STARTUP_FOR:
                interval = min(interval, _STARTUP_INTERVAL)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _probe_once(self, replica: Replica, path: str, timeout: float) -> str | None:
        """None when the replica answered 2xx/3xx, else why not."""
        assert replica.upstream is not None
        origin = Origin.parse(replica.upstream)
        headers = [(b"host", f"{origin.host}:{origin.port}".encode()), (b"user-agent", _USER_AGENT)]
        try:
            async with asyncio.timeout(timeout):
                response = await self._pool.request(b"GET", origin, path.encode(), headers)
                while await response.read():
                    pass
                response.release()
        except TimeoutError:
            return f"no answer from {path} within {timeout:g}s"
        except (UpstreamUnavailable, OSError, ValueError) as exc:
            return str(exc) or type(exc).__name__
        except Exception as exc:  # a broken answer is a failed probe, never a dead prober
            return f"bad answer from {path}: {type(exc).__name__}"
        if 200 <= response.status < 400:
            return None
        return f"HTTP {response.status} from {path}"

    def _verdict(self, endpoint: Endpoint, replica: Replica, *, ready: bool, reason: str) -> None:
        replica.ready = ready
        replica.reason = reason
        log.info(
            "endpoint %s replica %s (%s) is %s%s",
            endpoint.name,
            replica.index,
            replica.session_id,
            "ready" if ready else "not ready",
            f": {reason}" if reason else "",
        )
        endpoint.balancer.refresh()
        self._report(endpoint, replica, poke=True)

    def _report(self, endpoint: Endpoint, replica: Replica, *, poke: bool = False) -> None:
        health = ReplicaHealth(
            ready=replica.ready, at=time.time(), reason=replica.reason, proxy_id=self._proxy_id
        )
        endpoint_id = endpoint.route.endpoint_id
        ttl = max(60, int(endpoint.route.probe.interval_s * _HASH_TTL_PROBES))
        endpoint.spawn(self._write(endpoint_id, replica.session_id, health, ttl, poke=poke))

    async def _write(
        self, endpoint_id: str, field: str, health: ReplicaHealth, ttl: int, *, poke: bool
    ) -> None:
        key = endpoint_ready_key(endpoint_id)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hset(key, field, health.model_dump_json())
                pipe.expire(key, ttl)
                if poke:  # after the verdict is stored: the controller's tick reads it
                    pipe.publish(ENDPOINT_WAKE_CHANNEL, endpoint_id)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("cannot record readiness in Redis: %s", type(exc).__name__)


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("a readiness prober stopped", exc_info=task.exception())
