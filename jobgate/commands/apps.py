"""``jobgate apps ls|open`` and ``jobgate images ls|add|rm``."""

from __future__ import annotations

import webbrowser
from typing import Annotated

import typer

from jobgate.commands.common import client
from jobgate.render import Output, err, out, print_json, table

apps_app = typer.Typer(
    help="Apps of interactive sessions (Jupyter, code-server, ...).", no_args_is_help=True
)
images_app = typer.Typer(
    help="The image registry: which apps an image serves.", no_args_is_help=True
)


@apps_app.command("ls")
def apps_ls(
    session: Annotated[str, typer.Argument(help="id, id prefix or name")],
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
) -> None:
    """The apps a session serves and whether they are ready."""
    api = client()
    found = api.get(f"/v1/sessions/{api.resolve_session(session)}/apps")
    if output == Output.json:
        print_json(found)
        return
    table(
        ["APP", "PROTOCOL", "PORT", "READY"],
        [[a["name"], a["protocol"], str(a["port"]), "yes" if a["ready"] else "no"] for a in found],
    )


@apps_app.command("open")
def apps_open(
    session: Annotated[str, typer.Argument(help="id, id prefix or name")],
    app: Annotated[str, typer.Argument(help="jupyter, code-server, terminal, ...")],
    browser: Annotated[bool, typer.Option("--browser", help="open it in a browser")] = False,
) -> None:
    """Print a one-time link to the app (last line); it signs you in for this session."""
    api = client()
    link = api.post(f"/v1/sessions/{api.resolve_session(session)}/apps/{app}")
    err.print(f"[dim]one-time link, valid until {link['expires_at']}:[/]")
    print(link["url"])
    if browser:
        webbrowser.open(link["url"])


@images_app.command("ls")
def images_ls(output: Annotated[Output, typer.Option("--output", "-o")] = Output.table) -> None:
    """Images the gateway knows apps for (admins register them)."""
    found = client().get("/v1/images")
    if output == Output.json:
        print_json(found)
        return
    table(
        ["IMAGE", "APPS"],
        [
            [i["name"], ", ".join(f"{n}:{a['protocol']}:{a['port']}" for n, a in i["apps"].items())]
            for i in found
        ],
    )


@images_app.command("add")
def images_add(
    image: str,
    service_ports: Annotated[str, typer.Option(help="jupyter:http:8888,code-server:http:8080")],
) -> None:
    """Register (or override) the apps an image serves."""
    client().request("PUT", f"/v1/images/{image}", json={"service_ports": service_ports})
    out.print(f"{image}: {service_ports}")


@images_app.command("rm")
def images_rm(image: str) -> None:
    """Forget the apps registered for an image."""
    client().delete(f"/v1/images/{image}")
    out.print(f"{image} removed from the registry")
