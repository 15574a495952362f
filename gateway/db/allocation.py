"""Allocation arithmetic for node rows: what the applier takes and lifecycle.release frees.

A node row carries the sums of its live allocations: ``occupied`` (slot -> amount),
``device_used`` (device id -> amount of that device's slot) and ``used_cpus`` (pinned
cores). A :class:`NodeLedger` reads them once, answers "does this fit?" and applies any
number of takes and give-backs in memory, and writes the new sums back. Every caller
holds the node's row lock meanwhile, so the sums stay exact however many schedulers and
gateways run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gateway.db.models import Kernel, Node
from plugins.resources import ResourceSlots
from plugins.scheduling.fit import allocation_misfit, device_room

__all__ = ["NodeLedger", "kernel_devices"]

_ZERO = Decimal(0)
DeviceAmounts = Mapping[str, Mapping[str, Decimal]]  # slot -> device id -> amount


@dataclass
class NodeLedger:
    node_id: str
    capacity: ResourceSlots
    occupied: ResourceSlots
    device_capacity: dict[str, Decimal]  # healthy devices only
    device_used: dict[str, Decimal]
    used_cpus: set[int]

    @classmethod
    def from_columns(
        cls,
        node_id: str,
        capacity: dict[str, Any],
        occupied: dict[str, Any],
        devices: dict[str, Any],
        device_used: dict[str, Any],
        used_cpus: dict[str, Any],
    ) -> NodeLedger:
        return cls(
            node_id=node_id,
            capacity=ResourceSlots.from_json(capacity),
            occupied=ResourceSlots.from_json(occupied),
            device_capacity={
                d["id"]: Decimal(d["capacity"])
                for d in devices.get("items", [])
                if d.get("health", "healthy") == "healthy"
            },
            device_used={k: Decimal(v) for k, v in device_used.items()},
            used_cpus=set(used_cpus.get("cpus", [])),
        )

    @classmethod
    def of(cls, node: Node) -> NodeLedger:
        return cls.from_columns(
            node.id, node.capacity, node.occupied, node.devices, node.device_used, node.used_cpus
        )

    def why_not(
        self, slots: ResourceSlots, devices: DeviceAmounts, cpus: list[int] | None
    ) -> str | None:
        """None when the allocation fits now; else why not (for the pending reason).

        The test is the planner's own (:func:`plugins.scheduling.fit.allocation_misfit`).
        """
        room = {
            device_id: device_room(capacity, self.device_used.get(device_id, _ZERO), True)
            for device_id, capacity in self.device_capacity.items()
        }
        taken = [(d, amount) for per_device in devices.values() for d, amount in per_device.items()]
        misfit = allocation_misfit(
            self.capacity - self.occupied,
            list(slots.items()),
            room,
            taken,
            self.used_cpus,
            cpus,
            _ZERO,
        )
        if misfit is None:
            return None
        if misfit.what == "slot":
            slot = str(misfit.key)
            return f"{self.node_id} no longer has {slots[slot]} {slot} free (has {misfit.free})"
        if misfit.what == "device":
            return f"device {misfit.key} on {self.node_id} no longer has {misfit.asked} free"
        return f"cores {misfit.key} on {self.node_id} are taken"

    def take(self, slots: ResourceSlots, devices: DeviceAmounts, cpus: list[int] | None) -> None:
        self.occupied = self.occupied + slots
        for per_device in devices.values():
            for device_id, amount in per_device.items():
                self.device_used[device_id] = self.device_used.get(device_id, _ZERO) + amount
        self.used_cpus.update(cpus or ())

    def give_back(
        self, slots: ResourceSlots, devices: DeviceAmounts, cpus: list[int] | None
    ) -> None:
        left = self.occupied - slots
        self.occupied = ResourceSlots({k: v for k, v in left.items() if v > 0})
        for per_device in devices.values():
            for device_id, amount in per_device.items():
                rest = self.device_used.get(device_id, _ZERO) - amount
                if rest > 0:
                    self.device_used[device_id] = rest
                else:
                    self.device_used.pop(device_id, None)
        self.used_cpus.difference_update(cpus or ())

    def columns(self) -> dict[str, Any]:
        """The node row's new sums."""
        return {
            "occupied": self.occupied.to_json(),
            "device_used": {k: str(v) for k, v in sorted(self.device_used.items())},
            "used_cpus": {"cpus": sorted(self.used_cpus)} if self.used_cpus else {},
        }


def kernel_devices(kernel: Kernel) -> dict[str, dict[str, Decimal]]:
    return {s: {d: Decimal(a) for d, a in per.items()} for s, per in kernel.devices.items()}
