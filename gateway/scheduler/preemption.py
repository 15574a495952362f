"""What the planner needs to preempt, read from the database (docs/fair-share.md).

* ``Snapshot.running``: the group's RUNNING sessions that may be preempted, with what
  each kernel holds where. A session may be preempted when it says so
  (``preemptible``), or by default when it is a batch session that is no endpoint
  replica; and only while it was preempted fewer than the group's ``max_preemptions``
  times.
* ``Snapshot.preempting``: pending sessions whose victims have not stopped yet (they
  wait for those, and preempt nothing more meanwhile).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import and_, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.locks import lock_rows
from gateway.db.models import Kernel, Session
from gateway.db.transitions import transition
from gateway.domain.status import SessionStatus
from gateway.lifecycle import stop_kernels
from gateway.outbox import Outbox
from plugins.resources import ResourceSlots
from plugins.scheduling.types import KernelPlacement, RunningSession, Snapshot

__all__ = ["add_preemption_view", "may_be_preempted", "preempt_victims"]

S = SessionStatus


def may_be_preempted(preemptible: bool | None, type: str, endpoint_id: str | None) -> bool:
    """Whether a session is preemptible in a group that preempts: as it says, else a
    batch session that is no endpoint replica."""
    if preemptible is not None:
        return preemptible
    return type == "batch" and endpoint_id is None


async def add_preemption_view(db: AsyncSession, snapshot: Snapshot) -> None:
    """Fill ``snapshot.running`` and ``snapshot.preempting`` (a group that preempts)."""
    config = snapshot.config
    group = snapshot.resource_group
    batch = and_(Session.type == "batch", Session.endpoint_id.is_(None))
    by_default = and_(Session.preemptible.is_(None), batch)
    if not config.preemption_opt_out:  # what a batch session says does not count
        by_default = batch
    sessions = list(
        await db.execute(
            select(
                Session.id,
                Session.owner_id,
                Session.project_id,
                Session.priority,
                Session.created_at,
                Session.started_at,
                Session.preempted_by,
            ).where(
                Session.resource_group == group,
                Session.status == S.RUNNING,
                Session.preemptions < config.max_preemptions,
                or_(Session.preemptible == true(), by_default),
            )
        )
    )
    kernels: dict[str, list[KernelPlacement]] = {}
    if sessions:
        for k in await db.execute(
            select(
                Kernel.session_id, Kernel.node_id, Kernel.slots, Kernel.devices, Kernel.cpuset
            ).where(
                Kernel.session_id.in_([s.id for s in sessions]),
                Kernel.ended_at.is_(None),
                Kernel.node_id.is_not(None),
            )
        ):
            kernels.setdefault(k.session_id, []).append(
                KernelPlacement(
                    node_id=k.node_id,
                    slots=ResourceSlots.from_json(k.slots),
                    devices={
                        slot: {d: Decimal(a) for d, a in per.items()}
                        for slot, per in k.devices.items()
                    },
                    cpuset=k.cpuset.get("cpus"),
                )
            )
    snapshot.running = [
        RunningSession(
            id=s.id,
            owner=s.owner_id,
            kernels=tuple(kernels[s.id]),
            created_at=s.created_at,
            started_at=s.started_at or s.created_at,
            priority=s.priority,
            project=s.project_id,
            preempted_by=s.preempted_by,
        )
        for s in sessions
        if s.id in kernels
    ]
    ending = await db.execute(
        select(Session.id, Session.preempted_by).where(
            Session.resource_group == group,
            Session.status == S.PREEMPTED,
            Session.preempted_by.is_not(None),
        )
    )
    for victim, preemptor in ending:
        snapshot.preempting.setdefault(preemptor or "", []).append(victim)


async def preempt_victims(
    db: AsyncSession,
    preempted: dict[str, tuple[str, str]],
    grace: float,
    outbox: Outbox,
    now: datetime,
) -> dict[str, str]:
    """Move the plan's victims to PREEMPTED and send their stop jobs (notice, SIGTERM,
    *grace*, SIGKILL). A preemptor's victims go all together or not at all: when one of
    them is no longer RUNNING (it ended, it was stopped), the room the plan counted on
    is not there, and the next pass decides again. Victim id -> why, of those moved."""
    rows = await lock_rows(db, Session, Session.id.in_(sorted(preempted)))
    by_id = {s.id: s for s in rows}
    groups: dict[str, list[str]] = {}
    for victim, (preemptor, _) in preempted.items():
        groups.setdefault(preemptor, []).append(victim)
    moved: dict[str, str] = {}
    for preemptor, victims in sorted(groups.items()):
        sessions = [by_id.get(v) for v in sorted(victims)]
        if any(s is None or s.status != S.RUNNING for s in sessions):
            continue
        for session in sessions:
            assert session is not None
            why = preempted[session.id][1]
            db.add(transition(session, S.PREEMPTED, why, now))
            session.preempted_by = preemptor
            outbox.status(session)
            moved[session.id] = why
            await stop_kernels(db, [session.id], why, outbox, grace, preemptor)
    return moved
