"""Retention: delete a table's rows older than a number of days, a batch at a time.

Each batch is its own transaction of at most *batch* rows claimed ``SKIP LOCKED`` (two
gateway processes pruning at once share the work instead of waiting); at most *batches*
per call, the rest next time. Used for the audit log and the hook deliveries.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import InstrumentedAttribute

from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory

__all__ = ["PRUNE_BATCH", "PRUNE_BATCHES", "prune_older"]

PRUNE_BATCH = 500
PRUNE_BATCHES = 20


async def prune_older(
    db: SessionFactory,
    id_column: InstrumentedAttribute[Any],
    time_column: InstrumentedAttribute[datetime],
    days: float,
    batch: int = PRUNE_BATCH,
    batches: int = PRUNE_BATCHES,
) -> int:
    """Delete the rows whose *time_column* is more than *days* ago (0: keep them for
    ever); how many it deleted."""
    if days <= 0:
        return 0
    async with db() as session:
        cutoff = await db_now(session) - timedelta(days=days)
    old = (
        select(id_column).where(time_column < cutoff).limit(batch).with_for_update(skip_locked=True)
    )
    deleted = 0
    for _ in range(batches):
        async with db() as session, session.begin():
            ids = list((await session.execute(old)).scalars())
            if ids:
                await session.execute(delete(id_column.class_).where(id_column.in_(ids)))
        deleted += len(ids)
        if len(ids) < batch:
            break
    return deleted
