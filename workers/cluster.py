"""The container side of a cluster session: its environment, names, ssh keys and hostfile.

::

    StartKernel.cluster ──▶ cluster_env()     JOBGATE_CLUSTER_*, MASTER_ADDR, RANK ...
                        ──▶ write_config()    DIR/ssh/{id_ed25519, authorized_keys,
                                              known_hosts, config}, DIR/sshd_config,
                                              DIR/ssh_host_ed25519_key, DIR/hostfile
                        ──▶ ClusterNet        hostname, network or /etc/hosts, DIR

The session's ssh key pair and its sshd host key are derived from the 32-byte seed the
gateway made for the session (``WireCluster.ssh_seed``), so every container of the
session, on any node, gets the same keys without another round trip, and nothing secret
is kept after the container is gone. docs/cluster-sessions.md has the whole design.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contract.cluster import cluster_network
from contract.messages import WireCluster
from plugins.runtimes.base import CLUSTER_CONFIG_TARGET, ClusterNet

__all__ = [
    "SSH_BASE_PORT",
    "cluster_env",
    "cluster_net",
    "remove_config",
    "ssh_port",
    "write_config",
]

#: multi-node containers share their node's network: each runs sshd on its own port,
#: SSH_BASE_PORT + a per-session block + its index (docs/cluster-sessions.md)
SSH_BASE_PORT = 20000
_BLOCKS = 600  # blocks of 16 ports between 20000 and 29599
_BLOCK = 16
HOSTFILE = f"{CLUSTER_CONFIG_TARGET}/hostfile"
_KNOWN_ALIAS = "jobgate-cluster"


def _block(session_id: str) -> int:
    digest = hashlib.sha256(session_id.encode()).digest()
    return int.from_bytes(digest[:4], "big") % _BLOCKS


def ssh_port(cluster: WireCluster, session_id: str, index: int) -> int:
    """sshd's port in container *index*: 22 on a private network, else from the block."""
    if cluster.mode == "single-node":
        return 22
    return SSH_BASE_PORT + _block(session_id) * _BLOCK + index


def master_port(cluster: WireCluster, session_id: str) -> int:
    """MASTER_PORT: the usual 29500 on a private network, else the block's last port."""
    if cluster.mode == "single-node":
        return cluster.master_port
    return SSH_BASE_PORT + _block(session_id) * _BLOCK + _BLOCK - 1


def cluster_env(cluster: WireCluster, session_id: str, kernel_id: str) -> dict[str, str]:
    """The environment of one container, with Backend.AI's names as aliases."""
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
        "MASTER_PORT": str(master_port(cluster, session_id)),
        "WORLD_SIZE": str(size),
        "RANK": str(cluster.index),
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


def write_config(directory: Path, cluster: WireCluster, session_id: str) -> None:
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
    blocks = []
    for i, m in enumerate(cluster.members):
        lines = [f"Host {m.hostname}", f"    Port {ssh_port(cluster, session_id, i)}"]
        if cluster.mode == "multi-node" and m.address:
            lines.append(f"    HostName {m.address}")
        blocks.append("\n".join(lines))
    _write(
        ssh / "config",
        "\n".join(blocks) + "\nHost *\n    User root\n    IdentityFile ~/.ssh/id_ed25519\n"
        f"    HostKeyAlias {_KNOWN_ALIAS}\n    StrictHostKeyChecking yes\n"
        "    UserKnownHostsFile ~/.ssh/known_hosts\n    LogLevel ERROR\n",
    )
    _write(directory / "ssh_host_ed25519_key", _private(host))
    port = ssh_port(cluster, session_id, cluster.index)
    _write(
        directory / "sshd_config",
        f"Port {port}\nHostKey {target}/ssh_host_ed25519_key\n"
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


def cluster_net(cluster: WireCluster, session_id: str, config_dir: Path | None) -> ClusterNet:
    """How the runtime connects this container."""
    me = cluster.members[cluster.index]
    if cluster.mode == "single-node":
        return ClusterNet(me.hostname, cluster_network(session_id), {}, config_dir)
    hosts = {m.hostname: m.address or "127.0.0.1" for m in cluster.members}
    return ClusterNet(me.hostname, None, hosts, config_dir)
