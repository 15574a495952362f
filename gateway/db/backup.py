"""``jobgate db backup FILE`` / ``jobgate db restore FILE``.

::

    SQLite      backup:  sqlite3 online backup API (a consistent copy while the gateway writes)
                restore: the same API from FILE into the database file
    PostgreSQL  backup:  pg_dump --format=custom (one consistent snapshot, gateway running)
                restore: pg_restore --single-transaction --exit-on-error --clean --if-exists

A restore refuses a database that holds rows (other than Alembic's version) unless
``force`` is given, and refuses a file of the other kind. The password of a PostgreSQL
URL goes to pg_dump/pg_restore in ``PGPASSWORD``, never on their command line.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from sqlalchemy import inspect, select, table, text
from sqlalchemy.engine import Connection

from gateway.db.engine import create_engine

__all__ = ["BackupError", "Target", "backup", "nonempty_tables", "restore", "target"]

SQLITE_MAGIC = b"SQLite format 3\x00"
PGDUMP_MAGIC = b"PGDMP"
VERSION_TABLE = "alembic_version"


class BackupError(Exception):
    """A backup or restore that cannot be done, with a message for the operator."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where the database is: a SQLite file, or a PostgreSQL URL (libpq form)."""

    async_url: str
    sqlite_path: Path | None = None
    pg_url: str = ""  # without the password
    pg_password: str = ""

    @property
    def kind(self) -> str:
        return "SQLite" if self.sqlite_path is not None else "PostgreSQL"


def target(async_url: str) -> Target:
    """The target of an effective (async driver) database URL."""
    parts = urlsplit(async_url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme == "sqlite":
        path = async_url.split(":///", 1)[1] if ":///" in async_url else ""
        if not path or path == ":memory:":
            raise BackupError(f"not a SQLite file: {async_url}")
        return Target(async_url, sqlite_path=Path(path))
    if scheme in ("postgresql", "postgres"):
        password = unquote(parts.password or "")
        netloc = f"{parts.username}@" if parts.username else ""
        netloc += parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        plain = urlunsplit(("postgresql", netloc, parts.path, parts.query, ""))
        return Target(async_url, pg_url=plain, pg_password=password)
    raise BackupError(f"backups support SQLite and PostgreSQL, not {scheme!r}")


async def nonempty_tables(async_url: str) -> list[str]:
    """Tables that hold rows, besides Alembic's version (empty list: safe to restore into)."""

    def scan(conn: Connection) -> list[str]:
        names = [n for n in inspect(conn).get_table_names() if n != VERSION_TABLE]
        return [
            name
            for name in sorted(names)
            if conn.execute(select(text("1")).select_from(table(name)).limit(1)).first()
        ]

    path = target(async_url).sqlite_path
    if path is not None:
        return await asyncio.to_thread(_sqlite_nonempty, path)
    engine = create_engine(async_url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(scan)
    finally:
        await engine.dispose()


def _sqlite_nonempty(path: Path) -> list[str]:
    """The same scan on SQLite, read-only: the engine's ``BEGIN IMMEDIATE`` would queue for
    the write lock behind a live stack's writers, for a question that only reads."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
            if row[0] != VERSION_TABLE
        ]
        quoted = {name: name.replace('"', '""') for name in names}
        return [
            name
            for name in sorted(names)
            if conn.execute(f'SELECT 1 FROM "{quoted[name]}" LIMIT 1').fetchone()
        ]
    finally:
        conn.close()


def _pg_env(where: Target) -> dict[str, str]:
    env = dict(os.environ)
    if where.pg_password:
        env["PGPASSWORD"] = where.pg_password
    return env


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} not found: install the PostgreSQL client (Debian: postgresql-client)"
        )
    return found


def _run(argv: list[str], where: Target) -> None:
    done = subprocess.run(argv, env=_pg_env(where), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{Path(argv[0]).name} failed: {done.stderr.strip()[-2000:]}")


def backup(async_url: str, file: Path) -> Target:
    """Write a consistent copy of the database to *file* (replaced only once complete)."""
    where = target(async_url)
    part = file.with_name(file.name + ".part")
    if where.sqlite_path is not None:
        if not where.sqlite_path.exists():
            raise BackupError(f"no database at {where.sqlite_path}")
        part.unlink(missing_ok=True)
        source = sqlite3.connect(where.sqlite_path)  # WAL: readers need the -shm writable
        try:
            with sqlite3.connect(part) as copy:
                source.backup(copy)
            copy.close()
        finally:
            source.close()
    else:
        argv = [_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges"]
        _run([*argv, "--file", str(part), "--dbname", where.pg_url], where)
    part.replace(file)
    return where


def _kind_of(file: Path) -> str:
    try:
        with file.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise BackupError(f"cannot read {file}: {exc.strerror or exc}") from None
    if head.startswith(SQLITE_MAGIC):
        return "SQLite"
    if head.startswith(PGDUMP_MAGIC):
        return "PostgreSQL"
    raise BackupError(f"{file} is not a jobgate backup (neither SQLite nor pg_dump custom format)")


async def restore(async_url: str, file: Path, *, force: bool = False) -> Target:
    """Put the backup in *file* into the database; refuse a database with rows unless forced."""
    where = target(async_url)
    kind = _kind_of(file)
    if kind != where.kind:
        raise BackupError(f"{file} is a {kind} backup; the database is {where.kind}")
    if where.sqlite_path is None or where.sqlite_path.exists():
        busy = await nonempty_tables(async_url)
        if busy and not force:
            shown = ", ".join(busy[:6]) + (" ..." if len(busy) > 6 else "")
            raise BackupError(
                f"the database is not empty (rows in {shown}); "
                "restore into an empty one or pass --force to replace its contents"
            )
    if where.sqlite_path is not None:
        _check_sqlite_backup(file)
        where.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        source = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
        try:
            with sqlite3.connect(where.sqlite_path) as dest:
                source.backup(dest)  # replaces every page of dest, in one step
            dest.close()
        finally:
            source.close()
    else:
        # --clean: tables `db upgrade` made (empty, or emptied by --force) are replaced
        argv = [_tool("pg_restore"), "--single-transaction", "--exit-on-error"]
        argv += ["--no-owner", "--no-privileges", "--clean", "--if-exists"]
        _run([*argv, "--dbname", where.pg_url, str(file)], where)
    return where


def _check_sqlite_backup(file: Path) -> None:
    with sqlite3.connect(f"file:{file}?mode=ro", uri=True) as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    if VERSION_TABLE not in names:
        raise BackupError(
            f"{file} is a SQLite file but not a jobgate database (no {VERSION_TABLE})"
        )


async def revision(async_url: str) -> str:
    """The Alembic revision the database is at ('' when it has none)."""
    engine = create_engine(async_url)
    try:
        async with engine.connect() as conn:
            has = await conn.run_sync(lambda c: inspect(c).has_table(VERSION_TABLE))
            if not has:
                return ""
            row = (await conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))).first()
            return str(row[0]) if row else ""
    finally:
        await engine.dispose()
