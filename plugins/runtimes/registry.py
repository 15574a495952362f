"""The built-in runtimes of ``jobgate.runtimes.v1``, by name (see :mod:`plugins.loader`)."""

from __future__ import annotations

from typing import Any

from plugins.runtimes.podman import PodmanRuntime
from plugins.runtimes.process import ProcessRuntime
from plugins.runtimes.sim import SimRuntime
from plugins.runtimes.slurm.runtime import SlurmRuntime

__all__ = ["IN_TREE"]

IN_TREE: dict[str, Any] = {
    "process": ProcessRuntime,
    "sim": SimRuntime,
    "podman": PodmanRuntime,
    "slurm": SlurmRuntime,
}
