"""`jobgate db upgrade`, as a deployment runs it before the gateway starts."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
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


def test_postgresql_is_migrated_and_no_data_dir_is_made(empty_pg: str, tmp_path: Path) -> None:
    async def tables() -> set[str]:
        conn = await asyncpg.connect(empty_pg)
        try:
            rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            return {r["tablename"] for r in rows}
        finally:
            await conn.close()

    data_dir = tmp_path / "never-made"
    done = _upgrade({"JOBGATE_DATABASE_URL": empty_pg, "JOBGATE_DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("database at revision head")
    assert {"alembic_version", "sessions", "kernels", "nodes"} <= asyncio.run(tables())
    assert not data_dir.exists()


def test_embedded_sqlite_is_made_in_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    done = _upgrade({"JOBGATE_DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(data_dir / "jobgate.db") as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert {"alembic_version", "sessions", "kernels"} <= names
