"""A driver error reaches the client as what it is: a bad value is a 422, an outage a 503.

Real errors from real drivers (asyncpg on PostgreSQL, aiosqlite on SQLite) are raised,
then answered by the gateway's own error handlers: a value the database refuses must
never look like an outage (a client would retry it for ever), and an outage must never
look like the client's fault.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import DataError
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.api.problems import install
from gateway.db.engine import create_engine, unavailable
from jobgate.localnet import free_port

Statement = Callable[[AsyncConnection], Awaitable[object]]


async def _raised(url: str, statement: Statement) -> BaseException:
    before = set(threading.enumerate())
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("CREATE TEMPORARY TABLE t (n INTEGER, s VARCHAR(3))"))
            await statement(conn)
    except Exception as exc:
        return exc
    finally:
        await engine.dispose()
        _threads_ended(before)
    raise AssertionError("the statement went through")


def _threads_ended(before: set[threading.Thread], timeout: float = 10.0) -> None:
    """Join the aiosqlite threads (one per connection) started since *before*.

    When a connection fails to open, aiosqlite asks its thread to stop without waiting
    for it; a thread that gets there after this test's event loop has closed raises
    "Event loop is closed", which pytest then reports against whichever test runs next.
    (Joining here blocks nothing the thread needs: it only queues a callback on the loop.)
    """
    started = set(threading.enumerate()) - before
    for thread in [t for t in started if t.name.endswith("(_connection_worker_thread)")]:
        thread.join(timeout)
        assert not thread.is_alive(), f"{thread.name} still running"


async def _answer(exc: BaseException) -> httpx.Response:
    """How the gateway answers a request during which *exc* was raised."""
    app = FastAPI()
    install(app)

    @app.get("/x")
    async def fail() -> None:
        raise exc

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.get("/x")


def _insert(value: object, column: str = "n") -> Statement:
    return lambda conn: conn.execute(text(f"INSERT INTO t ({column}) VALUES (:v)"), {"v": value})


def _cast(value: str) -> Statement:
    return lambda conn: conn.execute(text("SELECT CAST(CAST(:v AS TEXT) AS INTEGER)"), {"v": value})


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param(_insert(2**31), id="int4-overflow-refused-by-the-client"),
        pytest.param(_insert(2**70), id="int8-overflow"),
        pytest.param(_insert("abcdef", "s"), id="string-too-long-refused-by-the-server"),
        pytest.param(_cast("x"), id="not-an-integer-refused-by-the-server"),
    ],
)
async def test_a_value_postgresql_refuses_is_a_422(pg_url: str, statement: Statement) -> None:
    exc = await _raised(pg_url, statement)
    assert isinstance(exc, DataError), repr(exc)
    assert not unavailable(exc)
    answer = await _answer(exc)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert "outside what the gateway can store" in answer.json()["detail"]


async def test_text_with_a_nul_is_a_422_that_says_so(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL cannot hold a NUL in text or JSON; a field whose rule forgot it answers a
    422 naming the NUL, and the log line names the SQLSTATE, not the value."""
    exc = await _raised(pg_url, _insert("a\x00b", "s"))
    assert isinstance(exc, DataError), repr(exc)
    with caplog.at_level(logging.WARNING, logger="gateway.api.problems"):
        answer = await _answer(exc)
    assert answer.status_code == 422, answer.text
    assert "NUL character" in answer.json()["detail"]
    logged = caplog.records[-1].getMessage()
    assert "SQLSTATE 22" in logged, logged
    assert "INSERT" not in logged, logged


async def test_an_integer_sqlite_cannot_hold_is_a_422(tmp_path: Path) -> None:
    exc = await _raised(f"sqlite+aiosqlite:///{tmp_path / 'db'}", _insert(2**70))
    assert isinstance(exc, DataError), repr(exc)
    answer = await _answer(exc)
    assert answer.status_code == 422, answer.text


async def test_a_connection_the_server_dropped_is_a_503(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def killed(conn: AsyncConnection) -> None:
        pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        admin = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        await conn.execute(text("SELECT 1"))

    exc = await _raised(pg_url, killed)
    assert unavailable(exc), repr(exc)
    with caplog.at_level(logging.WARNING, logger="gateway.api.problems"):
        answer = await _answer(exc)
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "1"
    # the log names the driver's own error (and its SQLSTATE when the server sent one):
    # the operator's first question; never the statement or its parameters
    logged = caplog.records[-1].getMessage()
    assert "asyncpg.exceptions" in logged, logged
    assert "SELECT" not in logged, logged


@pytest.mark.parametrize("where", ["postgresql", "sqlite"])
async def test_a_database_that_cannot_be_reached_is_a_503(where: str, tmp_path: Path) -> None:
    url = (
        f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/none"
        if where == "postgresql"
        else f"sqlite+aiosqlite:///{tmp_path / 'missing-dir' / 'db'}"
    )
    exc = await _raised(url, _insert(1))
    assert unavailable(exc), repr(exc)
    assert (await _answer(exc)).status_code == 503
