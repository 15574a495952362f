"""The reconciler: make Redis and the nodes agree with the database again.

Redis is transport; the database is the truth. So, every few seconds:

* a kernel placed (SCHEDULED) whose start job may have been lost gets it again, and a
  kernel of a TERMINATING session its stop job (job ids make both idempotent);
* a node whose heartbeat key expired and that was last seen ``node_lost_after_s`` ago is
  lost - unless its keeper still beats (its worker restarts, its kernels run on: the node
  is "disconnected" until ``node_max_disconnect_s``): sessions that never started there
  are placed again; batch sessions that ran there are retried (a new attempt, PENDING
  after a backoff) while retries are left; interactive ones, and those whose retries
  are spent, end ERROR naming the node; those asked to stop end TERMINATED (CANCELLED if
  they never started), the loss in the reason (``gateway.domain.retry``,
  docs/node-loss.md);
* alive nodes get ``last_seen_at`` refreshed (one UPDATE for all of them);
* interactive sessions idle past their timeout (no traffic through the app proxy, from
  the activity keys it writes) are terminated, and routes Redis lost are written again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from contract.keys import activity_key, route_key
from contract.messages import WireClusterMember, WireEgress
from contract.routes import RouteRecord
from gateway import lifecycle
from gateway.apps import route_for
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.locks import lock_rows
from gateway.db.models import Kernel, Node, ResourceGroup, Session
from gateway.db.transitions import transition
from gateway.domain.idle import idle_deadline, idle_timeout
from gateway.domain.retry import Outcome, backoff_s, decide, error_reason, max_retries_for
from gateway.domain.status import (
    KERNEL_STARTED,
    TERMINAL,
    KernelStatus,
    SessionStatus,
    can_transition,
)
from gateway.lifecycle import begin_termination, end_kernel, stop_job, stop_kernels
from gateway.outbox import Outbox
from gateway.scheduler.applier import cluster_members, start_job
from gateway.scheduler.snapshot import alive_nodes, group_config, kept_nodes, wire_egress
from plugins.scheduling.config import SchedulerConfig

__all__ = ["Activity", "Reconciler", "lost_nodes"]

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
        #: when each node's keeper key is due to expire, as last read (time.monotonic())
        self._kept_until: dict[str, float] = {}

    async def run(self) -> None:
        """One tick: read liveness and activity from Redis, decide, then send."""
        async with self.db() as db:
            nodes = {n.id: n for n in (await db.execute(select(Node))).scalars()}
        alive = await alive_nodes(self.pool, list(nodes))
        outbox = await self.reconcile(nodes, alive, self._activity, await self._kept(nodes))
        async with self.db() as db:
            outbox.routes += await self._routes(db, nodes)
        await outbox.flush(self.pool)

    async def reconcile(
        self,
        nodes: dict[str, Node],
        alive: set[str],
        activity: Activity,
        kept: set[str] | None = None,
    ) -> Outbox:
        """The database side of a tick. Each task in a short transaction of its own,
        locking rows in the one order (sessions, kernels, nodes; by id), so the reconciler
        never deadlocks a pass. *alive*: nodes whose worker beats; *kept*: whose keeper
        does (the machine lives)."""
        outbox = Outbox()
        async with self.db() as db, db.begin():
            now = await db_now(db)
            await _touch(db, Node, sorted(alive), last_seen_at=now)
        async with self.db() as db, db.begin():
            await self._requeue(db, nodes, alive, now, outbox)
        async with self.db() as db, db.begin():
            lost = lost_nodes(nodes, alive, kept or set(), now, self.settings)
            await self._lost_nodes(db, nodes, lost, now, outbox)
        async with self.db() as db, db.begin():
            await self._idle(db, now, activity, outbox)
        return outbox

    async def _kept(self, nodes: dict[str, Node]) -> set[str]:
        """Nodes whose keeper's key is there - or was, and would not have expired yet: a
        key Redis lost (a flush, a restart) while the worker restarts must not make the
        node lost before the keeper writes it again."""
        now = time.monotonic()
        for node_id, left in (await kept_nodes(self.pool, list(nodes))).items():
            self._kept_until[node_id] = now + left
        for node_id in [n for n, until in self._kept_until.items() if until <= now]:
            del self._kept_until[node_id]
        return set(self._kept_until)

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
            .where(
                Session.type == "interactive",
                Session.status == S.RUNNING,
                Kernel.cluster_idx == 0,  # a cluster session's apps are main1's
            )
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
        egress: dict[str, WireEgress] = {}  # group -> its egress, read once per tick
        rows = await db.execute(
            select(Kernel, Session)
            .join(Session, Session.id == Kernel.session_id)
            .where(
                Kernel.ended_at.is_(None),
                Kernel.node_id.is_not(None),
                Kernel.updated_at < cutoff,
                Session.status.in_([S.SCHEDULED, S.TERMINATING, S.PREEMPTED]),
            )
        )
        for kernel, session in rows:
            node = nodes.get(kernel.node_id or "")
            if node is None or node.id not in alive:
                continue
            touched.append(kernel.id)
            if session.status == S.TERMINATING:
                why = "terminated on request"
                job = stop_job(kernel.id, session.id, node.id, why, attempt=kernel.attempt)
                outbox.stops.append((node.queue, job))
            elif session.status == S.PREEMPTED:
                why, by = session.status_reason, session.preempted_by
                job = stop_job(kernel.id, session.id, node.id, why, 10.0, kernel.attempt, by)
                outbox.stops.append((node.queue, job))
            elif kernel.status == K.SCHEDULED:
                members = await _members(db, session, nodes)
                key = self.settings.proxy_secret.get_secret_value()
                group = session.resource_group
                if group not in egress:
                    row = await db.get(ResourceGroup, group)
                    egress[group] = wire_egress(group_config(row, self.settings))
                start = start_job(session, kernel, members, key, egress[group])
                outbox.restarts.append((node.queue, start))
        await _touch(db, Kernel, sorted(touched), updated_at=now)

    async def _lost_nodes(
        self,
        db: AsyncSession,
        nodes: dict[str, Node],
        lost_ids: set[str],
        now: datetime,
        outbox: Outbox,
    ) -> None:
        """Sessions with a kernel on a lost node (:func:`lost_nodes`): placed again,
        retried, cancelled or ended ERROR (:func:`gateway.domain.retry.decide`)."""
        if not lost_ids:
            return
        on_lost = Kernel.node_id.in_(sorted(lost_ids)) & Kernel.ended_at.is_(None)
        session_ids = sorted(
            set((await db.execute(select(Kernel.session_id).where(on_lost))).scalars())
        )
        if not session_ids:
            return
        # lock order: sessions, kernels (all of these sessions'), nodes, each by id
        sessions = await lock_rows(db, Session, Session.id.in_(session_ids))
        kernels = await lock_rows(db, Kernel, Kernel.session_id.in_(session_ids))
        node_ids = sorted({k.node_id for k in kernels if k.node_id})
        locked = {n.id: n for n in await lock_rows(db, Node, Node.id.in_(node_ids))}
        limits = await _group_retries(db, {s.resource_group for s in sessions})
        own: dict[str, list[Kernel]] = {}
        for kernel in kernels:
            own.setdefault(kernel.session_id, []).append(kernel)
        given_up: list[str] = []
        for session in sessions:
            if session.status in TERMINAL:
                continue
            ks = own.get(session.id, [])
            lost_here = [k for k in ks if k.ended_at is None and k.node_id in lost_ids]
            if not lost_here:
                continue
            loss = _Loss(db, session, ks, locked, lost_ids, lost_here[0].node_id or "", now, outbox)
            limit = max_retries_for(
                session.max_retries,
                limits.get(session.resource_group),
                self.settings.max_retries,
            )
            started = any(k.status in KERNEL_STARTED or k.started_at is not None for k in ks)
            outcome = decide(session.type, session.status, started, session.retries, limit)
            outbox.schedule.add(session.resource_group)
            if loss.settle(outcome, limit, self.settings):
                given_up.append(session.id)
        if given_up:  # their kernels on other nodes: stopped, their nodes' events end them
            await stop_kernels(db, given_up, "another kernel of its session was lost", outbox)


def lost_nodes(
    nodes: dict[str, Node],
    alive: set[str],
    kept: set[str],
    now: datetime,
    settings: GatewaySettings,
) -> set[str]:
    """Nodes whose worker is silent (heartbeat key gone, last seen ``node_lost_after_s``
    ago) and whose machine is gone too (its keeper's key lapsed as well) - or whose
    worker stayed silent ``node_max_disconnect_s`` although the keeper beats on. A node
    whose worker restarts is only disconnected: nothing of it is re-run."""
    cut = now - timedelta(seconds=settings.node_lost_after_s)
    gone = now - timedelta(seconds=settings.node_max_disconnect_s)
    return {
        n.id
        for n in nodes.values()
        if n.id not in alive
        and n.last_seen_at < cut
        and (n.id not in kept or n.last_seen_at < gone)
    }


async def _group_retries(db: AsyncSession, groups: set[str]) -> dict[str, int | None]:
    """Each resource group's ``max_retries`` (its scheduler config; None: not set)."""
    out: dict[str, int | None] = {}
    rows = await db.execute(
        select(ResourceGroup.name, ResourceGroup.scheduler).where(
            ResourceGroup.name.in_(sorted(groups))
        )
    )
    for name, config in rows:
        try:
            out[name] = SchedulerConfig.model_validate(config or {}).max_retries
        except ValidationError:
            log.warning("resource group %s: scheduler config invalid, default retries", name)
    return out


@dataclass
class _Loss:
    """One session hit by a lost node, and its kernels (locked), inside a tick."""

    db: AsyncSession
    session: Session
    kernels: list[Kernel]
    nodes: dict[str, Node]
    lost: set[str]
    node_id: str
    now: datetime
    outbox: Outbox

    def settle(self, outcome: Outcome, limit: int, settings: GatewaySettings) -> bool:
        """Apply *outcome*; True if the session ended ERROR (its other kernels must stop)."""
        session = self.session
        if outcome == Outcome.PLACE_AGAIN and session.status == S.PREEMPTED:
            session.preemptions += 1
            self.place_again(
                f"queued again after preemption {session.preemptions} "
                f"(node {self.node_id} lost while it stopped)"
            )
        elif outcome == Outcome.PLACE_AGAIN:
            self.place_again(f"node {self.node_id} stopped responding before it started")
        elif outcome == Outcome.RETRY:
            session.retries += 1
            wait = backoff_s(
                session.retries, settings.retry_backoff_s, settings.retry_backoff_max_s
            )
            at = self.now + timedelta(seconds=wait)
            session.starts_at = at
            self.place_again(
                f"retrying after node {self.node_id} lost "
                f"(retry {session.retries} of {limit}) at {at:%H:%M:%S}Z"
            )
        elif outcome == Outcome.CANCEL:
            self.cancel()
        elif outcome == Outcome.TERMINATE:
            self.terminate()
        else:
            return self.fail(error_reason(self.node_id, session.type, session.retries, limit))
        return False

    def place_again(self, why: str) -> None:
        """Every kernel of the session becomes a new attempt, waiting for a place; the old
        attempts still on live nodes are stopped (their late events are stale)."""
        self.session.lost_node = self.node_id
        lifecycle.place_again(
            self.db,
            self.session,
            self.kernels,
            self.nodes,
            why,
            self.now,
            self.outbox,
            unreachable=self.lost,
        )
        self.outbox.status(self.session)

    def cancel(self) -> None:
        """A session asked to stop whose kernel never started on the lost node."""
        self._stopped(K.CANCELLED, S.CANCELLED, "stopped responding before it started")

    def terminate(self) -> None:
        """A session asked to stop whose kernel ran on the lost node: stopped, as asked."""
        self._stopped(K.FAILED, S.TERMINATED, "lost")

    def _stopped(self, kernel_status: K, status: S, what: str) -> None:
        """The kernels on lost nodes end; the session too if no other kernel is left (the
        others end by their nodes' events, and the reason already names the loss)."""
        for kernel in self.kernels:
            if kernel.ended_at is None and kernel.node_id in self.lost:
                end_kernel(self.nodes.get(kernel.node_id or ""), kernel, kernel_status, self.now)
        self.session.status_reason = f"{self.session.status_reason}; node {self.node_id} {what}"
        if all(k.ended_at is not None for k in self.kernels):
            self._end(status, self.session.status_reason)

    def fail(self, why: str) -> bool:
        """The kernels on lost nodes failed, the session is ERROR; True if it moved."""
        for kernel in self.kernels:
            if kernel.ended_at is None and kernel.node_id in self.lost:
                end_kernel(self.nodes.get(kernel.node_id or ""), kernel, K.FAILED, self.now)
        if not can_transition(self.session.status, S.ERROR):
            return False
        self._end(S.ERROR, why)
        return True

    def _end(self, status: S, why: str) -> None:
        self.db.add(transition(self.session, status, why, self.now))
        self.outbox.status(self.session)
        if self.session.type == "interactive" and self.session.apps:  # the proxy's route
            self.outbox.ended_routes.append((self.session.id, self.session.owner_id))


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


async def _members(
    db: AsyncSession, session: Session, nodes: dict[str, Node]
) -> list[WireClusterMember] | None:
    """A cluster session's containers, for a start job sent again."""
    if session.cluster_mode is None or session.cluster_size < 2:
        return None
    rows = list(
        await db.execute(
            select(Kernel.id, Kernel.node_id, Kernel.cluster_port)
            .where(Kernel.session_id == session.id)
            .order_by(Kernel.cluster_idx)
        )
    )
    addresses = {n.id: n.address for n in nodes.values()}
    ports = {n: p for _, n, p in rows if n and p}
    return cluster_members([(k, n or "") for k, n, _ in rows], addresses, ports)
