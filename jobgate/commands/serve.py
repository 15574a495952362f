"""The long-running components: ``gateway serve``, ``scheduler run``, ``worker run``,
``db upgrade``, ``proxy serve``. Each reads ``JOBGATE_*`` settings; the flags override
the common ones."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated, Any

import typer

from jobgate import logs

gateway_app = typer.Typer(help="The API gateway.", no_args_is_help=True)
scheduler_app = typer.Typer(help="The scheduler.", no_args_is_help=True)
worker_app = typer.Typer(help="The node daemon.", no_args_is_help=True)
db_app = typer.Typer(help="The database.", no_args_is_help=True)
proxy_app = typer.Typer(help="The app proxy.", no_args_is_help=True)


@gateway_app.command("serve")
def gateway_serve(
    host: Annotated[str, typer.Option(envvar="JOBGATE_HOST", help="Address to listen on.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(envvar="JOBGATE_PORT", help="Port to listen on.")] = 8420,
    no_events: Annotated[
        bool, typer.Option(help="API only; another process consumes events")
    ] = False,
) -> None:
    """Serve the REST API (and consume worker events)."""
    import uvicorn

    from gateway.app import create_app
    from gateway.config import GatewaySettings

    logs.setup("gateway")
    app = create_app(GatewaySettings(), run_events=not no_events)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
        lifespan="on",
    )
    uvicorn.Server(config).run()


@scheduler_app.command("run")
def scheduler_run() -> None:
    """Place pending sessions on nodes (several schedulers may run at once)."""
    from gateway.config import GatewaySettings
    from gateway.scheduler.runner import run_scheduler

    logs.setup("scheduler")
    asyncio.run(run_scheduler(GatewaySettings()))


@worker_app.command("run")
def worker_run(
    runtime: Annotated[str | None, typer.Option(help="process | podman | sim")] = None,
    node_id: Annotated[str | None, typer.Option(help="default: the hostname")] = None,
    sim_nodes: Annotated[int | None, typer.Option(help="simulate this many nodes")] = None,
    cpu: Annotated[str | None, typer.Option(help="cores to offer (default: all)")] = None,
    mem: Annotated[str | None, typer.Option(help="memory to offer (default: all)")] = None,
) -> None:
    """Run sessions on this node."""
    from workers.agent import Agent
    from workers.config import WorkerSettings

    logs.setup("worker")
    overrides: dict[str, Any] = {
        "worker_runtime": runtime,
        "node_id": node_id,
        "sim_nodes": sim_nodes,
        "worker_cpu": cpu,
        "worker_mem": mem,
    }
    settings = WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await Agent(settings).run(stop)

    asyncio.run(main())


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="The Alembic revision to reach.")] = "head",
) -> None:
    """Apply the Alembic migrations to JOBGATE_DATABASE_URL (or the embedded SQLite)."""
    from gateway.config import GatewaySettings
    from gateway.db.migrate import upgrade

    settings = GatewaySettings()
    if not settings.database_url:  # the embedded SQLite file lives in the data dir
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.effective_database_url, revision)
    typer.echo(f"database at revision {revision}")


@proxy_app.command("serve")
def proxy_serve(
    host: Annotated[str | None, typer.Option(help="default: JOBGATE_PROXY_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="default: JOBGATE_PROXY_PORT")] = None,
) -> None:
    """Serve Jupyter, code-server, terminals and endpoints of sessions at stable URLs."""
    from appproxy.server import serve
    from appproxy.settings import ProxySettings

    logs.setup("proxy")
    overrides: dict[str, Any] = {"proxy_host": host, "proxy_port": port}
    serve(ProxySettings(**{k: v for k, v in overrides.items() if v is not None}))
