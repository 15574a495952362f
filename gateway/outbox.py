"""What to send to Redis once a transaction committed: one type for every writer.

Services, the event handler, the reconciler and the scheduler's applier all decide
inside a database transaction and act on Redis only after it commits, so a rolled-back
transaction sends nothing and no job points at a row that does not exist. Each of them
collects its effects in an :class:`Outbox` and calls :meth:`Outbox.flush` after the
commit; tests read the outbox instead of Redis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from arq.connections import ArqRedis

from contract.keys import ENDPOINT_WAKE_CHANNEL
from contract.messages import StartKernel, StopKernel
from contract.routes import RouteRecord, end_route, write_route
from gateway import live
from gateway.db.models import Session
from gateway.queue import enqueue_start, enqueue_starts, enqueue_stop, request_schedule

__all__ = ["Outbox"]


@dataclass
class Outbox:
    #: a pass's start jobs, sent as one batch per node queue
    starts: list[tuple[str, StartKernel]] = field(default_factory=list)
    #: start jobs sent again one by one (id ``start:{kernel}``, idempotent)
    restarts: list[tuple[str, StartKernel]] = field(default_factory=list)
    stops: list[tuple[str, StopKernel]] = field(default_factory=list)
    #: (session id, event) for the session's live stream
    live: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: resource groups that need a scheduling pass
    schedule: set[str] = field(default_factory=set)
    #: app-proxy routes to write, and (session id, owner id) of routes that ended
    routes: list[RouteRecord] = field(default_factory=list)
    ended_routes: list[tuple[str, str]] = field(default_factory=list)
    #: endpoints one of whose replicas changed status: their controller reacts at once
    endpoints: set[str] = field(default_factory=set)

    def status(self, session: Session) -> None:
        """A live status event with the session's status as it is now (and, for an
        endpoint's replica, a poke of the endpoint controller)."""
        self.live.append((session.id, live.status_event(session)))
        if session.endpoint_id is not None:
            self.endpoints.add(session.endpoint_id)

    async def flush(self, pool: ArqRedis) -> None:
        """Send everything, in this order: jobs, live events, schedule requests, routes,
        endpoint pokes."""
        if self.starts:
            await enqueue_starts(pool, self.starts)
        for queue, start in self.restarts:
            await enqueue_start(pool, queue, start)
        for queue, stop in self.stops:
            await enqueue_stop(pool, queue, stop)
        await live.publish_many(pool, self.live)
        for group in sorted(self.schedule):
            await request_schedule(pool, group)
        for record in self.routes:
            await write_route(pool, record)
        for session_id, owner_id in self.ended_routes:
            await end_route(pool, session_id, owner_id=owner_id)
        for endpoint_id in sorted(self.endpoints):
            await pool.publish(ENDPOINT_WAKE_CHANNEL, endpoint_id)
