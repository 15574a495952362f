"""The accelerator plugin contract (entry-point group ``jobgate.accelerators.v1``).

Three calls, as Nomad's device plugins have, and no knowledge of any container runtime:

* :meth:`AcceleratorPlugin.fingerprint` - the node's devices and the slots they offer;
* :meth:`AcceleratorPlugin.reserve` - an allocation becomes a :class:`Reservation`
  (environment, device nodes or CDI names, mounts) that the runtime turns into flags;
* :meth:`AcceleratorPlugin.stats` - utilisation and memory per device.

A plugin is built with its validated ``Settings`` (a pydantic model) and must be cheap
to call repeatedly: the worker fingerprints at start and with every heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel

from plugins.common import Mount

__all__ = [
    "AcceleratorPlugin",
    "Allocation",
    "Device",
    "DeviceStats",
    "Enforcement",
    "Fingerprint",
    "Health",
    "Reservation",
    "ReservationError",
    "SlotType",
]

Health = Literal["healthy", "unhealthy"]
#: How a node keeps a fractional allocation inside its fraction: ``mps`` (NVIDIA MPS
#: thread percentage + pinned memory limit), ``preload`` (an LD_PRELOAD limiter in the
#: HAMi-core style), ``none`` (fractions are placed but not enforced).
Enforcement = Literal["mps", "preload", "none"]


@dataclass(frozen=True, slots=True)
class SlotType:
    """A slot a node offers, e.g. ``cuda.shares`` in steps of ``0.1``."""

    name: str
    quantum: Decimal = Decimal(1)
    #: "device": whole devices; "share": fractions of one device that may be split.
    unit: Literal["device", "share"] = "device"


@dataclass(frozen=True, slots=True)
class Device:
    """One physical (or MIG / mock) device as fingerprinted on a node."""

    id: str  # stable identity: GPU UUID, PCI bus id, /dev path
    kind: str  # "cuda" | "rocm" | "tpu"
    model: str
    memory: int  # bytes of device memory
    processing_units: int  # SMs, compute units or cores
    numa_node: int | None
    slot: str  # the slot this device offers, e.g. "cuda.shares"
    capacity: Decimal  # how much of that slot it offers, e.g. 2 shares
    health: Health = "healthy"
    attributes: dict[str, str] = field(default_factory=dict)  # pci_bus_id, mig, minor ...

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "model": self.model,
            "memory": self.memory,
            "processing_units": self.processing_units,
            "numa_node": self.numa_node,
            "slot": self.slot,
            "capacity": str(self.capacity),
            "health": self.health,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Device:
        return cls(
            id=raw["id"],
            kind=raw["kind"],
            model=raw["model"],
            memory=int(raw["memory"]),
            processing_units=int(raw["processing_units"]),
            numa_node=raw.get("numa_node"),
            slot=raw["slot"],
            capacity=Decimal(raw["capacity"]),
            health=raw.get("health", "healthy"),
            attributes=dict(raw.get("attributes", {})),
        )


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What one plugin found on this node."""

    plugin: str
    devices: list[Device]
    slot_types: list[SlotType]
    #: fraction enforcement available on this node (None when the plugin has no fractions)
    enforcement: Enforcement | None = None
    #: what an operator should know, in words: "NVIDIA driver not found", "CDI spec: ..."
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the scheduler gave one container of one slot: ``{device_id: amount}``."""

    slot: str
    amounts: dict[str, Decimal]

    @property
    def total(self) -> Decimal:
        return sum(self.amounts.values(), Decimal(0))


@dataclass(frozen=True, slots=True)
class Reservation:
    """What a runtime must add to a container for an allocation to work inside it."""

    env: dict[str, str] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)  # host device nodes, e.g. /dev/nvidia0
    cdi_devices: list[str] = field(default_factory=list)  # e.g. nvidia.com/gpu=GPU-1234
    mounts: list[Mount] = field(default_factory=list)

    def merge(self, other: Reservation) -> Reservation:
        return Reservation(
            env={**self.env, **other.env},
            devices=[*self.devices, *(d for d in other.devices if d not in self.devices)],
            cdi_devices=[
                *self.cdi_devices,
                *(d for d in other.cdi_devices if d not in self.cdi_devices),
            ],
            mounts=[*self.mounts, *(m for m in other.mounts if m not in self.mounts)],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "env": dict(self.env),
            "devices": list(self.devices),
            "cdi_devices": list(self.cdi_devices),
            "mounts": [m.to_json() for m in self.mounts],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None) -> Reservation:
        raw = raw or {}
        return cls(
            env=dict(raw.get("env", {})),
            devices=list(raw.get("devices", [])),
            cdi_devices=list(raw.get("cdi_devices", [])),
            mounts=[Mount.from_json(m) for m in raw.get("mounts", [])],
        )


@dataclass(frozen=True, slots=True)
class DeviceStats:
    device_id: str
    utilization: float  # percent of processing units busy, 0-100
    memory_used: int  # bytes
    memory_total: int  # bytes


class ReservationError(RuntimeError):
    """An allocation this node cannot honour (unknown device, unhealthy, over capacity)."""


class AcceleratorPlugin(Protocol):
    """Implemented by every accelerator plugin; see the module docstring."""

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]]

    def fingerprint(self) -> Fingerprint: ...

    def reserve(self, allocation: Allocation) -> Reservation: ...

    def stats(self) -> list[DeviceStats]: ...
