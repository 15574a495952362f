"""``jobgate images ls|add|rm``: which apps an image serves (the registry of service
ports), and private images of committed sessions (docs/images.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client
from jobgate.render import Output, list_or_json, out, print_json

app = typer.Typer(
    help="Images: which apps an image serves; private images of committed sessions.",
    no_args_is_help=True,
)


@app.command("ls")
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


@app.command("add")
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


@app.command("rm")
def images_rm(image: ImageArg, output: OutputOpt = Output.table) -> None:
    """Forget the apps registered for an image (admins), or delete a private image of yours."""
    client().delete(f"/v1/images/{segment(image)}")
    if output == Output.json:
        print_json({"name": image, "removed": True})
    else:
        out.print(f"{image} removed from the registry")
