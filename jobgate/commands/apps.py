"""``jobgate apps ls|open`` and ``jobgate images ls|add|rm``."""

from __future__ import annotations

import webbrowser
from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client
from jobgate.render import Output, err, list_or_json, out, print_json, stamp

apps_app = typer.Typer(
    help="Apps of interactive sessions (Jupyter, code-server, ...).", no_args_is_help=True
)
images_app = typer.Typer(
    help="Images: which apps an image serves; private images of committed sessions.",
    no_args_is_help=True,
)


@apps_app.command("ls")
def apps_ls(
    session: Annotated[str, typer.Argument(help="Session id, unique id prefix, or name.")],
    output: OutputOpt = Output.table,
) -> None:
    """The apps a session serves and whether they are ready."""
    api = client()
    list_or_json(
        api.get(f"/v1/sessions/{segment(api.resolve_session(session))}/apps"),
        output,
        ["APP", "PROTOCOL", "PORT", "READY"],
        lambda a: [a["name"], a["protocol"], str(a["port"]), "yes" if a["ready"] else "no"],
    )


@apps_app.command("open")
def apps_open(
    session: Annotated[str, typer.Argument(help="Session id, unique id prefix, or name.")],
    app: Annotated[str, typer.Argument(help="The app: jupyter, code-server, terminal, ...")],
    browser: Annotated[bool, typer.Option("--browser", help="Also open it in a browser.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Print a one-time link to the app; it signs you in for this session."""
    api = client()
    link = api.post(f"/v1/sessions/{segment(api.resolve_session(session))}/apps/{segment(app)}")
    if output == Output.json:
        print_json(link)
    else:
        err.print(f"one-time link, valid until {stamp(link['expires_at'])}:", markup=False)
        print(link["url"])
    if browser:
        webbrowser.open(link["url"])


@images_app.command("ls")
def images_ls(output: OutputOpt = Output.table) -> None:
    """Images the gateway knows: registered apps, and your private (committed) images."""
    list_or_json(
        client().get("/v1/images"), output, ["IMAGE", "VISIBILITY", "STATE", "APPS"], _image_row
    )


def _image_row(i: dict[str, Any]) -> list[str]:
    return [
        i["name"],
        i.get("visibility", "public")
        + (f" ({i['owner']})" if i.get("visibility") == "private" else ""),
        i.get("state", "ready"),
        ", ".join(f"{n}:{a['protocol']}:{a['port']}" for n, a in i["apps"].items()),
    ]


ImageArg = Annotated[str, typer.Argument(help="The image reference, e.g. jobgate-jupyter:4.")]


@images_app.command("add")
def images_add(
    image: ImageArg,
    service_ports: Annotated[
        str,
        typer.Option(help="NAME:PROTOCOL:PORT,..., e.g. jupyter:http:8888,code-server:http:8080."),
    ],
    output: OutputOpt = Output.table,
) -> None:
    """Register (or override) the apps an image serves."""
    found = client().request(
        "PUT", f"/v1/images/{segment(image)}", json={"service_ports": service_ports}
    )
    if output == Output.json:
        print_json(found)
    else:
        apps = ", ".join(f"{n}:{a['protocol']}:{a['port']}" for n, a in found["apps"].items())
        out.print(f"{found['name']}: {apps}")


@images_app.command("rm")
def images_rm(image: ImageArg, output: OutputOpt = Output.table) -> None:
    """Forget the apps registered for an image (admins), or delete a private image of yours."""
    client().delete(f"/v1/images/{segment(image)}")
    if output == Output.json:
        print_json({"name": image, "removed": True})
    else:
        out.print(f"{image} removed from the registry")
