"""``jobgate webhooks``: outbound, signed POSTs when sessions end (docs/pipelines.md).

::

    jobgate webhooks create --url URL --events a,b [--project P]
    jobgate webhooks ls | rm ID | deliveries ID | redeliver DELIVERY | rotate ID
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client, print_removed, split_list
from jobgate.render import Output, age, list_or_json, print_json

app = typer.Typer(help="Outbound webhooks: signed POSTs when sessions end.", no_args_is_help=True)

IdArg = Annotated[str, typer.Argument(help="The webhook's id.")]


@app.command("create")
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
    body: dict[str, Any] = {"url": url, "events": split_list(events)}
    if project is not None:
        body["project"] = project
    made = client().post("/v1/webhooks", json=body)
    if output == Output.json:
        print_json(made)
        return
    print(f"id      {made['id']}")
    print(f"secret  {made['secret']}")


@app.command("ls")
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


@app.command("rm")
def webhooks_rm(webhook: IdArg, output: OutputOpt = Output.table) -> None:
    """Delete a webhook and its pending deliveries."""
    client().delete(f"/v1/webhooks/{segment(webhook)}")
    print_removed(webhook, output, "webhook")


@app.command("rotate")
def webhooks_rotate(webhook: IdArg, output: OutputOpt = Output.table) -> None:
    """A new secret; for a day deliveries carry signatures with the old and the new."""
    made = client().post(f"/v1/webhooks/{segment(webhook)}/rotate")
    if output == Output.json:
        print_json(made)
    else:
        print(f"secret  {made['secret']}")


@app.command("deliveries")
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


@app.command("redeliver")
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
