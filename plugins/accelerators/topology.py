"""Which CPU cores belong to which NUMA node, read from sysfs.

The worker reports this with its devices so the scheduler can pin a session's CPUs
next to its GPU (``Device.numa_node``). Read from
``<root>/sys/devices/system/node/node<N>/cpulist``; a machine (or container) without
that directory is treated as one node, 0, holding every online CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

from plugins.accelerators.sysfs import parse_cpulist, read_text

__all__ = ["numa_cpus"]


def numa_cpus(sysfs_root: Path = Path("/")) -> dict[int, list[int]]:
    """``{numa node: [cpu ids]}``; memory-only nodes appear with no CPUs."""
    nodes: dict[int, list[int]] = {}
    base = sysfs_root / "sys/devices/system/node"
    for node_dir in base.glob("node*"):
        suffix = node_dir.name[4:]
        text = read_text(node_dir / "cpulist")
        if not suffix.isdigit() or text is None:
            continue
        try:
            nodes[int(suffix)] = parse_cpulist(text)
        except ValueError:
            continue
    if not any(nodes.values()):
        return {0: _online_cpus(sysfs_root)}
    return dict(sorted(nodes.items()))


def _online_cpus(sysfs_root: Path) -> list[int]:
    text = read_text(sysfs_root / "sys/devices/system/cpu/online")
    if text:
        try:
            return parse_cpulist(text)
        except ValueError:
            pass
    return list(range(os.cpu_count() or 1))
