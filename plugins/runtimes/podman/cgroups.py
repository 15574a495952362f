"""Can this node enforce CPU, memory and pids limits, and how.

Rootless Podman enforces limits natively on cgroup v2 when the controllers are
delegated to the user's cgroup. On cgroup v1 (and hybrid hosts) it ignores them; there
``scripts/setup-podman.sh`` creates ``/sys/fs/cgroup/{memory,cpu,pids,cpuset}/PARENT``
owned by the Podman user and starts the API service inside. runc then creates each
container's cgroup below that parent (owned by the user), and the runtime writes the
limits into it between ``init`` and ``start``::

    /sys/fs/cgroup/memory/jobgate/            <- podman system service (delegated, no limit)
    /sys/fs/cgroup/memory/jobgate/<ctr id>/   <- runc init; we write memory.limit_in_bytes

Everything here reads files under a root given by the caller, so tests use a fake tree.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Final, Literal

from plugins.resources import CPU, MEM, ResourceSlots, format_size

__all__ = [
    "CPU_PERIOD_US",
    "MIN_MEMORY",
    "CgroupMode",
    "CgroupSupport",
    "Limits",
    "apply_v1",
    "compute_limits",
    "cpuset_text",
    "detect",
    "oom_kill_file",
    "oom_kills",
    "parse_proc_cgroup",
    "v1_writes",
]

CgroupMode = Literal["v2", "v1-delegated", "v1-none"]
REQUIRED: Final = ("memory", "cpu", "pids")
CPU_PERIOD_US: Final = 100_000
MIN_CPU_QUOTA_US: Final = 1_000  # the kernel refuses less than 1 ms per period
MIN_MEMORY: Final = 6 * 1024 * 1024  # podman's own floor; less cannot even start runc


class LimitError(ValueError):
    """A limit no container could run under (shown to the user as InvalidSpec)."""


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """What ``info()`` reports: the mode, whether limits hold, and why in words."""

    mode: CgroupMode
    enforced: bool
    detail: str
    cpuset: bool = False  # v1: cpu pinning possible too


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits of one container, in the units the kernel takes."""

    memory: int | None = None  # bytes
    cpu_quota: int | None = None  # microseconds per CPU_PERIOD_US
    pids: int | None = None
    cpuset: str | None = None  # "0-3,6"

    @property
    def empty(self) -> bool:
        return self == Limits()

    def podman_resource_limits(self) -> dict[str, object]:
        """The libpod ``resource_limits`` for native enforcement (cgroup v2)."""
        body: dict[str, object] = {}
        if self.memory is not None:
            body["memory"] = {"limit": self.memory, "swap": self.memory}  # no swap on top
        cpu: dict[str, object] = {}
        if self.cpu_quota is not None:
            cpu.update(quota=self.cpu_quota, period=CPU_PERIOD_US)
        if self.cpuset is not None:
            cpu["cpus"] = self.cpuset
        if cpu:
            body["cpu"] = cpu
        if self.pids is not None:
            body["pids"] = {"limit": self.pids}
        return body


def cpuset_text(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the kernel's list format)."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def compute_limits(
    resources: ResourceSlots, pids_limit: int | None, cpuset: list[int] | None
) -> Limits:
    """Limits from a kernel's slots: ``cpu`` cores -> CFS quota, ``mem`` bytes, pids, pinning."""
    memory: int | None = None
    if resources[MEM] > 0:
        memory = int(resources[MEM])
        if memory < MIN_MEMORY:
            raise LimitError(
                f"memory limit {format_size(memory)} is below the minimum {format_size(MIN_MEMORY)}"
            )
    quota: int | None = None
    if resources[CPU] > 0:
        quota = max(MIN_CPU_QUOTA_US, math.ceil(resources[CPU] * Decimal(CPU_PERIOD_US)))
    if pids_limit is not None and pids_limit < 1:
        raise LimitError(f"pids limit must be at least 1 (got {pids_limit})")
    if cpuset is not None and (not cpuset or min(cpuset) < 0):
        raise LimitError(f"not a cpu set: {cpuset}")
    return Limits(memory, quota, pids_limit, cpuset_text(cpuset) if cpuset else None)


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/PID/cgroup`` -> ``{controller: path}``; the v2 line is under ``""``.

    ``4:memory:/jobgate/abc`` -> ``{"memory": "/jobgate/abc"}``; co-mounted controllers
    (``3:cpu,cpuacct:/x``) give one entry each; named hierarchies (``name=systemd``) stay.
    """
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def oom_kill_file(root: Path, proc_cgroup: str) -> Path | None:
    """The file that counts OOM kills in the memory cgroup of a process (its
    ``/proc/PID/cgroup`` text): v1 ``memory.oom_control``, v2 ``memory.events``."""
    paths = parse_proc_cgroup(proc_cgroup)
    if "memory" in paths:
        directory = _controller_dir(root, "memory") / paths["memory"].lstrip("/")
        return directory / "memory.oom_control"
    if "" in paths:
        return root / paths[""].lstrip("/") / "memory.events"
    return None


def oom_kills(counter: Path) -> int | None:
    """The ``oom_kill`` count in *counter* (None: the cgroup is gone, or no such line)."""
    try:
        text = counter.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def _below(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent + "/")


def _controller_dir(root: Path, controller: str) -> Path:
    """The mount of a v1 controller: ``root/memory``, or ``root/cpu,cpuacct`` if co-mounted."""
    plain = root / controller
    if plain.is_dir() or not root.is_dir():
        return plain
    joined = (p for p in root.iterdir() if p.is_dir() and controller in p.name.split(","))
    return next(joined, plain)


def detect(root: Path, service_cgroup: str | None, parent: str) -> CgroupSupport:
    """Decide the mode from the cgroup tree at *root* and the API service's ``/proc/PID/cgroup``.

    *service_cgroup* is None when the service's pid is unknown (a TCP socket, no access).
    """
    if (root / "cgroup.controllers").is_file():
        return _detect_v2(root, service_cgroup)
    if service_cgroup is None:
        return CgroupSupport(
            "v1-none", False, "cgroup v1: cannot tell where the Podman service runs"
        )
    paths = parse_proc_cgroup(service_cgroup)
    top = "/" + parent
    for controller in REQUIRED:
        where = paths.get(controller)
        if where is None or not _below(where, top):
            return CgroupSupport(
                "v1-none",
                False,
                f"cgroup v1: the Podman service runs in {controller}:{where or '?'}, not below "
                f"{top}, so limits are ignored (run scripts/setup-podman.sh)",
            )
        directory = _controller_dir(root, controller) / where.lstrip("/")
        if not os.access(directory, os.W_OK):
            return CgroupSupport(
                "v1-none", False, f"cgroup v1: {directory} is not writable by the worker"
            )
    cpuset = _below(paths.get("cpuset", ""), top)
    return CgroupSupport(
        "v1-delegated",
        True,
        f"cgroup v1: limits written into each container's cgroup below {top} "
        f"(memory, cpu, pids{', cpuset' if cpuset else ''})",
        cpuset=cpuset,
    )


def _detect_v2(root: Path, service_cgroup: str | None) -> CgroupSupport:
    where = parse_proc_cgroup(service_cgroup or "").get("", "/")
    controllers_file = root / where.lstrip("/") / "cgroup.controllers"
    try:
        available = set(controllers_file.read_text().split())
    except OSError:
        available = set()
    missing = [c for c in REQUIRED if c not in available]
    if missing:
        return CgroupSupport(
            "v2",
            False,
            f"cgroup v2: {', '.join(missing)} not delegated to {where} (limits are ignored)",
        )
    return CgroupSupport("v2", True, f"cgroup v2: limits enforced by Podman in {where}", True)


def v1_writes(limits: Limits) -> list[tuple[str, str, str]]:
    """``(controller, file, value)`` in the order the kernel accepts them."""
    writes: list[tuple[str, str, str]] = []
    if limits.memory is not None:
        writes.append(("memory", "memory.limit_in_bytes", str(limits.memory)))
        # memsw (memory + swap) must not be below the memory limit; equal means no swap.
        writes.append(("memory", "memory.memsw.limit_in_bytes", str(limits.memory)))
    if limits.cpu_quota is not None:
        writes.append(("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US)))
        writes.append(("cpu", "cpu.cfs_quota_us", str(limits.cpu_quota)))
    if limits.pids is not None:
        writes.append(("pids", "pids.max", str(limits.pids)))
    if limits.cpuset is not None:
        writes.append(("cpuset", "cpuset.cpus", limits.cpuset))
    return writes


def apply_v1(root: Path, container_cgroup: str, parent: str, limits: Limits) -> None:
    """Write *limits* into the cgroups a just-initialised container process lives in.

    Refuses (OSError) a container that is not strictly below the delegated parent: writing
    there would limit the API service or the whole host instead.
    """
    paths = parse_proc_cgroup(container_cgroup)
    top = "/" + parent + "/"
    for controller, name, value in v1_writes(limits):
        where = paths.get(controller, "")
        if not where.startswith(top):
            raise OSError(f"container is in {controller}:{where or '?'}, not below {top}")
        target = _controller_dir(root, controller) / where.lstrip("/") / name
        if name == "memory.memsw.limit_in_bytes" and not target.exists():
            continue  # no swap accounting on this kernel: nothing to close
        target.write_text(value)
