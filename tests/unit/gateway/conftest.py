"""A real database without a stack: SQLite in tmp_path, made from the ORM metadata.

The gateway's writers decide inside a transaction and put what Redis should get into an
``Outbox``; the tests read that outbox instead of Redis (``gateway_rows.NO_REDIS``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gateway_rows import Rows

from gateway.db.engine import SessionFactory, create_engine, create_session_factory
from gateway.db.models import Base


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SessionFactory]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'jobgate.db'}")
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    try:
        yield create_session_factory(engine)
    finally:
        await engine.dispose()


@pytest.fixture
def rows(db: SessionFactory) -> Rows:
    return Rows(db)
