"""Devices that vanish stay visible, as unhealthy, until they come back.

A GPU that falls off the bus (NVML's "GPU is lost", an Xid 79) or a render node that
disappears simply stops being enumerated. If the fingerprint just dropped it, the
gateway would see a node with fewer devices and could not tell a failure from a
reconfiguration; sessions holding it would keep their allocation on a device nobody
sees. So each real plugin keeps the last data of every device it has seen and reports a
missing one as ``unhealthy`` with ``lost = "true"``; the scheduler never places on it.
Memory lasts for the life of the worker process: a restart forgets devices removed on
purpose.
"""

from __future__ import annotations

from dataclasses import replace

from plugins.accelerators.base import Device

__all__ = ["LostDevices"]


class LostDevices:
    """Remembers every device seen; :meth:`merge` adds the missing ones back, unhealthy."""

    def __init__(self) -> None:
        self._seen: dict[str, Device] = {}

    def merge(self, current: list[Device]) -> list[Device]:
        present = {d.id for d in current}
        lost = [
            replace(
                device,
                health="unhealthy",
                attributes={
                    **device.attributes,
                    "health_reason": "no longer enumerated",
                    "lost": "true",
                },
            )
            for device_id, device in self._seen.items()
            if device_id not in present
        ]
        for device in current:
            self._seen[device.id] = device
        return [*current, *lost]
