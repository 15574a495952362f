"""The async engine and session factory, on PostgreSQL (asyncpg) or SQLite (aiosqlite).

SQLite is the embedded default of ``jobgate up``, where the gateway, the scheduler and
the event consumer are separate processes writing one file. Three settings make that
safe: WAL (readers never block the writer), a busy timeout (writers queue instead of
failing), and ``BEGIN IMMEDIATE`` (a transaction takes the write lock when it starts,
so a read-then-write transaction cannot fail half-way with SQLITE_BUSY when another
process committed in between).
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, ProgrammingError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

__all__ = ["SessionFactory", "create_engine", "create_session_factory", "unavailable"]

SessionFactory = async_sessionmaker[AsyncSession]

SQLITE_BUSY_TIMEOUT_MS = 30_000


def create_engine(url: str, *, echo: bool = False, pool_size: int = 20) -> AsyncEngine:
    if url.startswith("sqlite"):
        engine = create_async_engine(url, echo=echo, connect_args={"timeout": 30})
        _sqlite_transactions(engine)
        return engine
    return create_async_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        # overflow connections are closed when returned: under a steady load above
        # pool_size every request would open a connection (TLS attempt, auth), so the
        # pool is sized for the API's concurrency and overflow is small
        max_overflow=pool_size // 2,
        # no pre-ping: it costs a round trip on every checkout; recycle old connections
        # instead, and a connection that died is replaced on its first failure
        pool_recycle=1800,
    )


def _sqlite_transactions(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_session_factory(engine: AsyncEngine) -> SessionFactory:
    return async_sessionmaker(engine, expire_on_commit=False)


def unavailable(exc: BaseException) -> bool:
    """Whether *exc* says the database or Redis could not be reached (a restart, a
    failover, a network cut): the same request may well work a moment later. Errors
    about the statement or the data (a constraint, a type) are not."""
    if isinstance(exc, IntegrityError | DataError | ProgrammingError):
        return False
    if isinstance(exc, DBAPIError) and _about_the_data(exc):
        return False
    return isinstance(exc, DBAPIError | RedisError | OSError)


def _about_the_data(exc: BaseException) -> bool:
    """A driver error about a value (asyncpg's DataError for an integer out of range
    reaches SQLAlchemy as a bare DBAPIError): found in the chain of causes."""
    seen: BaseException | None = exc
    for _ in range(5):
        seen = getattr(seen, "orig", None) or (seen.__cause__ if seen else None)
        if seen is None:
            return False
        if isinstance(seen, OverflowError | ValueError) or type(seen).__name__ in _DATA_ERRORS:
            return True
    return False


_DATA_ERRORS = frozenset({"DataError", "IntegrityError", "ProgrammingError"})
