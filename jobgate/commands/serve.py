"""The long-running components: ``gateway serve``, ``scheduler run``, ``worker run``,
``proxy serve``. Each reads ``JOBGATE_*`` settings; the flags override the common ones.
(``jobgate db`` is commands/db.py.)"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import urllib.parse
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from jobgate import logs

S = TypeVar("S", bound=BaseSettings)

#: what to say when a required setting is missing, beyond its name
_HINTS = {
    "proxy_secret": "it signs app links and cookies: use the gateway's value, "
    "16+ characters; `jobgate up` keeps its own in DATA_DIR/secrets.json",
    "join_token": "a worker presents it once to join and get the node's own credential; "
    "set the same long random string on the gateway and every worker (the deprecated "
    "JOBGATE_NODE_TOKEN is taken for it)",
}


def require_join_token(component: str, token: str) -> None:
    """Refuse to start without a join token (JOBGATE_JOIN_TOKEN or JOBGATE_NODE_TOKEN)."""
    if not token:
        raise fail(component, f"JOBGATE_JOIN_TOKEN is not set ({_HINTS['join_token']})")


gateway_app = typer.Typer(help="The API gateway.", no_args_is_help=True)
scheduler_app = typer.Typer(help="The scheduler.", no_args_is_help=True)
worker_app = typer.Typer(help="The node daemon.", no_args_is_help=True)
proxy_app = typer.Typer(help="The app proxy.", no_args_is_help=True)


def fail(component: str, message: str) -> typer.Exit:
    """One line on stderr, exit status 2: what is wrong and how to fix it."""
    typer.echo(f"jobgate {component}: {message}", err=True)
    return typer.Exit(2)


def load_settings(cls: type[S], component: str, **overrides: Any) -> S:
    """Settings from the environment, or one line per bad setting (no traceback)."""
    try:
        return cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix") or "")
        lines = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            name = f"{prefix}{field}".upper()
            what = "is not set" if error["type"] == "missing" else f"is invalid: {error['msg']}"
            hint = _HINTS.get(field, "")
            lines.append(f"{name} {what}" + (f" ({hint})" if hint else ""))
        raise fail(component, "; ".join(lines)) from None


def require(component: str, settings: BaseSettings, *fields: str) -> None:
    """Refuse to start without a secret the component cannot work without."""
    for name in fields:
        value = getattr(settings, name)
        secret = value.get_secret_value() if hasattr(value, "get_secret_value") else value
        if not secret:
            hint = _HINTS.get(name, "")
            raise fail(component, f"JOBGATE_{name.upper()} is not set ({hint})")


def redact(url: str) -> str:
    """A URL fit for a log line: the password replaced by ***."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    netloc = user + parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


#: the cyclic collector's first-generation threshold in a gateway or scheduler (Python's
#: default: 700)
GC_THRESHOLD = 50_000


def tune_gc() -> None:
    """Move what start-up allocated (modules, the app, its routes and schemas) out of the
    cyclic collector's reach (``gc.freeze``) and collect the young generation rarely.

    A create allocates a few thousand short-lived objects (pydantic, SQLAlchemy, the ASGI
    cycle); with Python's default thresholds the collector ran every few requests and,
    now and then, walked every object the process holds - a pause that every request in
    flight waited for. Reference cycles are still collected, only in larger batches.
    What it changes on ``benchmarks/api_create.py`` is measured in the README."""
    gc.collect()
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, second, third)


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

    from gateway.api.http11 import GatewayProtocol
    from gateway.app import create_app
    from gateway.config import GatewaySettings

    logs.setup("gateway")
    settings = load_settings(GatewaySettings, "gateway")
    require_join_token("gateway", settings.effective_join_token)
    require("gateway", settings, "proxy_secret")
    app = create_app(settings, run_events=not no_events)
    tune_gc()
    typer.echo(
        f"jobgate gateway: listening on http://{host}:{port}, database "
        f"{redact(settings.effective_database_url)}, redis {redact(settings.redis_url)}"
        + ("" if no_events else ", consuming worker events")
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http=GatewayProtocol,  # httptools', plus zero-copy downloads (api/http11.py)
        lifespan="on",
    )
    uvicorn.Server(config).run()


@scheduler_app.command("run")
def scheduler_run() -> None:
    """Place pending sessions on nodes (several schedulers may run at once)."""
    from gateway.config import GatewaySettings
    from gateway.loops.scheduler_process import run_scheduler

    logs.setup("scheduler")
    settings = load_settings(GatewaySettings, "scheduler")
    tune_gc()  # a pass builds and drops a snapshot of every node and pending session
    typer.echo(
        f"jobgate scheduler: database {redact(settings.effective_database_url)}, "
        f"redis {redact(settings.redis_url)}"
    )
    asyncio.run(run_scheduler(settings))


@worker_app.command("run")
def worker_run(
    runtime: Annotated[
        str | None,
        typer.Option(
            help="How sessions run: process, podman, slurm or sim (default: "
            "JOBGATE_WORKER_RUNTIME)."
        ),
    ] = None,
    node_id: Annotated[
        str | None, typer.Option(help="The node id (default: the hostname).")
    ] = None,
    sim_nodes: Annotated[int | None, typer.Option(help="Simulate this many nodes.")] = None,
    cpu: Annotated[str | None, typer.Option(help="Cores to offer (default: all).")] = None,
    mem: Annotated[str | None, typer.Option(help="Memory to offer (default: all).")] = None,
    partition: Annotated[
        list[str] | None,
        typer.Option(
            help="Attach this Slurm partition's nodes (with --runtime slurm; repeat it for "
            "more; default: JOBGATE_SLURM_PARTITIONS, else every node)."
        ),
    ] = None,
) -> None:
    """Run sessions on this node."""
    from workers.agent import Agent
    from workers.config import WorkerSettings
    from workers.credential import JoinFailed, credential_path

    logs.setup("worker")
    if partition:  # the Slurm runtime's own setting, which its nodes' runtimes read too
        os.environ["JOBGATE_SLURM_PARTITIONS"] = ",".join(partition)
    overrides: dict[str, Any] = {
        "worker_runtime": runtime,
        "node_id": node_id,
        "sim_nodes": sim_nodes,
        "worker_cpu": cpu,
        "worker_mem": mem,
    }
    settings = load_settings(WorkerSettings, "worker", **overrides).resolved()
    many = settings.sim_nodes > 0 or settings.worker_runtime == "slurm"  # nodes join each
    if many or not credential_path(settings.data_dir, settings.node_id).exists():
        require_join_token("worker", settings.effective_join_token)  # else it has joined
    if settings.worker_runtime == "podman" and settings.sim_nodes == 0:
        _check_podman()
    typer.echo(
        f"jobgate worker: node {settings.node_id} ({settings.worker_runtime} runtime, "
        f"group {settings.resource_group}), gateway {settings.gateway_url}, "
        f"redis {redact(settings.redis_url)}"
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await Agent(settings).run(stop)

    try:
        asyncio.run(main())
    except JoinFailed as e:  # one line, not a traceback: a 409 says what to do
        raise fail("worker", str(e)) from None


def _check_podman() -> None:
    """One line, not a traceback, when the worker's Podman API socket does not answer."""
    from jobgate.stack import find_podman_socket, podman_answers
    from plugins.runtimes.podman.settings import PodmanSettings

    socket = load_settings(PodmanSettings, "worker").socket
    if not socket.startswith("unix://") or podman_answers(socket):
        return
    found = find_podman_socket()
    hint = (
        f"one answers at {found}: set JOBGATE_PODMAN_SOCKET={found}"
        if found
        else "start the rootless Podman API service (scripts/setup-podman.sh as root "
        "prints the JOBGATE_PODMAN_SOCKET=... line to set)"
    )
    raise fail("worker", f"no Podman API answers at {socket}; {hint}")


@proxy_app.command("serve")
def proxy_serve(
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (default: JOBGATE_PROXY_HOST).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default: JOBGATE_PROXY_PORT).")
    ] = None,
) -> None:
    """Serve Jupyter, code-server, terminals and endpoints of sessions at stable URLs."""
    from appproxy.server import serve
    from appproxy.settings import ProxySettings

    logs.setup("proxy")
    settings = load_settings(ProxySettings, "proxy", proxy_host=host, proxy_port=port)
    typer.echo(
        f"jobgate proxy: listening on http://{settings.proxy_host}:{settings.proxy_port}, "
        f"gateway {settings.gateway_url}, redis {redact(settings.redis_url)}"
    )
    serve(settings)
