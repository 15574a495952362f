"""``jobgate db backup FILE`` and ``jobgate db restore FILE [--force]`` (gateway/db/backup.py).

Both read ``JOBGATE_DATABASE_URL`` (or the embedded SQLite in ``JOBGATE_DATA_DIR``),
like ``jobgate db upgrade``; they are registered on the ``db`` group in ``jobgate/cli.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from jobgate.render import err

__all__ = ["backup", "restore"]


def _url() -> str:
    from gateway.config import GatewaySettings

    return GatewaySettings().effective_database_url


def backup(
    file: Annotated[Path, typer.Argument(help="where to write the backup", dir_okay=False)],
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


def restore(
    file: Annotated[Path, typer.Argument(help="a file `jobgate db backup` wrote", exists=True)],
    force: Annotated[
        bool, typer.Option("--force", help="replace a database that already holds data")
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
