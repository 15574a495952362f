"""The container side of a cluster session: its environment, names, ssh keys and hostfile.

::

    StartKernel.cluster ──▶ cluster_env()     JOBGATE_CLUSTER_*, MASTER_ADDR, RANK ...
                        ──▶ write_config()    DIR/ssh/{id_ed25519, authorized_keys,
                                              known_hosts, config}, DIR/sshd_config,
                                              DIR/ssh_host_ed25519_key, DIR/hostfile
                        ──▶ ClusterNet        hostname, network or /etc/hosts, DIR,
                                              the overlay link (multi-node)

Every container has a network namespace of its own. single-node: the session's private
network on the node. multi-node: the session's overlay, ``jg0`` with 10.254.0.<index+1>
in each container, carried between nodes by one forwarder per (session, node)
(workers/overlay/) on the UDP port the scheduler gave it. ssh listens on 22 and
MASTER_PORT is 29500 in every container, as on a machine of its own.

The session's ssh key pair and its sshd host key are derived from the 32-byte seed the
gateway made for the session (``WireCluster.ssh_seed``), so every container of the
session, on any node, gets the same keys without another round trip, and nothing secret
is kept after the container is gone; the overlay's key is derived from it too.
docs/cluster-sessions.md has the whole design.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import ipaddress
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contract.cluster import cluster_network
from contract.messages import WireCluster
from contract.routes import valid_session_id
from plugins.runtimes.base import CLUSTER_CONFIG_TARGET, ClusterNet
from workers import overlay

__all__ = [
    "OVERLAY_IFNAME",
    "OVERLAY_MTU",
    "OVERLAY_PREFIX",
    "Overlays",
    "cluster_env",
    "cluster_net",
    "master_port",
    "overlay_address",
    "overlay_key",
    "remove_config",
    "write_config",
]

log = logging.getLogger(__name__)
HOSTFILE = f"{CLUSTER_CONFIG_TARGET}/hostfile"
_KNOWN_ALIAS = "jobgate-cluster"
#: the overlay inside each container of a multi-node session: its interface, network
#: and MTU (its packets travel in UDP over the nodes' network, 29 bytes bigger: wire.py)
OVERLAY_IFNAME = "jg0"
OVERLAY_NETWORK = "10.254.0"
OVERLAY_PREFIX = 24
OVERLAY_MTU = 1380


def overlay_address(index: int) -> str:
    """Container *index*'s address on its session's overlay: main1 10.254.0.1, ..."""
    return f"{OVERLAY_NETWORK}.{index + 1}"


def overlay_key(seed_hex: str) -> str:
    """The key that tags the session's overlay packets (hex), from its ssh seed."""
    return hmac.new(bytes.fromhex(seed_hex), b"jobgate-overlay", hashlib.sha256).hexdigest()


def master_port(cluster: WireCluster, own_netns: bool = True) -> int:
    """MASTER_PORT: 29500 where every container has a network of its own; on a node's
    shared network (the process runtime) the port the scheduler gave the session on main1's
    node, which no other live session there holds."""
    if own_netns or cluster.mode == "single-node" or not cluster.members[0].port:
        return cluster.master_port
    return cluster.members[0].port


def cluster_env(
    cluster: WireCluster, session_id: str, kernel_id: str, own_netns: bool = True
) -> dict[str, str]:
    """The environment of one container, with Backend.AI's names as aliases; *own_netns*:
    whether the runtime gives each container a network namespace (not the process one)."""
    me = cluster.members[cluster.index]
    size = len(cluster.members)
    role = "main" if cluster.index == 0 else "sub"
    hosts = ",".join(m.hostname for m in cluster.members)
    common = {
        "CLUSTER_HOST": me.hostname,
        "CLUSTER_HOSTS": hosts,
        # in its role, from 1: main1 -> 1, sub2 -> 2 (as Backend.AI)
        "CLUSTER_IDX": str(1 if cluster.index == 0 else cluster.index),
        "CLUSTER_LOCAL_RANK": str(cluster.index),
        "CLUSTER_MODE": cluster.mode,
        "CLUSTER_ROLE": role,
        "CLUSTER_ROLES": "main,sub",
        "CLUSTER_SIZE": str(size),
        "CLUSTER_REPLICAS": f"main:1,sub:{size - 1}",
        "SESSION_ID": session_id,
        "KERNEL_ID": kernel_id,
    }
    env = {f"JOBGATE_{k}": v for k, v in common.items()}
    env |= {f"BACKENDAI_{k}": v for k, v in common.items()}
    env |= {
        "JOBGATE_CLUSTER_HOSTFILE": HOSTFILE,
        "OMPI_MCA_orte_default_hostfile": HOSTFILE,
        "MASTER_ADDR": cluster.members[0].hostname,
        "MASTER_PORT": str(master_port(cluster, own_netns)),
        "WORLD_SIZE": str(size),
        "RANK": str(cluster.index),
    }
    if cluster.mode == "multi-node" and own_netns:  # peers only over the overlay
        env |= {
            "JOBGATE_CLUSTER_IFNAME": OVERLAY_IFNAME,
            "OMPI_MCA_btl_tcp_if_include": OVERLAY_IFNAME,
            "OMPI_MCA_oob_tcp_if_include": OVERLAY_IFNAME,
            "NCCL_SOCKET_IFNAME": OVERLAY_IFNAME,
            "GLOO_SOCKET_IFNAME": OVERLAY_IFNAME,
        }
    return env


def _keys(seed_hex: str) -> tuple[Ed25519PrivateKey, Ed25519PrivateKey]:
    """(the session's user key, its sshd host key), both from the session's seed."""
    seed = bytes.fromhex(seed_hex)
    if len(seed) != 32:
        raise ValueError("the cluster's ssh seed must be 32 bytes")
    host = hashlib.sha256(b"jobgate-host-key:" + seed).digest()
    return Ed25519PrivateKey.from_private_bytes(seed), Ed25519PrivateKey.from_private_bytes(host)


def _private(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )


def _public(key: Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def _write(path: Path, data: str | bytes, mode: int = 0o600) -> None:
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    os.chmod(path, mode)


def write_config(directory: Path, cluster: WireCluster) -> None:
    """Fill *directory* (made here, 0700) with what the container mounts."""
    user, host = _keys(cluster.ssh_seed)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ssh = directory / "ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    target = CLUSTER_CONFIG_TARGET
    _write(ssh / "id_ed25519", _private(user))
    _write(ssh / "id_ed25519.pub", _public(user) + " jobgate-session\n", 0o644)
    _write(ssh / "authorized_keys", _public(user) + " jobgate-session\n")
    _write(ssh / "known_hosts", f"{_KNOWN_ALIAS} {_public(host)}\n", 0o644)
    _write(
        ssh / "config",
        "Host *\n    Port 22\n    User root\n    IdentityFile ~/.ssh/id_ed25519\n"
        f"    HostKeyAlias {_KNOWN_ALIAS}\n    StrictHostKeyChecking yes\n"
        "    UserKnownHostsFile ~/.ssh/known_hosts\n    LogLevel ERROR\n",
    )
    _write(directory / "ssh_host_ed25519_key", _private(host))
    _write(
        directory / "sshd_config",
        f"Port 22\nHostKey {target}/ssh_host_ed25519_key\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"AuthorizedKeysFile {target}/ssh/authorized_keys\n"
        "PidFile /run/sshd.pid\nLogLevel ERROR\nAcceptEnv LANG LC_*\n"
        "Subsystem sftp internal-sftp\n",
        0o644,
    )
    _write(
        directory / "hostfile",
        "".join(f"{m.hostname} slots=1\n" for m in cluster.members),
        0o644,
    )


def remove_config(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def cluster_net(
    cluster: WireCluster,
    session_id: str,
    config_dir: Path | None,
    attach: Callable[[int], Awaitable[None]] | None = None,
    subnet: str | None = None,
) -> ClusterNet:
    """How the runtime connects this container; *attach* (multi-node): joins the created
    container (its pid) to the session's overlay; *subnet* (single-node): the session's
    network, in which container *i* has the fixed address ``.i+2`` (``.1`` is the
    bridge), so every peer is in ``/etc/hosts`` before any of them starts."""
    me = cluster.members[cluster.index]
    if cluster.mode == "single-node":
        return ClusterNet(
            me.hostname, cluster_network(session_id), _fixed(cluster, subnet), config_dir
        )
    hosts = {m.hostname: overlay_address(i) for i, m in enumerate(cluster.members)}
    return ClusterNet(me.hostname, None, hosts, config_dir, link=OVERLAY_IFNAME, attach=attach)


def _fixed(cluster: WireCluster, subnet: str | None) -> dict[str, str]:
    """Each container's address in the single-node session's *subnet* (none without)."""
    if subnet is None:
        return {}
    net = ipaddress.ip_network(subnet, strict=False)
    if net.version != 4 or net.num_addresses < len(cluster.members) + 3:
        raise ValueError(f"the session's network {subnet} has no room for {len(cluster.members)}")
    return {m.hostname: str(net.network_address + i + 2) for i, m in enumerate(cluster.members)}


class Overlays:
    """The overlay forwarders of this node's multi-node sessions: one per session, made
    with its first container here, stopped after its last (workers/overlay/).

    Each session's state is ``ROOT/<session>/``: ``forwarder.pid``, ``forwarder.log`` and
    ``control`` (the path of the forwarder's control socket, in a directory of its own
    that ``mkdtemp`` made: a unix socket's path may not exceed 107 bytes, and a random
    name cannot be taken in advance by another local user). A forwarder outlives a worker
    restart as the containers do; it also ends by itself once its containers are gone."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, session_id: str) -> Path:
        """The session's directory; an id that could name another path is refused (ids
        come in start jobs, over Redis)."""
        if not valid_session_id(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        return self.root / session_id

    async def ensure(
        self, session_id: str, cluster: WireCluster, netns_pid: int | None
    ) -> Callable[[int], Awaitable[None]]:
        """Start the session's forwarder here unless it runs; how to attach a container."""
        me = cluster.members[cluster.index]
        if not me.port or not me.address:
            raise ValueError(
                "the start job names no overlay port or node address for this node "
                "(a scheduler older than this worker)"
            )
        directory = self._dir(session_id)
        control = _running(directory)
        if control is None:
            await asyncio.to_thread(_forget, directory)  # a forwarder that ended
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            control = Path(tempfile.mkdtemp(prefix=_SOCKETS)) / "control.sock"
            config = overlay.OverlayConfig(
                session_id=session_id,
                key=overlay_key(cluster.ssh_seed),
                listen_host=me.address,
                listen_port=me.port,
                mtu=OVERLAY_MTU,
                members=tuple(
                    overlay.Member(
                        index=i,
                        address=overlay_address(i),
                        node_host=m.address,
                        node_port=m.port,
                    )
                    for i, m in enumerate(cluster.members)
                ),
                control=str(control),
            )
            (directory / "control").write_text(str(control))
            pid = await asyncio.to_thread(
                overlay.spawn, config, netns_pid, directory / "forwarder.log"
            )
            (directory / "forwarder.pid").write_text(str(pid))
        return functools.partial(
            overlay.attach,
            control=str(control),
            ifname=OVERLAY_IFNAME,
            address=overlay_address(cluster.index),
            prefix=OVERLAY_PREFIX,
            mtu=OVERLAY_MTU,
            index=cluster.index,
        )

    async def done(self, session_id: str) -> None:
        """The session's last container here is gone: stop its forwarder, keep the counts
        it logged at its end in the worker's log, and forget the session."""
        directory = self._dir(session_id)
        control = _control(directory)
        pid = _pid(directory / "forwarder.pid")
        if pid is not None and control is not None:  # stop() leaves any other pid alone
            await asyncio.to_thread(overlay.stop, pid, str(control))
        for line in _tail(directory / "forwarder.log"):
            log.info("overlay of session %s: %s", session_id, line)
        await asyncio.to_thread(_forget, directory)

    async def sweep(self, live: set[str]) -> None:
        """After a restart: forget the sessions none of whose containers is here."""
        names = [p.name for p in self.root.iterdir()] if self.root.is_dir() else []
        for session_id in sorted(set(names) - live):
            if valid_session_id(session_id):
                await self.done(session_id)


#: the prefix of the directories (under the temporary directory) of control sockets
_SOCKETS: Final = "jobgate-overlay-"


def _control(directory: Path) -> Path | None:
    """The control socket a session's state names, if it is one of ours."""
    try:
        path = Path((directory / "control").read_text())
    except OSError:
        return None
    ours = path.parent.parent == Path(tempfile.gettempdir())
    return path if ours and path.parent.name.startswith(_SOCKETS) else None


def _running(directory: Path) -> Path | None:
    """The control socket of the session's forwarder, if that forwarder runs."""
    control = _control(directory)
    pid = _pid(directory / "forwarder.pid")
    if control is None or pid is None or not control.is_socket():
        return None
    return control if overlay.is_forwarder(pid, str(control)) else None


def _forget(directory: Path) -> None:
    """Remove a session's state and its control socket's directory."""
    control = _control(directory)
    if control is not None:
        shutil.rmtree(control.parent, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)


def _tail(path: Path, lines: int = 3) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None
