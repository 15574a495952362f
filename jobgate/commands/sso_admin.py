"""``jobgate admin sso``: the identity providers users sign in through, and the binding
rules that map their claims to projects and roles (docs/auth.md).

::

    jobgate admin sso set NAME --issuer URL --client-id ID [--client-secret-file F] ...
    jobgate admin sso ls | show NAME | rm NAME
    jobgate admin sso bind PROVIDER RULE --value ml-team [--project ml] [--role admin]
    jobgate admin sso rules PROVIDER | unbind PROVIDER RULE
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client
from jobgate.errors import ApiError
from jobgate.render import Output, list_or_json, out, print_json

__all__ = ["app"]

app = typer.Typer(
    help="Single sign-on: identity providers and their binding rules.", no_args_is_help=True
)

ProviderArg = Annotated[str, typer.Argument(help="The provider's name in jobgate.")]
RuleArg = Annotated[str, typer.Argument(help="The binding rule's name.")]


class Role(StrEnum):
    user = "user"
    admin = "admin"


def _secret(path: Path | None, public: bool) -> str | None:
    if public:
        return ""
    if path is None:
        return None
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as exc:
        raise ApiError(0, "Usage", f"cannot read {path}: {exc.strerror}") from None
    return text.strip()


@app.command("set")
def sso_set(
    name: ProviderArg,
    issuer: Annotated[str, typer.Option(help="The issuer URL (its discovery document).")],
    client_id: Annotated[str, typer.Option(help="The web console's client id.")],
    client_secret_file: Annotated[
        Path | None,
        typer.Option(help="A file holding the console client's secret (- for stdin)."),
    ] = None,
    public: Annotated[
        bool, typer.Option("--public", help="The console's client has no secret (PKCE only).")
    ] = False,
    cli_client_id: Annotated[
        str, typer.Option(help="A public client for `jobgate login` (default: --client-id).")
    ] = "",
    display_name: Annotated[str, typer.Option(help='Shown as "Sign in with …".')] = "",
    scopes: Annotated[str, typer.Option(help="Scopes asked for.")] = "openid profile email",
    username_claim: Annotated[str, typer.Option(help="The claim a new user's name comes from.")] = (
        "preferred_username"
    ),
    groups_claim: Annotated[str, typer.Option(help="The claim binding rules match.")] = "groups",
    output: OutputOpt = Output.table,
) -> None:
    """Add or change an identity provider (the secret is sealed and never shown again)."""
    body: dict[str, Any] = {
        "issuer": issuer,
        "client_id": client_id,
        "cli_client_id": cli_client_id,
        "display_name": display_name,
        "scopes": scopes,
        "username_claim": username_claim,
        "groups_claim": groups_claim,
    }
    secret = _secret(client_secret_file, public)
    if secret is not None:
        body["client_secret"] = secret
    found = client().request("PUT", f"/v1/auth/providers/{segment(name)}", json=body)
    if output == Output.json:
        print_json(found)
        return
    kind = "with a client secret" if found["has_client_secret"] else "a public client"
    out.print(f"provider {name}: {found['issuer']}, {kind}", markup=False)


@app.command("ls")
def sso_ls(output: OutputOpt = Output.table) -> None:
    """The identity providers."""
    list_or_json(
        client().get("/v1/auth/providers"),
        output,
        ["NAME", "ISSUER", "CLIENT", "CLI CLIENT", "SECRET"],
        lambda p: [
            p["name"],
            p["issuer"],
            p["client_id"],
            p["cli_client_id"] or "-",
            "yes" if p["has_client_secret"] else "no",
        ],
    )


@app.command("rm")
def sso_rm(name: ProviderArg, output: OutputOpt = Output.table) -> None:
    """Remove a provider and its binding rules (its users stay, with their keys)."""
    client().delete(f"/v1/auth/providers/{segment(name)}")
    if output == Output.json:
        print_json({"name": name, "removed": True})
    else:
        out.print(f"provider {name} removed", markup=False)


@app.command("bind")
def sso_bind(
    provider: ProviderArg,
    rule: RuleArg,
    value: Annotated[str, typer.Option(help="The claim's value that matches (a group's name).")],
    claim: Annotated[str, typer.Option(help="The claim (default: the groups claim).")] = "",
    project: Annotated[str | None, typer.Option(help="A project members join.")] = None,
    role: Annotated[Role, typer.Option(help="The role it gives.")] = Role.user,
    output: OutputOpt = Output.table,
) -> None:
    """A binding rule: who signs in with CLAIM holding VALUE joins PROJECT and/or is admin."""
    body: dict[str, Any] = {"value": value, "role": str(role)}
    if claim:
        body["claim"] = claim
    if project is not None:
        body["project"] = project
    found = client().request(
        "PUT", f"/v1/auth/providers/{segment(provider)}/bindings/{segment(rule)}", json=body
    )
    if output == Output.json:
        print_json(found)
        return
    gives = " and ".join(
        x
        for x in (
            f"project {found['project']}" if found["project"] else "",
            "the admin role" if found["role"] == "admin" else "",
        )
        if x
    )
    out.print(
        f"rule {rule}: {found['claim']} holding {found['value']!r} gives {gives}", markup=False
    )


@app.command("rules")
def sso_rules(provider: ProviderArg, output: OutputOpt = Output.table) -> None:
    """A provider's binding rules."""
    list_or_json(
        client().get(f"/v1/auth/providers/{segment(provider)}/bindings"),
        output,
        ["RULE", "CLAIM", "VALUE", "PROJECT", "ROLE"],
        lambda b: [b["name"], b["claim"], b["value"], b["project"] or "-", b["role"]],
    )


@app.command("unbind")
def sso_unbind(provider: ProviderArg, rule: RuleArg, output: OutputOpt = Output.table) -> None:
    """Remove a binding rule (from each user's next sign-in on)."""
    client().delete(f"/v1/auth/providers/{segment(provider)}/bindings/{segment(rule)}")
    if output == Output.json:
        print_json({"provider": provider, "rule": rule, "removed": True})
    else:
        out.print(f"rule {rule} of {provider} removed", markup=False)
