"""``jobgate sessions ls|show|logs|rm|create|commit``."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from typing import Annotated, Any

import typer

from gateway.domain.status import SessionStatus
from jobgate.client import ApiError, segment
from jobgate.commands.common import OutputOpt, client
from jobgate.commands.run import (
    CommandArg,
    CpuOpt,
    EnvOpt,
    ImageOpt,
    MemOpt,
    NameOpt,
    ResourceOpt,
    SecretOpt,
    build_request,
    follow_session,
)
from jobgate.render import (
    Output,
    age,
    between,
    command_text,
    duration,
    list_or_json,
    out,
    print_json,
    short_id,
    slots_text,
    stamp,
    status_text,
)
from plugins.scheduling.reasons import short_reason

app = typer.Typer(help="Sessions: list, inspect, follow, stop.", no_args_is_help=True)

SessionArg = Annotated[str, typer.Argument(help="Session id, unique id prefix, or name.")]


class SessionType(StrEnum):
    batch = "batch"
    interactive = "interactive"
    inference = "inference"  # an endpoint's replicas (docs/endpoints.md)


def _reason(s: dict[str, Any], short: bool = False) -> str:
    if s["status"] == "PENDING" and s.get("pending_reason"):
        reason = str(s["pending_reason"])
        return short_reason(reason) if short else reason
    return str(s["status_reason"])


@app.command("ls")
def list_sessions(
    status: Annotated[
        list[SessionStatus],
        typer.Option("--status", "-s", case_sensitive=False, help="Only these; repeatable."),
    ] = [],  # noqa: B006
    type_: Annotated[
        SessionType | None, typer.Option("--type", help="Only sessions of this type.")
    ] = None,
    all_users: Annotated[
        bool, typer.Option("--all", help="Every user's sessions (admins only).")
    ] = False,
    array: Annotated[
        str | None,
        typer.Option(help="Only the sessions of this array (its id, from run --count)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """Sessions, newest first."""
    params: dict[str, Any] = {"limit": limit, "all": all_users}
    if array:
        params["array"] = array
    if status:
        params["status"] = [str(s) for s in status]
    if type_:
        params["type"] = str(type_)
    list_or_json(
        client().get("/v1/sessions", params=params)["items"],
        output,
        ["ID", "NAME", "STATUS", "REASON", "NODE", "CLUSTER", "EXIT", "CREATED"],
        lambda s: [
            short_id(s["id"]),
            s["name"] or "-",
            status_text(s["status"]),
            _reason(s, short=True) or "-",
            s["node"] or "-",
            cluster_text(s),
            "-" if s["exit_code"] is None else str(s["exit_code"]),
            age(s["created_at"]),
        ],
    )


def cluster_text(s: dict[str, Any]) -> str:
    """``single-node \N{MULTIPLICATION SIGN}3`` for a cluster session, ``-`` for one."""
    if s.get("cluster_size", 1) < 2:
        return "-"
    times = "\N{MULTIPLICATION SIGN}"
    return f"{s.get('cluster_mode') or 'cluster'} {times}{s['cluster_size']}"


@app.command("show")
def show(session: SessionArg, output: OutputOpt = Output.table) -> None:
    """Status, reason, exit code, node, resources, timestamps and the status history."""
    api = client()
    s = api.get(f"/v1/sessions/{segment(api.resolve_session(session))}")
    if output == Output.json:
        print_json(s)
        return
    ran = between(s["started_at"], s["ended_at"])
    fields: list[tuple[str, object]] = [
        ("id", s["id"]),
        ("name", s["name"] or "-"),
        ("type", s["type"]),
        ("owner", s["owner"]),
        ("status", status_text(s["status"])),
        ("reason", _reason(s) or "-"),
        ("exit code", "-" if s["exit_code"] is None else s["exit_code"]),
        ("image", s["image"] or "-"),
        ("command", command_text(s["command"])),
        ("working dir", s.get("working_dir") or "-"),
        ("resources", slots_text(s["resources"])),
        ("group", s["resource_group"]),
        ("priority", s["priority"]),
        ("cluster", cluster_text(s)),
        ("node", s["node"] or "-"),
    ]
    if s.get("array_id"):
        fields.append(
            ("array", f"{s['array_id']} [{s['array_index']} of 0..{s['array_size'] - 1}]")
        )
    fields += [
        ("created", stamp(s["created_at"])),
        ("started", stamp(s["started_at"])),
        ("ended", stamp(s["ended_at"])),
        ("ran", duration(ran)),
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
        fields.append((k.get("hostname") or f"kernel {k['index']}", detail))
    width = max(len(f) for f, _ in fields)
    for key, value in fields:
        out.print(f"[bold]{key:<{width}}[/]  {value}")
    out.print("[bold]history[/]")
    for h in s.get("history") or []:
        before = h["from_status"] or "-"
        out.print(
            f"  {stamp(h['at'])}  {before:>11} → {status_text(h['to_status'])}  {h['reason'] or ''}"
        )


@app.command("logs")
def logs(
    session: SessionArg,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Stream until the session ends; Ctrl-C stops following, never the session.",
        ),
    ] = False,
    kernel: Annotated[
        str | None,
        typer.Option(
            "--kernel",
            help="A cluster session's container: main1 (the default), sub1, ... or all.",
        ),
    ] = None,
    attempt: Annotated[
        int | None,
        typer.Option(
            "--attempt",
            min=1,
            help="The output of this attempt (a session runs again when its node is lost); "
            "default: the latest.",
        ),
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Output of a session (its stdout to stdout, its stderr to stderr)."""
    api = client()
    session_id = api.resolve_session(session)
    wanted = _kernel_ids(api.get(f"/v1/sessions/{segment(session_id)}"), kernel)
    which = {} if attempt is None else {"attempt": attempt}
    if follow:
        code, _ = follow_session(
            api, session_id, cancel_on_interrupt=False, quiet=True, kernels=wanted, params=which
        )
        if code == 130:
            raise typer.Exit(code)
        return
    path = f"/v1/sessions/{segment(session_id)}/logs"
    entries = api.get(path, params={"format": "json", **which})["items"]
    if wanted is not None:
        entries = [e for e in entries if e.get("kernel") in wanted]
    if output == Output.json:
        print_json(entries)
        return
    for e in entries:
        stream = sys.stdout if e["stream"] == "stdout" else sys.stderr
        stream.write(e["data"])
    sys.stdout.flush()


def _kernel_ids(s: dict[str, Any], name: str | None) -> set[str] | None:
    """The kernel ids whose output to show (None: every kernel's)."""
    kernels = s.get("kernels") or []
    if name == "all" or (name is None and len(kernels) < 2):
        return None
    name = name or "main1"
    found = {k["id"] for k in kernels if k.get("hostname") == name or k["id"] == name}
    if not found:
        names = ", ".join(k.get("hostname", "") for k in kernels)
        raise typer.BadParameter(f"no container {name} in this session ({names})")
    return found


@app.command("rm")
def remove(
    sessions: Annotated[
        list[str], typer.Argument(help="Session ids, unique id prefixes or names.")
    ],
    force: Annotated[bool, typer.Option("--force", help="Kill at once, no grace period.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Cancel pending sessions or stop running ones."""
    api = client()
    results = []
    for ref in sessions:
        s = api.delete(f"/v1/sessions/{segment(api.resolve_session(ref))}", params={"force": force})
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
    command: CommandArg = None,
    image: ImageOpt = None,
    cpu: CpuOpt = None,
    mem: MemOpt = None,
    resource: ResourceOpt = [],  # noqa: B006
    env: EnvOpt = [],  # noqa: B006
    name: NameOpt = None,
    interactive: Annotated[
        bool, typer.Option(help="An interactive session (runs until stopped).")
    ] = False,
    secret: SecretOpt = [],  # noqa: B006
    output: OutputOpt = Output.table,
) -> None:
    """Create a session without following it (like `run --detach`)."""
    body = build_request(
        command or [],
        image=image,
        cpu=cpu,
        mem=mem,
        resources=resource,
        env=env,
        name=name,
        interactive=interactive,
        secrets=secret,
    )
    s = client().post("/v1/sessions", json=body)
    if output == Output.json:
        print_json(s)
    else:
        print(s["id"])


@app.command("commit")
def commit(
    session: SessionArg,
    image: Annotated[
        str, typer.Option("--image", help="The name:tag of the new private image, e.g. me/env:1.")
    ],
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait until the image is pushed.")
    ] = True,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.", min=1)] = 900,
    output: OutputOpt = Output.table,
) -> None:
    """Turn a running session's container into a private image of its owner.

    Folder mounts and /home/work are not part of it. By default it waits until the image
    is in the cluster registry (ready), and fails if the commit failed."""
    api = client()
    found = api.post(
        f"/v1/sessions/{segment(api.resolve_session(session))}/commit", json={"image": image}
    )
    deadline = time.monotonic() + timeout
    while wait and found["state"] == "committing":
        if time.monotonic() > deadline:
            raise ApiError(0, "Failed", f"{found['name']} is still committing after {timeout:g} s")
        time.sleep(0.5)
        images = {i["name"]: i for i in api.get("/v1/images")}
        found = images.get(found["name"], {**found, "state": "failed", "detail": "it vanished"})
    if found["state"] == "failed":
        raise ApiError(0, "Failed", f"commit to {found['name']} failed: {found['detail']}")
    if output == Output.json:
        print_json(found)
    else:
        print(found["name"])
