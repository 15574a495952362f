"""``jobgate admin``: users and keys, projects, resource policies, resource groups."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from jobgate.commands.common import client, parse_pairs
from jobgate.render import Output, out, print_json, table

app = typer.Typer(
    help="Administration (needs an admin key; `bootstrap` makes the first).", no_args_is_help=True
)
users = typer.Typer(help="Users and their API keys.", no_args_is_help=True)
projects = typer.Typer(help="Projects and their members.", no_args_is_help=True)
policies = typer.Typer(help="Per-user and per-project resource policies.", no_args_is_help=True)
groups = typer.Typer(help="Resource groups and their scheduler pipelines.", no_args_is_help=True)
app.add_typer(users, name="users")
app.add_typer(projects, name="projects")
app.add_typer(policies, name="policies")
app.add_typer(groups, name="groups")

OutputOpt = Annotated[Output, typer.Option("--output", "-o")]


@app.command("bootstrap")
def bootstrap(
    key_name: Annotated[str, typer.Option(help="a label for the key")] = "bootstrap",
) -> None:
    """The first admin key of a new deployment, made in the database itself.

    Needs no API key, only JOBGATE_DATABASE_URL (after ``jobgate db upgrade``). Creates
    the ``admin`` user the first time; every run prints one more key, once.
    """
    import asyncio

    from gateway.bootstrap import admin_key
    from gateway.config import GatewaySettings

    url = GatewaySettings().effective_database_url
    typer.echo(asyncio.run(admin_key(url, key_name=key_name)))


def _show(value: Any, output: Output, columns: list[str], rows: list[list[str]]) -> None:
    if output == Output.json:
        print_json(value)
    else:
        table(columns, rows)


@users.command("ls")
def users_ls(output: OutputOpt = Output.table) -> None:
    """Every user, with their role."""
    found = client().get("/v1/users")
    _show(
        found,
        output,
        ["NAME", "ROLE", "CREATED"],
        [[u["name"], u["role"], u["created_at"]] for u in found],
    )


@users.command("create")
def users_create(
    name: str,
    role: Annotated[str, typer.Option(help="user | admin")] = "user",
    key: Annotated[bool, typer.Option(help="also create an API key and print it")] = True,
) -> None:
    """A user (and, by default, an API key for them, printed once)."""
    api = client()
    api.post("/v1/users", json={"name": name, "role": role})
    out.print(f"user {name} ({role}) created")
    if key:
        created = api.post(f"/v1/users/{name}/keys", json={"name": "initial"})
        out.print(f"API key (shown once): {created['key']}")


@users.command("key")
def users_key(
    name: str, label: Annotated[str, typer.Option("--name", help="what the key is for")] = ""
) -> None:
    """A new API key for a user (printed once)."""
    created = client().post(f"/v1/users/{name}/keys", json={"name": label})
    print(created["key"])


@projects.command("ls")
def projects_ls(output: OutputOpt = Output.table) -> None:
    """Every project and its members."""
    found = client().get("/v1/projects")
    _show(
        found, output, ["PROJECT", "MEMBERS"], [[p["name"], ", ".join(p["members"])] for p in found]
    )


@projects.command("create")
def projects_create(name: str) -> None:
    """A project (sessions can be charged to it with --project)."""
    client().post("/v1/projects", json={"name": name})
    out.print(f"project {name} created")


@projects.command("add-member")
def projects_add(project: str, user: str) -> None:
    """Let a user submit sessions to a project."""
    client().post(f"/v1/projects/{project}/members", json={"user": user})
    out.print(f"{user} is a member of {project}")


@projects.command("remove-member")
def projects_remove(project: str, user: str) -> None:
    """Take a user out of a project."""
    client().delete(f"/v1/projects/{project}/members/{user}")
    out.print(f"{user} is no longer a member of {project}")


@policies.command("ls")
def policies_ls(output: OutputOpt = Output.table) -> None:
    """Resource policies: per user or project, * for the default."""
    found = client().get("/v1/policies")
    _show(
        found,
        output,
        ["SCOPE", "SUBJECT", "MAX SESSIONS", "MAX PENDING", "MAX SLOTS"],
        [
            [
                p["scope"],
                p["subject"],
                _n(p["max_sessions"]),
                _n(p["max_pending"]),
                " ".join(f"{k}={v}" for k, v in (p["max_slots"] or {}).items()) or "-",
            ]
            for p in found
        ],
    )


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


@policies.command("set")
def policies_set(
    scope: Annotated[str, typer.Argument(help="user | project")],
    subject: Annotated[str, typer.Argument(help="its name, or * for the default")],
    max_sessions: Annotated[int | None, typer.Option(help="running at once")] = None,
    max_pending: Annotated[int | None, typer.Option(help="waiting at once")] = None,
    max_slot: Annotated[list[str], typer.Option(help="SLOT=AMOUNT held in total")] = [],  # noqa: B006
) -> None:
    """Create or replace a policy; limits not given are unlimited."""
    body: dict[str, Any] = {"max_sessions": max_sessions, "max_pending": max_pending}
    if max_slot:
        body["max_slots"] = parse_pairs(max_slot, "--max-slot")
    client().request("PUT", f"/v1/policies/{scope}/{subject}", json=body)
    out.print(f"policy for {scope} {subject} set")


@policies.command("rm")
def policies_rm(scope: str, subject: str) -> None:
    """Remove a policy (its limits become unlimited)."""
    client().delete(f"/v1/policies/{scope}/{subject}")
    out.print(f"policy for {scope} {subject} removed")


@groups.command("ls")
def groups_ls(output: OutputOpt = Output.table) -> None:
    """Resource groups, their node counts and scheduler pipelines."""
    found = client().get("/v1/resource-groups")
    _show(
        found,
        output,
        ["GROUP", "NODES", "SCHEDULER"],
        [[g["name"], str(g["nodes"]), json.dumps(g["scheduler"]) or "{}"] for g in found],
    )


@groups.command("set")
def groups_set(
    name: str,
    config: Annotated[
        str, typer.Option(help='scheduler pipeline as JSON, e.g. {"sequencer": "drf"}')
    ] = "{}",
    description: Annotated[str, typer.Option()] = "",
) -> None:
    """Create a resource group or replace its scheduler configuration."""
    try:
        scheduler = json.loads(config)
    except ValueError as exc:
        raise typer.BadParameter(f"--config is not JSON: {exc}") from None
    client().request(
        "PUT",
        f"/v1/resource-groups/{name}",
        json={"description": description, "scheduler": scheduler},
    )
    out.print(f"resource group {name} configured")


blobs = typer.Typer(help="Uploaded working directories (the gateway's blob store).")
app.add_typer(blobs, name="blobs")


@blobs.command("gc")
def blobs_gc(
    grace: Annotated[
        float | None,
        typer.Option(help="keep unreferenced blobs younger than this many seconds"),
    ] = None,
) -> None:
    """Delete blobs no live session names, older than the grace period.

    Runs where the gateway's storage root is (JOBGATE_STORAGE_ROOT, default
    DATA_DIR/storage) with JOBGATE_DATABASE_URL, like ``bootstrap``; safe to run from cron.
    """
    import asyncio

    from gateway.config import GatewaySettings
    from gateway.db.engine import create_engine, create_session_factory
    from gateway.services.blobs import BlobStore, collect_garbage

    settings = GatewaySettings()
    store = BlobStore(settings.effective_storage_root, settings.max_blob_bytes)

    async def collect() -> list[str]:
        engine = create_engine(settings.effective_database_url)
        try:
            factory = create_session_factory(engine)
            return await collect_garbage(
                store, factory, settings.blob_gc_grace_s if grace is None else grace
            )
        finally:
            await engine.dispose()

    deleted = asyncio.run(collect())
    for digest in deleted:
        out.print(f"deleted {digest}")
    out.print(f"{len(deleted)} blob(s) deleted, {len(store.list())} kept")
