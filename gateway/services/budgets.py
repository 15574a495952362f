"""Budgets of users and projects: set, merge-patch and remove (admins), read (admins all;
a user their own and their projects') - docs/fair-share.md, Budgets.

A budget is checked whole after every change (:func:`gateway.domain.budgets.check_budget`:
a 422 naming the field) and worked out at once against the accounting records
(:func:`gateway.scheduler.budgets.check_budget`), so a budget set below what is already
spent holds sessions back from the next pass on, and alerts for what it already crossed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import Budget, Project, ProjectMember, User
from gateway.domain.budgets import check_budget
from gateway.domain.errors import Conflict, Forbidden, NotFound
from gateway.domain.patch import merge_patch
from gateway.scheduler.budgets import SELF, window_of
from gateway.scheduler.budgets import check_budget as work_out

__all__ = ["BudgetService", "BudgetView", "HolderView", "Scope", "drop_member"]

Scope = Literal["user", "project"]


@dataclass(frozen=True)
class HolderView:
    """What one holder of a budget (its subject, or a member) spent, as last checked."""

    limits: dict[str, float]
    used: dict[str, float]
    percent: float  # of the limit it is closest to (the largest used / limit)
    exhausted_until: datetime | None


@dataclass(frozen=True)
class BudgetView:
    scope: Scope
    subject: str
    period: str
    window: str
    status: HolderView
    members: dict[str, HolderView]
    period_start: datetime | None  # calendar periods only
    period_end: datetime | None
    checked_at: datetime | None
    updated_at: datetime


def _holder(limits: dict[str, float], state: dict[str, Any], key: str) -> HolderView:
    used = {k: float(state.get("used", {}).get(key, {}).get(k, 0.0)) for k in limits}
    until = state.get("until", {}).get(key)
    percent = max((used[k] / v * 100 for k, v in limits.items() if v > 0), default=0.0)
    return HolderView(
        limits=dict(limits),
        used=used,
        percent=round(percent, 2),
        exhausted_until=datetime.fromisoformat(until) if until else None,
    )


def _when(state: dict[str, Any], key: str) -> datetime | None:
    value = state.get(key)
    return datetime.fromisoformat(value) if value else None


class BudgetService:
    def __init__(self, db: SessionFactory) -> None:
        self.db = db

    # -- reading --------------------------------------------------------------------------
    async def listing(self, principal: Principal) -> list[BudgetView]:
        """Every budget *principal* may see: all for admins; else their own user budget
        and the budgets of the projects they are a member of."""
        async with self.db() as db:
            query = select(Budget).order_by(Budget.scope, Budget.subject_id)
            if not principal.is_admin:
                mine = select(ProjectMember.project_id).where(
                    ProjectMember.user_id == principal.user_id
                )
                query = query.where(
                    or_(
                        (Budget.scope == "user") & (Budget.subject_id == principal.user_id),
                        (Budget.scope == "project") & Budget.subject_id.in_(mine),
                    )
                )
            rows = list((await db.execute(query)).scalars())
            names = await _names(db, rows)
        views = [self._view(r, names) for r in rows]
        return sorted(views, key=lambda v: (v.scope, v.subject))

    async def get(self, principal: Principal, scope: Scope, subject: str) -> BudgetView:
        """One budget; a non-admin asking for another user's or a foreign project's gets a
        403 whether or not it exists."""
        async with self.db() as db:
            subject_id = await _may_read(db, principal, scope, subject)
            row = await _find(db, scope, subject_id, lock=False)
            if row is None:
                raise NotFound(f"{scope} {subject!r} has no budget")
            names = await _names(db, [row])
        return self._view(row, names)

    # -- changing (admins) ----------------------------------------------------------------
    async def set(self, scope: Scope, subject: str, body: dict[str, Any]) -> BudgetView:
        """Create or replace a budget whole."""
        return await self._write(scope, subject, lambda _: body, patch=False)

    async def update(self, scope: Scope, subject: str, patch: dict[str, Any]) -> BudgetView:
        """A JSON merge patch of the budget as ``GET`` names it (creates one if none: then
        it must give the period and limits, else a 409, as it would make an empty budget;
        one that removes every limit is a 409 too: remove the budget instead)."""
        return await self._write(
            scope, subject, lambda current: merge_patch(current, patch), patch=True
        )

    async def delete(self, scope: Scope, subject: str) -> None:
        async with self.db() as db, db.begin():
            subject_id = await _subject_id(db, scope, subject)
            row = await _find(db, scope, subject_id, lock=True)
            if row is None:
                raise NotFound(f"{scope} {subject!r} has no budget")
            await db.delete(row)

    async def _write(
        self,
        scope: Scope,
        subject: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        patch: bool,
    ) -> BudgetView:
        try:
            return await self._write_once(scope, subject, change, patch=patch)
        except IntegrityError:
            # two writes created the same budget at once (no row to lock yet): the loser
            # runs again, now as a change of the row the winner made
            return await self._write_once(scope, subject, change, patch=patch)

    async def _write_once(
        self,
        scope: Scope,
        subject: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        patch: bool,
    ) -> BudgetView:
        async with self.db() as db, db.begin():
            subject_id = await _subject_id(db, scope, subject)
            row = await _find(db, scope, subject_id, lock=True)
            names = await _names(db, [row]) if row is not None else {}
            current = _as_given(row, names) if row is not None else {"window": "calendar"}
            wanted = change(current)
            if patch:
                _creatable(scope, subject, row, wanted)
            period, window, limits, members = check_budget(
                scope,
                wanted.get("period"),  # none (a patch's null removed it): a 422
                wanted.get("window", "calendar"),  # none: the default, as a policy's null
                wanted.get("limits"),
                wanted.get("members"),
            )
            member_ids = await _member_ids(db, subject_id, members)
            now = await db_now(db)
            if row is None:
                row = Budget(scope=scope, subject_id=subject_id, state={}, created_at=now)
                db.add(row)
            row.period, row.rolling, row.limits = period, window == "rolling", limits
            row.members = {member_ids[name]: amounts for name, amounts in members.items()}
            row.updated_at = now
            await db.flush()
            await work_out(db, row, now)
            names = await _names(db, [row])
            view = self._view(row, names)
        return view

    @staticmethod
    def _view(row: Budget, names: dict[str, str]) -> BudgetView:
        state = row.state or {}
        return BudgetView(
            scope="user" if row.scope == "user" else "project",
            subject=names.get(row.subject_id, row.subject_id),
            period=row.period,
            window=window_of(row),
            status=_holder(dict(row.limits), state, SELF),
            members={
                names.get(uid, uid): _holder(dict(limits), state, uid)
                for uid, limits in row.members.items()
            },
            period_start=None if row.rolling else _when(state, "period_start"),
            period_end=None if row.rolling else _when(state, "period_end"),
            checked_at=_when(state, "checked_at"),
            updated_at=row.updated_at,
        )


async def drop_member(db: AsyncSession, project_id: str, user_id: str) -> None:
    """A member leaves the project: their sub-limit leaves its budget, in the caller's
    transaction (the row locked), with what was worked out for them; else the members'
    sum and the check that every member is in the project would refuse the next PATCH or
    ``jobgate admin config import`` of the budget."""
    row = await _find(db, "project", project_id, lock=True)
    if row is None or user_id not in row.members:
        return
    row.members = {u: v for u, v in row.members.items() if u != user_id}
    state = dict(row.state or {})
    for key in ("levels", "used", "until"):
        if isinstance(state.get(key), dict):
            state[key] = {h: v for h, v in state[key].items() if h != user_id}
    row.state = state


def _creatable(scope: Scope, subject: str, row: Budget | None, wanted: dict[str, Any]) -> None:
    """What a patch cannot do, given the budget there is (or is not): a 409 naming it."""
    if row is None:
        for name in ("period", "limits"):
            if wanted.get(name) is None:
                raise Conflict(
                    f"{scope} {subject!r} has no budget yet: give {name} to make one",
                    field=name,
                )
    elif not wanted.get("limits"):
        raise Conflict(
            f"that removes every limit of the budget of {scope} {subject!r}: remove the budget",
            field="limits",
        )


def _as_given(row: Budget, names: dict[str, str]) -> dict[str, Any]:
    """The budget as a PUT would give it (members by name): what a PATCH merges into."""
    out: dict[str, Any] = {
        "period": row.period,
        "window": window_of(row),
        "limits": dict(row.limits),
    }
    if row.members:
        out["members"] = {names.get(u, u): dict(v) for u, v in row.members.items()}
    return out


async def _names(db: AsyncSession, rows: list[Budget]) -> dict[str, str]:
    users = {r.subject_id for r in rows if r.scope == "user"}
    users |= {u for r in rows for u in r.members}
    projects = {r.subject_id for r in rows if r.scope == "project"}
    names: dict[str, str] = {}
    if users:
        query = select(User.id, User.name).where(User.id.in_(users))
        names |= {uid: name for uid, name in await db.execute(query)}
    if projects:
        query = select(Project.id, Project.name).where(Project.id.in_(projects))
        names |= {pid: name for pid, name in await db.execute(query)}
    return names


async def _subject_id(db: AsyncSession, scope: Scope, subject: str) -> str:
    model = User if scope == "user" else Project
    found = (await db.execute(select(model.id).where(model.name == subject))).scalar_one_or_none()
    if found is None:
        raise NotFound(f"no {scope} {subject!r}", field="subject")
    return str(found)


async def _may_read(db: AsyncSession, principal: Principal, scope: Scope, subject: str) -> str:
    if principal.is_admin:
        return await _subject_id(db, scope, subject)
    if scope == "user":
        if subject != principal.name:
            raise Forbidden("only admins may see another user's budget", field="subject")
        return principal.user_id
    project_id = (
        await db.execute(select(Project.id).where(Project.name == subject))
    ).scalar_one_or_none()
    if project_id is None or await db.get(ProjectMember, (project_id, principal.user_id)) is None:
        raise Forbidden(f"{principal.name} is not a member of project {subject!r}", field="subject")
    return str(project_id)


async def _find(db: AsyncSession, scope: Scope, subject_id: str, *, lock: bool) -> Budget | None:
    query = select(Budget).where(Budget.scope == scope, Budget.subject_id == subject_id)
    if lock:
        query = query.with_for_update()
    return (await db.execute(query)).scalar_one_or_none()


async def _member_ids(
    db: AsyncSession, project_id: str, members: dict[str, dict[str, float]]
) -> dict[str, str]:
    """Member name -> user id; a name that is no user is a 404, one of a user who is no
    member of the project a 409, each naming it."""
    if not members:
        return {}
    found = {
        name: uid
        for name, uid in await db.execute(
            select(User.name, User.id).where(User.name.in_(list(members)))
        )
    }
    belong = set(
        (
            await db.execute(
                select(ProjectMember.user_id).where(
                    ProjectMember.project_id == project_id,
                    ProjectMember.user_id.in_(list(found.values())),
                )
            )
        ).scalars()
    )
    for name in members:
        if name not in found:
            raise NotFound(f"no user {name!r}", field=f"members.{name}")
        if found[name] not in belong:
            raise Conflict(f"{name} is not a member of the project", field=f"members.{name}")
    return found
