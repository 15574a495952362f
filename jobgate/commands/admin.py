"""``jobgate admin``: users and keys, projects, resource policies, budgets, resource
groups, the audit log.

``policies set``, ``budgets set`` and ``groups set`` change only what is given
(``PATCH``, a JSON merge patch) and print the object as it now is.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from jobgate.client import segment
from jobgate.commands import config, sso_admin
from jobgate.commands.common import OutputOpt, client, parse_bytes, parse_pairs
from jobgate.errors import ApiError
from jobgate.render import (
    BUDGET_COLUMNS,
    Output,
    age,
    budget_rows,
    list_or_json,
    out,
    print_json,
    slots_text,
    stamp,
    table,
)

app = typer.Typer(
    help="Administration (needs an admin key; `bootstrap` makes the first).", no_args_is_help=True
)
users = typer.Typer(help="Users and their API keys.", no_args_is_help=True)
projects = typer.Typer(help="Projects and their members.", no_args_is_help=True)
policies = typer.Typer(help="Per-user and per-project resource policies.", no_args_is_help=True)
groups = typer.Typer(help="Resource groups and their scheduler pipelines.", no_args_is_help=True)
budgets = typer.Typer(
    help="GPU-, cpu- and mem-hour budgets of users and projects.", no_args_is_help=True
)
app.add_typer(users, name="users")
app.add_typer(projects, name="projects")
app.add_typer(policies, name="policies")
app.add_typer(budgets, name="budgets")
app.add_typer(groups, name="groups")

UserArg = Annotated[str, typer.Argument(help="The user's name.")]
ProjectArg = Annotated[str, typer.Argument(help="The project's name.")]


class Role(StrEnum):
    user = "user"
    admin = "admin"


class Scope(StrEnum):
    user = "user"
    project = "project"


class Limit(StrEnum):
    max_sessions = "max-sessions"
    max_pending = "max-pending"
    max_slots = "max-slots"
    max_folder_bytes = "max-folder-bytes"
    max_priority = "max-priority"


ScopeArg = Annotated[Scope, typer.Argument(help="Whose policy: user or project.")]
SubjectArg = Annotated[str, typer.Argument(help="The user's or project's name; * for the default.")]


@app.command("bootstrap")
def bootstrap(
    key_name: Annotated[str, typer.Option(help="A label for the key.")] = "bootstrap",
) -> None:
    """The first admin key of a new deployment, made in the database itself.

    Needs no API key, only JOBGATE_DATABASE_URL (after `jobgate db upgrade`). Creates
    the admin user the first time; every run prints one more key, once.
    """
    import asyncio

    from gateway.bootstrap import admin_key
    from gateway.config import GatewaySettings

    url = GatewaySettings().effective_database_url
    typer.echo(asyncio.run(admin_key(url, key_name=key_name)))


def _fields(value: dict[str, str], output: Output, raw: Any) -> None:
    if output == Output.json:
        print_json(raw)
        return
    width = max(len(k) for k in value)
    for key, text in value.items():
        out.print(f"[bold]{key:<{width}}[/]  {text}")


@users.command("ls")
def users_ls(output: OutputOpt = Output.table) -> None:
    """Every user, with their role."""
    list_or_json(
        client().get("/v1/users"),
        output,
        ["NAME", "ROLE", "CREATED"],
        lambda u: [u["name"], u["role"], age(u["created_at"])],
    )


@users.command("create")
def users_create(
    name: UserArg,
    role: Annotated[Role, typer.Option(help="What the user may do.")] = Role.user,
    key: Annotated[bool, typer.Option(help="Also create an API key and print it once.")] = True,
    output: OutputOpt = Output.table,
) -> None:
    """A user (and, by default, an API key for them, printed once)."""
    api = client()
    user = api.post("/v1/users", json={"name": name, "role": str(role)})
    created = api.post(f"/v1/users/{segment(name)}/keys", json={"name": "initial"}) if key else None
    if output == Output.json:
        print_json(user | ({"key": created["key"]} if created else {}))
        return
    out.print(f"user {name} ({role}) created")
    if created:
        out.print(f"API key (shown once): {created['key']}")


@users.command("key")
def users_key(
    name: UserArg,
    label: Annotated[str, typer.Option("--name", help="What the key is for.")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """A new API key for a user (printed once)."""
    created = client().post(f"/v1/users/{segment(name)}/keys", json={"name": label})
    if output == Output.json:
        print_json(created)
    else:
        print(created["key"])


@projects.command("ls")
def projects_ls(output: OutputOpt = Output.table) -> None:
    """Every project, its fair-share weight and its members."""
    list_or_json(
        client().get("/v1/projects"),
        output,
        ["PROJECT", "SHARE", "MEMBERS"],
        lambda p: [p["name"], f"{p['share']:g}", ", ".join(p["members"]) or "-"],
    )


@projects.command("create")
def projects_create(name: ProjectArg, output: OutputOpt = Output.table) -> None:
    """A project (sessions can be charged to it with --project)."""
    created = client().post("/v1/projects", json={"name": name})
    if output == Output.json:
        print_json(created)
    else:
        out.print(f"project {name} created")


@projects.command("share")
def projects_share(
    project: ProjectArg,
    share: Annotated[
        float, typer.Argument(help="Its weight in the fair-share sequencer, above 0.")
    ],
    output: OutputOpt = Output.table,
) -> None:
    """Set a project's weight in the fair share sequencer (1 by default)."""
    found = client().patch(f"/v1/projects/{segment(project)}", json={"share": share})
    if output == Output.json:
        print_json(found)
    else:
        out.print(f"project {project} has share {found['share']:g}")


@projects.command("add-member")
def projects_add(project: ProjectArg, user: UserArg, output: OutputOpt = Output.table) -> None:
    """Let a user submit sessions to a project."""
    found = client().post(f"/v1/projects/{segment(project)}/members", json={"user": user})
    if output == Output.json:
        print_json(found)
    else:
        out.print(f"{user} is a member of {project}")


@projects.command("remove-member")
def projects_remove(project: ProjectArg, user: UserArg, output: OutputOpt = Output.table) -> None:
    """Take a user out of a project."""
    found = client().delete(f"/v1/projects/{segment(project)}/members/{segment(user)}")
    if output == Output.json:
        print_json(found)
    else:
        out.print(f"{user} is no longer a member of {project}")


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def _policy_fields(p: dict[str, Any]) -> dict[str, str]:
    return {
        "scope": p["scope"],
        "subject": p["subject"],
        "max sessions": _n(p["max_sessions"]),
        "max pending": _n(p["max_pending"]),
        "max slots": slots_text(p["max_slots"]),
        "max folder bytes": _n(p.get("max_folder_bytes")),
        "max priority": _n(p.get("max_priority")),
    }


@policies.command("ls")
def policies_ls(output: OutputOpt = Output.table) -> None:
    """Resource policies: per user or project, * for the default (- is unlimited)."""
    list_or_json(
        client().get("/v1/policies"),
        output,
        [
            "SCOPE",
            "SUBJECT",
            "MAX SESSIONS",
            "MAX PENDING",
            "MAX SLOTS",
            "MAX FOLDER BYTES",
            "MAX PRIORITY",
        ],
        lambda p: list(_policy_fields(p).values()),
    )


@policies.command("set")
def policies_set(
    scope: ScopeArg,
    subject: SubjectArg,
    max_sessions: Annotated[
        int | None, typer.Option(min=0, help="Sessions running at once.")
    ] = None,
    max_pending: Annotated[
        int | None, typer.Option(min=0, help="Sessions waiting at once.")
    ] = None,
    max_slot: Annotated[
        list[str],
        typer.Option(
            help="SLOT=AMOUNT held in total, e.g. cpu=16 or mem=64g; SLOT= lifts it; repeatable."
        ),
    ] = [],  # noqa: B006
    max_folder_bytes: Annotated[
        str | None,
        typer.Option(help="Bytes its data folders may hold, e.g. 500g (docs/folders.md)."),
    ] = None,
    max_priority: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=100,
            help="The highest priority its sessions may ask for (docs/security.md).",
        ),
    ] = None,
    unset: Annotated[
        list[Limit], typer.Option(help="Make this limit unlimited again; repeatable.")
    ] = [],  # noqa: B006
    output: OutputOpt = Output.table,
) -> None:
    """Create a policy or change the limits given; the others stay as they were."""
    body: dict[str, Any] = {}
    for limit in unset:
        body[str(limit).replace("-", "_")] = None
    if max_sessions is not None:
        body["max_sessions"] = max_sessions
    if max_pending is not None:
        body["max_pending"] = max_pending
    if max_folder_bytes is not None:
        body["max_folder_bytes"] = parse_bytes(max_folder_bytes, "--max-folder-bytes")
    if max_priority is not None:
        body["max_priority"] = max_priority
    if max_slot:
        slots = parse_pairs(max_slot, "--max-slot")
        body["max_slots"] = {k: (v or None) for k, v in slots.items()}
    policy = client().patch(f"/v1/policies/{segment(scope)}/{segment(subject)}", json=body)
    _fields(_policy_fields(policy), output, policy)


@policies.command("rm")
def policies_rm(scope: ScopeArg, subject: SubjectArg, output: OutputOpt = Output.table) -> None:
    """Remove a policy (its limits become unlimited)."""
    client().delete(f"/v1/policies/{segment(scope)}/{segment(subject)}")
    if output == Output.json:
        print_json({"scope": str(scope), "subject": subject, "removed": True})
    else:
        out.print(f"policy for {scope} {subject} removed")


class Period(StrEnum):
    day = "day"
    week = "week"
    month = "month"


class Window(StrEnum):
    calendar = "calendar"
    rolling = "rolling"


BudgetSubjectArg = Annotated[str, typer.Argument(help="The user's or project's name.")]


@budgets.command("ls")
def budgets_ls(output: OutputOpt = Output.table) -> None:
    """Budgets with what each spent this period (members of a project as PROJECT/USER)."""
    found: list[dict[str, Any]] = client().get("/v1/budgets")
    if output == Output.json:
        print_json(found)
        return
    table(BUDGET_COLUMNS, budget_rows(found))


def _hours(items: list[str], what: str) -> dict[str, float | None]:
    body: dict[str, float | None] = {}
    for kind, text in parse_pairs(items, what).items():
        try:
            body[kind] = float(text) if text else None
        except ValueError:
            raise ApiError(0, "Usage", f"{what} {kind}: {text!r} is not a number") from None
    return body


@budgets.command("set")
def budgets_set(
    scope: Annotated[Scope, typer.Argument(help="Whose budget: user or project.")],
    subject: BudgetSubjectArg,
    period: Annotated[Period | None, typer.Option(help="The period the hours are per.")] = None,
    window: Annotated[
        Window | None,
        typer.Option(
            help="calendar: the UTC day, ISO week or month (the default); rolling: the last "
            "1, 7 or 30 days."
        ),
    ] = None,
    limit: Annotated[
        list[str],
        typer.Option(
            help="KIND=HOURS per period, KIND one of gpu (every accelerator slot), cpu, mem "
            "(GiB-hours), e.g. gpu=100; KIND= lifts it; repeatable."
        ),
    ] = [],  # noqa: B006
    member: Annotated[
        list[str],
        typer.Option(
            help="USER:KIND=HOURS, a project member's part of the project's budget; "
            "USER:KIND= lifts it; repeatable."
        ),
    ] = [],  # noqa: B006
    unset_member: Annotated[
        list[str], typer.Option(help="Remove this member's sub-limits; repeatable.")
    ] = [],  # noqa: B006
    output: OutputOpt = Output.table,
) -> None:
    """Create a budget or change what is given; the rest stays as it was."""
    body: dict[str, Any] = {}
    if period is not None:
        body["period"] = str(period)
    if window is not None:
        body["window"] = str(window)
    if limit:
        body["limits"] = _hours(limit, "--limit")
    members: dict[str, Any] = {name: None for name in unset_member}
    for item in member:
        name, sep, pair = item.partition(":")
        if not sep or not name:
            raise ApiError(0, "Usage", f"--member must look like USER:KIND=HOURS, got {item!r}")
        mine = members.get(name) or {}
        members[name] = mine | _hours([pair], f"--member {name}:")
    if members:
        body["members"] = members
    found = client().patch(f"/v1/budgets/{segment(scope)}/{segment(subject)}", json=body)
    if output == Output.json:
        print_json(found)
        return
    table(BUDGET_COLUMNS, budget_rows([found]))


@budgets.command("rm")
def budgets_rm(
    scope: Annotated[Scope, typer.Argument(help="Whose budget: user or project.")],
    subject: BudgetSubjectArg,
    output: OutputOpt = Output.table,
) -> None:
    """Remove a budget: its sessions are no longer held back by it."""
    client().delete(f"/v1/budgets/{segment(scope)}/{segment(subject)}")
    if output == Output.json:
        print_json({"scope": str(scope), "subject": subject, "removed": True})
    else:
        out.print(f"budget of {scope} {subject} removed")


def _group_fields(g: dict[str, Any]) -> dict[str, str]:
    return {
        "name": g["name"],
        "description": g["description"] or "-",
        "nodes": str(g["nodes"]),
        "scheduler": json.dumps(g["scheduler"], sort_keys=True),
    }


@groups.command("ls")
def groups_ls(output: OutputOpt = Output.table) -> None:
    """Resource groups, their node counts and scheduler pipelines."""
    list_or_json(
        client().get("/v1/resource-groups"),
        output,
        ["GROUP", "NODES", "SCHEDULER", "DESCRIPTION"],
        lambda g: [g["name"], str(g["nodes"]), json.dumps(g["scheduler"]), g["description"] or "-"],
    )


@groups.command("set")
def groups_set(
    name: Annotated[str, typer.Argument(help="The resource group's name.")],
    config: Annotated[
        str | None,
        typer.Option(
            help='Scheduler settings as JSON, merged key by key, e.g. {"sequencer": "drf"}.'
        ),
    ] = None,
    description: Annotated[str | None, typer.Option(help="What the group is for.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create a resource group or change what is given; the rest stays as it was."""
    body: dict[str, Any] = {}
    if config is not None:
        try:
            scheduler = json.loads(config)
        except ValueError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--config") from None
        if not isinstance(scheduler, dict):
            raise typer.BadParameter("must be a JSON object", param_hint="--config")
        body["scheduler"] = scheduler
    if description is not None:
        body["description"] = description
    group = client().patch(f"/v1/resource-groups/{segment(name)}", json=body)
    _fields(_group_fields(group), output, group)


blobs = typer.Typer(help="Uploaded working directories (the gateway's blob store).")
app.add_typer(blobs, name="blobs")


@blobs.command("gc")
def blobs_gc(
    grace: Annotated[
        float | None,
        typer.Option(help="Keep unreferenced blobs younger than this many seconds."),
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


secrets_ = typer.Typer(
    help="The master key of user secrets and providers' client secrets (docs/secrets.md).",
    no_args_is_help=True,
)
app.add_typer(secrets_, name="secrets")


@secrets_.command("rekey")
def secrets_rekey(
    new_key_file: Annotated[
        Path,
        typer.Option(
            "--new-key-file",
            help="The new master key: a file holding base64 of 32 random bytes.",
        ),
    ],
) -> None:
    """Wrap every secret's data key with a new master key, in one transaction
    (user secrets and identity providers' client secrets).

    Runs with the database (JOBGATE_DATABASE_URL) and the current key as the gateway has
    it (JOBGATE_SECRETS_KEY, JOBGATE_SECRETS_KEY_FILE or DATA_DIR/secrets.key), like
    ``bootstrap``. Values are not decrypted to disk nor shown. Then give every gateway
    the new key and restart them: until then they cannot open the secrets.
    """
    import asyncio

    from gateway.bootstrap import rekey_secrets
    from gateway.config import GatewaySettings
    from gateway.domain.sealing import MasterKey, SealingError

    settings = GatewaySettings()
    try:
        current = settings.effective_secrets_key
        if not current:
            raise ApiError(0, "Usage", "no current key: set JOBGATE_SECRETS_KEY (docs/secrets.md)")
        old = MasterKey.from_base64(current)
        new = MasterKey.from_base64(new_key_file.read_text())
        (done, kept), (pdone, pkept) = asyncio.run(
            rekey_secrets(settings.effective_database_url, old, new)
        )
    except OSError as exc:
        raise ApiError(0, "Usage", f"cannot read {exc.filename}: {exc.strerror}") from None
    except SealingError as exc:
        raise ApiError(0, "Usage", f"{exc}; nothing was changed") from None
    out.print(
        f"{done} secret(s) and {pdone} provider secret(s) rewrapped, {kept} and {pkept} "
        f"already under the new key ({new.key_id})"
    )


app.add_typer(config.app, name="config")
app.add_typer(sso_admin.app, name="sso")


_SINCE = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _since(value: str) -> str:
    """``1h``, ``30m``, ``7d`` back from now, or a date or ISO 8601 time (UTC unless it
    has an offset), as the API's RFC 3339."""
    if match := _SINCE.fullmatch(value.strip()):
        delta = timedelta(**{_UNITS[match[2]]: int(match[1])})
        return (datetime.now(UTC) - delta).isoformat()
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is neither a duration (30m, 1h, 7d) nor a time (2026-11-23T14:00)",
            param_hint="--since",
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


@app.command("audit")
def audit(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's calls.")] = None,
    action: Annotated[
        str | None, typer.Option("--action", help="Only this operation id (sessions-create).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only calls since: 30m, 1h, 7d, or a date or time (UTC)."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most.")] = 100,
    output: OutputOpt = Output.table,
) -> None:
    """The audit log, newest first: every state-changing call, who made it (user and
    credential), what (its operation id and target), from where, and its answer."""
    params: dict[str, str | int] = {"limit": limit}
    for name, value in (("user", user), ("action", action)):
        if value is not None:
            params[name] = value
    if since is not None:
        params["from"] = _since(since)
    page = client().get("/v1/audit", params=params)
    list_or_json(
        page["items"],
        output,
        ["TIME", "USER", "CREDENTIAL", "ACTION", "STATUS", "CLIENT", "TARGET"],
        lambda e: [
            stamp(e["at"]),
            escape(e["user"] or "-"),
            escape(e["credential"] or "-"),
            escape(e["action"]),
            str(e["status"]),
            escape(e["client"] or "-"),
            escape(e["target"] or "-"),
        ],
    )
