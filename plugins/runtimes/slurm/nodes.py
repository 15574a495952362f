"""A Slurm node as a jobgate node: its capacity (cpu, mem) and its GPUs.

Slurm, not this host, says what a node has: ``CPUs`` (``CPUEfctv``), ``RealMemory`` (MB)
and ``Gres=gpu[:type]:N``, offered as ``N`` ``cuda.device`` slots of model ``type``
(:class:`SlurmGpus`, an accelerator plugin built per node, not from entry points). Slurm
picks the GPUs a job gets and sets ``CUDA_VISIBLE_DEVICES`` itself, so the devices here
are jobgate's bookkeeping of how many are in use: their ids are ``<node>-gpu<i>`` and a
reservation adds nothing to the job (the runtime asks ``--gres=gpu[:type]:N``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from decimal import Decimal
from typing import ClassVar

from pydantic import BaseModel

from plugins.accelerators.base import (
    Allocation,
    Device,
    DeviceStats,
    Fingerprint,
    Reservation,
    SlotType,
)
from plugins.accelerators.checks import check_allocation
from plugins.accelerators.sharing import DEVICE_SLOT
from plugins.resources import CPU, MEM, ResourceSlots
from plugins.runtimes.slurm.records import SlurmNode

__all__ = ["SlurmGpus", "attached_nodes", "node_capacity", "node_labels"]

log = logging.getLogger(__name__)


def attached_nodes(nodes: Sequence[SlurmNode], partitions: Sequence[str]) -> list[SlurmNode]:
    """The nodes of *partitions* (all nodes when none is named) that can take sessions;
    the others are left out, each with a warning saying why (a drained or down node is
    not registered: jobgate has no "unavailable" flag a worker could send)."""
    out = []
    for node in nodes:
        if partitions and not set(partitions) & set(node.partitions):
            continue
        why = node.unavailable
        if why is not None:
            log.warning("%s: not attached", why)
            continue
        out.append(node)
    return out


def node_capacity(node: SlurmNode) -> ResourceSlots:
    """cpu and mem as Slurm offers them (the GPUs come from :class:`SlurmGpus`)."""
    return ResourceSlots.parse({CPU: str(node.cpus), MEM: str(node.real_memory_mb * 1024 * 1024)})


def node_labels(node: SlurmNode) -> dict[str, str]:
    """Slurm features as labels (``feature=true``) plus ``slurm.partition``."""
    labels = {feature: "true" for feature in node.features}
    if node.partitions:
        labels["slurm.partition"] = ",".join(node.partitions)
    return labels


class _NoSettings(BaseModel):
    pass


class SlurmGpus:
    """The GPUs Slurm's gres gives one node, as whole ``cuda.device`` slots."""

    name: ClassVar[str] = "slurm-gres"
    Settings: ClassVar[type[BaseModel]] = _NoSettings

    def __init__(self, node: SlurmNode) -> None:
        self.node = node
        self._devices: list[Device] = []
        for gres in node.gres:
            if gres.name != "gpu":
                continue
            for _ in range(gres.count):
                index = len(self._devices)
                self._devices.append(
                    Device(
                        id=f"{node.name}-gpu{index}",
                        kind="cuda",
                        model=gres.type or "gpu",
                        memory=0,  # Slurm does not say
                        processing_units=0,
                        numa_node=None,
                        slot=DEVICE_SLOT,
                        capacity=Decimal(1),
                        attributes={
                            "slurm_gres": f"gpu:{gres.type}" if gres.type else "gpu",
                            "index": str(index),
                        },
                    )
                )

    def fingerprint(self) -> Fingerprint:
        gres = ",".join(
            f"gpu:{g.type}:{g.count}" if g.type else f"gpu:{g.count}"
            for g in self.node.gres
            if g.name == "gpu"
        )
        return Fingerprint(
            self.name,
            list(self._devices),
            [SlotType(DEVICE_SLOT)] if self._devices else [],
            detail=f"Slurm gres {gres or 'none'} on {self.node.name}; Slurm picks the GPUs",
        )

    def reserve(self, allocation: Allocation) -> Reservation:
        devices = {d.id: d for d in self._devices}
        check_allocation(allocation, devices, SlotType(DEVICE_SLOT))
        return Reservation()  # Slurm sets CUDA_VISIBLE_DEVICES for the GPUs it picks

    def stats(self) -> list[DeviceStats]:
        return []
