"""KernelHandles from what Podman reports (pure): a list row, or an inspect after start.

A handle must be rebuildable from Podman alone, since a worker killed with -9 keeps no
memory: ids come from the labels, the published ports from Podman's port table matched
to the names in ``jobgate.ports``, the memory limit from ``jobgate.mem-limit``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

from plugins.runtimes.base import LABEL_KERNEL, LABEL_SESSION, KernelHandle, ServicePort

from .spec import LABEL_MEM_LIMIT, LABEL_PORTS, parse_ports_label

__all__ = ["NEVER_STARTED", "RUNNING", "handle_from_inspect", "handle_from_row", "host_ports"]

#: States of a container that was created but whose process never ran.
NEVER_STARTED: Final = frozenset({"created", "configured", "initialized"})
RUNNING: Final = frozenset({"running", "paused", "stopping"})
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def _mem_limit(labels: dict[str, str]) -> int | None:
    raw = labels.get(LABEL_MEM_LIMIT, "")
    return int(raw) if raw.isdigit() else None


def _named(ports: list[ServicePort], by_container_port: dict[int, int]) -> dict[str, int]:
    return {
        p.name: by_container_port[p.container_port]
        for p in ports
        if p.container_port in by_container_port
    }


def host_ports(table: dict[str, Any] | None) -> dict[int, int]:
    """Inspect's ``NetworkSettings.Ports`` (``{"8888/tcp": [{"HostPort": "41234"}]}``)."""
    found: dict[int, int] = {}
    for key, bindings in (table or {}).items():
        number = key.split("/", 1)[0]
        for binding in bindings or []:
            host = str(binding.get("HostPort") or "")
            if number.isdigit() and host.isdigit():
                found.setdefault(int(number), int(host))
    return found


def _row_ports(rows: list[dict[str, Any]] | None) -> dict[int, int]:
    """The list endpoint's ``Ports`` (``[{"container_port": 8888, "host_port": 41234}]``)."""
    found: dict[int, int] = {}
    for row in rows or []:
        container, host = row.get("container_port"), row.get("host_port")
        if isinstance(container, int) and isinstance(host, int) and host > 0:
            found.setdefault(container, host)
    return found


def handle_from_row(row: dict[str, Any]) -> KernelHandle | None:
    """A handle from ``GET /containers/json``; None for a container that is not a kernel."""
    labels: dict[str, str] = row.get("Labels") or {}
    kernel, session = labels.get(LABEL_KERNEL), labels.get(LABEL_SESSION)
    if not kernel or not session:
        return None
    state = str(row.get("State") or "")
    ports = parse_ports_label(labels.get(LABEL_PORTS, ""))
    return KernelHandle(
        kernel_id=kernel,
        session_id=session,
        ref=str(row["Id"]),
        ports=_named(ports, _row_ports(row.get("Ports"))),
        started_at=float(row.get("StartedAt") or 0),
        exited=state not in RUNNING,
        started=state not in NEVER_STARTED,
        extra={"mem_limit": _mem_limit(labels), "state": state},
    )


def _epoch(text: str) -> float:
    """Podman's RFC 3339 time with nanoseconds -> epoch seconds (0.0 if unset or unreadable)."""
    match = _RFC3339.match(text)
    if not match or text.startswith("0001-"):
        return 0.0
    whole, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return stamp.timestamp() + float(f"0.{fraction or 0}")


def handle_from_inspect(data: dict[str, Any]) -> KernelHandle:
    """A handle from ``GET /containers/{id}/json`` (start, or adopting a running kernel)."""
    config = data.get("Config") or {}
    labels: dict[str, str] = config.get("Labels") or {}
    state = data.get("State") or {}
    ports = parse_ports_label(labels.get(LABEL_PORTS, ""))
    table = (data.get("NetworkSettings") or {}).get("Ports")
    return KernelHandle(
        kernel_id=labels.get(LABEL_KERNEL, ""),
        session_id=labels.get(LABEL_SESSION, ""),
        ref=str(data["Id"]),
        ports=_named(ports, host_ports(table)),
        started_at=_epoch(str(state.get("StartedAt") or "")),
        exited=str(state.get("Status") or "") not in RUNNING,
        extra={"mem_limit": _mem_limit(labels), "state": str(state.get("Status") or "")},
    )
