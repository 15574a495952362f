"""What this machine offers: cores, memory, architecture."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from plugins.resources import CPU, MEM, ResourceSlots, parse_size

__all__ = ["host_capacity", "machine_arch"]


def machine_arch() -> str:
    arch = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


def _mem_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def host_capacity(cpu: str | None = None, mem: str | None = None) -> ResourceSlots:
    """cpu and mem of this machine (the cores this process may use), or the overrides."""
    cores = cpu if cpu is not None else str(len(os.sched_getaffinity(0)))
    memory = parse_size(mem) if mem is not None else _mem_total()
    return ResourceSlots.parse({CPU: cores, MEM: str(memory)})
