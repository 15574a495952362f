"""Which replica takes a request: least outstanding requests, power of two choices.

    acquire ─▶ a free slot on a ready, serving replica?  yes ─▶ p2c: of two random ones,
            │                                                 the one with fewer in flight
            ├─▶ ready replicas, all at their limit ─▶ FIFO queue (bounded: queue_limit)
            │                                        full ─▶ Overloaded (503 + Retry-After)
            └─▶ no ready replica ─▶ wake() once, hold in the same queue until one is ready
                                    or the wait runs out ─▶ NoReplica (503 + Retry-After)
    release ─▶ the slot goes to the first waiter (no request overtakes the queue)

Only replicas that this proxy's prober saw as ready and that the controller lists as
``serving`` take requests; ``starting`` ones are probed but wait for their promotion,
``draining`` ones finish what they have and get nothing new. One exception: while no
serving replica is ready (scaled to zero, or all of them down), a ready ``starting``
replica takes requests rather than letting them wait for the controller's next pass.
Everything here runs in the event loop without awaiting, except the wait in the queue.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

from appproxy.metrics import EndpointStats, InferenceLoad, RequestRate
from contract.endpoints import ReplicaTarget

__all__ = ["Balancer", "NoReplica", "Overloaded", "Replica"]

#: while no replica is ready, at least this many requests may be held (even with a
#: queue_limit of 0): a first burst waits for the first replica rather than failing
HOLD_AT_LEAST: Final = 32


class Overloaded(Exception):
    """Every ready replica is at its limit and the queue is full."""


class NoReplica(Exception):
    """The wait for a replica (a free slot, or the first ready one) ran out."""

    def __init__(self, *, held: bool) -> None:
        super().__init__("no replica became ready in time" if held else "no free replica in time")
        self.held = held  # True: waited for a replica at zero; False: queued behind busy ones


class Replica:
    """One replica as the balancer keeps it: the controller's view plus this proxy's; it is
    also the :class:`~appproxy.backend.upstream.Meter` of the requests sent to it."""

    __slots__ = (
        "_rate",
        "in_flight",
        "index",
        "on_failure",
        "ready",
        "reason",
        "revision",
        "seen_at",
        "session_id",
        "state",
        "stats",
        "taken",
        "upstream",
    )

    def __init__(self, target: ReplicaTarget, stats: EndpointStats) -> None:
        self.session_id = target.session_id
        self.index = target.index
        self.revision = target.revision
        self.upstream = target.upstream
        self.state = target.state
        self.stats = stats  # per-replica counters (requests, failures, latency)
        self.ready = False  # this proxy's readiness verdict
        self.reason = "not probed yet"
        self.in_flight = 0
        self.taken = 0  # requests this proxy sent to it
        self._rate = RequestRate()
        self.seen_at = time.monotonic()  # when this proxy first saw it (initial delay)
        #: called when a request to it fails (the prober checks it at once)
        self.on_failure: Callable[[Replica], None] | None = None

    # -- the forwarders' Meter: the replica's counters, and a failure hook -----------------
    def responded(self, seconds: float, status: int) -> None:
        self.stats.responded(seconds, status)

    def traffic(self) -> None:
        self.stats.traffic()

    def failed(self) -> None:
        self.stats.failed()
        if self.on_failure is not None:
            self.on_failure(self)

    def rate(self, now: float) -> float:
        """Requests sent to it per second (the load reporter samples it each interval)."""
        return self._rate.of(self.taken, now)

    @property
    def takes_traffic(self) -> bool:
        return self.ready and self.state == "serving" and self.upstream is not None

    @property
    def first_up(self) -> bool:
        """Ready but not yet promoted: takes traffic only while no serving one is ready."""
        return self.ready and self.state == "starting" and self.upstream is not None


class Balancer:
    """One endpoint's replicas, their in-flight counts and the queue of waiting requests."""

    def __init__(
        self,
        load: InferenceLoad,
        *,
        concurrency: int,
        queue_limit: int,
        wake: Callable[[], None],
        emptied: Callable[[], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.load = load
        #: told when the last waiter leaves the queue (the load report goes out at once,
        #: so `endpoints show` stops saying "queued" when the request is answered)
        self._emptied = emptied
        self.concurrency = concurrency
        self.queue_limit = queue_limit
        self.replicas: dict[str, Replica] = {}
        self._wake = wake
        self._rng = rng or random.Random()
        self._serving: list[Replica] = []  # ready and serving, recomputed on changes
        self._waiters: deque[asyncio.Future[Replica]] = deque()

    # -- the replica set ------------------------------------------------------------------
    def update(
        self, targets: Iterable[ReplicaTarget], stats: Callable[[str], EndpointStats]
    ) -> tuple[list[Replica], list[Replica]]:
        """Take the controller's replica list; returns (added or re-addressed, removed)."""
        fresh: dict[str, Replica] = {}
        changed: list[Replica] = []
        for target in targets:
            replica = self.replicas.get(target.session_id)
            if replica is None or replica.upstream != target.upstream:
                replica = Replica(target, stats(target.session_id))
                changed.append(replica)
            else:
                replica.state = target.state
                replica.index = target.index
                replica.revision = target.revision
            fresh[target.session_id] = replica
        removed = [r for sid, r in self.replicas.items() if fresh.get(sid) is not r]
        self.replicas = fresh
        self.refresh()
        return changed, removed

    def refresh(self) -> None:
        """Recompute who takes traffic (after readiness or state changes) and fill slots."""
        serving = [r for r in self.replicas.values() if r.takes_traffic]
        if not serving:  # at zero: the first ready replica answers before its promotion
            serving = [r for r in self.replicas.values() if r.first_up]
        self._serving = serving
        self._dispatch()

    @property
    def ready_count(self) -> int:
        return len(self._serving)

    # -- requests -------------------------------------------------------------------------
    def pick(self, exclude: Replica | None = None) -> Replica | None:
        """A free replica by power of two choices (least in flight of two), or None."""
        serving = self._serving
        limit = self.concurrency
        count = len(serving)
        if count >= 2 and exclude is None:
            first = self._rng.randrange(count)
            second = self._rng.randrange(count - 1)
            if second >= first:
                second += 1
            a, b = serving[first], serving[second]
            best = b if b.in_flight < a.in_flight else a
            if best.in_flight < limit:
                return best
        free = [r for r in serving if r.in_flight < limit and r is not exclude]
        if len(free) <= 1:
            return free[0] if free else None
        a, b = self._rng.sample(free, 2)
        return b if b.in_flight < a.in_flight else a

    def try_acquire(self, exclude: Replica | None = None) -> Replica | None:
        """A slot now, without queueing (the retry of a failed connection)."""
        replica = self.pick(exclude)
        if replica is not None:
            self._take(replica)
        return replica

    def try_admit(self) -> Replica | None:
        """A new request's slot if one is free now and nobody waits (counted as a request
        as :meth:`acquire` counts it); None: leave it to :meth:`acquire`."""
        if self._waiters:
            return None
        replica = self.pick()
        if replica is not None:
            self.load.requests += 1
            self._take(replica)
        return replica

    async def acquire(self, timeout: float) -> Replica:
        """A slot on a replica: at once, or after waiting in the queue (at most ``timeout``)."""
        self.load.requests += 1
        if not self._waiters:
            replica = self.pick()
            if replica is not None:
                self._take(replica)
                return replica
        at_zero = not self._serving
        limit = max(self.queue_limit, HOLD_AT_LEAST) if at_zero else self.queue_limit
        if self.load.queued >= limit:
            self.load.rejected += 1
            raise Overloaded
        if at_zero:
            self.load.held += 1
            self._wake()
        waiter: asyncio.Future[Replica] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.load.queued += 1
        try:
            await asyncio.wait((waiter,), timeout=timeout)
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        if waiter.done() and not waiter.cancelled():
            return waiter.result()
        self._abandon(waiter)
        self.load.rejected += 1
        raise NoReplica(held=not self._serving)

    def release(self, replica: Replica) -> None:
        replica.in_flight -= 1
        self.load.in_flight -= 1
        if self._waiters:
            self._dispatch()

    def _take(self, replica: Replica) -> None:
        replica.taken += 1
        replica.in_flight += 1
        self.load.in_flight += 1

    def _abandon(self, waiter: asyncio.Future[Replica]) -> None:
        """A waiter gave up (timeout, client gone): leave the queue, hand back a slot it got."""
        if not waiter.done():
            waiter.cancel()
            self._waiters.remove(waiter)
            self._left_queue()
        elif not waiter.cancelled():
            self.release(waiter.result())

    def _left_queue(self) -> None:
        self.load.queued -= 1
        if not self._waiters and self._emptied is not None:
            self._emptied()

    def _dispatch(self) -> None:
        """Give free slots to waiters, first come first served."""
        while self._waiters:
            replica = self.pick()
            if replica is None:
                return
            waiter = self._waiters.popleft()
            self._take(replica)
            self._left_queue()
            waiter.set_result(replica)

    def fail_waiters(self) -> None:
        """The endpoint is gone: every waiter gets NoReplica at its next look."""
        while self._waiters:
            waiter = self._waiters.popleft()
            waiter.cancel()
            self._left_queue()
