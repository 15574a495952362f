"""The event consumer: turns what workers report into statuses, allocations and jobs.

Workers send batches (``handle_events`` jobs on ``EVENTS_QUEUE``): a node registration
when they start, and kernel events as they happen. One batch is one transaction. Every
handler is safe to run twice and in any order: an event that would move a session
backwards, or touch a session that already ended, changes nothing (but a container
reported running for a session that ended is stopped, and a freed allocation is never
freed twice). The one move back: a start the node's runtime deferred (``start_failed``
with ``deferred``) places the session again, PENDING after a backoff, as a new attempt
(``lifecycle.place_again``, as the reconciler does after a node loss).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from arq.connections import ArqRedis
from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from contract.cluster import cluster_hostname
from contract.keys import node_queue
from contract.messages import EventBatch, KernelEvent, NodeInfo
from gateway import lifecycle
from gateway.apps import route_for
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.locks import lock_rows
from gateway.db.models import Kernel, Node, ResourceGroup, Session
from gateway.db.tables import GROUPS
from gateway.db.transitions import note, transition
from gateway.db.upsert import insert_ignoring
from gateway.domain.retry import Backoff
from gateway.domain.status import (
    KERNEL_LIVE,
    KERNEL_STARTED,
    TERMINAL,
    KernelStatus,
    SessionStatus,
    can_move_kernel,
    can_transition,
)
from gateway.images import record_commits
from gateway.lifecycle import stop_job, stop_kernels
from gateway.outbox import Outbox

__all__ = ["EventHandler"]

log = logging.getLogger(__name__)
S = SessionStatus
K = KernelStatus
# the events that end a kernel, and the status each ends it with
_KERNEL_ENDS = {
    "exited": K.EXITED,
    "start_failed": K.FAILED,
    "not_started": K.CANCELLED,
    "lost": K.FAILED,
}
_ENDING = frozenset(_KERNEL_ENDS)
_ORDER = {
    "preparing": 0,
    "progress": 1,
    "running": 2,
    "start_failed": 3,
    "not_started": 3,
    "lost": 3,
    "exited": 4,
}


def only_from(batch: EventBatch, node: str) -> EventBatch:
    """What of *batch* node *node* may say: its own registration (with its own queue) and
    events of its own; the rest is dropped with a WARNING naming the node. (Which kernels
    are placed on it is checked as each event is applied.)"""
    info = batch.node
    if info is not None and (info.node_id != node or info.queue != node_queue(node)):
        log.warning(
            "node %s refused: tried to register as node %s with queue %s",
            node,
            info.node_id,
            info.queue,
        )
        info = None
    events = [e for e in batch.events if e.node_id == node]
    for other in {e.node_id for e in batch.events} - {node}:
        log.warning("node %s refused: tried to report events in the name of node %s", node, other)
    return EventBatch(node=info, events=events, commits=batch.commits)


class EventHandler:
    def __init__(self, db: SessionFactory, pool: ArqRedis, backoff: Backoff | None = None) -> None:
        self.db = db
        self.pool = pool
        #: the wait before a session whose start was deferred is placed again
        self.backoff = backoff or Backoff()

    async def handle(self, batch: EventBatch, node: str | None = None) -> None:
        outbox = await self.commit(batch, node)
        await outbox.flush(self.pool)

    async def commit(self, batch: EventBatch, node: str | None = None) -> Outbox:
        """Apply *batch* to the database; what to send once it committed. *node*: the
        batch came from that node's own Redis user (:func:`only_from`)."""
        if node is not None:
            batch = only_from(batch, node)
        outbox = Outbox()
        events = list(batch.events)
        if batch.node is not None:
            async with self.db() as db, db.begin():
                events[:0] = await self._register(db, batch.node, events, outbox)
        if events:
            async with self.db() as db, db.begin():
                await self._apply(db, events, outbox)
        if batch.commits:
            async with self.db() as db, db.begin():
                await record_commits(db, batch.commits, node)
        return outbox

    # -- registration -----------------------------------------------------------------
    async def _register(
        self, db: AsyncSession, info: NodeInfo, carried: Sequence[KernelEvent], outbox: Outbox
    ) -> list[KernelEvent]:
        """Store what the node says about itself; the events its report implies (beside
        *carried*, the ends its batch brings)."""
        now = await db_now(db)
        node = await db.get(Node, info.node_id, with_for_update={"key_share": True})
        if node is None:
            node = Node(
                id=info.node_id,
                registered_at=now,
                occupied={},
                device_used={},
                used_cpus={},
                queue=info.queue,
                runtime=info.runtime,
            )
            db.add(node)
        node.hostname = info.hostname
        node.address = info.address
        node.queue = info.queue
        node.runtime = info.runtime
        node.resource_group = info.resource_group
        node.arch = info.arch
        node.labels = dict(info.labels)
        node.capacity = dict(info.capacity)
        node.devices = {"items": list(info.devices)}
        node.slot_types = dict(info.slot_types)
        node.numa_cpus = {k: list(v) for k, v in info.numa_cpus.items()}
        node.fraction_enforcement = info.fraction_enforcement
        node.limits_enforced = info.limits_enforced
        node.bind_mounts = info.bind_mounts
        node.images = info.images
        node.egress = ",".join(info.egress)
        node.cgroup = info.cgroup
        node.runtime_detail = info.runtime_detail
        node.agent_version = info.version
        node.last_seen_at = now
        if await db.get(ResourceGroup, info.resource_group) is None:
            # nodes of a new group may register at once, each in its own batch
            dialect = db.get_bind().dialect.name
            made = insert_ignoring(dialect, GROUPS, ["name"])
            await db.execute(
                made.values(name=info.resource_group, description="", scheduler={}, created_at=now)
            )
        await db.flush()
        await self._orphans(db, info, outbox)
        outbox.schedule.add(info.resource_group)
        return await self._vanished(db, info, carried, now)

    async def _vanished(
        self, db: AsyncSession, info: NodeInfo, carried: Sequence[KernelEvent], now: datetime
    ) -> list[KernelEvent]:
        """Kernels live here by the database that the node no longer has (its state was
        wiped, or a simulated node restarted): they end as if the node had said so.

        Not judged: a kernel whose end the batch carries (that end is what happened,
        whatever the clocks say about the order), and one the gateway saw start or
        change after the node listed its kernels (``info.ts``): batches are handled
        concurrently, and a registration may be handled again after a gateway crash, so
        a kernel the worker started once registered may be here before its
        registration is; it was never in that list."""
        reported = {k.kernel_id: k.attempt for k in info.kernels}
        ended = {(e.kernel_id, e.attempt) for e in carried if e.kind in _ENDING}
        rows = (
            await db.execute(
                select(
                    Kernel.id, Kernel.session_id, Kernel.status, Kernel.attempt, Kernel.updated_at
                ).where(
                    Kernel.node_id == info.node_id,
                    Kernel.status.in_(KERNEL_STARTED),
                )
            )
        ).all()
        listed_at = None if info.ts is None else datetime.fromtimestamp(info.ts, UTC)
        gone = f"not on {info.node_id} any more when its worker registered again"
        return [
            KernelEvent(
                kind="exited" if status == K.STOPPING else "lost",
                kernel_id=kernel_id,
                session_id=session_id,
                node_id=info.node_id,
                ts=now.timestamp(),
                message=gone,
                requested_stop=status == K.STOPPING,
                attempt=attempt,
            )
            for kernel_id, session_id, status, attempt, updated_at in rows
            if (kernel_id not in reported or reported[kernel_id] not in (None, attempt))
            and (kernel_id, attempt) not in ended
            and (kernel_id, None) not in ended
            and (listed_at is None or updated_at <= listed_at)
        ]

    async def _orphans(self, db: AsyncSession, info: NodeInfo, outbox: Outbox) -> None:
        """Containers the node runs for kernels that are not live here, or of an attempt
        the gateway moved elsewhere (fencing): stop them."""
        reported = {k.kernel_id: k for k in info.kernels}
        if not reported:
            return
        live = dict(
            (
                await db.execute(
                    select(Kernel.id, Kernel.attempt).where(
                        Kernel.id.in_(list(reported)),
                        Kernel.node_id == info.node_id,
                        Kernel.status.in_(KERNEL_LIVE),
                    )
                )
            ).all()
        )
        for kernel_id, report in reported.items():
            if kernel_id not in live or report.attempt not in (None, live[kernel_id]):
                why = "its session is no longer live here"
                job = stop_job(kernel_id, report.session_id, info.node_id, why, 0.0, report.attempt)
                outbox.stops.append((info.queue, job))

    # -- kernel events ----------------------------------------------------------------
    async def _apply(self, db: AsyncSession, events: Sequence[KernelEvent], outbox: Outbox) -> None:
        kernel_ids = sorted({e.kernel_id for e in events})
        # lock order, everywhere: sessions, then kernels, then nodes (gateway.db.locks)
        owners = dict(
            (
                await db.execute(
                    select(Kernel.id, Kernel.session_id).where(Kernel.id.in_(kernel_ids))
                )
            ).all()
        )
        session_ids = sorted(set(owners.values()))
        sessions = {s.id: s for s in await lock_rows(db, Session, Session.id.in_(session_ids))}
        # a deferred start places its whole session again: all of its kernels, and their
        # nodes below, are locked with the rest (a cluster session's others are elsewhere)
        deferring = sorted({owners[e.kernel_id] for e in events if _deferring(e, owners)})
        held: ColumnElement[bool] = Kernel.id.in_(kernel_ids)
        if deferring:
            held = or_(held, Kernel.session_id.in_(deferring))
        kernels = {k.id: k for k in await lock_rows(db, Kernel, held)}
        # read the clock once the rows are ours: a batch that waited for another's locks
        # must not stamp an end before the start that batch stamped (started_at <= ended_at)
        now = await db_now(db)
        events, stale = await self._fence(db, events, kernels, outbox)
        await _late_ends(db, stale, kernels, sessions, now)
        ending = {e.kernel_id for e in events if e.kind in _ENDING}
        ending |= {k.id for k in kernels.values() if k.session_id in deferring}
        nodes = await _nodes(db, kernels.values(), ending)
        siblings = await self._siblings(db, sessions, kernels)
        abandoned: set[str] = set()  # sessions that ended with kernels still live
        for event in sorted(events, key=lambda e: (e.ts, _ORDER[e.kind])):
            kernel = kernels.get(event.kernel_id)
            if kernel is None:
                log.warning("event %s for unknown kernel %s ignored", event.kind, event.kernel_id)
                continue
            if kernel.ended_at is not None and event.kind in _ENDING:
                continue  # it ended already (a late stop's "not started", a repeat): keep that
            if event.attempt not in (None, kernel.attempt):
                continue  # this batch placed it again (a deferral, a requeue): it is stale
            session = sessions[kernel.session_id]
            node = nodes.get(kernel.node_id) if kernel.node_id else None
            ctx = _Ctx(
                db, session, kernel, node, siblings[session.id], now, outbox, nodes, self.backoff
            )
            before = session.status
            _handle(ctx, event)
            if session.status != before:
                outbox.status(session)
                if session.status in TERMINAL:
                    _ended(session, outbox)
                    if any(k.ended_at is None for k in ctx.siblings):
                        abandoned.add(session.id)
                elif session.status == S.RUNNING:
                    main = next((k for k in ctx.siblings if k.cluster_idx == 0), kernel)
                    if main is not kernel:  # a cluster session's apps are main1's
                        node = nodes.get(main.node_id or "") or await db.get(
                            Node, main.node_id or ""
                        )
                    _running(session, main, node, outbox)
        if abandoned:
            # a cluster session that ended (one kernel failed or was lost): its other
            # kernels would run on, holding their nodes, for a session that is over
            reason = "its cluster session ended"
            await stop_kernels(db, sorted(abandoned), reason, outbox)

    async def _fence(
        self,
        db: AsyncSession,
        events: Sequence[KernelEvent],
        kernels: dict[str, Kernel],
        outbox: Outbox,
    ) -> tuple[list[KernelEvent], list[KernelEvent]]:
        """The events of each kernel's current attempt, and those of attempts the gateway
        moved elsewhere: those change nothing; if that attempt still runs, it is stopped.
        An event of the current attempt from a node it is not placed on is dropped and
        logged: a node reports only on kernels placed on it."""
        current, stale = [], []
        for event in events:
            kernel = kernels.get(event.kernel_id)
            if kernel is None or event.attempt in (None, kernel.attempt):
                if kernel is not None and kernel.node_id != event.node_id:
                    log.warning(
                        "event %s of kernel %s from node %s dropped: it is placed on %s",
                        event.kind,
                        event.kernel_id,
                        event.node_id,
                        kernel.node_id or "no node",
                    )
                    continue
                current.append(event)
            else:
                stale.append(event)
        running = [e for e in stale if e.kind in ("preparing", "running", "progress")]
        if stale:
            log.info("%d event(s) of superseded attempts fenced off", len(stale))
        if running:
            queues = dict(
                (
                    await db.execute(
                        select(Node.id, Node.queue).where(
                            Node.id.in_(sorted({e.node_id for e in running}))
                        )
                    )
                ).all()
            )
            stops = {(e.node_id, e.kernel_id, e.attempt): e for e in running}
            for (node_id, kernel_id, attempt), e in sorted(stops.items(), key=lambda i: str(i[0])):
                if node_id in queues:
                    why = f"attempt {attempt} was moved elsewhere"
                    job = stop_job(kernel_id, e.session_id, node_id, why, 0.0, attempt)
                    outbox.stops.append((queues[node_id], job))
        return current, stale

    async def _siblings(
        self, db: AsyncSession, sessions: dict[str, Session], kernels: dict[str, Kernel]
    ) -> dict[str, list[Kernel]]:
        """All kernels of each session (cluster sessions end when their last kernel ends)."""
        out: dict[str, list[Kernel]] = {sid: [] for sid in sessions}
        multi = [s.id for s in sessions.values() if s.cluster_size > 1]
        for k in kernels.values():
            out[k.session_id].append(k)
        if multi:
            for k in (
                await db.execute(select(Kernel).where(Kernel.session_id.in_(multi)))
            ).scalars():
                if k.id not in kernels:
                    out[k.session_id].append(k)
        return out


async def _nodes(db: AsyncSession, kernels: Iterable[Kernel], ending: set[str]) -> dict[str, Node]:
    """The nodes of *kernels*, those of the *ending* ones locked. Only an ending kernel
    (or one placed again) changes its node's sums: lock just those nodes, so the stream
    of "preparing"/"running" events never holds up a scheduling pass."""
    placed = {k.id: k.node_id for k in kernels if k.node_id}
    locked = sorted({node for kid, node in placed.items() if kid in ending})
    others = sorted(set(placed.values()) - set(locked))
    nodes = {n.id: n for n in await lock_rows(db, Node, Node.id.in_(locked))}
    if others:
        for n in (await db.execute(select(Node).where(Node.id.in_(others)))).scalars():
            nodes[n.id] = n
    return nodes


async def _late_ends(
    db: AsyncSession,
    stale: Sequence[KernelEvent],
    kernels: dict[str, Kernel],
    sessions: dict[str, Session],
    now: datetime,
) -> None:
    """A superseded attempt's exit goes to its session's history, once, as what became of
    it ("attempt 1 on n2 ended 0 after the node returned"); its status stays."""
    for event in stale:
        kernel = kernels.get(event.kernel_id)
        if event.kind != "exited" or kernel is None:
            continue
        session = sessions[kernel.session_id]
        code = "without an exit code" if event.exit_code is None else str(event.exit_code)
        stopped = " (stopped)" if event.requested_stop else ""
        reason = (
            f"attempt {event.attempt} on {event.node_id} ended {code}{stopped} "
            "after the node returned"
        )
        await note(db, session, reason, now)


def _running(session: Session, kernel: Kernel, node: Node | None, outbox: Outbox) -> None:
    """An interactive session runs: the app proxy's route to it."""
    if node is None or session.type != "interactive":
        return
    record = route_for(session, kernel, node)
    if record is not None:
        outbox.routes.append(record)


def _ended(session: Session, outbox: Outbox) -> None:
    """A session is over: its place is free, and its apps' route says so."""
    outbox.schedule.add(session.resource_group)
    if session.type == "interactive" and session.apps:
        outbox.ended_routes.append((session.id, session.owner_id))


@dataclass
class _Ctx:
    db: AsyncSession
    session: Session
    kernel: Kernel
    node: Node | None
    siblings: list[Kernel]
    now: datetime
    outbox: Outbox
    #: the nodes of the batch's kernels (those of ending kernels and of every kernel of a
    #: session being placed again locked)
    nodes: dict[str, Node]
    backoff: Backoff

    def move(self, new: SessionStatus, reason: str) -> None:
        if can_transition(self.session.status, new):
            self.db.add(transition(self.session, new, reason, self.now))

    def stop_container(self, reason: str) -> None:
        if self.node is not None:
            job = stop_job(self.kernel.id, self.session.id, self.node.id, reason)
            self.outbox.stops.append((self.node.queue, job))

    def end_kernel(self, status: KernelStatus, exit_code: int | None = None) -> None:
        lifecycle.end_kernel(self.node, self.kernel, status, self.now, exit_code)
        self.outbox.schedule.add(self.session.resource_group)

    @property
    def all_ended(self) -> bool:
        return all(k.ended_at is not None for k in self.siblings)


def _handle(ctx: _Ctx, event: KernelEvent) -> None:
    """Apply one event of the kernel's current attempt to the kernel and its session.

    An ending event (``_ENDING``) first ends the kernel (``_end``). Then one rule, whatever
    the kind: a kernel of a preempted session that ended, however it did, is part of its
    requeue (``_preempted_kernel_ended``). Otherwise the kind's handler decides."""
    if event.kind in _ENDING:
        ctx = _end(ctx, event)
        if ctx.session.status == S.PREEMPTED:
            _preempted_kernel_ended(ctx)
            return
    _HANDLERS[event.kind](ctx, event)


def _end(ctx: _Ctx, event: KernelEvent) -> _Ctx:
    """End the kernel with the status the event's kind means (``_KERNEL_ENDS``); the
    context as of its end. An exit ends it when the runtime says it did, with its exit
    code, and proves it ran."""
    if event.deferred and event.kind == "start_failed":
        ctx.end_kernel(K.CANCELLED)  # not failed: the runtime gave up on it for now
        return ctx
    if event.kind != "exited":
        ctx.end_kernel(_KERNEL_ENDS[event.kind])
        return ctx
    ctx = replace(ctx, now=_ended_at(ctx, event))
    _ran(ctx, event)
    ctx.end_kernel(_KERNEL_ENDS[event.kind], _exit_code(event))
    return ctx


def _exit_code(event: KernelEvent) -> int:
    """An exit's code; -1 when the runtime gave none."""
    return event.exit_code if event.exit_code is not None else -1


def _ended_at(ctx: _Ctx, event: KernelEvent) -> datetime:
    """When the kernel ended: the runtime's record (a kernel that ended while its worker
    was down ends then, not at the restart), never later than now nor before its start."""
    if event.ended_at is None:
        return ctx.now
    at = min(datetime.fromtimestamp(event.ended_at, UTC), ctx.now)
    starts = [t for t in (ctx.kernel.started_at, ctx.session.started_at) if t is not None]
    return max([at, *starts])


def _ran(ctx: _Ctx, event: KernelEvent) -> None:
    """An exit proves the kernel ran, even when its "running" is late (batches are
    handled concurrently) or was lost (Redis lost it): keep the history and start time
    whole instead of jumping from SCHEDULED to an end, or leaving no ``started_at``."""
    ctx.kernel.started_at = ctx.kernel.started_at or ctx.now
    if ctx.session.status == S.SCHEDULED:
        ctx.move(S.PREPARING, f"preparing on {event.node_id}")
    if ctx.session.status == S.PREPARING:
        ctx.move(S.RUNNING, f"running on {event.node_id}")
    ctx.session.started_at = ctx.session.started_at or ctx.kernel.started_at


def _deferring(event: KernelEvent, owners: dict[str, str]) -> bool:
    """A deferred start of a kernel the database knows (its session may be placed again)."""
    return event.kind == "start_failed" and event.deferred and event.kernel_id in owners


def _preempted_kernel_ended(ctx: _Ctx) -> None:
    """A container of a preempted session ended, however it did (its SIGTERM handler may
    exit 0 after a checkpoint). Once all have, the session waits again in its old place
    in the queue (its created_at), as its next attempt (docs/fair-share.md)."""
    if not ctx.all_ended:
        return
    session = ctx.session
    session.preemptions += 1
    session.exit_code = None
    for kernel in ctx.siblings:
        lifecycle.new_attempt(kernel, ctx.now)
    why = f"queued again after preemption {session.preemptions} ({session.status_reason})"
    ctx.move(S.PENDING, why)
    session.pending_reason = why
    ctx.outbox.schedule.add(session.resource_group)


def _on_preparing(ctx: _Ctx, event: KernelEvent) -> None:
    if can_move_kernel(ctx.kernel.status, K.PREPARING):
        ctx.kernel.status = K.PREPARING
        ctx.kernel.updated_at = ctx.now
    if ctx.session.status == S.SCHEDULED:
        ctx.move(S.PREPARING, event.message or f"preparing on {event.node_id}")


def _on_progress(ctx: _Ctx, event: KernelEvent) -> None:
    if ctx.session.status in (S.SCHEDULED, S.PREPARING) and event.message:
        ctx.session.status_reason = event.message
        ctx.outbox.live.append((ctx.session.id, {"type": "progress", "message": event.message}))


def _on_running(ctx: _Ctx, event: KernelEvent) -> None:
    k = ctx.kernel
    if event.apps and not ctx.session.apps:  # discovered from the image's label
        ctx.session.apps = {
            a.name: {
                "port": a.port,
                "protocol": a.protocol,
                "strip_prefix": a.strip_prefix,
                "start": a.start,
            }
            for a in event.apps
        }
    if k.ended_at is None:
        if can_move_kernel(k.status, K.RUNNING):  # a late "running" never undoes "stopping"
            k.status = K.RUNNING
        k.ports = dict(event.ports)
        k.container_id = event.container_id
        k.started_at = k.started_at or ctx.now
        k.updated_at = ctx.now
    if ctx.session.status in TERMINAL or ctx.session.status == S.TERMINATING:
        ctx.stop_container(f"session is {ctx.session.status}")
        return
    if ctx.session.status == S.SCHEDULED:
        # its "preparing" is late (batches are handled concurrently): keep the history whole
        ctx.move(S.PREPARING, f"preparing on {event.node_id}")
    if all(s.status == K.RUNNING for s in ctx.siblings):
        ctx.move(S.RUNNING, f"running on {event.node_id}")


# The handlers of the ending events: what a session that is not preempted becomes once
# the kernel ended (``_handle``).


def _on_exited(ctx: _Ctx, event: KernelEvent) -> None:
    code = _exit_code(event)
    if not ctx.all_ended:
        _cluster_member_exited(ctx, event, code)
        return
    if ctx.session.status in TERMINAL:  # a cluster session main1 or a failure ended
        return
    codes = [k.exit_code for k in ctx.siblings if k.exit_code is not None]
    failing = next((c for c in codes if c != 0), 0)
    ctx.session.exit_code = failing
    if event.requested_stop and ctx.session.status != S.TERMINATING:
        # the node stopped it on its own (its stack or worker shut down with its sessions)
        ctx.move(S.TERMINATING, event.message or f"{event.node_id} stopped it")
    if ctx.session.status == S.TERMINATING:
        # keep why it was stopped (a user, idleness, the node shutting down) in the reason
        ctx.move(S.TERMINATED, f"{ctx.session.status_reason} (exit code {code})")
    elif failing == 0:
        ctx.move(S.SUCCEEDED, "exited with code 0")
    else:
        ctx.move(S.FAILED, event.message or f"exited with code {failing}")


def _cluster_member_exited(ctx: _Ctx, event: KernelEvent, code: int) -> None:
    """One container of a cluster session ended while others run (docs/cluster-sessions.md).

    A failing container ends the session, naming it; main1 ending ends a ``main-done``
    session with main1's exit code. The others are then stopped (see ``abandoned``).
    """
    if ctx.session.status in TERMINAL or ctx.session.status == S.TERMINATING:
        return
    name = cluster_hostname(ctx.kernel.cluster_idx)
    ctx.session.exit_code = code
    if code != 0:
        ctx.move(S.FAILED, f"{name} exited with code {code}" + _why(event))
    elif ctx.kernel.cluster_idx == 0 and ctx.session.stop_when != "all-done":
        ctx.move(S.SUCCEEDED, "main1 exited with code 0")
    else:
        ctx.session.exit_code = None


def _why(event: KernelEvent) -> str:
    return f" ({event.message})" if event.message else ""


def _on_start_failed(ctx: _Ctx, event: KernelEvent) -> None:
    if event.deferred:
        _start_deferred(ctx, event)
        return
    ctx.move(S.ERROR, event.message or "the node could not start it")


def _start_deferred(ctx: _Ctx, event: KernelEvent) -> None:
    """The runtime could not start it *now* (Slurm kept its job waiting past the start
    timeout, ...) and left nothing running: the session is placed again, every kernel as
    its next attempt (``lifecycle.place_again``, as after a node loss), the runtime's
    words as its pending reason. Never at once: it waits ``retry_backoff_s * 2**(n-1)``
    (at most ``retry_backoff_max_s``) through ``starts_at``, n the attempt that did not
    start, so a node that keeps refusing is not asked again and again in a hot loop.
    It is no retry (``retries`` stays: nothing ran). A session asked to stop meanwhile
    ends CANCELLED once its last kernel has."""
    session = ctx.session
    message = event.message or f"{event.node_id} could not start it now"
    if session.status == S.TERMINATING:
        if ctx.all_ended:
            ctx.move(S.CANCELLED, f"{session.status_reason}; {message}")
        return
    if not can_transition(session.status, S.PENDING):
        return  # over already (another kernel of its cluster session ended it)
    at = ctx.now + timedelta(seconds=ctx.backoff.wait_s(ctx.kernel.attempt))
    session.starts_at = at
    why = f"{message} (on {event.node_id}); placed again from {at:%H:%M:%S}Z"
    lifecycle.place_again(ctx.db, session, ctx.siblings, ctx.nodes, why, ctx.now, ctx.outbox)
    ctx.outbox.schedule.add(session.resource_group)


def _on_not_started(ctx: _Ctx, event: KernelEvent) -> None:
    if not ctx.all_ended:
        return
    if ctx.session.status == S.PREPARING:
        # the node stopped it on its own while it was being prepared (its worker shut down)
        ctx.move(S.TERMINATING, event.message or f"{event.node_id} stopped it before it ran")
    ctx.move(S.CANCELLED, event.message or "cancelled before it started")


def _on_lost(ctx: _Ctx, event: KernelEvent) -> None:
    message = event.message or f"its container was lost on {event.node_id}"
    if ctx.session.status == S.TERMINATING:
        # it was asked to stop, and it is gone: stopped, not an error (as when its node is
        # lost, docs/node-loss.md); a cluster session ends when its last kernel has
        if ctx.all_ended:
            ctx.move(S.TERMINATED, f"{ctx.session.status_reason}; {message}")
        return
    ctx.move(S.ERROR, message)


_HANDLERS = {
    "preparing": _on_preparing,
    "progress": _on_progress,
    "running": _on_running,
    "exited": _on_exited,
    "start_failed": _on_start_failed,
    "not_started": _on_not_started,
    "lost": _on_lost,
}
