"""Rootless Podman as jobgate's container runtime (entry point ``podman``).

See ``README.md`` beside this file for the picture and ``docs/podman.md`` for the node
set-up, the measurements behind the defaults and the limits story on cgroup v1.
"""

from __future__ import annotations

from .runtime import PodmanRuntime
from .settings import PodmanSettings

__all__ = ["PodmanRuntime", "PodmanSettings"]
