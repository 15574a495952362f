"""``jobgate triggers``: inbound CI hooks, signed by GitHub, GitLab or the Standard
Webhooks scheme, that run a template (docs/pipelines.md).

::

    jobgate triggers create NAME --template T --source github|gitlab|standard ...
    jobgate triggers ls | show NAME | rm NAME | deliveries NAME
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import (
    NameArg,
    OutputOpt,
    client,
    print_fields,
    print_removed,
    split_list,
)
from jobgate.render import Output, age, err, list_or_json, print_json, short_id, stamp

app = typer.Typer(
    help="Inbound CI triggers: signed hooks that run a template.", no_args_is_help=True
)


class Source(StrEnum):
    github = "github"
    gitlab = "gitlab"
    standard = "standard"


@app.command("create")
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
        "events": split_list(events),
        "branches": split_list(branches),
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


@app.command("ls")
def triggers_ls(output: OutputOpt = Output.table) -> None:
    """Your triggers (refused: deliveries with a missing or wrong signature)."""
    list_or_json(
        client().get("/v1/triggers"),
        output,
        ["NAME", "TEMPLATE", "SOURCE", "EVENTS", "BRANCHES", "REFUSED", "URL"],
        _trigger_row,
    )


@app.command("show")
def triggers_show(name: NameArg, output: OutputOpt = Output.table) -> None:
    """One trigger (its secret is never shown again)."""
    t = client().get(f"/v1/triggers/{segment(name)}")
    if output == Output.json:
        print_json(t)
        return
    row = _trigger_row(t)
    keys = ["name", "template", "source", "events", "branches", "refused", "url"]
    print_fields([*zip(keys, row, strict=True), ("created", stamp(t["created_at"]))])


@app.command("rm")
def triggers_rm(name: NameArg, output: OutputOpt = Output.table) -> None:
    """Delete a trigger: its URL answers 404 from now on."""
    client().delete(f"/v1/triggers/{segment(name)}")
    print_removed(name, output, "trigger")


@app.command("deliveries")
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
