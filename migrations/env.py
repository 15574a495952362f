"""Alembic environment (async): runs on PostgreSQL (asyncpg) and SQLite (aiosqlite).

The URL comes from the Alembic config (``jobgate db upgrade`` sets it from
``JOBGATE_DATABASE_URL``); SQLite ALTERs go through batch mode.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from sqlalchemy import event
from sqlalchemy.engine import Connection

from gateway.config import GatewaySettings
from gateway.db.engine import create_engine
from gateway.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    return url or GatewaySettings().effective_database_url


def run_migrations_offline() -> None:
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _foreign_keys_off(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA foreign_keys=OFF")


async def run_migrations_online() -> None:
    engine = create_engine(_url())
    if engine.dialect.name == "sqlite":
        # a batch ALTER copies a table and drops the old one: with foreign keys on (the
        # engine turns them on when it connects), that drop would cascade to the rows
        # pointing at it (a session's kernels and logs). Off for the migration, set as
        # each connection opens (the pragma is a no-op inside a transaction); this
        # engine is disposed after it.
        event.listen(engine.sync_engine, "connect", _foreign_keys_off)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_migrations_online())
