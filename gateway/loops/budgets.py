"""The budget watcher: every ``budget_check_s`` the scheduler's tick checks every budget
(gateway/scheduler/budgets.py): what each spent, the 80 % and 100 % alerts it owes (to
the webhook outbox, once per crossing), and until when a spent one holds its sessions
back. In resource groups with ``stop_at_budget``, it then stops the running sessions of
every spent budget (TERMINATED, naming it). Several scheduler processes may run it: the
rows are locked while checked."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from arq.connections import ArqRedis
from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.locks import lock_rows
from gateway.db.models import Budget, Project, ResourceGroup, Session, User
from gateway.domain.status import SessionStatus
from gateway.lifecycle import begin_termination
from gateway.outbox import Outbox
from gateway.scheduler.budgets import SELF, check_budgets
from gateway.scheduler.snapshot import group_config

__all__ = ["BudgetWatcher"]

log = logging.getLogger(__name__)

S = SessionStatus
#: what "stop at budget" stops: sessions placed or running, not those already stopping
RUNNING = (S.SCHEDULED, S.PREPARING, S.RUNNING)


class BudgetWatcher:
    def __init__(
        self, db: SessionFactory, settings: GatewaySettings, pool: ArqRedis | None = None
    ) -> None:
        self.db = db
        self.settings = settings
        self.pool = pool
        self._last: float | None = None

    async def run_due(self) -> int | None:
        """Check the budgets if ``budget_check_s`` passed since the last check here; how
        many were checked (None: not due)."""
        now = time.monotonic()
        if self._last is not None and now - self._last < self.settings.budget_check_s:
            return None
        self._last = now
        outbox = Outbox()
        async with self.db() as db, db.begin():
            at = await db_now(db)
            checked = await check_budgets(db, at)
            if checked:
                await self._stop_spent(db, at, outbox)
        if self.pool is not None:
            await outbox.flush(self.pool)
        return checked

    async def _stop_spent(self, db: AsyncSession, now: datetime, outbox: Outbox) -> None:
        groups = [
            g.name
            for g in (await db.execute(select(ResourceGroup))).scalars()
            if group_config(g, self.settings).stop_at_budget
        ]
        if not groups:
            return
        for where, reason in await _spent(db, now):
            sessions = await lock_rows(
                db,
                Session,
                where & Session.status.in_(RUNNING) & Session.resource_group.in_(groups),
            )
            for session in sessions:
                log.info("stopping session %s: %s", session.id, reason)
                await begin_termination(
                    db,
                    session,
                    outbox,
                    cancel_reason=reason,
                    stop_reason=reason,
                    grace=self.settings.stop_grace_s,
                )


async def _spent(db: AsyncSession, now: datetime) -> list[tuple[ColumnElement[bool], str]]:
    """For every spent budget holder: which sessions are its, and the reason to give."""
    out: list[tuple[ColumnElement[bool], str]] = []
    for row in (await db.execute(select(Budget))).scalars():
        for holder, text in (row.state or {}).get("until", {}).items():
            until = datetime.fromisoformat(text)
            if until <= now:
                continue
            when = f"exhausted until {until:%Y-%m-%d %H:%M} UTC"
            if row.scope == "user":
                who = f"user {await _name(db, User, row.subject_id)}"
                where = Session.owner_id == row.subject_id
            elif holder == SELF:
                who = f"project {await _name(db, Project, row.subject_id)}"
                where = Session.project_id == row.subject_id
            else:
                user = await _name(db, User, holder)
                who = f"user {user} in project {await _name(db, Project, row.subject_id)}"
                where = (Session.project_id == row.subject_id) & (Session.owner_id == holder)
            out.append((where, f"budget of {who} {when}"))
    return out


async def _name(db: AsyncSession, model: type[User] | type[Project], id_: str) -> str:
    found = (await db.execute(select(model.name).where(model.id == id_))).scalar_one_or_none()
    return str(found) if found is not None else id_
