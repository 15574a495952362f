"""What the planner's validators need beside nodes and requests: who holds what now,
the limits that apply to them, names for reasons, and the statuses of dependencies.

Usage counts every session that holds an allocation (SCHEDULED through TERMINATING),
over all resource groups: a quota is per user or project, not per pool. Rows are
grouped by resource shape in SQL, so a user running 20,000 identical sessions costs one
row, not 20,000.

Policies: a ``resource_policies`` row with ``subject_id = "*"`` is the default for every
user (or project) without one of its own.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import Kernel, Project, ResourcePolicy, Session, User
from gateway.domain.status import ACTIVE
from plugins.resources import ResourceSlots
from plugins.scheduling.types import Limits, Snapshot, Usage

__all__ = ["DEFAULT_SUBJECT", "add_policy_view", "limits_from_row"]

DEFAULT_SUBJECT = "*"


def limits_from_row(row: ResourcePolicy) -> Limits:
    return Limits(
        max_sessions=row.max_sessions,
        max_slots=ResourceSlots.from_json(row.max_slots) if row.max_slots else None,
    )


async def add_policy_view(db: AsyncSession, snapshot: Snapshot, deps: dict[str, list[str]]) -> None:
    """Fill usage, limits, names and dependency statuses into *snapshot*."""
    if not snapshot.pending:
        return
    owners = {r.owner for r in snapshot.pending}
    projects = {r.project for r in snapshot.pending if r.project}
    policies = list(
        (
            await db.execute(
                select(ResourcePolicy).where(
                    ResourcePolicy.subject_id.in_([*owners, *projects, DEFAULT_SUBJECT])
                )
            )
        ).scalars()
    )
    snapshot.user_limits = _limits(policies, "user", owners)
    snapshot.project_limits = _limits(policies, "project", projects)
    # usage feeds quotas and DRF only: skip its queries when neither applies
    if snapshot.user_limits or snapshot.project_limits or snapshot.config.sequencer.name == "drf":
        await _add_usage(db, snapshot)
    snapshot.user_names = {
        uid: name
        for uid, name in await db.execute(select(User.id, User.name).where(User.id.in_(owners)))
    }
    if projects:
        snapshot.project_names = {
            pid: name
            for pid, name in await db.execute(
                select(Project.id, Project.name).where(Project.id.in_(projects))
            )
        }
    wanted = {d for ids in deps.values() for d in ids}
    if wanted:
        snapshot.dependency_status = {
            sid: status
            for sid, status in await db.execute(
                select(Session.id, Session.status).where(Session.id.in_(wanted))
            )
        }


def _add(
    table: dict[str, tuple[int, ResourceSlots]], key: str, n: int, slots: ResourceSlots
) -> None:
    count, held = table.get(key, (0, ResourceSlots()))
    table[key] = (count + n, held + slots)


def _limits(policies: list[ResourcePolicy], scope: str, subjects: set[str]) -> dict[str, Limits]:
    mine = {p.subject_id: p for p in policies if p.scope == scope}
    default = mine.get(DEFAULT_SUBJECT)
    out = {}
    for subject in subjects:
        row = mine.get(subject, default)
        if row is not None and (row.max_sessions is not None or row.max_slots):
            out[subject] = limits_from_row(row)  # rows that limit nothing are left out
    return out


async def _add_usage(db: AsyncSession, snapshot: Snapshot) -> None:
    """Sessions and slots every user and project holds now (grouped by shape in SQL)."""
    active = [str(s) for s in ACTIVE]

    users: dict[str, tuple[int, ResourceSlots]] = {}
    groups: dict[str, tuple[int, ResourceSlots]] = {}
    for owner, project, count in await db.execute(
        select(Session.owner_id, Session.project_id, func.count())
        .where(Session.status.in_(active))
        .group_by(Session.owner_id, Session.project_id)
    ):
        _add(users, owner, count, ResourceSlots())
        if project:
            _add(groups, project, count, ResourceSlots())
    for owner, project, slots, count in await db.execute(
        select(Session.owner_id, Session.project_id, Kernel.slots, func.count())
        .join(Kernel, Kernel.session_id == Session.id)
        .where(Session.status.in_(active), Kernel.released.is_(False))
        .group_by(Session.owner_id, Session.project_id, Kernel.slots)
    ):
        held = ResourceSlots.from_json(slots) * count
        _add(users, owner, 0, held)
        if project:
            _add(groups, project, 0, held)
    snapshot.user_usage = {k: Usage(n, s) for k, (n, s) in users.items()}
    snapshot.project_usage = {k: Usage(n, s) for k, (n, s) in groups.items()}
