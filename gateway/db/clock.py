"""The database clock: one time source that every gateway, scheduler and node agrees on."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["clock", "db_now"]


def clock(db: AsyncSession) -> ColumnElement[Any]:
    """The database's clock as an SQL expression, to use inside a statement.

    PostgreSQL gives microseconds; on SQLite ``CURRENT_TIMESTAMP`` has whole seconds only,
    so we ask for milliseconds, which keeps arrival order for FIFO scheduling.
    """
    if db.get_bind().dialect.name == "sqlite":
        return func.strftime("%Y-%m-%d %H:%M:%f", "now")
    return func.clock_timestamp()


async def db_now(db: AsyncSession) -> datetime:
    """The database's current time as an aware UTC datetime."""
    value = (await db.execute(select(clock(db)))).scalar_one()
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"CURRENT_TIMESTAMP returned {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
