"""The reconciler: make Redis and the nodes agree with the database again.

Redis is transport; the database is the truth. So, every few seconds:

* a kernel placed (SCHEDULED) whose start job may have been lost gets it again, and a
  kernel of a TERMINATING session its stop job (job ids make both idempotent);
* a node whose heartbeat stopped: kernels placed there that never started go back to
  PENDING after ``requeue_after_s``; sessions running there end ERROR after
  ``node_lost_timeout_s`` ("node n1 stopped responding");
* alive nodes get ``last_seen_at`` refreshed (one UPDATE for all of them);
* interactive sessions idle past their timeout (no traffic through the app proxy, from
  the activity keys it writes) are terminated, and routes Redis lost are written again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from contract.keys import activity_key, route_key
from contract.routes import RouteRecord
from gateway.apps import route_for
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.locks import lock_rows
from gateway.db.models import Kernel, Node, Session
from gateway.db.transitions import transition
from gateway.domain.idle import idle_deadline, idle_timeout
from gateway.domain.status import TERMINAL, KernelStatus, SessionStatus, can_transition
from gateway.lifecycle import begin_termination, end_kernel, release, stop_job, stop_kernels
from gateway.outbox import Outbox
from gateway.scheduler.applier import start_job
from gateway.scheduler.snapshot import alive_nodes

__all__ = ["Activity", "Reconciler"]

log = logging.getLogger(__name__)
S = SessionStatus
K = KernelStatus
#: when the app proxy last carried traffic for each of these sessions (None: never)
Activity = Callable[[Sequence[str]], Awaitable[list[datetime | None]]]


class Reconciler:
    def __init__(self, db: SessionFactory, pool: ArqRedis, settings: GatewaySettings) -> None:
        self.db = db
        self.pool = pool
        self.settings = settings

    async def run(self) -> None:
        """One tick: read liveness and activity from Redis, decide, then send."""
        async with self.db() as db:
            nodes = {n.id: n for n in (await db.execute(select(Node))).scalars()}
        alive = await alive_nodes(self.pool, list(nodes))
        outbox = await self.reconcile(nodes, alive, self._activity)
        async with self.db() as db:
            outbox.routes += await self._routes(db, nodes)
        await outbox.flush(self.pool)

    async def reconcile(
        self, nodes: dict[str, Node], alive: set[str], activity: Activity
    ) -> Outbox:
        """The database side of a tick. Each task in a short transaction of its own,
        locking rows in the one order (sessions, kernels, nodes; by id), so the reconciler
        never deadlocks a pass."""
        outbox = Outbox()
        async with self.db() as db, db.begin():
            now = await db_now(db)
            await _touch(db, Node, sorted(alive), last_seen_at=now)
        async with self.db() as db, db.begin():
            await self._requeue(db, nodes, alive, now, outbox)
        async with self.db() as db, db.begin():
            await self._lost_nodes(db, nodes, alive, now, outbox)
        async with self.db() as db, db.begin():
            await self._idle(db, now, activity, outbox)
        return outbox

    async def _activity(self, session_ids: Sequence[str]) -> list[datetime | None]:
        """From the activity keys the app proxy writes."""
        seen = await self.pool.mget([activity_key(sid) for sid in session_ids])
        return [None if raw is None else datetime.fromtimestamp(float(raw), UTC) for raw in seen]

    async def _idle(
        self, db: AsyncSession, now: datetime, activity: Activity, outbox: Outbox
    ) -> None:
        """Terminate interactive sessions that carried no traffic for their idle timeout."""
        rows = await lock_rows(
            db, Session, (Session.type == "interactive") & (Session.status == S.RUNNING)
        )
        default = self.settings.idle_timeout_s
        watched = [s for s in rows if idle_timeout(s.idle_timeout_s, default)]
        if not watched:
            return
        seen = await activity([s.id for s in watched])
        for session, last in zip(watched, seen, strict=True):
            timeout = idle_timeout(session.idle_timeout_s, default) or 0
            deadline = idle_deadline(session.started_at or now, last, timeout)
            if deadline is None or now < deadline:
                continue
            reason = f"idle for {_minutes(timeout)} (no traffic through the app proxy)"
            await begin_termination(
                db,
                session,
                outbox,
                cancel_reason=reason,
                stop_reason=reason,
                grace=self.settings.stop_grace_s,
            )

    async def _routes(self, db: AsyncSession, nodes: dict[str, Node]) -> list[RouteRecord]:
        """Routes of running interactive sessions that Redis lost (write them again)."""
        result = await db.execute(
            select(Session, Kernel)
            .join(Kernel, Kernel.session_id == Session.id)
            .where(Session.type == "interactive", Session.status == S.RUNNING)
        )
        rows = [(s, k) for s, k in result if s.apps and k.ports and k.node_id in nodes]
        if not rows:
            return []
        present = await self.pool.mget([route_key(s.id) for s, _ in rows])
        return [
            record
            for (session, kernel), raw in zip(rows, present, strict=True)
            if raw is None
            and (record := route_for(session, kernel, nodes[kernel.node_id or ""])) is not None
        ]

    async def _requeue(
        self,
        db: AsyncSession,
        nodes: dict[str, Node],
        alive: set[str],
        now: datetime,
        outbox: Outbox,
    ) -> None:
        cutoff = now - timedelta(seconds=self.settings.requeue_after_s)
        touched: list[str] = []
        rows = await db.execute(
            select(Kernel, Session)
            .join(Session, Session.id == Kernel.session_id)
            .where(
                Kernel.ended_at.is_(None),
                Kernel.node_id.is_not(None),
                Kernel.updated_at < cutoff,
                Session.status.in_([S.SCHEDULED, S.TERMINATING]),
            )
        )
        for kernel, session in rows:
            node = nodes.get(kernel.node_id or "")
            if node is None or node.id not in alive:
                continue
            touched.append(kernel.id)
            if session.status == S.TERMINATING:
                job = stop_job(kernel.id, session.id, node.id, "terminated on request")
                outbox.stops.append((node.queue, job))
            elif kernel.status == K.SCHEDULED:
                outbox.restarts.append((node.queue, start_job(session, kernel)))
        await _touch(db, Kernel, sorted(touched), updated_at=now)

    async def _lost_nodes(
        self,
        db: AsyncSession,
        nodes: dict[str, Node],
        alive: set[str],
        now: datetime,
        outbox: Outbox,
    ) -> None:
        lost_ids = sorted(n.id for n in nodes.values() if n.id not in alive)
        if not lost_ids:
            return
        on_lost = (Kernel.node_id.in_(lost_ids)) & (Kernel.ended_at.is_(None))
        session_ids = sorted(
            set((await db.execute(select(Kernel.session_id).where(on_lost))).scalars())
        )
        if not session_ids:
            return
        sessions = {s.id: s for s in await lock_rows(db, Session, Session.id.in_(session_ids))}
        kernels = await lock_rows(db, Kernel, on_lost)
        lost = {n.id: n for n in await lock_rows(db, Node, Node.id.in_(lost_ids))}
        requeue_cut = now - timedelta(seconds=self.settings.requeue_after_s)
        error_cut = now - timedelta(seconds=self.settings.node_lost_timeout_s)
        given_up: list[str] = []
        for kernel in kernels:
            session = sessions.get(kernel.session_id)
            node = lost.get(kernel.node_id or "")
            if session is None or node is None:
                continue
            if session.status in TERMINAL:
                continue
            if kernel.status == K.SCHEDULED and node.last_seen_at < requeue_cut:
                await self._settle_unstarted(db, node, kernel, session, now, outbox)
            elif node.last_seen_at < error_cut:
                end_kernel(node, kernel, K.FAILED, now)
                if can_transition(session.status, S.ERROR):
                    db.add(transition(session, S.ERROR, f"node {node.id} stopped responding", now))
                    outbox.status(session)
                    given_up.append(session.id)
                outbox.schedule.add(session.resource_group)
        if given_up:  # their kernels on other nodes: stopped, their nodes' events end them
            await stop_kernels(db, given_up, "another kernel of its session was lost", outbox)

    async def _settle_unstarted(
        self,
        db: AsyncSession,
        node: Node,
        kernel: Kernel,
        session: Session,
        now: datetime,
        outbox: Outbox,
    ) -> None:
        """A kernel placed on a node that went silent before starting it: free its place,
        then cancel it if its session was asked to stop, else place it again."""
        release(node, kernel)
        outbox.schedule.add(session.resource_group)
        why = f"node {node.id} stopped responding before it started"
        if session.status == S.TERMINATING:
            end_kernel(node, kernel, K.CANCELLED, now)
            live_siblings = await db.scalar(
                select(func.count())
                .select_from(Kernel)
                .where(Kernel.session_id == session.id, Kernel.ended_at.is_(None))
            )
            if not live_siblings:  # others end through their own nodes' events
                db.add(transition(session, S.CANCELLED, f"{session.status_reason}; {why}", now))
                outbox.status(session)
            return
        kernel.status, kernel.node_id = K.PENDING, None
        kernel.slots, kernel.devices, kernel.cpuset = {}, {}, {}
        if session.status == S.SCHEDULED:
            db.add(transition(session, S.PENDING, why, now))
            session.pending_reason = "waiting for the scheduler"
            outbox.status(session)


def _minutes(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds >= 60 and seconds % 60 == 0 else f"{seconds}s"


async def _touch(
    db: AsyncSession, model: type[Node] | type[Kernel], ids: list[str], **values: Any
) -> None:
    """Set columns on rows nobody else holds right now (SKIP LOCKED): best-effort stamps
    that must never make the reconciler wait for, or deadlock with, a scheduling pass."""
    if not ids:
        return
    free = (
        select(model.id)
        .where(model.id.in_(ids))
        .order_by(model.id)
        .with_for_update(skip_locked=True, key_share=True)
    )
    await db.execute(update(model).where(model.id.in_(free)).values(**values))
