"""`jobgate db upgrade`, as a deployment runs it before the gateway starts."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg


def _upgrade(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "jobgate", "db", "upgrade"],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_postgresql_is_migrated_and_no_data_dir_is_made(pg_server: str, tmp_path: Path) -> None:
    name = f"jobgate_upgrade_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(pg_server)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def tables(url: str) -> set[str]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            return {r["tablename"] for r in rows}
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    url = f"{pg_server.rsplit('/', 1)[0]}/{name}"
    try:
        data_dir = tmp_path / "never-made"
        done = _upgrade({"JOBGATE_DATABASE_URL": url, "JOBGATE_DATA_DIR": str(data_dir)})
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().endswith("database at revision head")
        assert {"alembic_version", "sessions", "kernels", "nodes"} <= asyncio.run(tables(url))
        assert not data_dir.exists()
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_embedded_sqlite_is_made_in_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    done = _upgrade({"JOBGATE_DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(data_dir / "jobgate.db") as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert {"alembic_version", "sessions", "kernels"} <= names
