"""The rocm accelerator plugin: AMD GPUs found through the KFD topology in sysfs.

The amdgpu driver publishes every compute agent under
``/sys/class/kfd/kfd/topology/nodes/<n>/``; CPU agents have ``gpu_id`` 0, GPUs a
non-zero one and a ``properties`` file (``simd_count``, ``simd_per_cu``,
``drm_render_minor``, ``location_id``, ``domain``, ``unique_id``, ``device_id`` ...)
plus ``mem_banks/*/properties`` with ``size_in_bytes``. This is what ROCm's own
runtime (and amdsmi) read, so no library is needed; tests point ``sysfs_root`` and
``dev_root`` at trees written by :mod:`plugins.accelerators.fake_sysfs`.

Slot ``rocm.device`` (whole GPUs). A reservation gives ``/dev/kfd`` and each GPU's
render node ``/dev/dri/renderD<minor>``; inside the container ROCm sees only the GPUs
whose render nodes it can open, so ``ROCR_VISIBLE_DEVICES`` carries their UUIDs
(``GPU-<unique_id>``) and ``HIP_VISIBLE_DEVICES`` is ``0..n-1`` in KFD order. Stats
come from ``/sys/class/drm/renderD<minor>/device/{gpu_busy_percent,mem_info_vram_*}``.
"""

from __future__ import annotations

import logging
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
    SlotType,
)
from plugins.accelerators.checks import check_allocation
from plugins.accelerators.health import LostDevices
from plugins.accelerators.sysfs import pci_numa_node, read_int, read_text

__all__ = ["ROCM_SLOT", "RocmPlugin", "RocmSettings"]

log = logging.getLogger(__name__)
ROCM_SLOT = "rocm.device"
TOPOLOGY = "sys/class/kfd/kfd/topology/nodes"
#: PCI device ids of common Instinct parts (anything else is named by its gfx target)
MODELS = {
    0x738C: "AMD Instinct MI100",
    0x7408: "AMD Instinct MI250X",
    0x740C: "AMD Instinct MI250X/MI250",
    0x740F: "AMD Instinct MI210",
    0x74A1: "AMD Instinct MI300X",
}


class RocmSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBGATE_ROCM_", extra="forbid")

    sysfs_root: Path = Path("/")
    dev_root: Path = Path("/dev")


@dataclass(frozen=True, slots=True)
class _Gpu:
    node: int  # KFD topology node number (ROCm's enumeration order)
    render_minor: int
    device: Device


class RocmPlugin:
    """AMD GPUs as whole devices; see the module docstring."""

    name: ClassVar[str] = "rocm"
    #: typed as the contract declares it (a ClassVar in a Protocol is invariant)
    Settings: ClassVar[type[BaseModel]] = RocmSettings

    def __init__(self, settings: RocmSettings | None = None) -> None:
        self.settings = settings if settings is not None else RocmSettings()
        self._lost = LostDevices()
        self._gpus: dict[str, _Gpu] = {}
        self._last: Fingerprint | None = None

    def fingerprint(self) -> Fingerprint:
        topology = self.settings.sysfs_root / TOPOLOGY
        gpus = [g for g in map(self._read_node, _node_dirs(topology)) if g is not None]
        self._gpus = {g.device.id: g for g in gpus}
        devices = self._lost.merge([g.device for g in gpus])
        if not topology.is_dir():
            detail = f"no KFD topology at {topology} (amdgpu driver not loaded): no ROCm devices"
        else:
            detail = f"{len(gpus)} GPUs in the KFD topology"
        fp = Fingerprint(self.name, devices, [SlotType(ROCM_SLOT)] if devices else [], None, detail)
        self._last = fp
        return fp

    def _read_node(self, node_dir: Path) -> _Gpu | None:
        if not read_int(node_dir / "gpu_id"):
            return None  # a CPU agent
        props = _properties(node_dir / "properties")
        minor = props.get("drm_render_minor", -1)
        location = props.get("location_id", 0)
        bdf = (
            f"{props.get('domain', 0):04x}:{(location >> 8) & 0xFF:02x}:"
            f"{(location >> 3) & 0x1F:02x}.{location & 0x7}"
        )
        unique = props.get("unique_id", 0)
        gfx = read_text(node_dir / "name") or "gfx"
        device_id = props.get("device_id", 0)
        render = self.settings.dev_root / "dri" / f"renderD{minor}"
        attributes = {
            "kfd_node": node_dir.name,
            "pci_bus_id": bdf,
            "render_minor": str(minor),
            "gfx": gfx,
        }
        healthy = render.exists()
        if not healthy:
            attributes["health_reason"] = f"render node {render} is missing"
        device = Device(
            id=f"GPU-{unique:016x}" if unique else bdf,
            kind="rocm",
            model=MODELS.get(device_id, f"AMD GPU {gfx} ({device_id:#06x})"),
            memory=_vram(node_dir),
            processing_units=props.get("simd_count", 0) // max(1, props.get("simd_per_cu", 4)),
            numa_node=pci_numa_node(self.settings.sysfs_root, bdf),
            slot=ROCM_SLOT,
            capacity=Decimal(1),
            health="healthy" if healthy else "unhealthy",
            attributes=attributes,
        )
        return _Gpu(int(node_dir.name), minor, device)

    def reserve(self, allocation: Allocation) -> Reservation:
        fp = self._last if self._last is not None else self.fingerprint()
        slot_type = next((s for s in fp.slot_types if s.name == allocation.slot), None)
        check_allocation(allocation, {d.id: d for d in fp.devices}, slot_type)
        gpus = sorted((self._gpus[i] for i in allocation.amounts), key=lambda g: g.node)
        dev = self.settings.dev_root
        uuids = [g.device.id for g in gpus]
        positions = ",".join(str(i) for i in range(len(gpus)))
        rocr = ",".join(uuids) if all(u.startswith("GPU-") for u in uuids) else positions
        return Reservation(
            env={"ROCR_VISIBLE_DEVICES": rocr, "HIP_VISIBLE_DEVICES": positions},
            devices=[
                str(dev / "kfd"),
                *(str(dev / "dri" / f"renderD{g.render_minor}") for g in gpus),
            ],
        )

    def stats(self) -> list[DeviceStats]:
        if self._last is None:
            self.fingerprint()
        result = []
        for gpu in self._gpus.values():
            base = (
                self.settings.sysfs_root / "sys/class/drm" / f"renderD{gpu.render_minor}" / "device"
            )
            busy = read_int(base / "gpu_busy_percent")
            used = read_int(base / "mem_info_vram_used")
            total = read_int(base / "mem_info_vram_total")
            if busy is None or used is None:
                log.debug("rocm stats: no counters under %s", base)
                continue
            result.append(DeviceStats(gpu.device.id, float(busy), used, total or gpu.device.memory))
        return result


def _node_dirs(topology: Path) -> list[Path]:
    try:
        return sorted(
            (p for p in topology.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        )
    except OSError:
        return []


def _properties(path: Path) -> dict[str, int]:
    """KFD ``properties``: one ``key value`` pair per line, integer values."""
    result: dict[str, int] = {}
    for line in (read_text(path) or "").splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            result[key] = int(value.strip())
        except ValueError:
            continue
    return result


def _vram(node_dir: Path) -> int:
    """Device memory: the sum of the node's frame-buffer memory banks."""
    total = 0
    banks = node_dir / "mem_banks"
    try:
        bank_dirs = sorted(banks.iterdir())
    except OSError:
        return 0
    for bank in bank_dirs:
        props = _properties(bank / "properties")
        if props.get("heap_type", 1) in (1, 2):  # HSA frame buffer, public or private
            total += props.get("size_in_bytes", 0)
    return total
