"""Settings of the cuda plugin (environment prefix ``JOBGATE_CUDA_``).

Roots and paths are settings so that tests, and nodes with unusual layouts, can point
the plugin elsewhere: ``JOBGATE_CUDA_SYSFS_ROOT=/tmp/tree`` reads
``/tmp/tree/sys/bus/pci/...``; ``JOBGATE_CUDA_FAKE_NVML=table.toml`` replaces the
driver with :mod:`plugins.accelerators.fake_nvml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from plugins.accelerators.sharing import SharingFields

__all__ = ["CudaSettings"]


class CudaSettings(BaseSettings, SharingFields):
    """How this node's NVIDIA GPUs are offered and how fractions are kept in bounds."""

    model_config = SettingsConfigDict(env_prefix="JOBGATE_CUDA_", extra="forbid")

    #: a fake NVML table (TOML/JSON); unset on real nodes
    fake_nvml: Path | None = None
    sysfs_root: Path = Path("/")
    dev_root: Path = Path("/dev")
    #: where CDI specs live; a spec of kind nvidia.com/gpu switches reservations to CDI
    cdi_dirs: list[Path] = Field(default_factory=lambda: [Path("/etc/cdi"), Path("/var/run/cdi")])
    #: "auto" picks MPS when its control daemon runs, else the preload limiter if set
    enforcement: Literal["auto", "mps", "preload", "none"] = "auto"
    #: CUDA_MPS_PIPE_DIRECTORY of the node's MPS control daemon
    mps_pipe_dir: Path = Path("/tmp/nvidia-mps")
    #: host directory shared as /dev/shm with MPS clients (MPS servers use shared memory)
    mps_shm_dir: Path | None = Path("/dev/shm")
    #: an LD_PRELOAD limiter library in the HAMi-core style (libvgpu.so), if installed
    preload_library: Path | None = None
    #: where the limiter library is mounted inside sessions
    preload_target_dir: str = "/usr/local/jobgate/lib"
