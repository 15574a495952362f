"""Small builders for scheduler tests: nodes, GPUs, sessions, snapshots, outcomes.

Times are seconds after ``NOW - 1h`` so that "older" reads as a smaller number.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.types import (
    DeviceState,
    Limits,
    NodeState,
    Plan,
    SessionRequest,
    Snapshot,
    Usage,
)

NOW = datetime(2026, 11, 20, 13, 48, tzinfo=UTC)
GiB = 1024**3


def res(raw: Mapping[str, object] | None = None, **named: object) -> ResourceSlots:
    """``res(cpu=2, mem="4g")`` or ``res({"cuda.shares": "0.5"})``."""
    merged: dict[str, Any] = {**(raw or {}), **named}
    return ResourceSlots.parse(merged)


def gpus(
    prefix: str,
    count: int,
    *,
    slot: str = "cuda.shares",
    cap: str = "1",
    used: Iterable[str] = (),
    numa: Iterable[int | None] | None = None,
    quantum: str | None = None,
    unhealthy: Iterable[int] = (),
) -> list[DeviceState]:
    used_list = list(used)
    numa_list = list(numa) if numa is not None else [None] * count
    sick = set(unhealthy)
    return [
        DeviceState(
            id=f"{prefix}{k}",
            slot=slot,
            capacity=Decimal(cap),
            used=Decimal(used_list[k]) if k < len(used_list) else Decimal(0),
            numa_node=numa_list[k],
            healthy=k not in sick,
            quantum=Decimal(quantum) if quantum is not None else None,
        )
        for k in range(count)
    ]


def node(
    node_id: str,
    cpu: object = 8,
    mem: object = "32g",
    *,
    used: Mapping[str, object] | None = None,
    devices: list[DeviceState] | None = None,
    **fields: Any,
) -> NodeState:
    """A node; device slots are added to its capacity (and usage) from *devices*."""
    capacity: dict[str, Any] = {"cpu": cpu, "mem": mem}
    occupied: dict[str, Any] = dict(used or {})
    for d in devices or []:
        capacity[d.slot] = Decimal(str(capacity.get(d.slot, 0))) + d.capacity
        if d.used:
            occupied[d.slot] = Decimal(str(occupied.get(d.slot, 0))) + d.used
    return NodeState(
        id=node_id,
        capacity=res(capacity),
        used=res(occupied),
        devices=list(devices or []),
        **fields,
    )


def session(
    session_id: str,
    cpu: object = 1,
    mem: object = "1g",
    *,
    at: int = 0,
    slots: Mapping[str, object] | None = None,
    owner: str = "alice",
    **fields: Any,
) -> SessionRequest:
    wanted: dict[str, Any] = {"cpu": cpu, "mem": mem, **(slots or {})}
    wanted = {k: v for k, v in wanted.items() if v not in (0, "0", None)}
    return SessionRequest(
        id=session_id,
        owner=owner,
        requested=res(wanted),
        created_at=NOW - timedelta(hours=1) + timedelta(seconds=at),
        **fields,
    )


def snapshot(
    nodes: list[NodeState],
    pending: list[SessionRequest],
    config: Mapping[str, Any] | SchedulerConfig | None = None,
    **fields: Any,
) -> Snapshot:
    if not isinstance(config, SchedulerConfig):
        config = SchedulerConfig.model_validate(config or {})
    return Snapshot(now=NOW, nodes=nodes, pending=pending, config=config, **fields)


def usage(sessions: int = 0, **slots: object) -> Usage:
    return Usage(sessions=sessions, slots=res(dict(slots)))


def limits(max_sessions: int | None = None, **slots: object) -> Limits:
    return Limits(max_sessions=max_sessions, max_slots=res(dict(slots)) if slots else None)


def where(result: Plan) -> dict[str, list[str]]:
    """session id -> node ids of its containers."""
    return {p.session_id: [k.node_id for k in p.kernels] for p in result.placements}


def order_placed(result: Plan) -> list[str]:
    return [p.session_id for p in result.placements]


def install_plugin_package(
    root: Path, package: str, source: str, entry_points: Mapping[str, str]
) -> None:
    """Write an importable package plus a ``*.dist-info`` publishing *entry_points*.

    This is what ``pip install`` leaves behind, so ``importlib.metadata`` finds the
    plugins exactly as it would find a third-party package's.
    """
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(source))
    info = root / f"{package}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[jobgate.schedulers.v1]\n{lines}\n")


def bench_scheduler() -> ModuleType:
    """``benchmarks/scheduler.py``, the simulated cluster the benchmark plans for, as a
    module (loaded once: its dataclasses look their module up)."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "scheduler.py"
    spec = importlib.util.spec_from_file_location("_bench_scheduler", path)
    assert spec is not None
    assert spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module
