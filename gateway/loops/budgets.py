"""The budget watcher: every ``budget_check_s`` the scheduler's tick checks every budget
(gateway/scheduler/budgets.py): what each spent, the 80 % and 100 % alerts it owes (to
the webhook outbox, once per crossing), and until when a spent one holds its sessions
back. Several scheduler processes may run it: the rows are locked while checked."""

from __future__ import annotations

import logging
import time

from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.scheduler.budgets import check_budgets

__all__ = ["BudgetWatcher"]

log = logging.getLogger(__name__)


class BudgetWatcher:
    def __init__(self, db: SessionFactory, settings: GatewaySettings) -> None:
        self.db = db
        self.settings = settings
        self._last: float | None = None

    async def run_due(self) -> int | None:
        """Check the budgets if ``budget_check_s`` passed since the last check here; how
        many were checked (None: not due)."""
        now = time.monotonic()
        if self._last is not None and now - self._last < self.settings.budget_check_s:
            return None
        self._last = now
        async with self.db() as db, db.begin():
            return await check_budgets(db, await db_now(db))
