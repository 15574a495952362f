"""Which accelerator plugins this node runs, and what they add to its registration.

``JOBGATE_ACCELERATORS`` names them (``cuda,mock``), or ``auto`` (the default): every
built-in plugin that finds devices here, plus ``mock`` when ``JOBGATE_MOCK_DEVICES`` names
a device file; ``none`` turns them off.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from plugins.accelerators.node import AcceleratorConfigError, NodeAccelerators, NodeDevices
from plugins.accelerators.topology import numa_cpus

__all__ = ["load_accelerators", "registration_fields"]

log = logging.getLogger(__name__)
BUILT_IN = ("cuda", "rocm", "tpu")


def load_accelerators(names: list[str]) -> NodeAccelerators | None:
    if not names or names == ["none"]:
        return None
    if names != ["auto"]:
        return NodeAccelerators.load(names)
    candidates = list(BUILT_IN) + (["mock"] if os.environ.get("JOBGATE_MOCK_DEVICES") else [])
    found = []
    for name in candidates:
        try:
            single = NodeAccelerators.load([name])
            if single.fingerprint().devices:
                found.extend(single.plugins)
        except AcceleratorConfigError as exc:
            log.warning("accelerator plugin %s not used: %s", name, exc)
    return NodeAccelerators(found) if found else None


def registration_fields(
    devices: NodeDevices | None, sysfs_root: Path = Path("/")
) -> dict[str, Any]:
    """The NodeInfo fields for devices, slot types and NUMA layout (read under *sysfs_root*)."""
    layout = {str(node): cpus for node, cpus in numa_cpus(sysfs_root).items() if cpus}
    if devices is None:
        return {"numa_cpus": layout}
    return {
        **devices.node_info_fields(),
        "slot_types": {
            name: {"quantum": str(t.quantum), "unit": t.unit}
            for name, t in devices.slot_types.items()
        },
        "numa_cpus": layout,
    }
