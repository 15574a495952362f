"""``jobgate nodes ls|show|drain|cordon|uncordon|revoke``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jobgate.client import segment
from jobgate.commands.common import OutputOpt, client
from jobgate.render import (
    Output,
    age,
    list_or_json,
    out,
    print_json,
    slots_text,
    stamp,
    value_text,
)
from plugins.resources import format_size

app = typer.Typer(help="Nodes: capacity, allocation, devices, liveness.", no_args_is_help=True)


NodeArg = Annotated[str, typer.Argument(help="The node's id.")]


def _state(n: dict[str, Any]) -> str:
    if n["status"] == "disconnected":  # its worker restarts; its sessions run on
        return "[yellow]disconnected[/]"
    if n["status"] != "ready":
        return f"[red]{n['status']}[/]"
    return n["admin_state"] if n["admin_state"] != "ready" else "[green]ready[/]"


@app.command("ls")
def list_nodes(output: OutputOpt = Output.table) -> None:
    """Every node with what it has, what is free and whether it enforces limits."""
    list_or_json(
        client().get("/v1/nodes")["items"],
        output,
        ["NODE", "STATUS", "RUNTIME", "FREE", "CAPACITY", "KERNELS", "SEEN"],
        lambda n: [
            n["id"],
            _state(n),
            n["runtime"],
            slots_text(n["free"]),
            slots_text(n["capacity"]),
            str(n["running_kernels"]),
            age(n["last_seen_at"]),
        ],
    )


@app.command("show")
def show(
    node: NodeArg,
    output: OutputOpt = Output.table,
) -> None:
    """One node, with its devices and their live stats."""
    n = client().get(f"/v1/nodes/{segment(node)}")
    if output == Output.json:
        print_json(n)
        return
    for key in (
        "id",
        "hostname",
        "address",
        "status",
        "admin_state",
        "runtime",
        "resource_group",
        "arch",
        "cgroup",
        "limits_enforced",
        "bind_mounts",
        "fraction_enforcement",
        "egress",
        "runtime_detail",
    ):
        out.print(f"[bold]{key:<21}[/] {value_text(n.get(key))}")
    out.print(
        f"[bold]{'labels':<21}[/] {' '.join(f'{k}={v}' for k, v in n['labels'].items()) or '-'}"
    )
    out.print(f"[bold]{'last seen':<21}[/] {stamp(n['last_seen_at'])} ({age(n['last_seen_at'])})")
    out.print(f"[bold]{'registered':<21}[/] {stamp(n['registered_at'])}")
    out.print(f"[bold]{'capacity':<21}[/] {slots_text(n['capacity'])}")
    out.print(f"[bold]{'occupied':<21}[/] {slots_text(n['occupied'])}")
    out.print(f"[bold]{'free':<21}[/] {slots_text(n['free'])}")
    stats = {s["device_id"]: s for s in n.get("stats", [])}
    for d in n["devices"]:
        st = stats.get(d["id"], {})
        live = (
            f" | util {st['utilization']:.0f}% mem {format_size(int(st['memory_used']))}"
            if st
            else ""
        )
        out.print(
            f"  device {d['id']}: {d['model']} {format_size(int(d['memory']))} "
            f"numa {value_text(d.get('numa_node'))} {d['slot']}={d['capacity']} {d['health']}{live}"
        )


def _set_state(node: str, action: str, output: Output) -> None:
    n = client().post(f"/v1/nodes/{segment(node)}/{action}")
    if output == Output.json:
        print_json(n)
    else:
        out.print(f"{n['id']}: {n['admin_state']}")


@app.command("drain")
def drain(node: NodeArg, output: OutputOpt = Output.table) -> None:
    """Take nothing new; running sessions finish."""
    _set_state(node, "drain", output)


@app.command("cordon")
def cordon(node: NodeArg, output: OutputOpt = Output.table) -> None:
    """Take nothing new, for now."""
    _set_state(node, "cordon", output)


@app.command("uncordon")
def uncordon(node: NodeArg, output: OutputOpt = Output.table) -> None:
    """Take sessions again."""
    _set_state(node, "uncordon", output)


@app.command("revoke")
def revoke(node: NodeArg, output: OutputOpt = Output.table) -> None:
    """Refuse the node's own credential from now on (at once); it may join again with
    the join token once its credential file is removed. Admins only."""
    client().post(f"/v1/nodes/{segment(node)}/revoke")
    if output == Output.json:
        print_json({"node": node, "revoked": True})
        return
    out.print(
        f"{node}: credential revoked (to let it back: remove "
        f"DATA_DIR/worker/{node}/node-credential on it and restart its worker)"
    )
