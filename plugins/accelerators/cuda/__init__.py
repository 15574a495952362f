"""NVIDIA GPUs through NVML: the ``cuda`` accelerator plugin (see ``README.md`` here).

``python -m plugins.accelerators.cuda --proof`` checks the plugin against the real
driver of the machine it runs on (``scripts/gpu-proof.sh`` wraps it).
"""

from plugins.accelerators.cuda.plugin import CudaPlugin
from plugins.accelerators.cuda.settings import CudaSettings

__all__ = ["CudaPlugin", "CudaSettings"]
