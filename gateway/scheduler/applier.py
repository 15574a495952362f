"""The plan applier: commit a Plan in one transaction, re-checking everything it assumed.

The planner worked on a snapshot that may be stale by the time its plan arrives: a
session may have been cancelled, another scheduler may have used the capacity. So the
applier locks the sessions (still PENDING?) and then the nodes (in id order, the same
order the event consumer uses, so two writers never deadlock), re-checks every kernel
against the node's *current* free capacity, and commits only the placements that still
hold - all kernels of a session or none. What it drops stays PENDING for the next pass,
as Nomad's plan applier does with a partially rejected plan.

A pass may place thousands of sessions, so this works on columns and writes with one
executemany statement per table, not through the ORM's per-object bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from contract.cluster import cluster_hostname
from contract.messages import (
    StartKernel,
    WireApp,
    WireCluster,
    WireClusterMember,
    WireEgress,
    WireFolder,
    WireMount,
    WireSecret,
)
from contract.tokens import app_secret
from gateway.db.allocation import NodeLedger
from gateway.db.clock import db_now
from gateway.db.models import Kernel, Session, WebhookEvent
from gateway.db.tables import HISTORY, KERNELS, NODES, SESSIONS
from gateway.db.transitions import bulk_transition, session_ended_events
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.outbox import Outbox
from gateway.scheduler.preemption import preempt_victims
from plugins.scheduling.reasons import DID_NOT_FIT
from plugins.scheduling.types import KernelPlacement, Placement, Plan

__all__ = ["Applied", "apply_plan", "cluster_members", "start_job"]

S = SessionStatus


@dataclass
class Applied:
    """What a plan came to (its start jobs and live events went into the outbox)."""

    #: session id -> its new status and reason
    placed: dict[str, str] = field(default_factory=dict)
    cancelled: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # session id -> why
    reasons: dict[str, str] = field(default_factory=dict)  # changed pending reasons
    preempted: dict[str, str] = field(default_factory=dict)  # victim id -> why


async def apply_plan(
    db: AsyncSession,
    plan: Plan,
    known_reasons: dict[str, Any],
    outbox: Outbox,
    app_key: str = "",
    grace: float = 30.0,
    egress: WireEgress | None = None,
    cluster_ports: range = range(29100, 29900),
) -> Applied:
    """Apply *plan* inside the caller's transaction; its start jobs and live events go
    into *outbox*, to send after the commit. *app_key*: the proxy secret, from which
    interactive sessions' app secrets are derived ("": none); *grace*: the group's
    preemption grace period; *egress*: the group's, which every start job carries;
    *cluster_ports*: the UDP ports multi-node sessions' overlay forwarders get."""
    out = Applied()
    now = await db_now(db)
    # lock order, everywhere: sessions, then kernels, then nodes, each in id order
    sessions = await _lock_sessions(db, plan)
    if plan.preempted:
        out.preempted = await preempt_victims(db, plan.preempted, grace, outbox, now)
    kernels = await _kernels(
        db, [p.session_id for p in plan.placements if p.session_id in sessions]
    )
    ledgers, queues, addresses = await _lock_nodes(db, plan)
    ports = await PortBook.read(db, plan, sessions, cluster_ports)
    kernel_updates: list[dict[str, Any]] = []
    for placement in plan.placements:
        session = sessions.get(placement.session_id)
        if session is None:
            continue  # cancelled or placed by someone else meanwhile
        overlay = ports.take(session, placement)
        if overlay is None:
            out.rejected[session.id] = ports.why_not(placement)
            continue
        why = _reserve(placement, ledgers)
        if why is not None:
            ports.give_back(overlay)
            out.rejected[session.id] = why
            continue
        attempts = kernels.get(session.id, [])
        members = cluster_members(
            [(k, kp.node_id) for (k, _), kp in zip(attempts, placement.kernels, strict=True)],
            addresses,
            overlay,
        )
        for index, ((kernel_id, attempt), kp) in enumerate(
            zip(attempts, placement.kernels, strict=True)
        ):
            update_row = _kernel_columns(kernel_id, kp, now, overlay.get(kp.node_id))
            kernel_updates.append(update_row)
            cluster = _cluster(session, index, members)
            job = _job(
                session, kernel_id, kp.node_id, update_row, attempt, cluster, app_key, egress
            )
            outbox.starts.append((queues[kp.node_id], job))
        where = ", ".join(sorted({kp.node_id for kp in placement.kernels}))
        out.placed[session.id] = f"placed on {where}"
        if session.lost_node:  # placed again after a node loss (docs/node-loss.md)
            attempt = max(a for _, a in attempts)
            out.placed[session.id] = (
                f"node {session.lost_node} lost; attempt {attempt} placed on {where}"
            )
    out.cancelled = {sid: why for sid, why in plan.cancelled.items() if sid in sessions}
    await _write(db, out, ledgers, kernel_updates, now)
    await _record_reasons(db, plan, out, known_reasons)
    _live_events(out, outbox)
    return out


def _live_events(out: Applied, outbox: Outbox) -> None:
    for status, moved in ((S.SCHEDULED, out.placed), (S.CANCELLED, out.cancelled)):
        outbox.live += [
            (sid, {"type": "status", "status": status, "reason": why, "exit_code": None})
            for sid, why in moved.items()
        ]
    outbox.live += [
        (sid, {"type": "progress", "message": f"pending: {why}"})
        for sid, why in out.reasons.items()
    ]


async def _lock_sessions(db: AsyncSession, plan: Plan) -> dict[str, Any]:
    ids = sorted({p.session_id for p in plan.placements} | set(plan.cancelled))
    if not ids:
        return {}
    c = SESSIONS.c
    rows = await db.execute(
        select(
            c.id,
            c.type,
            c.image,
            c.command,
            c.env,
            c.workdir,
            c.working_dir,
            c.mounts,
            c.folders,
            c.secrets,
            c.apps,
            c.lost_node,
            c.cluster_mode,
            c.cluster_key,
        )
        .where(c.id.in_(ids), c.status == S.PENDING)
        .order_by(c.id)
        .with_for_update(key_share=True)
    )
    return {row.id: row for row in rows}


async def _lock_nodes(
    db: AsyncSession, plan: Plan
) -> tuple[dict[str, NodeLedger], dict[str, str], dict[str, str]]:
    """Each node's ledger, queue and address."""
    ids = sorted({k.node_id for p in plan.placements for k in p.kernels})
    if not ids:
        return {}, {}, {}
    c = NODES.c
    rows = await db.execute(
        select(
            c.id,
            c.queue,
            c.address,
            c.capacity,
            c.occupied,
            c.devices,
            c.device_used,
            c.used_cpus,
        )
        .where(c.id.in_(ids))
        .order_by(c.id)
        .with_for_update(key_share=True)
    )
    ledgers, queues, addresses = {}, {}, {}
    for r in rows:
        ledgers[r.id] = NodeLedger.from_columns(
            r.id, r.capacity, r.occupied, r.devices, r.device_used, r.used_cpus
        )
        queues[r.id] = r.queue
        addresses[r.id] = r.address
    return ledgers, queues, addresses


async def _kernels(
    db: AsyncSession, session_ids: Sequence[str]
) -> dict[str, list[tuple[str, int]]]:
    """Each session's (kernel id, attempt), in cluster order."""
    if not session_ids:
        return {}
    c = KERNELS.c
    rows = await db.execute(
        select(c.id, c.session_id, c.cluster_idx, c.attempt)
        .where(c.session_id.in_(session_ids))
        .order_by(c.id)
        .with_for_update(key_share=True)
    )
    out: dict[str, list[tuple[int, str, int]]] = {}
    for kernel_id, session_id, index, attempt in rows:
        out.setdefault(session_id, []).append((index, kernel_id, attempt))
    return {sid: [(k, a) for _, k, a in sorted(ks)] for sid, ks in out.items()}


def _reserve(placement: Placement, ledgers: dict[str, NodeLedger]) -> str | None:
    """Take a whole placement from the nodes' ledgers, or nothing and say why not."""
    taken: list[tuple[NodeLedger, KernelPlacement]] = []
    for kp in placement.kernels:
        ledger = ledgers.get(kp.node_id)
        why = (
            f"node {kp.node_id} is gone"
            if ledger is None
            else ledger.why_not(kp.slots, kp.devices, kp.cpuset)
        )
        if why is not None or ledger is None:
            for earlier, done in taken:  # all of a gang or none of it
                earlier.give_back(done.slots, done.devices, done.cpuset)
            return why
        ledger.take(kp.slots, kp.devices, kp.cpuset)
        taken.append((ledger, kp))
    return None


def _kernel_columns(
    kernel_id: str, kp: KernelPlacement, now: datetime, port: int | None
) -> dict[str, Any]:
    return {
        "b_id": kernel_id,
        "node_id": kp.node_id,
        "cluster_port": port,
        "slots": kp.slots.to_json(),
        "devices": {s: {d: str(a) for d, a in per.items()} for s, per in kp.devices.items()},
        "cpuset": {"cpus": list(kp.cpuset)} if kp.cpuset else {},
        "status": KernelStatus.SCHEDULED,
        "released": False,
        "updated_at": now,
    }


async def _write(
    db: AsyncSession,
    out: Applied,
    ledgers: dict[str, NodeLedger],
    kernel_updates: list[dict[str, Any]],
    now: datetime,
) -> None:
    """One executemany statement per table."""
    if out.placed:
        updates, history = bulk_transition(S.PENDING, S.SCHEDULED, out.placed, now)
        for row in updates:
            row.update(scheduled_at=now, pending_reason="", schedule_attempts=0, lost_node=None)
        await db.execute(_by_id(SESSIONS, updates[0]), updates)
        await db.execute(insert(HISTORY), history)
        await db.execute(_by_id(KERNELS, kernel_updates[0]), kernel_updates)
        nodes = [{"b_id": n, **ledger.columns()} for n, ledger in ledgers.items()]
        await db.execute(_by_id(NODES, nodes[0]), nodes)
    if out.cancelled:
        updates, history = bulk_transition(S.PENDING, S.CANCELLED, out.cancelled, now)
        for row in updates:
            row["pending_reason"] = ""
        await db.execute(_by_id(SESSIONS, updates[0]), updates)
        await db.execute(insert(HISTORY), history)
        ended = session_ended_events(S.CANCELLED, list(out.cancelled), now)
        await db.execute(insert(WebhookEvent), ended)
        await db.execute(
            update(KERNELS)
            .where(KERNELS.c.session_id.in_(list(out.cancelled)))
            .values(status=KernelStatus.CANCELLED, ended_at=now, updated_at=now)
        )


def _by_id(table: Table, example: dict[str, Any]) -> Any:
    """UPDATE table SET <the example's columns> WHERE id = :b_id, for executemany."""
    columns: dict[str, Any] = {k: bindparam(k) for k in example if k != "b_id"}
    return update(table).where(table.c.id == bindparam("b_id")).values(columns)


async def _record_reasons(
    db: AsyncSession, plan: Plan, out: Applied, known: dict[str, Any]
) -> None:
    """Store why each session still waits, writing only reasons that changed."""
    reasons = dict(plan.waiting)
    for session_id, why in out.rejected.items():
        reasons[session_id] = f"capacity changed while placing ({why}); retrying"
    changed = [
        {"b_id": sid, "pending_reason": why}
        for sid, why in reasons.items()
        if known.get(sid) != why
    ]
    if changed:
        await db.execute(_by_id(SESSIONS, changed[0]), changed)
    out.reasons = {c["b_id"]: c["pending_reason"] for c in changed}
    # heuristic-fifo reads how many passes in a row a session did not fit
    missed = sorted(sid for sid, code in plan.codes.items() if code in DID_NOT_FIT)
    if missed:
        await db.execute(
            update(SESSIONS)
            .where(SESSIONS.c.id.in_(missed), SESSIONS.c.status == S.PENDING)
            .values(schedule_attempts=SESSIONS.c.schedule_attempts + 1)
        )


def cluster_members(
    kernels: Sequence[tuple[str, str]],
    addresses: dict[str, str],
    ports: dict[str, int] | None = None,
) -> list[WireClusterMember]:
    """``(kernel id, node id)`` in cluster order -> the members every container is told;
    *ports*: node -> the session's overlay port there (multi-node)."""
    return [
        WireClusterMember(
            hostname=cluster_hostname(i),
            kernel_id=kernel_id,
            node_id=node_id,
            address=addresses.get(node_id, ""),
            port=(ports or {}).get(node_id, 0),
        )
        for i, (kernel_id, node_id) in enumerate(kernels)
    ]


@dataclass
class PortBook:
    """The overlay ports (UDP) of multi-node sessions, per node: each (session, node)
    gets the lowest port of the range that no live kernel on that node holds. The nodes
    are locked by the caller's transaction, so two passes never hand out the same one."""

    ports: range
    taken: dict[str, set[int]]

    @classmethod
    async def read(
        cls, db: AsyncSession, plan: Plan, sessions: dict[str, Any], ports: range
    ) -> PortBook:
        nodes = sorted(
            {
                kp.node_id
                for p in plan.placements
                if _multi_node(sessions.get(p.session_id), p)
                for kp in p.kernels
            }
        )
        taken: dict[str, set[int]] = {n: set() for n in nodes}
        if nodes:
            c = KERNELS.c
            rows = await db.execute(
                select(c.node_id, c.cluster_port).where(
                    c.node_id.in_(nodes), c.ended_at.is_(None), c.cluster_port.is_not(None)
                )
            )
            for node, port in rows:
                taken[node].add(port)
        return cls(ports, taken)

    def take(self, session: Any, placement: Placement) -> dict[str, int] | None:
        """node -> port for *placement* ({} when it needs none); None: a node has none
        left (nothing taken)."""
        if not _multi_node(session, placement):
            return {}
        out: dict[str, int] = {}
        for node in sorted({kp.node_id for kp in placement.kernels}):
            used = self.taken[node]
            port = next((p for p in self.ports if p not in used), None)
            if port is None:
                self.give_back(out)
                return None
            used.add(port)
            out[node] = port
        return out

    def give_back(self, taken: dict[str, int]) -> None:
        for node, port in taken.items():
            self.taken[node].discard(port)

    def why_not(self, placement: Placement) -> str:
        full = sorted(
            {
                kp.node_id
                for kp in placement.kernels
                if len(self.taken[kp.node_id]) >= len(self.ports)
            }
        )
        return (
            f"no cluster port left on {', '.join(full)} ({self.ports.start}-{self.ports.stop - 1})"
        )


def _multi_node(session: Any, placement: Placement) -> bool:
    return (
        session is not None and session.cluster_mode == "multi-node" and len(placement.kernels) > 1
    )


def _cluster(session: Any, index: int, members: list[WireClusterMember]) -> WireCluster | None:
    if session.cluster_mode is None or len(members) < 2:
        return None
    return WireCluster(
        mode=session.cluster_mode,
        index=index,
        members=members,
        ssh_seed=session.cluster_key or "",
    )


def _job(
    session: Any,
    kernel_id: str,
    node_id: str,
    placed: dict[str, Any],
    attempt: int = 1,
    cluster: WireCluster | None = None,
    app_key: str = "",
    egress: WireEgress | None = None,
) -> StartKernel:
    checks = app_key and session.type == "interactive"
    return StartKernel(
        kernel_id=kernel_id,
        session_id=session.id,
        node_id=node_id,
        session_type=session.type,
        command=list(session.command.get("argv", [])),
        image=session.image,
        env=dict(session.env),
        workdir=session.workdir,
        working_dir=session.working_dir,
        resources=dict(placed["slots"]),
        mounts=[WireMount(**m) for m in session.mounts.get("items", [])],
        folders=[WireFolder(**f) for f in (session.folders or {}).get("items", [])],
        devices=placed["devices"],
        apps=[WireApp(name=name, **info) for name, info in session.apps.items()],
        cpuset=placed["cpuset"].get("cpus") or None,
        attempt=attempt,
        cluster=cluster,
        egress=egress or WireEgress(),
        app_secret=app_secret(app_key, session.id) if checks else "",
        secrets=[
            WireSecret(name=s["name"], env=s.get("env"), path=s.get("path"))
            for s in (session.secrets or {}).get("items", [])
        ],
    )


def start_job(
    session: Session,
    kernel: Kernel,
    members: list[WireClusterMember] | None = None,
    app_key: str = "",
    egress: WireEgress | None = None,
) -> StartKernel:
    """The start job for a kernel already placed (the reconciler re-enqueues with it);
    *members*: a cluster session's containers (:func:`cluster_members`); *app_key*,
    *egress*: as :func:`apply_plan`'s."""
    placed = {"slots": kernel.slots, "devices": kernel.devices, "cpuset": kernel.cpuset}
    cluster = _cluster(session, kernel.cluster_idx, members or [])
    node = kernel.node_id or ""
    return _job(session, kernel.id, node, placed, kernel.attempt, cluster, app_key, egress)
