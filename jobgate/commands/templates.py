"""``jobgate templates``: a session with parameters, saved under a name and run by it
(docs/pipelines.md).

::

    jobgate templates create NAME [run's options] [--param NAME[=DEFAULT]] -- CMD...
    jobgate templates ls | show NAME | rm NAME | run NAME [-p KEY=VALUE] [--wait]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import (
    NameArg,
    OutputOpt,
    client,
    parse_pairs,
    print_fields,
    print_removed,
)
from jobgate.commands.run import (
    CommandArg,
    CpuOpt,
    EnvOpt,
    ImageOpt,
    MemOpt,
    ResourceOpt,
    SecretOpt,
    build_request,
    wait_for,
)
from jobgate.render import Output, age, command_text, list_or_json, print_json, stamp
from jobgate.workdir import send_working_dir

app = typer.Typer(
    help="Job templates: a session with parameters, run by name.", no_args_is_help=True
)


@app.command("create")
def templates_create(
    name: NameArg,
    command: CommandArg = None,
    image: ImageOpt = None,
    cpu: CpuOpt = None,
    mem: MemOpt = None,
    resource: ResourceOpt = [],  # noqa: B006
    env: EnvOpt = [],  # noqa: B006
    secret: SecretOpt = [],  # noqa: B006
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
        secrets=secret,
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


@app.command("ls")
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


@app.command("show")
def templates_show(name: NameArg, output: OutputOpt = Output.table) -> None:
    """A template: its parameters and the session it submits."""
    t = client().get(f"/v1/templates/{segment(name)}")
    if output == Output.json:
        print_json(t)
        return
    s = t["session"]
    print_fields(
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


@app.command("rm")
def templates_rm(name: NameArg, output: OutputOpt = Output.table) -> None:
    """Delete a template (and its triggers); the sessions it started stay."""
    client().delete(f"/v1/templates/{segment(name)}")
    print_removed(name, output, "template")


@app.command("run")
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
