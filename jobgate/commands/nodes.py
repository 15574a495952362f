"""``jobgate nodes ls|show``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jobgate.commands.common import client
from jobgate.render import Output, age, out, print_json, table
from plugins.resources import format_size

app = typer.Typer(help="Nodes: capacity, allocation, devices, liveness.", no_args_is_help=True)


def _slots(values: dict[str, str]) -> str:
    parts = []
    for k, v in values.items():
        parts.append(f"{k}={format_size(int(float(v)))}" if k == "mem" else f"{k}={v}")
    return " ".join(parts) or "-"


def _state(n: dict[str, Any]) -> str:
    if n["status"] != "ready":
        return f"[red]{n['status']}[/]"
    return n["admin_state"] if n["admin_state"] != "ready" else "[green]ready[/]"


@app.command("ls")
def list_nodes(output: Annotated[Output, typer.Option("--output", "-o")] = Output.table) -> None:
    """Every node with what it has, what is free and whether it enforces limits."""
    nodes = client().get("/v1/nodes")["items"]
    if output == Output.json:
        print_json(nodes)
        return
    rows = [
        [
            n["id"],
            _state(n),
            n["runtime"],
            n["resource_group"],
            _slots(n["capacity"]),
            _slots(n["free"]),
            "yes" if n["limits_enforced"] else "no",
            str(n["running_kernels"]),
            age(n["last_seen_at"]),
        ]
        for n in nodes
    ]
    table(
        ["NODE", "STATUS", "RUNTIME", "GROUP", "CAPACITY", "FREE", "LIMITS", "KERNELS", "SEEN"],
        rows,
    )


@app.command("show")
def show(
    node: Annotated[str, typer.Argument()],
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
) -> None:
    """One node, with its devices and their live stats."""
    n = client().get(f"/v1/nodes/{node}")
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
        "runtime_detail",
    ):
        out.print(f"[bold]{key:<21}[/] {n[key]}")
    out.print(f"[bold]{'capacity':<21}[/] {_slots(n['capacity'])}")
    out.print(f"[bold]{'occupied':<21}[/] {_slots(n['occupied'])}")
    out.print(f"[bold]{'free':<21}[/] {_slots(n['free'])}")
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
            f"numa {d.get('numa_node')} {d['slot']}={d['capacity']} {d['health']}{live}"
        )


def _set_state(node: str, action: str, output: Output) -> None:
    n = client().post(f"/v1/nodes/{node}/{action}")
    if output == Output.json:
        print_json(n)
    else:
        out.print(f"{n['id']}: {n['admin_state']}")


@app.command("drain")
def drain(
    node: str, output: Annotated[Output, typer.Option("--output", "-o")] = Output.table
) -> None:
    """Take nothing new; running sessions finish."""
    _set_state(node, "drain", output)


@app.command("cordon")
def cordon(
    node: str, output: Annotated[Output, typer.Option("--output", "-o")] = Output.table
) -> None:
    """Take nothing new, for now."""
    _set_state(node, "cordon", output)


@app.command("uncordon")
def uncordon(
    node: str, output: Annotated[Output, typer.Option("--output", "-o")] = Output.table
) -> None:
    """Take sessions again."""
    _set_state(node, "uncordon", output)
