"""How sessions and kernels end: the one module routes, events and the reconciler share.

::

    begin_termination ─▶ PENDING: CANCELLED, its kernels end (never placed)
                      └▶ live: TERMINATING, stop_kernels ─▶ a stop job per placed kernel
    stop_kernels      ─▶ started kernels become "stopping"; stop_job() for each (outbox)
    end_kernel        ─▶ final kernel status, ended_at (first end wins), release()
    place_again       ─▶ PENDING again: every kernel a new attempt, the old ones stopped
    release           ─▶ the kernel's allocation back to its node's sums (once)

Everything here runs inside the caller's transaction, with the rows locked in the one
order (sessions, kernels, nodes); the jobs and live events go into the caller's
:class:`~gateway.outbox.Outbox`, sent after the commit.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from contract.messages import StopKernel
from gateway.db.allocation import NodeLedger, kernel_devices
from gateway.db.clock import db_now
from gateway.db.models import Kernel, Node, Session
from gateway.db.transitions import transition
from gateway.domain.status import ACTIVE, KernelStatus, SessionStatus
from gateway.outbox import Outbox
from plugins.resources import ResourceSlots

__all__ = [
    "begin_termination",
    "end_kernel",
    "new_attempt",
    "place_again",
    "release",
    "stop_job",
    "stop_kernels",
]

S = SessionStatus
K = KernelStatus


def stop_job(
    kernel_id: str,
    session_id: str,
    node_id: str,
    reason: str,
    grace: float = 0.0,
    attempt: int | None = None,
    preempted_by: str | None = None,
) -> StopKernel:
    """The one way a stop job is made (SIGTERM, *grace* seconds, then SIGKILL); with
    *attempt*, the node stops only that attempt of the kernel; with *preempted_by*, it
    writes the preemption notice first."""
    return StopKernel(
        kernel_id=kernel_id,
        session_id=session_id,
        node_id=node_id,
        reason=reason,
        grace=grace,
        attempt=attempt,
        preempted_by=preempted_by,
    )


async def begin_termination(
    db: AsyncSession,
    session: Session,
    outbox: Outbox,
    *,
    cancel_reason: str,
    stop_reason: str,
    grace: float,
) -> None:
    """Cancel a pending session, or move a live one to TERMINATING and stop its kernels.

    The caller holds the session's row lock; the stop jobs and the live status event
    (when the status changed) go into *outbox*.
    """
    now = await db_now(db)
    status = SessionStatus(session.status)
    if status == S.PENDING:
        db.add(transition(session, S.CANCELLED, cancel_reason, now))
        for kernel in (
            await db.execute(select(Kernel).where(Kernel.session_id == session.id))
        ).scalars():
            end_kernel(None, kernel, K.CANCELLED, now)  # never placed: no share to give back
    elif status in ACTIVE:
        if status != S.TERMINATING:
            db.add(transition(session, S.TERMINATING, stop_reason, now))
            session.terminate_requested_at = now
        await stop_kernels(db, [session.id], stop_reason, outbox, grace)
    if session.status != status:
        outbox.status(session)


async def stop_kernels(
    db: AsyncSession,
    session_ids: list[str],
    reason: str,
    outbox: Outbox,
    grace: float = 10.0,
    preempted_by: str | None = None,
) -> None:
    """A stop job for every placed kernel of these sessions not yet ended; the kernels a
    node started are "stopping" from now on (a worker that no longer lists one stopped it).
    *preempted_by*: they are preempted for that session (the jobs carry the notice)."""
    rows = (
        await db.execute(
            select(Kernel.id, Kernel.session_id, Node.id, Node.queue, Kernel.attempt)
            .join(Node, Node.id == Kernel.node_id)
            .where(Kernel.session_id.in_(session_ids), Kernel.ended_at.is_(None))
            .order_by(Kernel.id)
        )
    ).all()
    if not rows:
        return
    await db.execute(
        update(Kernel)
        .where(
            Kernel.id.in_([row[0] for row in rows]),
            Kernel.status.in_([K.PREPARING, K.RUNNING]),
        )
        .values(status=K.STOPPING)
    )
    outbox.stops += [
        (queue, stop_job(kid, sid, nid, reason, grace, attempt, preempted_by))
        for kid, sid, nid, queue, attempt in rows
    ]


def end_kernel(
    node: Node | None,
    kernel: Kernel,
    status: KernelStatus,
    now: datetime,
    exit_code: int | None = None,
) -> None:
    """A kernel is over: its final status, when (the first end wins), its node's share back."""
    kernel.status = status
    kernel.exit_code = exit_code
    kernel.ended_at = kernel.ended_at or now
    kernel.updated_at = now
    release(node, kernel)


def new_attempt(kernel: Kernel, now: datetime) -> None:
    """The kernel waits for a place again, as its next attempt (its node was lost, or its
    session was preempted); its old attempt's allocation must be released already."""
    kernel.attempt += 1
    kernel.status, kernel.node_id = K.PENDING, None
    kernel.slots, kernel.devices, kernel.cpuset, kernel.ports = {}, {}, {}, {}
    kernel.cluster_port = None
    kernel.container_id = kernel.exit_code = None
    kernel.started_at = kernel.ended_at = None
    kernel.updated_at = now


def place_again(
    db: AsyncSession,
    session: Session,
    kernels: Sequence[Kernel],
    nodes: Mapping[str, Node],
    why: str,
    now: datetime,
    outbox: Outbox,
    *,
    unreachable: Collection[str] = (),
) -> None:
    """*session* waits for a place again (PENDING, *why* in its history and its
    ``pending_reason``), every kernel of it (*kernels*: all of them, locked) as its next
    attempt. The attempts not ended yet give their allocations back to their nodes (in
    *nodes*, locked) and are stopped, that attempt only, except on the nodes in
    *unreachable* (lost: nobody to tell); their late events are stale (fenced by
    attempt). The caller checked the move is allowed and sends the status event."""
    for kernel in kernels:
        node = nodes.get(kernel.node_id or "")
        if kernel.ended_at is None:
            release(node, kernel)
            if node is not None and node.id not in unreachable:
                job = stop_job(kernel.id, session.id, node.id, why, 0.0, kernel.attempt)
                outbox.stops.append((node.queue, job))
        new_attempt(kernel, now)
    session.exit_code = None
    db.add(transition(session, S.PENDING, why, now))
    session.pending_reason = why


def release(node: Node | None, kernel: Kernel) -> None:
    """Give the kernel's allocation back to its node (once; repeated calls do nothing)."""
    if kernel.released:
        return
    kernel.released = True
    if node is None:
        return
    ledger = NodeLedger.of(node)
    ledger.give_back(
        ResourceSlots.from_json(kernel.slots), kernel_devices(kernel), kernel.cpuset.get("cpus")
    )
    for column, value in ledger.columns().items():
        setattr(node, column, value)
