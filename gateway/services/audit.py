"""The audit log's rows: written (group commit), read by admins, pruned by age.

::

    middleware ─▶ AuditLog.record(entry) ─▶ waits ─┐  one INSERT of every row that waits,
    (each answered request)                        ├▶ one transaction, each caller told
    another request ─▶ record(entry) ─▶ waits ─────┘  (ok, or the error: it logs it)
    GET /v1/audit ─▶ AuditLog.search(filters) ─▶ newest first, a page, its cursor
    pruning loop ─▶ prune_audit(db, days) ─▶ rows older than the retention, SKIP LOCKED batches

Append-only: there is no update and no delete here but the retention's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select

from gateway.db.engine import SessionFactory
from gateway.db.models import AuditRecord
from gateway.db.retention import PRUNE_BATCH, PRUNE_BATCHES, prune_older
from gateway.db.tables import AUDIT
from gateway.domain.audit import AuditEntry, time_range

__all__ = ["AuditFilters", "AuditLog", "AuditRecord", "prune_audit"]


@dataclass(frozen=True)
class AuditFilters:
    user: str | None = None
    action: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    before: int | None = None  # the id the page starts below (the cursor)
    limit: int = 100


class AuditLog:
    """Writes rows for the middleware, many callers sharing one transaction."""

    def __init__(self, db: SessionFactory) -> None:
        self.db = db
        self._waiting: list[tuple[AuditEntry, asyncio.Future[None]]] = []
        self._writing: asyncio.Task[None] | None = None

    async def record(self, entry: AuditEntry) -> None:
        """Write *entry*'s row; returns once it is committed (raises if it was not)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # its error is read even when the request was cancelled meanwhile (no "never
        # retrieved" at garbage collection)
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._waiting.append((entry, done))
        if self._writing is None or self._writing.done():
            self._writing = asyncio.create_task(self._write())
        await asyncio.shield(done)

    async def _write(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                async with self.db() as session, session.begin():
                    await session.execute(insert(AUDIT), [e.row() for e, _ in batch])
            except Exception as exc:  # each caller logs its own row as lost
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
            else:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)

    async def close(self) -> None:
        """Let the rows still waiting be written (the process is stopping)."""
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)

    async def search(self, filters: AuditFilters) -> tuple[list[AuditRecord], int | None]:
        """A page of rows, newest first, and the cursor of the next one (None: the last)."""
        start, end = time_range(filters.start, filters.end)
        query = select(AuditRecord).order_by(AuditRecord.id.desc()).limit(filters.limit + 1)
        if filters.user is not None:
            query = query.where(AuditRecord.actor == filters.user)
        if filters.action is not None:
            query = query.where(AuditRecord.action == filters.action)
        if start is not None:
            query = query.where(AuditRecord.at >= start)
        if end is not None:
            query = query.where(AuditRecord.at < end)
        if filters.before is not None:
            query = query.where(AuditRecord.id < filters.before)
        async with self.db() as session:
            rows = list((await session.execute(query)).scalars())
        if len(rows) > filters.limit:
            return rows[: filters.limit], rows[filters.limit - 1].id
        return rows, None


async def prune_audit(
    db: SessionFactory, days: float, batch: int = PRUNE_BATCH, batches: int = PRUNE_BATCHES
) -> int:
    """Delete the rows of requests made more than *days* ago (0: keep them forever), in
    ``SKIP LOCKED`` batches (:mod:`gateway.db.retention`); how many it deleted."""
    return await prune_older(db, AuditRecord.id, AuditRecord.at, days, batch, batches)
