"""Cluster sessions' shared vocabulary: modes, hostnames, the per-session network name.

A cluster session's containers are named as in Backend.AI's guide: ``main1`` for the
first (index 0), ``sub1``, ``sub2``, ... for the others. The gateway shows these names
(``sessions show``, ``logs --kernel sub1``); the worker gives them to the containers
(hostnames, DNS aliases, ``/etc/hosts``, the environment). docs/cluster-sessions.md.
"""

from __future__ import annotations

import re
from typing import Final, Literal

__all__ = [
    "CLUSTER_MODES",
    "STOP_WHEN",
    "ClusterMode",
    "StopWhen",
    "cluster_hostname",
    "cluster_index",
    "cluster_network",
]

ClusterMode = Literal["single-node", "multi-node"]
StopWhen = Literal["main-done", "all-done"]
CLUSTER_MODES: Final[tuple[ClusterMode, ...]] = ("single-node", "multi-node")
STOP_WHEN: Final[tuple[StopWhen, ...]] = ("main-done", "all-done")
_NAME = re.compile(r"^(?:main1|sub([1-9][0-9]*))$")


def cluster_hostname(index: int) -> str:
    """0 -> ``main1``, 1 -> ``sub1``, 2 -> ``sub2`` ..."""
    return "main1" if index == 0 else f"sub{index}"


def cluster_index(hostname: str) -> int | None:
    """The inverse of :func:`cluster_hostname`; None for anything else."""
    match = _NAME.match(hostname)
    if match is None:
        return None
    return int(match.group(1)) if match.group(1) else 0


def cluster_network(session_id: str) -> str:
    """The rootless Podman network of a single-node cluster session."""
    return f"jobgate-{session_id}"
