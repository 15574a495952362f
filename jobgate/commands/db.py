"""``jobgate db``: ``upgrade [REVISION]`` (Alembic, gateway/db/migrate.py), ``backup FILE``
and ``restore FILE [--force]`` (gateway/db/backup.py).

Each reads ``JOBGATE_DATABASE_URL`` (or the embedded SQLite in ``JOBGATE_DATA_DIR``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from jobgate.render import err

__all__ = ["app", "backup", "restore", "upgrade"]

app = typer.Typer(help="The database.", no_args_is_help=True)


def _url() -> str:
    from gateway.config import GatewaySettings

    return GatewaySettings().effective_database_url


@app.command("upgrade")
def upgrade(
    revision: Annotated[str, typer.Argument(help="The Alembic revision to reach.")] = "head",
) -> None:
    """Apply the Alembic migrations to JOBGATE_DATABASE_URL (or the embedded SQLite)."""
    from gateway.config import GatewaySettings
    from gateway.db.migrate import upgrade as migrate

    settings = GatewaySettings()
    if not settings.database_url:  # the embedded SQLite file lives in the data dir
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.effective_database_url, revision)
    typer.echo(f"database at revision {revision}")


@app.command("backup")
def backup(
    file: Annotated[Path, typer.Argument(help="Where to write the backup.", dir_okay=False)],
) -> None:
    """A consistent copy of the database, taken while jobgate runs.

    SQLite: the online backup API (a SQLite file). PostgreSQL: pg_dump's custom format
    (needs pg_dump of the server's major version or newer).
    """
    from gateway.db.backup import BackupError
    from gateway.db.backup import backup as take

    try:
        where = take(_url(), file)
    except BackupError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    typer.echo(f"{where.kind} database backed up to {file} ({file.stat().st_size} bytes)")


@app.command("restore")
def restore(
    file: Annotated[Path, typer.Argument(help="A file `jobgate db backup` wrote.", exists=True)],
    force: Annotated[
        bool, typer.Option("--force", help="Replace a database that already holds data.")
    ] = False,
) -> None:
    """Put a backup into the database. Stop the gateway, schedulers and workers first.

    Refuses a database that holds rows unless --force. Run `jobgate db upgrade` after
    restoring a backup taken by an older jobgate.
    """
    from gateway.db.backup import BackupError, revision
    from gateway.db.backup import restore as put

    url = _url()
    try:
        where = asyncio.run(put(url, file, force=force))
    except BackupError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    at = asyncio.run(revision(url)) or "none"
    typer.echo(f"{where.kind} database restored from {file} (revision {at})")
