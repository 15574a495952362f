"""The async engine and session factory, on PostgreSQL (asyncpg) or SQLite (aiosqlite).

SQLite is the embedded default of ``jobgate up``, where the gateway, the scheduler and
the event consumer are separate processes writing one file. Three settings make that
safe: WAL (readers never block the writer), a busy timeout (writers queue instead of
failing), and ``BEGIN IMMEDIATE`` (a transaction takes the write lock when it starts,
so a read-then-write transaction cannot fail half-way with SQLITE_BUSY when another
process committed in between).

A driver's complaint about a value (PostgreSQL's data exceptions, SQLSTATE class 22, and
asyncpg's refusal to encode an integer over a column's range; SQLite's OverflowError for
an integer over 64 bits) is raised as SQLAlchemy's ``DataError`` whatever the driver
calls it, so that :func:`unavailable` can tell a bad value from an outage by class.

:func:`dispose` ends an engine for good: what ``engine.dispose()`` closes (the pool's
idle connections), and then any PostgreSQL connection the engine opened that is still
open. A task cancelled while the pool was setting up a new connection, or while it was
giving one back, can leave the driver's connection outside the pool (SQLAlchemy #8145,
asyncpg #1156): nothing would ever close its socket.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import event
from sqlalchemy.engine import Connection, ExceptionContext
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, ProgrammingError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

__all__ = ["SessionFactory", "create_engine", "create_session_factory", "dispose", "unavailable"]

log = logging.getLogger(__name__)

SessionFactory = async_sessionmaker[AsyncSession]

SQLITE_BUSY_TIMEOUT_MS = 30_000


def create_engine(url: str, *, echo: bool = False, pool_size: int = 20) -> AsyncEngine:
    if url.startswith("sqlite"):
        engine = create_async_engine(url, echo=echo, connect_args={"timeout": 30})
        _sqlite_transactions(engine)
        # sqlite3 raises a bare OverflowError (no DB-API class) for an int over 64 bits
        _data_errors(engine, (OverflowError,))
        return engine
    engine = create_async_engine(
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
    _data_errors(engine, _asyncpg_data_errors())
    _track_connections(engine)
    return engine


#: engine -> the driver connections it opened (both weakly: a closed one is forgotten)
_OPENED: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = weakref.WeakKeyDictionary()


def _track_connections(engine: AsyncEngine) -> None:
    opened: weakref.WeakSet[Any] = weakref.WeakSet()
    _OPENED[engine.sync_engine] = opened

    # first of the connect listeners: before the dialect's own set-up, whose round trips
    # are where a cancelled task leaves a connection the pool never got
    @event.listens_for(engine.sync_engine, "connect", insert=True)
    def _opened(dbapi_connection: Any, _record: Any) -> None:
        driver = getattr(dbapi_connection, "driver_connection", None)
        if driver is not None:
            opened.add(driver)


async def dispose(engine: AsyncEngine) -> None:
    """``engine.dispose()``, then close (at once, without a round trip) every connection
    the engine opened that is still open: ones a cancelled task left outside the pool.
    For the end of a component, when nothing uses the engine any more."""
    await engine.dispose()
    left = [c for c in _OPENED.get(engine.sync_engine, ()) if not c.is_closed()]
    for connection in left:
        connection.terminate()
    if left:
        log.info("closed %d database connection(s) that cancelled work left open", len(left))
        await asyncio.sleep(0)  # the transports close on the loop's next turn


def _asyncpg_data_errors() -> tuple[type[BaseException], ...]:
    from asyncpg.exceptions import DataError as AsyncpgDataError

    # the server's class 22 and the client's "invalid input for query argument" (a value
    # it cannot encode) are both this class; SQLAlchemy maps it to a bare DBAPIError
    return (AsyncpgDataError,)


def _data_errors(engine: AsyncEngine, driver_errors: tuple[type[BaseException], ...]) -> None:
    """Raise the driver's value errors as SQLAlchemy's DataError."""

    @event.listens_for(engine.sync_engine, "handle_error")
    def _translate(ctx: ExceptionContext) -> BaseException | None:
        error = ctx.original_exception
        if isinstance(ctx.sqlalchemy_exception, DataError):
            return None
        if isinstance(error, driver_errors) or isinstance(error.__cause__, driver_errors):
            return DataError(ctx.statement, ctx.parameters, error, hide_parameters=True)
        return None


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
    about the statement or the data (a constraint, a type, a value out of range) are not."""
    if isinstance(exc, IntegrityError | DataError | ProgrammingError):
        return False
    return isinstance(exc, DBAPIError | RedisError | OSError)
