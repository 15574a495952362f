"""Which fraction enforcement this node has: NVIDIA MPS, an LD_PRELOAD limiter, or none.

* **mps** - an MPS control daemon runs: its ``control`` socket exists in the pipe
  directory. Each session then gets an active-thread percentage and a pinned device
  memory limit, enforced by the MPS server (SMs by hardware partitioning, memory by the
  driver).
* **preload** - the operator installed a limiter library in the HAMi-core style
  (``libvgpu.so``): it is mounted into sessions and preloaded; it caps device memory per
  device and throttles SM use. Cooperative: a static binary escapes it.
* **none** - fractions are placed but nothing keeps a session inside its share; the
  plugin only allows them when ``allow_unenforced_fractions`` is set.

``JOBGATE_CUDA_ENFORCEMENT=auto`` (default) picks the first available in that order; a
named choice that is not available falls back to ``none`` and says why in the detail.
"""

from __future__ import annotations

from plugins.accelerators.base import Enforcement
from plugins.accelerators.cuda.settings import CudaSettings

__all__ = ["detect_enforcement"]


def detect_enforcement(settings: CudaSettings) -> tuple[Enforcement, str]:
    """The enforcement to use and a sentence for the fingerprint's detail."""
    wanted = settings.enforcement
    if wanted == "none":
        return "none", "fraction enforcement switched off by the operator"
    control = settings.mps_pipe_dir / "control"
    mps_ready = control.is_socket()
    library = settings.preload_library
    preload_ready = library is not None and library.is_file()
    if wanted in ("auto", "mps") and mps_ready:
        return "mps", f"fractions enforced by MPS (control daemon at {settings.mps_pipe_dir})"
    if wanted in ("auto", "preload") and preload_ready:
        return "preload", f"fractions enforced by the preload limiter {library}"
    missing = []
    if wanted == "mps":
        missing.append(f"MPS asked for but no control daemon socket at {control}")
    if wanted == "preload" and library is None:
        missing.append("preload asked for but JOBGATE_CUDA_PRELOAD_LIBRARY is not set")
    if library is not None and not preload_ready:
        missing.append(f"preload limiter {library} not found")
    reason = "; ".join(missing) or "no MPS control daemon and no preload limiter"
    return "none", f"fractions not enforced ({reason})"
