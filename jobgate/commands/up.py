"""``jobgate up``: the embedded single-machine stack (see :mod:`jobgate.stack`)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gateway.config import default_data_dir
from jobgate.errors import ApiError
from jobgate.profile import profile_path
from jobgate.stack import Stack, StackError


class RuntimeChoice(StrEnum):
    auto = "auto"
    podman = "podman"
    process = "process"
    sim = "sim"


def up(
    data_dir: Annotated[
        Path, typer.Option(help="All state: database, logs, secrets.")
    ] = default_data_dir(),
    port: Annotated[int, typer.Option(min=1, max=65535, help="The gateway's port.")] = 8420,
    proxy_port: Annotated[int, typer.Option(min=1, max=65535, help="The app proxy's port.")] = 8421,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    runtime: Annotated[
        RuntimeChoice, typer.Option(help="auto: podman when its socket answers, else process.")
    ] = RuntimeChoice.auto,
    image: Annotated[
        str,
        typer.Option(
            help="The default image of sessions that name none (podman only; "
            "default: localhost/jobgate-python:3.11 when present, else python:3.11-slim)."
        ),
    ] = "",
) -> None:
    """Start the whole stack on this machine: gateway, scheduler, a worker, app proxy.

    Ctrl-C (or SIGTERM) stops it. Running sessions are terminated, their reason
    "jobgate up stopped"; it first says how many. A second Ctrl-C stops at once.
    """
    if port == proxy_port:
        raise ApiError(
            0, "Usage", f"--port and --proxy-port are both {port}; give each its own port"
        )
    data_dir = data_dir.expanduser().resolve()
    typer.echo(f"jobgate up: state in {data_dir}")
    _warn_collisions()
    stack = Stack(
        data_dir=data_dir,
        port=port,
        proxy_port=proxy_port,
        host=host,
        runtime=runtime.value,
        image=image,
        say=typer.echo,
    )
    code = 1
    try:
        profile = stack.start()
        path = profile.save()
        typer.echo(f"  profile    {path} (API key for admin)")
        typer.echo("ready. In another shell: jobgate run -- python3 -c 'print(6*7)'")
        typer.echo(f"API: {profile.url}", color=False)
        code = stack.wait()
    except StackError as exc:
        typer.echo(f"jobgate up: {exc}", err=True)
    except KeyboardInterrupt:
        code = 0
    finally:
        if stack.components:
            stack.stop()
            typer.echo("jobgate up: stopped")
    raise typer.Exit(code)


__all__ = ["profile_path", "up"]


def _warn_collisions() -> None:
    """Say so when another distribution installs one of jobgate's top-level packages (its
    files and ours share one folder; docs/developing.md "Installed names")."""
    from jobgate.installed import collisions

    for name, others in collisions().items():
        typer.echo(
            f"jobgate up: warning: {', '.join(others)} also installs a top-level "
            f"{name!r} package; give jobgate a virtualenv of its own (pipx install jobgate)",
            err=True,
        )
