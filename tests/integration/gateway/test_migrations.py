"""The Alembic history builds the schema the models describe, on PostgreSQL and SQLite."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from gateway.db.engine import create_engine
from gateway.db.migrate import upgrade_async
from gateway.db.models import Base


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


@pytest.fixture(params=["sqlite", "postgresql"])
async def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
        return
    admin: str = request.getfixturevalue("pg_server")
    name = f"jobgate_fresh_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield "postgresql+asyncpg://" + admin.split("://", 1)[1].rsplit("/", 1)[0] + f"/{name}"
    finally:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


async def test_upgrade_from_empty_matches_the_models(empty_database: str) -> None:
    url = empty_database
    await upgrade_async(url)
    await upgrade_async(url)  # running it again changes nothing
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            tables = await conn.run_sync(_tables)
            diff = await conn.run_sync(_diff)
    finally:
        await engine.dispose()
    assert {t.name for t in Base.metadata.sorted_tables} <= tables
    assert diff == []
