"""The endpoint controller: desired vs actual replicas, every tick, on the leader only.

::

    loop (scheduler process): a message on ENDPOINT_WAKE_CHANNEL or 1 s ─▶ Leader.acquire
        ─▶ tick()   (messages: a proxy holding a request at zero, an API change, the event
                     consumer when a replica's session changed status, e.g. RUNNING)
    tick, per live endpoint, one transaction:
      replica sessions (DB) + readiness and load (Redis, from the proxies) + wake key
      ─▶ ended replicas: a failure (backoff 1, 2, 4 … 300 s), or drained and gone
      ─▶ autoscale.decide()        desired replicas, with its inputs
      ─▶ rollout.step()            start / promote / drain / stop / roll back
      ─▶ rollout.status()          HEALTHY … with the reason; DEGRADED only below what
                                   served (rollout.promised), never for a scale-up
      ─▶ events (what was done, why, inputs) ─▶ fencing check ─▶ commit
      ─▶ after the commit: stop jobs, schedule request, the EndpointRoute when it changed
    deleted endpoints: their replicas were told to stop by the API; nothing else to do

Decisions are pure functions in ``gateway.domain.autoscale`` and ``gateway.domain.rollout``;
this module only reads, applies and writes down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from contract.endpoints import (
    ENDPOINT_APP,
    EndpointRoute,
    Probe,
    ReplicaHealth,
    ReplicaTarget,
    TokenGrant,
    write_endpoint_route,
)
from contract.keys import ENDPOINT_WAKE_CHANNEL, endpoint_ready_key, endpoint_wake_key
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import (
    Endpoint,
    EndpointEvent,
    EndpointRevision,
    EndpointToken,
    Kernel,
    Node,
    Session,
    WebhookEvent,
)
from gateway.db.transitions import event_row
from gateway.domain.autoscale import AutoscaleSettings, Sample, ScaleState, decide, record
from gateway.domain.rollout import Replica, RolloutSettings, promised, status, step
from gateway.domain.status import TERMINAL
from gateway.endpoints.observe import Load, read_health, read_load
from gateway.endpoints.replicas import insert_replica
from gateway.lifecycle import begin_termination
from gateway.loops.endpoint_leader import Leader
from gateway.outbox import Outbox

__all__ = ["EndpointController", "backoff_s"]

log = logging.getLogger(__name__)
#: the statuses an ``endpoint.degraded`` webhook announces (once, on the way in)
_TROUBLE = frozenset({"DEGRADED", "UNAVAILABLE"})
TICK_S = 1.0
LIVE = [
    str(s) for s in ("PENDING", "SCHEDULED", "PREPARING", "RUNNING", "TERMINATING", "PREEMPTED")
]
BACKOFF_MAX_S = 300.0
ROLLBACK_AFTER_FAILURES = 3


def backoff_s(failures: int) -> float:
    """1, 2, 4 … seconds after consecutive failed replicas, at most 5 minutes."""
    return 0.0 if failures <= 0 else min(BACKOFF_MAX_S, 2.0 ** (failures - 1))


@dataclass
class _Memory:
    """What the leader keeps between ticks for one endpoint (rebuilt after a handover)."""

    samples: list[Sample] = field(default_factory=list)
    scale: ScaleState = field(default_factory=ScaleState)
    route: str = ""  # the last route written (without its timestamp)
    #: how many replicas should be ready (rollout.promised): below it is DEGRADED; after
    #: a handover it starts again from the replicas that serve
    promise: int | None = None


@dataclass
class _Tick:
    """One endpoint's tick: the transaction's view and what to do after the commit."""

    db: AsyncSession
    endpoint: Endpoint
    now: datetime
    outbox: Outbox = field(default_factory=Outbox)
    events: list[EndpointEvent] = field(default_factory=list)
    started: bool = False

    def record(self, kind: str, message: str, inputs: dict[str, Any] | None = None) -> None:
        log.info("endpoint %s: %s", self.endpoint.name, message)
        self.events.append(
            EndpointEvent(
                endpoint_id=self.endpoint.id,
                kind=kind,
                message=message,
                inputs=inputs or {},
                created_at=self.now,
            )
        )


class EndpointController:
    def __init__(
        self,
        db: SessionFactory,
        pool: ArqRedis,
        settings: GatewaySettings,
        *,
        tick_s: float = TICK_S,
    ) -> None:
        self.db = db
        self.pool = pool
        self.settings = settings
        self.tick_s = tick_s
        self.leader = Leader(pool)
        self.memory: dict[str, _Memory] = {}
        self._poked = asyncio.Event()
        self._stopping = asyncio.Event()

    # -- the loop -------------------------------------------------------------------------
    def stop(self) -> None:
        """Finish the tick under way, then leave :meth:`run` (giving the lease back)."""
        self._stopping.set()
        self._poked.set()

    async def run(self) -> None:
        """Tick every ``tick_s`` and whenever a wake or an API change arrives."""
        stop = self._stopping
        listener = asyncio.create_task(self._listen())
        try:
            while not stop.is_set():
                # a poke that arrives during the tick runs another one at once
                self._poked.clear()
                try:
                    if await self.leader.acquire():
                        await self.tick()
                    else:
                        self.memory.clear()  # another process leads: start afresh later
                except Exception:
                    log.exception("endpoint controller tick failed; the next one retries")
                if stop.is_set():
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._poked.wait(), self.tick_s)
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
            with contextlib.suppress(Exception):
                await self.leader.release()

    async def _listen(self) -> None:
        while True:
            pubsub = self.pool.pubsub()
            try:
                await pubsub.subscribe(ENDPOINT_WAKE_CHANNEL)
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._poked.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("endpoint wake subscription lost; subscribing again")
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    # -- one tick -------------------------------------------------------------------------
    async def tick(self) -> None:
        async with self.db() as db:
            ids = list(
                (await db.execute(select(Endpoint.id).where(Endpoint.deleted_at.is_(None))))
                .scalars()
                .all()
            )
        for gone in set(self.memory) - set(ids):
            del self.memory[gone]
        for endpoint_id in ids:
            try:
                await self.reconcile(endpoint_id)
            except Exception:
                log.exception("endpoint %s: reconcile failed", endpoint_id)

    async def reconcile(self, endpoint_id: str) -> None:
        now_s = time.time()
        health = await read_health(self.pool, endpoint_id)
        load = await read_load(self.pool, endpoint_id, now_s)
        woken = bool(await self.pool.exists(endpoint_wake_key(endpoint_id)))
        memory = self.memory.setdefault(endpoint_id, _Memory())
        async with self.db() as db, db.begin():
            endpoint = await db.get(Endpoint, endpoint_id, with_for_update={"key_share": True})
            if endpoint is None or endpoint.deleted_at is not None:
                return
            t = _Tick(db, endpoint, await db_now(db))
            replicas = await self._replicas(t)
            live = [s for s in replicas if s.status in LIVE and s.replica_state != "stopped"]
            await self._ended(t, [s for s in replicas if s not in live])
            views = [_view(s, health.get(s.id), load, t.now) for s in live]
            desired = self._scale(t, memory, load, views, woken, now_s)
            await self._roll(t, live, views, desired)
            any_ready = any(v.ready and v.revision == endpoint.revision for v in views)
            if any_ready:
                self._became_ready(t)
            self._status(t, views, desired, memory)
            t.db.add_all(t.events)
            if not await self.leader.still_mine():
                raise RuntimeError("lost the endpoint controller lease mid-tick")
        await t.outbox.flush(self.pool)
        if any_ready and woken:
            await self.pool.delete(endpoint_wake_key(endpoint_id))
        live_ids = {s.id for s in live}
        stale = [sid for sid in health if sid not in live_ids]
        if stale:
            await self.pool.hdel(endpoint_ready_key(endpoint_id), *stale)  # type: ignore[misc]
        await self._route(endpoint_id, memory)

    async def _replicas(self, t: _Tick) -> list[Session]:
        """Live replicas, and ended ones the controller has not accounted for yet."""
        query = (
            select(Session)
            .where(
                Session.endpoint_id == t.endpoint.id,
                Session.replica_state.in_(["starting", "serving", "draining", "stopped"]),
            )
            .order_by(Session.id)
            .with_for_update(key_share=True)
        )
        return list((await t.db.execute(query)).scalars())

    async def _ended(self, t: _Tick, ended: list[Session]) -> None:
        """Replicas that ended: drained ones are done; any other ending is a failure."""
        ep = t.endpoint
        for s in ended:
            if s.status not in TERMINAL:
                continue  # stopped by us, still terminating
            was = s.replica_state
            s.replica_state = "ended"
            s.replica_state_at = t.now
            if was in ("draining", "stopped"):
                continue
            ep.failures += 1
            ep.last_failure = f"replica {s.replica_index} {s.status}: {s.status_reason}"[:500]
            wait = backoff_s(ep.failures)
            ep.retry_at = t.now + timedelta(seconds=wait)
            t.record(
                "replica-failed",
                f"{ep.last_failure}; replaced after {wait:g}s (failure {ep.failures})",
                {"session": s.id, "status": s.status, "failures": ep.failures, "backoff_s": wait},
            )

    def _scale(
        self,
        t: _Tick,
        memory: _Memory,
        load: Load,
        views: list[Replica],
        woken: bool,
        now_s: float,
    ) -> int:
        settings = AutoscaleSettings.model_validate(t.endpoint.autoscale)
        sample = Sample(now_s, float(load.concurrency), load.rps)
        memory.samples = record(memory.samples, sample, settings.stable_window_s)
        if memory.scale.desired == 0 and not memory.scale.history:
            memory.scale = ScaleState(desired=t.endpoint.desired_replicas, last_active_at=now_s)
        ready = sum(1 for v in views if v.ready and v.state != "draining")
        decision = decide(memory.samples, settings, now_s, memory.scale, ready=ready, woken=woken)
        memory.scale = decision.state
        if decision.desired != t.endpoint.desired_replicas:
            before = t.endpoint.desired_replicas
            t.endpoint.desired_replicas = decision.desired
            t.record(
                "scale",
                f"desired replicas {before} → {decision.desired}: {decision.reason}",
                decision.inputs | {"in_flight": load.in_flight, "queued": load.queued},
            )
        return decision.desired

    async def _roll(
        self, t: _Tick, live: list[Session], views: list[Replica], desired: int
    ) -> None:
        ep = t.endpoint
        revision = await t.db.get(EndpointRevision, (ep.id, ep.revision))
        assert revision is not None
        settings = RolloutSettings.model_validate(revision.rollout)
        may_start = ep.retry_at is None or t.now >= ep.retry_at
        plan = step(
            views,
            revision=ep.revision,
            stable_revision=ep.stable_revision,
            desired=desired,
            settings=settings,
            now=t.now.timestamp(),
            may_start=may_start,
        )
        if plan.rollback is None and (
            ep.stable_revision is not None
            and ep.revision != ep.stable_revision
            and ep.failures >= ROLLBACK_AFTER_FAILURES
        ):
            plan.rollback = (
                f"revision {ep.revision}: {ep.failures} replicas failed ({ep.last_failure}); "
                f"back to revision {ep.stable_revision}"
            )
        if plan.rollback is not None:
            await self._rollback(t, revision, plan.rollback)
            return
        by_id = {s.id: s for s in live}
        for sid in plan.promote:
            by_id[sid].replica_state, by_id[sid].replica_state_at = "serving", t.now
            t.record("promote", f"replica {by_id[sid].replica_index} ready: serving", {})
        for sid in plan.drain:
            by_id[sid].replica_state, by_id[sid].replica_state_at = "draining", t.now
            t.record("drain", f"replica {by_id[sid].replica_index} draining", _inputs(views, sid))
        for sid in plan.stop:
            await self._stop(t, by_id[sid], "drained")
        if plan.start:
            for index in plan.start:
                await insert_replica(t.db, ep, revision, index, t.now)
            t.started = True
            t.outbox.schedule.add(revision.resource_group)
            t.record(
                "start",
                f"starting replica(s) {', '.join(map(str, plan.start))} of revision {ep.revision}",
                {"desired": desired, "live": len(live)},
            )

    async def _stop(self, t: _Tick, session: Session, why: str) -> None:
        session.replica_state, session.replica_state_at = "stopped", t.now
        reason = f"endpoint {t.endpoint.name}: replica {session.replica_index} {why}"
        await begin_termination(
            t.db,
            session,
            t.outbox,
            cancel_reason=reason,
            stop_reason=reason,
            grace=self.settings.stop_grace_s,
        )
        t.record("stop", reason, {"session": session.id})

    async def _rollback(self, t: _Tick, revision: EndpointRevision, why: str) -> None:
        ep = t.endpoint
        assert ep.stable_revision is not None
        revision.state, revision.reason = "rolled-back", why
        t.record("rollback", why, {"from": ep.revision, "to": ep.stable_revision})
        ep.revision = ep.stable_revision
        ep.failures, ep.retry_at, ep.last_failure = 0, None, ""
        live = Session.status.in_(LIVE)
        rows = await t.db.execute(
            select(Session).where(
                Session.endpoint_id == ep.id,
                Session.endpoint_revision == revision.number,
                Session.replica_state.in_(["starting", "serving", "draining"]),
                live,
            )
        )
        for s in rows.scalars():
            await self._stop(t, s, f"of rolled-back revision {revision.number}")

    def _became_ready(self, t: _Tick) -> None:
        ep = t.endpoint
        if ep.stable_revision != ep.revision:
            was = {} if ep.stable_revision is None else {"was": ep.stable_revision}
            t.record("ready", f"revision {ep.revision} is ready", was)
            ep.stable_revision = ep.revision
        ep.failures, ep.retry_at, ep.last_failure = 0, None, ""

    def _status(self, t: _Tick, views: list[Replica], desired: int, memory: _Memory) -> None:
        ep = t.endpoint
        memory.promise = promised(views, desired=desired, previous=memory.promise)
        word, why = status(
            views,
            desired=desired,
            revision=ep.revision,
            failure=ep.last_failure,
            promise=memory.promise,
        )
        if ep.retry_at is not None and t.now < ep.retry_at and word != "HEALTHY":
            why += f" (next replica in {(ep.retry_at - t.now).total_seconds():.0f}s)"
        if word != ep.status:
            t.record("status", f"{ep.status} → {word}: {why}", {"desired": desired})
            if word in _TROUBLE and ep.status not in _TROUBLE:  # webhooks: endpoint.degraded
                data = {"endpoint": ep.name, "status": word, "reason": why, "was": ep.status}
                t.db.add(
                    WebhookEvent(
                        **event_row("endpoint.degraded", t.now, owner_id=ep.owner_id, data=data)
                    )
                )
        if word != ep.status or why != ep.status_reason:
            ep.status, ep.status_reason, ep.updated_at = word, why, t.now

    # -- the route ------------------------------------------------------------------------
    async def _route(self, endpoint_id: str, memory: _Memory) -> None:
        route = await self.build_route(endpoint_id)
        if route is None:
            return
        body = route.model_dump_json(exclude={"updated_at"})
        if body == memory.route:
            return
        await write_endpoint_route(self.pool, route)
        memory.route = body

    async def build_route(self, endpoint_id: str) -> EndpointRoute | None:
        async with self.db() as db:
            ep = await db.get(Endpoint, endpoint_id)
            if ep is None or ep.deleted_at is not None:
                return None
            revision = await db.get(EndpointRevision, (ep.id, ep.revision))
            assert revision is not None
            rows = await db.execute(
                select(Session, Kernel, Node)
                .join(Kernel, Kernel.session_id == Session.id)
                .outerjoin(Node, Node.id == Kernel.node_id)
                .where(
                    Session.endpoint_id == ep.id,
                    Session.replica_state.in_(["starting", "serving", "draining"]),
                    Session.status.in_(LIVE),
                )
                .order_by(Session.replica_index)
            )
            targets = [
                ReplicaTarget(
                    session_id=s.id,
                    index=s.replica_index or 0,
                    revision=s.endpoint_revision or 0,
                    upstream=_upstream(s, k, n),
                    state=s.replica_state,
                )
                for s, k, n in rows
            ]
            now = await db_now(db)
            tokens = [
                TokenGrant(
                    id=tok.id,
                    digest=tok.digest,
                    expires_at=tok.expires_at.timestamp() if tok.expires_at else None,
                )
                for tok in (
                    await db.execute(
                        select(EndpointToken)
                        .where(
                            EndpointToken.endpoint_id == ep.id,
                            EndpointToken.revoked_at.is_(None),
                        )
                        .order_by(EndpointToken.id)
                    )
                ).scalars()
                if tok.expires_at is None or tok.expires_at > now
            ]
            rollout = RolloutSettings.model_validate(revision.rollout)
            return EndpointRoute(
                endpoint_id=ep.id,
                name=ep.name,
                owner_id=ep.owner_id,
                public=ep.public,
                revision=ep.revision,
                replicas=tuple(targets),
                tokens=tuple(tokens),
                probe=Probe.model_validate(revision.probe),
                concurrency_per_replica=rollout.concurrency_per_replica,
                queue_limit=rollout.queue_limit,
                wake_timeout_s=rollout.wake_timeout_s,
            )


def _upstream(session: Session, kernel: Kernel, node: Node | None) -> str | None:
    port = kernel.ports.get(ENDPOINT_APP) if kernel.ports else None
    if node is None or port is None or session.status != "RUNNING":
        return None
    return f"http://{node.address}:{int(port)}"


def _view(session: Session, health: ReplicaHealth | None, load: Load, now: datetime) -> Replica:
    ready = session.status == "RUNNING" and health is not None and health.ready
    if session.status == "PENDING":
        why = f"pending: {session.pending_reason}"
    elif session.status != "RUNNING":
        why = session.status.lower()
    elif health is None:
        why = "not probed yet"
    else:
        why = "" if health.ready else f"not ready: {health.reason or 'probe failing'}"
    created = session.created_at.timestamp()
    state_at = session.replica_state_at.timestamp() if session.replica_state_at else created
    return Replica(
        session_id=session.id,
        index=session.replica_index or 0,
        revision=session.endpoint_revision or 0,
        state=session.replica_state or "starting",
        ready=ready,
        in_flight=load.per_replica.get(session.id, 0),
        since=created,
        state_at=state_at,
        why=why,
    )


def _inputs(views: list[Replica], session_id: str) -> dict[str, Any]:
    for v in views:
        if v.session_id == session_id:
            return {"ready": v.ready, "in_flight": v.in_flight, "revision": v.revision}
    return {}
