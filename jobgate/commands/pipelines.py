"""``jobgate templates|triggers|webhooks``: parameterized jobs, CI triggers, webhooks.

::

    jobgate templates create NAME [run's options] [--param NAME[=DEFAULT]] -- CMD...
    jobgate templates ls | show NAME | rm NAME | run NAME [-p KEY=VALUE] [--wait]
    jobgate triggers create NAME --template T --source github|gitlab|standard ...
    jobgate triggers ls | show NAME | rm NAME | deliveries NAME
    jobgate webhooks create --url URL --events a,b [--project P]
    jobgate webhooks ls | rm ID | deliveries ID | redeliver DELIVERY | rotate ID
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client, parse_pairs
from jobgate.commands.run import (
    CommandArg,
    CpuOpt,
    EnvOpt,
    ImageOpt,
    MemOpt,
    ResourceOpt,
    build_request,
    wait_for,
)
from jobgate.render import Output, age, command_text, err, list_or_json, print_json, short_id, stamp
from jobgate.workdir import send_working_dir

templates_app = typer.Typer(
    help="Job templates: a session with parameters, run by name.", no_args_is_help=True
)
triggers_app = typer.Typer(
    help="Inbound CI triggers: signed hooks that run a template.", no_args_is_help=True
)
webhooks_app = typer.Typer(
    help="Outbound webhooks: signed POSTs when sessions end.", no_args_is_help=True
)

NameArg = Annotated[str, typer.Argument(help="Its name.")]


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _fields(pairs: list[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        print(f"{key.ljust(width)}  {value}")


def _removed(name: str, output: Output, kind: str) -> None:
    if output == Output.json:
        print_json({"name": name, "removed": True})
    else:
        err.print(f"deleted {kind} {name}", markup=False)


# -- templates ---------------------------------------------------------------------------
@templates_app.command("create")
def templates_create(
    name: NameArg,
    command: CommandArg = None,
    image: ImageOpt = None,
    cpu: CpuOpt = None,
    mem: MemOpt = None,
    resource: ResourceOpt = [],  # noqa: B006
    env: EnvOpt = [],  # noqa: B006
    param: Annotated[
        list[str],
        typer.Option(
            "--param", help="NAME or NAME=DEFAULT; the job gets $JOBGATE_PARAM_NAME; repeatable."
        ),
    ] = [],  # noqa: B006
    resource_group: Annotated[str | None, typer.Option("--group", help="Resource group.")] = None,
    project: Annotated[str | None, typer.Option(help="Project to charge runs to.")] = None,
    description: Annotated[str, typer.Option(help="What it is for.")] = "",
    working_dir: Annotated[
        Path | None,
        typer.Option(
            "--working-dir", help="Pack and upload this directory; every run starts in a copy."
        ),
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Save a session (image, resources, command ...) with parameters under a name."""
    api = client()
    session = build_request(
        command or [],
        image=image,
        cpu=cpu,
        mem=mem,
        resources=resource,
        env=env,
        resource_group=resource_group,
        project=project,
    )
    params = []
    for item in param:
        key, sep, default = item.partition("=")
        params.append({"name": key, "default": default if sep else None})
    if working_dir is not None:
        session["working_dir"] = send_working_dir(api, working_dir)
    body = {"name": name, "description": description, "params": params, "session": session}
    made = api.post("/v1/templates", json=body)
    if output == Output.json:
        print_json(made)
    else:
        print(made["name"])


@templates_app.command("ls")
def templates_ls(output: OutputOpt = Output.table) -> None:
    """Your templates."""
    list_or_json(
        client().get("/v1/templates"),
        output,
        ["NAME", "PARAMS", "COMMAND", "CREATED"],
        lambda t: [
            t["name"],
            _params(t) or "-",
            command_text(t["session"].get("command")),
            age(t["created_at"]),
        ],
    )


def _params(t: dict[str, Any]) -> str:
    return ", ".join(
        p["name"] if p["default"] is None else f"{p['name']}={p['default']}" for p in t["params"]
    )


@templates_app.command("show")
def templates_show(name: NameArg, output: OutputOpt = Output.table) -> None:
    """A template: its parameters and the session it submits."""
    t = client().get(f"/v1/templates/{segment(name)}")
    if output == Output.json:
        print_json(t)
        return
    s = t["session"]
    _fields(
        [
            ("name", t["name"]),
            ("description", t["description"] or "-"),
            ("params", _params(t) or "-"),
            ("image", s.get("image") or "-"),
            ("command", command_text(s.get("command"))),
            ("resources", ", ".join(f"{k}={v}" for k, v in s.get("resources", {}).items()) or "-"),
            ("created", stamp(t["created_at"])),
        ]
    )


@templates_app.command("rm")
def templates_rm(name: NameArg, output: OutputOpt = Output.table) -> None:
    """Delete a template (and its triggers); the sessions it started stay."""
    client().delete(f"/v1/templates/{segment(name)}")
    _removed(name, output, "template")


@templates_app.command("run")
def templates_run(
    name: NameArg,
    param: Annotated[list[str], typer.Option("--param", "-p", help="KEY=VALUE; repeatable.")] = [],  # noqa: B006
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow it like `jobgate run` and exit with its code.")
    ] = False,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Retry-safe key: the same key returns the same session.")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Submit the template's session with these parameters; print the session id."""
    api = client()
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    body = {"params": parse_pairs(param, "--param")}
    session = api.post(f"/v1/templates/{segment(name)}/run", json=body, headers=headers)
    if wait:
        wait_for(api, session["id"], output)
        return
    if output == Output.json:
        print_json(session)
    else:
        print(session["id"])


# -- triggers ----------------------------------------------------------------------------
class Source(StrEnum):
    github = "github"
    gitlab = "gitlab"
    standard = "standard"


@triggers_app.command("create")
def triggers_create(
    name: NameArg,
    template: Annotated[str, typer.Option(help="The template each delivery runs.")],
    source: Annotated[Source, typer.Option(help="Who signs the deliveries.")],
    events: Annotated[
        str | None, typer.Option(help="Comma-separated, e.g. push,pull_request (default: all).")
    ] = None,
    branches: Annotated[
        str | None, typer.Option(help="Comma-separated globs, e.g. main,release/* (default: all).")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Make a hook URL; prints the URL and the secret (shown this once)."""
    body = {
        "name": name,
        "template": template,
        "source": str(source),
        "events": _split(events),
        "branches": _split(branches),
    }
    made = client().post("/v1/triggers", json=body)
    if output == Output.json:
        print_json(made)
        return
    print(f"url     {made['url']}")
    print(f"secret  {made['secret']}")
    err.print("the secret is shown only now: give it to the CI service", markup=False)


def _trigger_row(t: dict[str, Any]) -> list[str]:
    return [
        t["name"],
        t["template"],
        t["source"],
        ",".join(t["events"]) or "*",
        ",".join(t["branches"]) or "*",
        str(t["refused"]),
        t["url"],
    ]


@triggers_app.command("ls")
def triggers_ls(output: OutputOpt = Output.table) -> None:
    """Your triggers (refused: deliveries with a missing or wrong signature)."""
    list_or_json(
        client().get("/v1/triggers"),
        output,
        ["NAME", "TEMPLATE", "SOURCE", "EVENTS", "BRANCHES", "REFUSED", "URL"],
        _trigger_row,
    )


@triggers_app.command("show")
def triggers_show(name: NameArg, output: OutputOpt = Output.table) -> None:
    """One trigger (its secret is never shown again)."""
    t = client().get(f"/v1/triggers/{segment(name)}")
    if output == Output.json:
        print_json(t)
        return
    row = _trigger_row(t)
    keys = ["name", "template", "source", "events", "branches", "refused", "url"]
    _fields([*zip(keys, row, strict=True), ("created", stamp(t["created_at"]))])


@triggers_app.command("rm")
def triggers_rm(name: NameArg, output: OutputOpt = Output.table) -> None:
    """Delete a trigger: its URL answers 404 from now on."""
    client().delete(f"/v1/triggers/{segment(name)}")
    _removed(name, output, "trigger")


@triggers_app.command("deliveries")
def triggers_deliveries(
    name: NameArg,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """Verified deliveries, newest first: verdict (started, filtered, rejected) and session."""
    list_or_json(
        client().get(f"/v1/triggers/{segment(name)}/deliveries", params={"limit": limit}),
        output,
        ["DELIVERY", "EVENT", "REF", "VERDICT", "SESSION", "REASON", "AT"],
        lambda d: [
            d["delivery"],
            d["event"],
            d["ref"] or "-",
            d["verdict"],
            short_id(d["session_id"]) or "-",
            d["detail"],
            age(d["at"]),
        ],
    )


# -- webhooks ----------------------------------------------------------------------------
IdArg = Annotated[str, typer.Argument(help="The webhook's id.")]


@webhooks_app.command("create")
def webhooks_create(
    url: Annotated[str, typer.Option(help="Where to POST (http or https).")],
    events: Annotated[
        str, typer.Option(help="Comma-separated: session.succeeded,session.failed,...")
    ],
    project: Annotated[
        str | None, typer.Option(help="Every session of this project (default: yours).")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Subscribe a URL; prints the id and the whsec_ signing secret (shown this once)."""
    body: dict[str, Any] = {"url": url, "events": _split(events)}
    if project is not None:
        body["project"] = project
    made = client().post("/v1/webhooks", json=body)
    if output == Output.json:
        print_json(made)
        return
    print(f"id      {made['id']}")
    print(f"secret  {made['secret']}")


@webhooks_app.command("ls")
def webhooks_ls(output: OutputOpt = Output.table) -> None:
    """Your webhooks; a disabled one says why (its receiver answered 410)."""
    list_or_json(
        client().get("/v1/webhooks"),
        output,
        ["ID", "URL", "EVENTS", "PROJECT", "STATE"],
        lambda w: [
            w["id"],
            w["url"],
            ",".join(w["events"]),
            w["project"] or "-",
            f"disabled: {w['disabled_reason']}" if w["disabled_reason"] else "active",
        ],
    )


@webhooks_app.command("rm")
def webhooks_rm(webhook: IdArg, output: OutputOpt = Output.table) -> None:
    """Delete a webhook and its pending deliveries."""
    client().delete(f"/v1/webhooks/{segment(webhook)}")
    _removed(webhook, output, "webhook")


@webhooks_app.command("rotate")
def webhooks_rotate(webhook: IdArg, output: OutputOpt = Output.table) -> None:
    """A new secret; for a day deliveries carry signatures with the old and the new."""
    made = client().post(f"/v1/webhooks/{segment(webhook)}/rotate")
    if output == Output.json:
        print_json(made)
    else:
        print(f"secret  {made['secret']}")


@webhooks_app.command("deliveries")
def webhooks_deliveries(
    webhook: IdArg,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """Deliveries, newest first, with their attempts' HTTP status codes."""
    list_or_json(
        client().get(f"/v1/webhooks/{segment(webhook)}/deliveries", params={"limit": limit}),
        output,
        ["ID", "EVENT", "STATUS", "ATTEMPTS", "CODES", "LAST ERROR", "CREATED"],
        lambda d: [
            d["id"],
            d["type"],
            d["status"],
            str(d["attempts"]),
            " ".join(str(a["status_code"] or "-") for a in d["log"]) or "-",
            d["last_error"] or "-",
            age(d["created_at"]),
        ],
    )


@webhooks_app.command("redeliver")
def webhooks_redeliver(
    delivery: Annotated[str, typer.Argument(help="A delivery id (webhooks deliveries).")],
    output: OutputOpt = Output.table,
) -> None:
    """Send a delivery again now (same webhook-id, so receivers can dedupe)."""
    made = client().post(f"/v1/webhooks/deliveries/{segment(delivery)}/redeliver")
    if output == Output.json:
        print_json(made)
    else:
        print(f"{made['id']} {made['status']}")
