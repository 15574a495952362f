"""Factories for the accelerator tests: fake NVML tables, node roots, an MPS socket."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from plugins.accelerators.cuda import CudaPlugin, CudaSettings
from plugins.accelerators.fake_sysfs import write_nvidia_nodes, write_pci_device

NVIDIA = 0x10DE


def _gpu(index: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": f"GPU-{index:08x}-1111-2222-3333-444444444444",
        "name": "NVIDIA A100-SXM4-40GB",
        "memory": "40GiB",
        "multiprocessors": 108,
        "pci_bus_id": f"00000000:{0x3B + index:02X}:00.0",
        "minor": index,
    }
    row.update(overrides)
    return row


@pytest.fixture
def gpu() -> Callable[..., dict[str, Any]]:
    """``gpu(0, memory="8GiB")``: one row of a fake NVML table."""
    return _gpu


@pytest.fixture
def node_root(tmp_path: Path) -> Path:
    """A node's fake filesystem: ``sys`` (sysfs), ``dev``, ``cdi``, ``lib``."""
    for name in ("sys-root", "dev", "cdi", "lib"):
        (tmp_path / name).mkdir()
    return tmp_path


@pytest.fixture
def mps_dir() -> Iterator[Path]:
    """An MPS pipe directory with a listening ``control`` socket, as the daemon makes.

    Under /tmp with a short name: unix socket paths are limited to 107 bytes.
    """
    directory = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(directory / "control"))
    server.listen(1)
    try:
        yield directory
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def make_cuda(node_root: Path) -> Callable[..., CudaPlugin]:
    """``make_cuda(gpus, driver=..., numa={bus: node}, **settings)``: a cuda plugin on a
    fake NVML table and a fake node root (device nodes for every GPU's minor)."""
    counter = iter(range(1000))

    def make(
        gpus: list[dict[str, Any]],
        *,
        driver: str = "loaded",
        numa: dict[str, int] | None = None,
        dev_nodes: bool = True,
        **settings: Any,
    ) -> CudaPlugin:
        table = node_root / f"nvml-{next(counter)}.toml"
        table.write_text(tomli_w.dumps({"driver": driver, "gpus": gpus}))
        for row in gpus:
            write_pci_device(
                node_root / "sys-root",
                row["pci_bus_id"],
                vendor=NVIDIA,
                device=0x20B0,
                numa_node=(numa or {}).get(row["pci_bus_id"], -1),
            )
        if dev_nodes:
            write_nvidia_nodes(node_root / "dev", [row["minor"] for row in gpus])
        defaults: dict[str, Any] = {
            "fake_nvml": table,
            "sysfs_root": node_root / "sys-root",
            "dev_root": node_root / "dev",
            "cdi_dirs": [node_root / "cdi"],
            "mps_pipe_dir": node_root / "no-mps",
        }
        return CudaPlugin(CudaSettings(**{**defaults, **settings}))

    return make


@pytest.fixture(autouse=True)
def _no_operator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugin settings read JOBGATE_CUDA_* etc.; a developer's shell must not leak in."""
    for key in list(os.environ):
        if key.startswith(("JOBGATE_CUDA_", "JOBGATE_ROCM_", "JOBGATE_TPU_", "JOBGATE_MOCK_")):
            monkeypatch.delenv(key)
