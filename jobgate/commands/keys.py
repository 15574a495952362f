"""``jobgate keys``: your API keys, scoped and expiring (admins: anyone's, ``--user``).

::

    jobgate keys create NAME [--scope read --scope sessions ...] [--expires 30d|never]
    jobgate keys ls | revoke NAME
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client
from jobgate.render import Output, age, err, list_or_json, print_json, stamp

app = typer.Typer(help="Your API keys: scoped, expiring, revocable.", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="The key's name (unique among your keys).")]
UserOpt = Annotated[str | None, typer.Option("--user", help="Another user's keys (admins only).")]


class Scope(StrEnum):
    read = "read"
    sessions = "sessions"
    endpoints = "endpoints"
    folders = "folders"
    admin = "admin"


def _params(user: str | None) -> dict[str, str]:
    return {} if user is None else {"user": user}


@app.command("create")
def keys_create(
    name: NameArg,
    scope: Annotated[
        list[Scope] | None,
        typer.Option(
            help="What the key may do; repeat it for more (default: the scopes of the key "
            "you use, which a new key can never exceed)."
        ),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option(
            help="Its lifetime: 30d, 12h, 90m, 2w or never (default: when the key you use "
            "expires, or never)."
        ),
    ] = None,
    user: UserOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A new API key; prints it (shown this once: store it now)."""
    body: dict[str, Any] = {"name": name}
    if scope:
        body["scopes"] = [str(s) for s in scope]
    if expires is not None:
        body["expires_in"] = expires
    made = client().post("/v1/keys", json=body, params=_params(user))
    if output == Output.json:
        print_json(made)
        return
    err.print(
        f"key {made['name']} of {made['user']}: {', '.join(made['scopes'])}; "
        f"expires {_expires(made['expires_at'])}",
        markup=False,
    )
    print(made["key"])


@app.command("ls")
def keys_ls(user: UserOpt = None, output: OutputOpt = Output.table) -> None:
    """Your keys (not the revoked ones): what each may do, until when, and its last use."""
    list_or_json(
        client().get("/v1/keys", params=_params(user)),
        output,
        ["NAME", "SCOPES", "EXPIRES", "LAST USED", "PREFIX"],
        lambda k: [
            k["name"],
            ",".join(k["scopes"]),
            _expires(k["expires_at"]),
            age(k["last_used_at"]) if k["last_used_at"] else "never",
            k["prefix"],
        ],
    )


@app.command("revoke")
def keys_revoke(name: NameArg, user: UserOpt = None, output: OutputOpt = Output.table) -> None:
    """Revoke a key: it stops working at once (other gateways: within seconds)."""
    client().delete(f"/v1/keys/{segment(name)}", params=_params(user))
    if output == Output.json:
        print_json({"name": name, "revoked": True})
    else:
        err.print(f"revoked key {name}", markup=False)


def _expires(value: str | None) -> str:
    if not value:
        return "never"
    at = stamp(value)
    ended = datetime.fromisoformat(value.replace("Z", "+00:00")) <= datetime.now(UTC)
    return f"{at} (expired)" if ended else at
