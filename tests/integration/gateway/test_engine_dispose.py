"""A component's engine ends with no database connection left open, even one that work
cancelled at the wrong moment left outside the pool (SQLAlchemy #8145, asyncpg #1156):
``engine.dispose()`` alone closes only the pool's idle connections."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from gateway.db.engine import create_engine, dispose


async def _stranded(url: str) -> tuple[Any, Any]:
    """An engine, and the driver connection of one it lent out and never got back."""
    engine = create_engine(url)
    conn = await engine.connect()
    await conn.execute(text("SELECT 1"))
    raw = (await conn.get_raw_connection()).driver_connection
    return engine, (conn, raw)


async def test_dispose_closes_a_connection_the_pool_never_got_back(pg_url: str) -> None:
    plain, (plain_conn, plain_raw) = await _stranded(pg_url)
    await plain.dispose()
    assert not plain_raw.is_closed()  # what engine.dispose() leaves: a socket nobody closes
    plain_raw.terminate()
    await plain_conn.invalidate()

    engine, (conn, raw) = await _stranded(pg_url)
    await dispose(engine)
    assert raw.is_closed()
    await conn.invalidate()  # the pool's record of it (its connection is already gone)


async def test_dispose_of_an_engine_with_nothing_left_is_quiet(pg_url: str) -> None:
    engine = create_engine(pg_url)
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        await conn.execute(text("SELECT 1"))
    await dispose(engine)
    assert raw.is_closed()
