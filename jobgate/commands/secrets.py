"""``jobgate secrets``: values that reach sessions and never come back (docs/secrets.md).

::

    jobgate secrets create NAME [--project P] [--from-file F]   (else the value from stdin)
    jobgate secrets ls | rm NAME | rotate NAME [--from-file F]

A value is never taken from an argument (it would land in the shell's history and in
``ps``); stdin is read to its end, one trailing newline dropped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from jobgate.client import Client, segment
from jobgate.commands.common import OutputOpt, client, print_removed
from jobgate.errors import ApiError
from jobgate.render import Output, age, list_or_json, print_json

app = typer.Typer(
    help="User secrets: tokens and passwords your sessions receive.", no_args_is_help=True
)

NameArg = Annotated[str, typer.Argument(help="The secret's name (also its default variable).")]
ProjectOpt = Annotated[str | None, typer.Option(help="A project's secret (you: a member).")]
FromFileOpt = Annotated[
    Path | None,
    typer.Option("--from-file", help="Read the value from this file (default: stdin)."),
]


def _value(api: Client, from_file: Path | None) -> str:
    """The value, from *from_file* or stdin; the gateway is asked first whether it is
    there at all (nobody types a secret for a gateway that is down)."""
    api.get("/healthz")
    if from_file is not None:
        try:
            return from_file.read_text()
        except OSError as exc:
            raise ApiError(0, "Usage", f"cannot read {from_file}: {exc.strerror}") from None
    if sys.stdin.isatty():
        typer.echo("value (then Ctrl-D):", err=True)
    text = sys.stdin.read()
    value = text[:-1] if text.endswith("\n") else text
    if not value:
        raise ApiError(0, "Usage", "no value: pipe it on stdin or give --from-file")
    return value


def _show(made: dict[str, Any], output: Output, what: str) -> None:
    if output == Output.json:
        print_json(made)
    else:
        print(f"{what} secret {made['name']} ({made['owner']})")


@app.command("create")
def secrets_create(
    name: NameArg,
    project: ProjectOpt = None,
    from_file: FromFileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Seal a new secret; its value is never shown again."""
    api = client()
    body: dict[str, Any] = {"name": name, "value": _value(api, from_file)}
    if project is not None:
        body["project"] = project
    _show(api.post("/v1/secrets", json=body), output, "created")


@app.command("ls")
def secrets_ls(output: OutputOpt = Output.table) -> None:
    """Your secrets and your projects': names and dates, never values."""
    list_or_json(
        client().get("/v1/secrets"),
        output,
        ["NAME", "OWNER", "CREATED", "UPDATED"],
        lambda s: [s["name"], s["owner"], age(s["created_at"]), age(s["updated_at"])],
    )


@app.command("rotate")
def secrets_rotate(
    name: NameArg,
    project: ProjectOpt = None,
    from_file: FromFileOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A new value; sessions that start from now on receive it."""
    params = {"project": project} if project is not None else {}
    api = client()
    made = api.request(
        "PUT", f"/v1/secrets/{segment(name)}", json={"value": _value(api, from_file)}, params=params
    )
    _show(made, output, "rotated")


@app.command("rm")
def secrets_rm(name: NameArg, project: ProjectOpt = None, output: OutputOpt = Output.table) -> None:
    """Delete a secret (sessions that start later no longer receive it)."""
    params = {"project": project} if project is not None else {}
    client().delete(f"/v1/secrets/{segment(name)}", params=params)
    print_removed(name, output, "secret")
