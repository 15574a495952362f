"""PostgreSQL and Redis that demand passwords: the whole stack works, wrong ones are refused.

The test makes its own PostgreSQL cluster with scram-sha-256 for every connection (the
shared one trusts local connections, which would prove nothing) and its own
redis-server with ``requirepass``. Passwords hold characters a URL must escape.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import asyncpg
import pytest
import redis.asyncio as aioredis
from harness import Stack
from needs import missing

from gateway.config import async_database_url
from gateway.db.migrate import upgrade_async
from jobgate.localnet import free_port, redis_server_argv, wait_port

PG_PASSWORD = "pg p@ss/word:1%"
REDIS_PASSWORD = "redis p@ss/word#2"


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.getuid() == 0 else argv


@pytest.fixture
def scram_pg() -> Iterator[str]:
    """A PostgreSQL of this test's own where every connection needs a password.

    In a directory of its own under /tmp: pytest's tmp_path is private to root, and
    the server runs as the postgres user."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        missing("no PostgreSQL server binaries (Debian package postgresql)")
    pg_bin = Path(bins[-1]).parent
    data = Path(tempfile.mkdtemp(prefix="jobgate-scram-pg-"))
    pwfile = data / "pw"
    pwfile.write_text(PG_PASSWORD + "\n")
    if os.getuid() == 0:
        shutil.chown(data, "postgres")
        shutil.chown(pwfile, "postgres")
    run = _as_postgres
    subprocess.run(
        run([str(pg_bin / "initdb"), "-D", str(data / "db"), "-U", "jobgate",
             "--auth=scram-sha-256", f"--pwfile={pwfile}"]),
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    port = free_port()
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        run([str(pg_bin / "pg_ctl"), "-D", str(data / "db"), "-l", str(data / "log"),
             "-o", options, "-w", "start"]),
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        yield f"postgresql://jobgate:{quote(PG_PASSWORD, safe='')}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            run([str(pg_bin / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "stop"]),
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def secret_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own with ``requirepass``."""
    port = free_port()
    workdir = tmp_path / "redis"
    workdir.mkdir()
    argv = [*redis_server_argv(workdir, port=port), "--requirepass", REDIS_PASSWORD]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=20)
        yield f"redis://:{quote(REDIS_PASSWORD, safe='')}@127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_stack_on_password_protected_postgresql_and_redis(
    scram_pg: str, secret_redis: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # wrong passwords are refused: the servers really check them
    wrong_pg = scram_pg.replace(quote(PG_PASSWORD, safe=""), "nope")
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(wrong_pg, timeout=10)
    anonymous = aioredis.Redis.from_url(
        secret_redis.replace(f":{quote(REDIS_PASSWORD, safe='')}@", "")
    )
    with pytest.raises(Exception, match=r"(?i)auth"):
        await anonymous.ping()
    await anonymous.aclose()

    # `jobgate db upgrade` with a wrong password fails, naming neither password
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobgate", "db", "upgrade",
        env=clean | {"JOBGATE_DATABASE_URL": wrong_pg},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode != 0
    assert b"password authentication failed" in err
    assert PG_PASSWORD.encode() not in err

    # the right ones: migrate, then gateway + scheduler + worker, a session end to end
    await upgrade_async(async_database_url(scram_pg))
    stack = Stack(scram_pg, secret_redis, tmp_path)
    await stack.bootstrap()
    await stack.start_gateway()
    stack.start_scheduler()
    try:
        async with stack.client() as api:
            health = (await api.get("/healthz")).json()
        assert health == {"status": "ok", "database": "ok", "redis": "ok"}
        await stack.start_worker("n1")
        done = await stack.submit(command=["sh", "-c", "echo through-the-passwords"])
        await stack.wait_status(done["id"], {"SUCCEEDED"})
        assert "through-the-passwords" in await stack.logs(done["id"])
    finally:
        await stack.close()

    # a backup of the password-protected database (the password goes in PGPASSWORD)
    file = tmp_path / "backup.pgdump"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobgate", "db", "backup", str(file),
        env=clean | {"JOBGATE_DATABASE_URL": scram_pg},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert file.read_bytes().startswith(b"PGDMP")

    # no log line of any component carried either password
    for secret in (PG_PASSWORD, REDIS_PASSWORD, quote(PG_PASSWORD, safe="")):
        assert secret not in caplog.text
