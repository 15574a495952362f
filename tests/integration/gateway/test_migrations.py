"""The Alembic history builds the schema the models describe, on PostgreSQL and SQLite."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, MetaData, Table, insert, inspect, select, text
from sqlalchemy.engine import Connection

from contract.apps import BUILT_IN
from gateway.db.engine import create_engine
from gateway.db.migrate import alembic_config, upgrade_async
from gateway.db.models import Base, Image, Kernel, ResourceGroup, Session, SessionLog, User


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


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


async def test_registered_images_get_the_templates_that_check_the_app_secret(
    empty_database: str,
) -> None:
    """0018: an image registered with jobgate's old Jupyter / code-server templates (no
    token, ``--auth none``) starts them checking the app secret; an admin's own stays."""
    old_jupyter = BUILT_IN["jupyter"].start.replace(  # type: ignore[union-attr]
        " --ServerApp.password=", " --IdentityProvider.token= --ServerApp.password="
    )
    old_code = "code-server --bind-addr 0.0.0.0:{port} --auth none --disable-telemetry"
    own = "jupyter lab --port={port} --IdentityProvider.token= --my-flag"
    apps = {
        "jupyter": {"port": 8888, "protocol": "http", "strip_prefix": False, "start": old_jupyter},
        "code-server": {"port": 8080, "protocol": "http", "strip_prefix": True, "start": old_code},
        "mine": {"port": 9000, "protocol": "http", "strip_prefix": False, "start": own},
    }
    await upgrade_async(empty_database, "0017")
    engine = create_engine(empty_database)
    try:
        now = datetime.now(UTC)
        async with engine.begin() as conn:
            await conn.execute(
                insert(Image).values(name="lab:1", apps=apps, created_at=now, updated_at=now)
            )
        await upgrade_async(empty_database)
        async with engine.connect() as conn:
            upgraded = (await conn.execute(select(Image.apps))).scalar_one()
    finally:
        await engine.dispose()
    assert {name: app["start"] for name, app in upgraded.items()} == {
        "jupyter": BUILT_IN["jupyter"].start,
        "code-server": BUILT_IN["code-server"].start,
        "mine": own,
    }


def _reflected(conn: Connection, name: str) -> Table:
    """*name* as the database holds it now (an older revision's columns), with the
    model's column types (JSON stays JSON)."""
    held = {c["name"] for c in inspect(conn).get_columns(name)}
    model = Base.metadata.tables[name]
    return Table(
        name, MetaData(), *[Column(c.name, c.type) for c in model.columns if c.name in held]
    )


def _defaults(model: Any, **values: Any) -> dict[str, Any]:
    """*values* over the model's Python-side column defaults (those a row needs)."""
    out: dict[str, Any] = {}
    for column in model.__table__.columns:
        default = column.default
        if default is None or (not default.is_scalar and not default.is_callable):
            continue
        out[column.name] = default.arg(None) if default.is_callable else default.arg
    return out | values


async def test_log_rows_and_offsets_get_the_attempt_of_their_kernel(
    empty_database: str,
) -> None:
    """0023: log rows held before get their kernel's attempt (1 for a kernel gone), and a
    kernel's offsets become those of its attempt; downgraded, the current ones stay."""
    await upgrade_async(empty_database, "0022")
    engine = create_engine(empty_database)
    now = datetime.now(UTC)
    offsets = {"stdout": 5, "_truncated": 1}
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(User).values(id="u1", name="alice", created_at=now))
            # only the columns sessions had at 0022 (the model's later ones, with their
            # defaults, would be named by insert(Session))
            sessions = await conn.run_sync(_reflected, "sessions")
            row = _defaults(Session, id="s1", owner_id="u1", type="batch", status="RUNNING")
            row["resources"] = {}
            await conn.execute(
                insert(sessions).values({k: v for k, v in row.items() if k in sessions.c})
            )
            await conn.execute(
                insert(Kernel).values(
                    [
                        {"id": "k1", "session_id": "s1", "attempt": 2, "log_offsets": offsets},
                        {"id": "k2", "session_id": "s1", "attempt": 1, "log_offsets": {}},
                    ]
                )
            )
            for kernel in ("k1", "k2", "gone"):
                await conn.execute(
                    text(
                        'INSERT INTO session_logs (session_id, kernel_id, stream, "offset",'
                        " data, created_at) VALUES ('s1', :k, 'stdout', 0, :d, :at)"
                    ),
                    {"k": kernel, "d": b"hi", "at": now},
                )
        await upgrade_async(empty_database)
        async with engine.connect() as conn:
            logs = dict(
                (await conn.execute(select(SessionLog.kernel_id, SessionLog.attempt))).all()
            )
            held = dict((await conn.execute(select(Kernel.id, Kernel.log_offsets))).all())
        assert logs == {"k1": 2, "k2": 1, "gone": 1}
        assert held == {"k1": {"2": offsets}, "k2": {}}
        await asyncio.to_thread(downgrade, empty_database, "0022")
        async with engine.connect() as conn:
            held = dict((await conn.execute(select(Kernel.id, Kernel.log_offsets))).all())
        assert held == {"k1": offsets, "k2": {}}
    finally:
        await engine.dispose()


async def test_groups_held_before_egress_keep_it_open(empty_database: str) -> None:
    """0029: an upgrade changes no group's behaviour (groups that said nothing get
    ``egress: open``, one that says more keeps it); only new groups are ``no-private``."""
    await upgrade_async(empty_database, "0028")
    engine = create_engine(empty_database)
    now = datetime.now(UTC)
    try:
        async with engine.begin() as conn:
            groups = await conn.run_sync(_reflected, "resource_groups")
            for name, scheduler in (("gpu", {"sequencer": "drf"}), ("cpu", {})):
                values = _defaults(ResourceGroup, name=name, scheduler=scheduler)
                held = {k: v for k, v in values.items() if k in groups.c}
                await conn.execute(insert(groups).values(**held | {"created_at": now}))
        await upgrade_async(empty_database)
        async with engine.connect() as conn:
            rows = dict(
                (await conn.execute(select(ResourceGroup.name, ResourceGroup.scheduler))).all()
            )
    finally:
        await engine.dispose()
    assert rows == {
        "gpu": {"sequencer": "drf", "egress": "open"},
        "cpu": {"egress": "open"},
    }
