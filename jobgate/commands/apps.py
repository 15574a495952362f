"""``jobgate apps ls|open``: the apps of an interactive session and one-time links to them."""

from __future__ import annotations

import webbrowser
from typing import Annotated

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client
from jobgate.render import Output, err, list_or_json, print_json, stamp

app = typer.Typer(
    help="Apps of interactive sessions (Jupyter, code-server, ...).", no_args_is_help=True
)


@app.command("ls")
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


@app.command("open")
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
