"""``jobgate sessions ls|show|logs|rm|create``."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from jobgate.commands.common import client
from jobgate.commands.run import build_request, follow_session
from jobgate.render import Output, age, out, print_json, short_id, status_text, table
from plugins.scheduling.reasons import short_reason

app = typer.Typer(help="Sessions: list, inspect, follow, stop.", no_args_is_help=True)


def _reason(s: dict[str, Any], short: bool = False) -> str:
    if s["status"] == "PENDING" and s.get("pending_reason"):
        reason = str(s["pending_reason"])
        return short_reason(reason) if short else reason
    return str(s["status_reason"])


@app.command("ls")
def list_sessions(
    status: Annotated[list[str], typer.Option("--status", "-s", help="filter; repeatable")] = [],  # noqa: B006
    type_: Annotated[str | None, typer.Option("--type", help="batch | interactive")] = None,
    all_users: Annotated[bool, typer.Option("--all", help="admins: every user's")] = False,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
) -> None:
    """Sessions, newest first."""
    params: dict[str, Any] = {"limit": limit, "all": all_users}
    if status:
        params["status"] = [s.upper() for s in status]
    if type_:
        params["type"] = type_
    page = client().get("/v1/sessions", params=params)
    if output == Output.json:
        print_json(page)
        return
    rows = [
        [
            short_id(s["id"]),
            s["name"] or "",
            s["type"],
            status_text(s["status"]),
            _reason(s, short=True),
            s["node"] or "",
            "" if s["exit_code"] is None else str(s["exit_code"]),
            age(s["created_at"]),
        ]
        for s in page["items"]
    ]
    table(["ID", "NAME", "TYPE", "STATUS", "REASON", "NODE", "EXIT", "CREATED"], rows)


@app.command("show")
def show(
    session: Annotated[str, typer.Argument(help="id, id prefix or name")],
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
) -> None:
    """Status, reason, exit code, node, resources, timestamps and the status history."""
    api = client()
    s = api.get(f"/v1/sessions/{api.resolve_session(session)}")
    if output == Output.json:
        print_json(s)
        return
    fields = [
        ("id", s["id"]),
        ("name", s["name"] or "-"),
        ("type", s["type"]),
        ("owner", s["owner"]),
        ("status", status_text(s["status"])),
        ("reason", _reason(s)),
        ("exit code", "-" if s["exit_code"] is None else s["exit_code"]),
        ("image", s["image"] or "-"),
        ("command", " ".join(s["command"]) or "-"),
        ("working dir", s.get("working_dir") or "-"),
        ("resources", ", ".join(f"{k}={v}" for k, v in s["resources"].items())),
        ("group", s["resource_group"]),
        ("priority", s["priority"]),
        ("node", s["node"] or "-"),
        ("created", s["created_at"]),
        ("started", s["started_at"] or "-"),
        ("ended", s["ended_at"] or "-"),
    ]
    for k in s["kernels"]:
        devices = "; ".join(
            f"{slot}: " + ", ".join(f"{d}={a}" for d, a in per.items())
            for slot, per in k["devices"].items()
        )
        detail = f"{k['status']} on {k['node'] or '-'}"
        if devices:
            detail += f" | devices {devices}"
        if k["cpuset"]:
            detail += f" | cpus {','.join(map(str, k['cpuset']))}"
        if k["ports"]:
            detail += " | ports " + ", ".join(f"{n}:{p}" for n, p in k["ports"].items())
        fields.append((f"kernel {k['index']}", detail))
    width = max(len(f) for f, _ in fields)
    for key, value in fields:
        out.print(f"[bold]{key:<{width}}[/]  {value}")
    out.print("[bold]history[/]")
    for h in s.get("history") or []:
        before = h["from_status"] or "-"
        out.print(f"  {h['at']}  {before:>11} → {status_text(h['to_status'])}  {h['reason']}")


@app.command("logs")
def logs(
    session: Annotated[str, typer.Argument(help="id, id prefix or name")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream until it ends")] = False,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
) -> None:
    """Output of a session (stdout to stdout, stderr to stderr)."""
    api = client()
    session_id = api.resolve_session(session)
    if follow:
        follow_session(api, session_id, quiet=True)
        return
    entries = api.get(f"/v1/sessions/{session_id}/logs", params={"format": "json"})["items"]
    if output == Output.json:
        print_json(entries)
        return
    for e in entries:
        stream = sys.stdout if e["stream"] == "stdout" else sys.stderr
        stream.write(e["data"])
    sys.stdout.flush()


@app.command("rm")
def remove(
    sessions: Annotated[list[str], typer.Argument(help="ids, id prefixes or names")],
    force: Annotated[bool, typer.Option("--force", help="kill at once, no grace period")] = False,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
) -> None:
    """Cancel pending sessions or stop running ones."""
    api = client()
    results = []
    for ref in sessions:
        s = api.delete(f"/v1/sessions/{api.resolve_session(ref)}", params={"force": force})
        results.append(s)
    if output == Output.json:
        print_json(results)
        return
    for s in results:
        out.print(f"{s['id']}  {status_text(s['status'])}")


@app.command(
    "create",
    context_settings={"allow_interspersed_args": False},
)
def create(
    command: Annotated[list[str] | None, typer.Argument()] = None,
    image: Annotated[str | None, typer.Option()] = None,
    cpu: Annotated[str | None, typer.Option()] = None,
    mem: Annotated[str | None, typer.Option()] = None,
    resource: Annotated[list[str], typer.Option("--resource", "-r")] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", "-e")] = [],  # noqa: B006
    name: Annotated[str | None, typer.Option()] = None,
    interactive: Annotated[bool, typer.Option()] = False,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
) -> None:
    """Create a session without following it (like ``run --detach``)."""
    body = build_request(
        command or [],
        image=image,
        cpu=cpu,
        mem=mem,
        resources=resource,
        env=env,
        name=name,
        interactive=interactive,
        mounts=[],
        priority=None,
        resource_group=None,
        project=None,
        depends_on=[],
        starts_at=None,
        constraints=[],
    )
    s = client().post("/v1/sessions", json=body)
    if output == Output.json:
        print_json(s)
    else:
        print(s["id"])
