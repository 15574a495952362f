"""Small, forgiving readers for sysfs and /dev, rooted anywhere.

Every accelerator plugin reads the kernel's view of its devices through these helpers,
with paths built under a configurable root (``/`` on a real node, a temporary directory
in tests, where :mod:`plugins.accelerators.fake_sysfs` writes a realistic tree). A file
that is missing or unreadable reads as ``None``: hardware comes and goes, and a plugin
must report what it finds rather than crash the worker.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "normalise_pci_bus_id",
    "parse_cpulist",
    "pci_device_dir",
    "pci_numa_node",
    "read_int",
    "read_text",
]


def read_text(path: Path) -> str | None:
    """The stripped contents of a small text file, or None when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    """An integer file: decimal (``-1``, ``128``) or hex with ``0x`` (``0x1ae0``)."""
    text = read_text(path)
    if not text:
        return None
    try:
        if text.lower().startswith(("0x", "-0x")):
            return int(text, 16)
        return int(text, 10)
    except ValueError:
        return None


def normalise_pci_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` -> sysfs's ``0000:3b:00.0`` (4-digit domain, lower case)."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    elif len(parts) == 2:  # no domain at all: "3b:00.0"
        parts.insert(0, "0000")
    return ":".join(parts)


def pci_device_dir(sysfs_root: Path, bus_id: str) -> Path:
    """``<root>/sys/bus/pci/devices/<bdf>`` for a PCI bus id in any common spelling."""
    return sysfs_root / "sys/bus/pci/devices" / normalise_pci_bus_id(bus_id)


def pci_numa_node(sysfs_root: Path, bus_id: str) -> int | None:
    """The NUMA node the kernel reports for a PCI device; None when unknown (``-1``)."""
    node = read_int(pci_device_dir(sysfs_root, bus_id) / "numa_node")
    return node if node is not None and node >= 0 else None


def parse_cpulist(text: str) -> list[int]:
    """The kernel's cpu list format: ``0-3,8,10-11`` -> ``[0, 1, 2, 3, 8, 10, 11]``.

    Raises ValueError for text that is not a cpu list (the caller decides the fallback).
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if low < 0 or high < low:
            raise ValueError(f"not a cpu range: {part!r}")
        cpus.update(range(low, high + 1))
    return sorted(cpus)
