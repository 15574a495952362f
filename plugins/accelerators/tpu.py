"""The tpu accelerator plugin: Google TPU chips found through /dev and PCI sysfs.

Chips appear as ``/dev/accel<N>`` (TPU v2-v4, the gasket driver; sysfs
``/sys/class/accel/accel<N>/device`` links to the PCI device) or, on newer chips
(v5e, v5p, v6e), as VFIO groups ``/dev/vfio/<group>`` whose PCI devices are listed
under ``/sys/kernel/iommu_groups/<group>/devices``. Only PCI vendor ``0x1ae0``
(Google) counts; the chip type comes from the PCI device id (and, for the shared v2/v3
id, the subsystem id). Memory and TensorCores per chip are the nominal figures of the
chip type, since the kernel does not publish them.

Slot ``tpu.device`` (whole chips). A reservation gives the device nodes and
``TPU_VISIBLE_CHIPS`` (host chip indices). When the session gets only part of the
host's chips, libtpu must also be told the shape of its slice and that it is alone:
``TPU_CHIPS_PER_PROCESS_BOUNDS`` (1 chip ``1,1,1``, 2 ``1,2,1``, 4 ``2,2,1``, 8
``2,4,1``), ``TPU_PROCESS_BOUNDS=1,1,1`` and a mesh-controller port of its own
(8476 + its first chip index, so neighbours on one host never collide). Other subset
sizes cannot form a slice and are refused. Stats: libtpu publishes utilisation only
through its runtime metrics service, which a node agent cannot read, so none are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel
from pydantic_settings import BaseSettings, SettingsConfigDict

from plugins.accelerators.base import (
    Allocation,
    Device,
    DeviceStats,
    Fingerprint,
    Reservation,
    ReservationError,
    SlotType,
)
from plugins.accelerators.checks import check_allocation
from plugins.accelerators.health import LostDevices
from plugins.accelerators.sysfs import read_int

__all__ = ["CHIPS", "GOOGLE_VENDOR", "TPU_SLOT", "TpuPlugin", "TpuSettings", "tpu_env"]

TPU_SLOT = "tpu.device"
GOOGLE_VENDOR = 0x1AE0
GIB = 1024**3
#: (PCI device id, subsystem id or None) -> (model, nominal HBM bytes, TensorCores)
CHIPS: dict[tuple[int, int | None], tuple[str, int, int]] = {
    (0x0027, 0x004E): ("TPU v2", 16 * GIB, 2),
    (0x0027, 0x004F): ("TPU v3", 32 * GIB, 2),
    (0x005E, None): ("TPU v4", 32 * GIB, 2),
    (0x0063, None): ("TPU v5e", 16 * GIB, 1),
    (0x0062, None): ("TPU v5p", 95 * GIB, 2),
    (0x006F, None): ("TPU v6e", 32 * GIB, 1),
}
SUBSET_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}
MESH_PORT_BASE = 8476


class TpuSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBGATE_TPU_", extra="forbid")

    sysfs_root: Path = Path("/")
    dev_root: Path = Path("/dev")


def tpu_env(indices: list[int], host_chips: int) -> dict[str, str]:
    """libtpu's variables for chips *indices* of a host with *host_chips* chips."""
    visible = ",".join(str(i) for i in indices)
    env = {"TPU_VISIBLE_CHIPS": visible, "TPU_VISIBLE_DEVICES": visible}
    if len(indices) < host_chips:
        bounds = SUBSET_BOUNDS.get(len(indices))
        if bounds is None:
            raise ReservationError(
                f"{TPU_SLOT}: {len(indices)} of {host_chips} chips cannot form a TPU slice "
                f"(a subset must be {', '.join(map(str, SUBSET_BOUNDS))} chips)"
            )
        port = MESH_PORT_BASE + min(indices)
        env.update(
            TPU_CHIPS_PER_PROCESS_BOUNDS=bounds,
            TPU_PROCESS_BOUNDS="1,1,1",
            TPU_MESH_CONTROLLER_ADDRESS=f"localhost:{port}",
            TPU_MESH_CONTROLLER_PORT=str(port),
        )
    return env


@dataclass(frozen=True, slots=True)
class _Chip:
    index: int
    nodes: tuple[str, ...]  # device nodes to give a session
    device: Device


class TpuPlugin:
    """Google TPU chips as whole devices; see the module docstring."""

    name: ClassVar[str] = "tpu"
    #: typed as the contract declares it (a ClassVar in a Protocol is invariant)
    Settings: ClassVar[type[BaseModel]] = TpuSettings

    def __init__(self, settings: TpuSettings | None = None) -> None:
        self.settings = settings if settings is not None else TpuSettings()
        self._lost = LostDevices()
        self._chips: dict[str, _Chip] = {}
        self._last: Fingerprint | None = None

    def fingerprint(self) -> Fingerprint:
        chips = self._accel_chips() or self._vfio_chips()
        self._chips = {c.device.id: c for c in chips}
        devices = self._lost.merge([c.device for c in chips])
        models = sorted({c.device.model for c in chips})
        detail = f"{len(chips)} chips ({', '.join(models)})" if chips else "no TPU chips"
        fp = Fingerprint(self.name, devices, [SlotType(TPU_SLOT)] if devices else [], None, detail)
        self._last = fp
        return fp

    def _accel_chips(self) -> list[_Chip]:
        chips = []
        dev = self.settings.dev_root
        numbered = [(int(p.name[5:]), p) for p in dev.glob("accel*") if p.name[5:].isdigit()]
        for index, node in sorted(numbered):
            pci = self.settings.sysfs_root / "sys/class/accel" / node.name / "device"
            device = self._device(pci, index, str(node))
            if device is not None:
                chips.append(_Chip(index, (str(node),), device))
        return chips

    def _vfio_chips(self) -> list[_Chip]:
        found: list[tuple[str, Path, str]] = []  # (bdf, pci dir, group node)
        groups = self.settings.sysfs_root / "sys/kernel/iommu_groups"
        for group in self.settings.dev_root.glob("vfio/[0-9]*"):
            for pci in (groups / group.name / "devices").glob("*"):
                found.append((pci.name, pci, str(group)))
        chips: list[_Chip] = []
        container = str(self.settings.dev_root / "vfio" / "vfio")
        for _, pci, group_node in sorted(found):
            device = self._device(pci, len(chips), group_node)
            if device is not None:
                chips.append(_Chip(len(chips), (group_node, container), device))
        return chips

    def _device(self, pci: Path, index: int, node: str) -> Device | None:
        if read_int(pci / "vendor") != GOOGLE_VENDOR:
            return None
        device_id = read_int(pci / "device") or 0
        subsystem = read_int(pci / "subsystem_device")
        model, memory, cores = CHIPS.get(
            (device_id, subsystem),
            CHIPS.get((device_id, None), (f"TPU (PCI device {device_id:#06x})", 0, 1)),
        )
        numa = read_int(pci / "numa_node")
        bdf = pci.resolve().name
        return Device(
            id=bdf,
            kind="tpu",
            model=model,
            memory=memory,
            processing_units=cores,
            numa_node=numa if numa is not None and numa >= 0 else None,
            slot=TPU_SLOT,
            capacity=Decimal(1),
            attributes={
                "chip_index": str(index),
                "pci_bus_id": bdf,
                "device_node": node,
                "pci_device_id": f"{device_id:#06x}",
            },
        )

    def reserve(self, allocation: Allocation) -> Reservation:
        fp = self._last if self._last is not None else self.fingerprint()
        slot_type = next((s for s in fp.slot_types if s.name == allocation.slot), None)
        check_allocation(allocation, {d.id: d for d in fp.devices}, slot_type)
        chips = sorted((self._chips[i] for i in allocation.amounts), key=lambda c: c.index)
        env = tpu_env([c.index for c in chips], len(self._chips))
        nodes = list(dict.fromkeys(n for c in chips for n in c.nodes))
        return Reservation(env=env, devices=nodes)

    def stats(self) -> list[DeviceStats]:
        return []  # see the module docstring
