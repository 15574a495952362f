"""`jobgate db backup` / `jobgate db restore` on PostgreSQL and SQLite, with live sessions.

The backup is taken while the gateway, the scheduler and a worker run a session; it is
restored into an empty database, and a second gateway on the restored database shows
the sessions (status, output) to the same admin key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from harness import Stack

from gateway.db.backup import nonempty_tables, target

pytestmark = pytest.mark.postgres


def jobgate(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "jobgate", "db", *args],
        env=clean | {"JOBGATE_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def other_redis_db(url: str) -> str:
    """The same Redis, another database: the second gateway must not take the first's events."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/7"))


@pytest.fixture(params=["postgresql", "sqlite"])
def live(request: pytest.FixtureRequest) -> Stack:
    return request.getfixturevalue("stack" if request.param == "postgresql" else "sqlite_stack")


async def test_backup_of_a_live_stack_restores_into_an_empty_database(
    live: Stack, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    await live.start_worker("n1")
    done = await live.submit(command=["sh", "-c", "echo finished-before-backup"])
    await live.wait_status(done["id"], {"SUCCEEDED"})
    running = await live.submit(command=["sh", "-c", "echo still-running; sleep 120"])
    await live.wait_status(running["id"], {"RUNNING"})
    await live.wait_output(running["id"], "still-running")

    sqlite = live.database_url.startswith("sqlite")
    file = tmp_path / ("jobgate.sqlite" if sqlite else "jobgate.pgdump")
    took = jobgate("backup", str(file), database_url=live.database_url)
    assert took.returncode == 0, took.stderr
    assert f"backed up to {file}" in took.stdout
    assert file.read_bytes().startswith(b"SQLite format 3" if sqlite else b"PGDMP")

    # the live database holds rows: a restore into it is refused and changes nothing
    refused = jobgate("restore", str(file), database_url=live.database_url)
    assert refused.returncode == 1
    assert "not empty" in refused.stderr
    assert "--force" in refused.stderr
    assert (await live.get(running["id"]))["status"] == "RUNNING"

    # a file of the other kind is refused before anything is touched
    if sqlite:
        restored_url = f"sqlite:///{tmp_path / 'restored' / 'jobgate.db'}"
    else:
        restored_url = request.getfixturevalue("empty_pg")
    wrong = tmp_path / "wrong"
    wrong.write_bytes(b"PGDMP" if sqlite else b"SQLite format 3\x00")
    mixed = jobgate("restore", str(wrong), database_url=restored_url)
    assert mixed.returncode == 1
    assert "backup; the database is" in mixed.stderr

    put = jobgate("restore", str(file), database_url=restored_url)
    assert put.returncode == 0, put.stderr
    assert "restored from" in put.stdout
    assert "revision 0" in put.stdout  # Alembic's revision came along

    # a gateway on the restored database shows what the live one showed, to the same key
    again = Stack(restored_url, other_redis_db(live.redis_url), tmp_path / "second")
    (tmp_path / "second").mkdir()
    again.admin_key = live.admin_key
    await again.start_gateway()
    try:
        assert (await again.get(done["id"]))["status"] == "SUCCEEDED"
        assert (await again.get(running["id"]))["status"] == "RUNNING"
        assert "finished-before-backup" in await again.logs(done["id"])
        assert "still-running" in await again.logs(running["id"])
    finally:
        await again.close()

    # --force replaces a database that holds rows
    assert await nonempty_tables(target_url(restored_url))
    forced = jobgate("restore", "--force", str(file), database_url=restored_url)
    assert forced.returncode == 0, forced.stderr


def target_url(url: str) -> str:
    from gateway.config import async_database_url

    return target(async_database_url(url)).async_url
