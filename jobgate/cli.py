"""The ``jobgate`` command: a thin client over the API, plus the components themselves.

::

    jobgate up                          the whole stack on this machine
    jobgate run [OPTIONS] -- CMD...     run a session, stream it, exit with its code
    jobgate sessions ls|show|logs|rm|create
    jobgate nodes ls|show|drain|cordon|uncordon
    jobgate admin users|projects|policies|groups ...
    jobgate apps ls|open SESSION [APP]        jobgate images ls|add|rm
    jobgate gateway serve | scheduler run | worker run | proxy serve
    jobgate db upgrade|backup|restore   jobgate service install   jobgate admin config
"""

from __future__ import annotations

import sys

import typer

from jobgate.client import ApiError
from jobgate.commands import admin, apps, config, db, nodes, serve, service, sessions
from jobgate.commands.run import run
from jobgate.commands.up import up
from jobgate.render import err

__all__ = ["app", "main"]

app = typer.Typer(
    name="jobgate",
    help="A serverless job gateway for GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("up")(up)
app.command(
    "run",
    context_settings={"allow_interspersed_args": False},
)(run)
app.add_typer(sessions.app, name="sessions")
app.add_typer(nodes.app, name="nodes")
app.add_typer(apps.apps_app, name="apps")
app.add_typer(apps.images_app, name="images")
app.add_typer(admin.app, name="admin")
admin.app.add_typer(config.app, name="config")
app.add_typer(serve.gateway_app, name="gateway")
app.add_typer(serve.scheduler_app, name="scheduler")
app.add_typer(serve.worker_app, name="worker")
app.add_typer(serve.db_app, name="db")
serve.db_app.command("backup")(db.backup)
serve.db_app.command("restore")(db.restore)
app.add_typer(serve.proxy_app, name="proxy")
app.add_typer(service.app, name="service")


def main() -> None:
    try:
        app()
    except ApiError as exc:
        where = f" ({exc.field})" if exc.field else ""
        err.print(f"[red]error:[/] {exc.detail}{where}")
        sys.exit(2 if exc.status in (0, 400, 422) and exc.title == "Usage" else 1)


if __name__ == "__main__":
    main()
