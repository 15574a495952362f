"""Write realistic fake sysfs and /dev trees into a directory.

The rocm and tpu plugins (and the cuda plugin's NUMA lookup, and the topology reader)
read the kernel's files under a configurable root; these builders lay out the same
files and symlinks a real node has, so the plugins run unchanged against them in
tests, demos and scale rigs::

    write_rocm_tree(tmp / "root", tmp / "dev", [RocmGpuSpec(pci_bus_id="0000:c3:00.0")])
    RocmPlugin(RocmSettings(sysfs_root=tmp / "root", dev_root=tmp / "dev")).fingerprint()

Device nodes are written as empty regular files: good enough for plugins that only
check that a node exists and hand its path to the runtime.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from plugins.accelerators.sysfs import normalise_pci_bus_id

__all__ = [
    "RocmGpuSpec",
    "TpuChipSpec",
    "write_numa_nodes",
    "write_nvidia_nodes",
    "write_pci_device",
    "write_rocm_tree",
    "write_tpu_tree",
]

GIB = 1024**3
AMD_VENDOR = 0x1002
GOOGLE_VENDOR = 0x1AE0
NVIDIA_VENDOR = 0x10DE


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def _link(link: Path, target: Path) -> None:
    """A relative symlink, as sysfs has, so the tree works wherever it is."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def write_pci_device(
    root: Path,
    bus_id: str,
    *,
    vendor: int,
    device: int,
    subsystem_device: int = 0,
    numa_node: int = -1,
) -> Path:
    """``<root>/sys/bus/pci/devices/<bdf>/{vendor,device,subsystem_device,numa_node}``."""
    directory = root / "sys/bus/pci/devices" / normalise_pci_bus_id(bus_id)
    _write(directory / "vendor", f"{vendor:#06x}")
    _write(directory / "device", f"{device:#06x}")
    _write(directory / "subsystem_device", f"{subsystem_device:#06x}")
    _write(directory / "numa_node", str(numa_node))
    return directory


def write_nvidia_nodes(dev_root: Path, minors: Sequence[int], *, uvm: bool = True) -> None:
    """``/dev/nvidia<minor>``, ``/dev/nvidiactl`` and (with *uvm*) the UVM nodes."""
    for minor in minors:
        _touch(dev_root / f"nvidia{minor}")
    _touch(dev_root / "nvidiactl")
    if uvm:
        _touch(dev_root / "nvidia-uvm")
        _touch(dev_root / "nvidia-uvm-tools")


def write_numa_nodes(root: Path, nodes: Mapping[int, str]) -> None:
    """``node<N>/cpulist`` per NUMA node (``{0: "0-3", 1: "4-7"}``) and ``cpu/online``."""
    base = root / "sys/devices/system"
    for node, cpulist in nodes.items():
        _write(base / "node" / f"node{node}" / "cpulist", cpulist)
    online = ",".join(c for c in nodes.values() if c)
    _write(base / "cpu" / "online", online)


# ---- ROCm -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RocmGpuSpec:
    """One AMD GPU as the KFD topology, PCI and DRM directories describe it."""

    pci_bus_id: str = "0000:c3:00.0"
    device_id: int = 0x740F  # MI210
    gfx: str = "gfx90a"
    compute_units: int = 104
    memory: int = 64 * GIB
    render_minor: int = 128
    unique_id: int = 0x1A2B3C4D5E6F7081
    numa_node: int = 0
    busy_percent: int = 0
    vram_used: int = 0


def write_rocm_tree(
    root: Path,
    dev_root: Path,
    gpus: Sequence[RocmGpuSpec],
    *,
    cpu_agents: int = 1,
    render_nodes: bool = True,
) -> None:
    """A KFD topology with *cpu_agents* CPU nodes then one node per GPU, and /dev nodes.

    With ``render_nodes=False`` the ``/dev/dri/renderD*`` nodes are left out (a GPU
    whose node vanished). ``/dev/kfd`` is always written.
    """
    topology = root / "sys/class/kfd/kfd/topology/nodes"
    for node in range(cpu_agents):
        _write(topology / str(node) / "gpu_id", "0")
        _write(topology / str(node) / "name", "")
        _write(topology / str(node) / "properties", "cpu_cores_count 16\nsimd_count 0\n")
    for offset, gpu in enumerate(gpus):
        node_dir = topology / str(cpu_agents + offset)
        _write(node_dir / "gpu_id", str(40000 + offset))
        _write(node_dir / "name", gpu.gfx)
        _write(node_dir / "properties", _rocm_properties(gpu))
        _write(
            node_dir / "mem_banks/0/properties",
            f"heap_type 1\nsize_in_bytes {gpu.memory}\nflags 0\nwidth 4096\n",
        )
        pci = write_pci_device(
            root, gpu.pci_bus_id, vendor=AMD_VENDOR, device=gpu.device_id, numa_node=gpu.numa_node
        )
        _write(pci / "gpu_busy_percent", str(gpu.busy_percent))
        _write(pci / "mem_info_vram_used", str(gpu.vram_used))
        _write(pci / "mem_info_vram_total", str(gpu.memory))
        _link(root / "sys/class/drm" / f"renderD{gpu.render_minor}" / "device", pci)
        if render_nodes:
            _touch(dev_root / "dri" / f"renderD{gpu.render_minor}")
    _touch(dev_root / "kfd")


def _rocm_properties(gpu: RocmGpuSpec) -> str:
    domain, bus, rest = normalise_pci_bus_id(gpu.pci_bus_id).split(":")
    slot, function = rest.split(".")
    location = (int(bus, 16) << 8) | (int(slot, 16) << 3) | int(function, 16)
    simd_per_cu = 4
    lines = {
        "cpu_cores_count": 0,
        "simd_count": gpu.compute_units * simd_per_cu,
        "mem_banks_count": 1,
        "gfx_target_version": 90010,
        "vendor_id": AMD_VENDOR,
        "device_id": gpu.device_id,
        "location_id": location,
        "domain": int(domain, 16),
        "drm_render_minor": gpu.render_minor,
        "simd_per_cu": simd_per_cu,
        "unique_id": gpu.unique_id,
        "num_xcc": 1,
    }
    return "".join(f"{key} {value}\n" for key, value in lines.items())


# ---- TPU ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TpuChipSpec:
    """One TPU chip: its PCI address, PCI ids and NUMA node."""

    pci_bus_id: str
    device_id: int = 0x005E  # TPU v4
    subsystem_device: int = 0
    numa_node: int = 0


def write_tpu_tree(
    root: Path, dev_root: Path, chips: Sequence[TpuChipSpec], *, vfio: bool = False
) -> None:
    """Chips as ``/dev/accel<N>`` (v2-v4 style) or, with *vfio*, as VFIO groups (v5e+)."""
    for index, chip in enumerate(chips):
        pci = write_pci_device(
            root,
            chip.pci_bus_id,
            vendor=GOOGLE_VENDOR,
            device=chip.device_id,
            subsystem_device=chip.subsystem_device,
            numa_node=chip.numa_node,
        )
        if vfio:
            group = 20 + index
            _touch(dev_root / "vfio" / str(group))
            _link(root / "sys/kernel/iommu_groups" / str(group) / "devices" / pci.name, pci)
        else:
            _touch(dev_root / f"accel{index}")
            _link(root / "sys/class/accel" / f"accel{index}" / "device", pci)
    if vfio:
        _touch(dev_root / "vfio" / "vfio")
