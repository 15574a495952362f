"""The built-in accelerators of ``jobgate.accelerators.v1``, by name (see :mod:`plugins.loader`)."""

from __future__ import annotations

from typing import Any

from plugins.accelerators.cuda import CudaPlugin
from plugins.accelerators.mock import MockPlugin
from plugins.accelerators.rocm import RocmPlugin
from plugins.accelerators.tpu import TpuPlugin

__all__ = ["IN_TREE"]

IN_TREE: dict[str, Any] = {
    "cuda": CudaPlugin,
    "rocm": RocmPlugin,
    "tpu": TpuPlugin,
    "mock": MockPlugin,
}
