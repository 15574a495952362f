"""``jobgate up``: the embedded single-machine stack (see :mod:`jobgate.stack`)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gateway.config import default_data_dir
from jobgate.profile import profile_path
from jobgate.stack import Stack, StackError


class RuntimeChoice(StrEnum):
    auto = "auto"
    podman = "podman"
    process = "process"
    sim = "sim"


def up(
    data_dir: Annotated[
        Path, typer.Option(help="all state: database, logs, secrets")
    ] = default_data_dir(),
    port: Annotated[int, typer.Option(help="gateway port")] = 8420,
    proxy_port: Annotated[int, typer.Option(help="app proxy port")] = 8421,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    runtime: Annotated[
        RuntimeChoice, typer.Option(help="auto: podman when its socket answers, else process")
    ] = RuntimeChoice.auto,
    image: Annotated[
        str,
        typer.Option(
            help="default image of sessions that name none (podman only; "
            "default: localhost/jobgate-python:3.11 when present, else python:3.11-slim)"
        ),
    ] = "",
) -> None:
    """Start gateway, scheduler, a worker and the app proxy here; Ctrl-C stops them all."""
    data_dir = data_dir.expanduser().resolve()
    typer.echo(f"jobgate up: state in {data_dir}")
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
        typer.echo("jobgate up: stopping…")
        stack.stop()
        typer.echo("jobgate up: stopped")
    raise typer.Exit(code)


__all__ = ["profile_path", "up"]
