"""Budgets against the accounting records: what each has spent, the alerts it owes, and
which subjects the scheduler holds back (docs/fair-share.md, Budgets).

:func:`check_budget` works one budget out from the ``usage`` records of its period (pure
arithmetic in :mod:`gateway.domain.budgets`) and keeps the result on the row
(``state``): per holder (the subject, and each member of a project's budget) what it
spent, its alert level and, once spent, until when. Crossing 80 % or 100 % adds a
``budget.warning`` or ``budget.exhausted`` event to the webhook outbox, in the same
transaction as the new level, so an alert goes out once per crossing however many
processes check. The API checks a budget when it is set; the scheduler process checks
them all every ``budget_check_s`` (:func:`check_budgets`). A pass reads only the stored
``until`` times of the subjects it has pending sessions of (:func:`add_budget_holds`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import Budget, Project, Usage, User, WebhookEvent
from gateway.db.transitions import event_row
from gateway.domain.budgets import (
    KINDS,
    Record,
    crossed,
    exhausted_kinds,
    level,
    spent,
    window_bounds,
)
from plugins.scheduling.reasons import utc
from plugins.scheduling.types import Snapshot

__all__ = ["EVENT_TYPES", "add_budget_holds", "check_budget", "check_budgets", "window_of"]

log = logging.getLogger(__name__)

#: the webhook event of each alert level
EVENT_TYPES = {80: "budget.warning", 100: "budget.exhausted"}
#: the holder key of the subject itself in ``Budget.state``
SELF = ""


def window_of(row: Budget) -> str:
    return "rolling" if row.rolling else "calendar"


async def _records(
    db: AsyncSession, row: Budget, start: datetime, end: datetime
) -> list[tuple[str, Record]]:
    subject = Usage.owner_id if row.scope == "user" else Usage.project_id
    rows = await db.execute(
        select(Usage.owner_id, Usage.slots, Usage.started_at, Usage.ended_at).where(
            subject == row.subject_id,
            Usage.started_at < end,
            or_(Usage.ended_at.is_(None), Usage.ended_at > start),
        )
    )
    return [
        (owner, Record(slots, utc(started), None if ended is None else utc(ended)))
        for owner, slots, started, ended in rows
    ]


async def _names(db: AsyncSession, row: Budget) -> dict[str, str]:
    users = [*row.members, row.subject_id] if row.scope == "user" else list(row.members)
    names = {
        uid: name
        for uid, name in await db.execute(select(User.id, User.name).where(User.id.in_(users)))
    }
    if row.scope == "project":
        project = await db.get(Project, row.subject_id)
        names[row.subject_id] = project.name if project is not None else row.subject_id
    return names


async def check_budget(db: AsyncSession, row: Budget, now: datetime) -> dict[str, Any]:
    """Work *row* out at *now*: its new ``state`` (set on the row), and the outbox events of
    the thresholds it crossed since the last check (added to *db*)."""
    window = window_of(row)
    start, end = window_bounds(row.period, window, now)
    records = await _records(db, row, start, end)
    holders: dict[str, tuple[dict[str, float], list[Record]]] = {
        SELF: (dict(row.limits), [r for _, r in records])
    }
    for uid, limits in row.members.items():
        holders[uid] = (dict(limits), [r for owner, r in records if owner == uid])
    old = row.state or {}
    same_period = window == "rolling" or old.get("period_start") == start.isoformat()
    before: dict[str, int] = old.get("levels", {}) if same_period else {}
    state: dict[str, Any] = {
        "period_start": start.isoformat(),
        "period_end": end.isoformat(),
        "checked_at": now.isoformat(),
        "levels": {},
        "used": {},
        "until": {},
        "kinds": {},
    }
    names: dict[str, str] | None = None
    for holder, (limits, mine) in holders.items():
        used = spent(mine, start, end, now)
        reached = level(used, limits)
        frees = exhausted_kinds(row.period, window, mine, limits, now)
        until = max(frees.values(), default=None)
        state["levels"][holder] = reached
        state["used"][holder] = {k: round(used[k], 6) for k in limits}
        if until is not None:
            state["until"][holder] = until.isoformat()
            state["kinds"][holder] = {k: at.isoformat() for k, at in sorted(frees.items())}
        for threshold in crossed(int(before.get(holder, 0)), reached):
            names = names if names is not None else await _names(db, row)
            _alert(db, row, holder, threshold, state, names, now)
    row.state = state
    return state


def _alert(
    db: AsyncSession,
    row: Budget,
    holder: str,
    threshold: int,
    state: dict[str, Any],
    names: dict[str, str],
    now: datetime,
) -> None:
    member = None if holder == SELF else names.get(holder, holder)
    data = {
        "scope": row.scope,
        "subject": names.get(row.subject_id, row.subject_id),
        "member": member,
        "percent": threshold,
        "period": row.period,
        "window": window_of(row),
        "period_start": state["period_start"] if not row.rolling else None,
        "limits": dict(row.limits) if holder == SELF else dict(row.members[holder]),
        "used": state["used"][holder],
        "exhausted_until": state["until"].get(holder),
    }
    owner: str | None
    project: str | None
    if row.scope == "user":
        owner, project = row.subject_id, None
    else:
        owner, project = (None if holder == SELF else holder), row.subject_id
    db.add(
        WebhookEvent(
            **event_row(EVENT_TYPES[threshold], now, owner_id=owner, project_id=project, data=data)
        )
    )
    who = f"{row.scope} {data['subject']}" + (f" (member {member})" if member else "")
    log.info("budget of %s at %d %% (%s)", who, threshold, EVENT_TYPES[threshold])


async def check_budgets(db: AsyncSession, now: datetime) -> int:
    """Check every budget (rows locked: concurrent checks alert once); how many."""
    query = select(Budget).order_by(Budget.id).with_for_update()  # one lock order for all
    rows = list((await db.execute(query)).scalars())
    for row in rows:
        await check_budget(db, row, now)
    return len(rows)


async def add_budget_holds(db: AsyncSession, snapshot: Snapshot) -> None:
    """Fill ``snapshot.budget_holds``: the spent budgets of the pending sessions' users,
    projects and project members, with their spent kinds and the time each frees (as
    last checked; a state from before kinds were kept: every kind, until its time)."""
    owners = sorted({r.owner for r in snapshot.pending})
    projects = sorted({r.project for r in snapshot.pending if r.project})
    rows = await db.execute(
        select(Budget.scope, Budget.subject_id, Budget.state).where(
            or_(
                and_(Budget.scope == "user", Budget.subject_id.in_(owners)),
                and_(Budget.scope == "project", Budget.subject_id.in_(projects)),
            )
        )
    )
    now = utc(snapshot.now)
    for scope, subject, state in rows:
        kinds = (state or {}).get("kinds", {})
        for holder, text in (state or {}).get("until", {}).items():
            frees = kinds.get(holder) or dict.fromkeys(KINDS, text)
            spent_kinds = {k: utc(datetime.fromisoformat(t)) for k, t in frees.items()}
            spent_kinds = {k: until for k, until in spent_kinds.items() if until > now}
            if not spent_kinds:
                continue
            key = (scope, subject) if holder == SELF else ("member", f"{subject}/{holder}")
            snapshot.budget_holds[key] = spent_kinds
