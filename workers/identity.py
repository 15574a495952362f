"""Who this worker is: a node id and an instance id that are its own.

Two workers on one host that share a Podman user (two ``jobgate up`` stacks, a test
suite beside a developer's stack) must never adopt or stop each other's containers.
So each data directory holds a random instance id (``DATA_DIR/worker/instance``,
written once), and:

* the node id is ``JOBGATE_NODE_ID`` when set, else ``<hostname>-<first 6 of instance>``
  (stable across restarts, different for another data dir);
* every container carries the labels ``jobgate.node=<node id>`` and
  ``jobgate.instance=<instance>``; a restarted worker re-attaches only to containers
  with both, so even two workers given the same ``JOBGATE_NODE_ID`` keep apart.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Identity", "load_identity"]


@dataclass(frozen=True, slots=True)
class Identity:
    node_id: str
    instance: str


def _instance(data_dir: Path) -> str:
    path = data_dir / "worker" / "instance"
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if text:
        return text
    path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(8)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text + "\n")
    try:
        os.link(tmp, path)  # first writer wins; a racing second worker reads its value
    except FileExistsError:
        text = path.read_text().strip()
    finally:
        tmp.unlink(missing_ok=True)
    return text


def load_identity(data_dir: Path, node_id: str = "") -> Identity:
    """The identity of the worker whose state lives in *data_dir*."""
    instance = _instance(data_dir)
    return Identity(node_id or f"{socket.gethostname()}-{instance[:6]}", instance)
