"""A KernelSpec becomes the body of libpod's ``POST /containers/create`` (pure, no I/O).

Validation happens here, before anything reaches Podman, and fails with
:class:`~plugins.runtimes.base.InvalidSpec` naming the bad field. User mounts must lie
under an operator-allowed root (checked after resolving symlinks); the accelerator
reservation's mounts and devices are operator-trusted and pass as they are.

Labels carry what a restarted worker needs to re-attach without any local state:
session, kernel and node ids (``KernelSpec.labels``), the service ports by name and the
memory limit (for the out-of-memory reason).
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Any, Final

from plugins.common import Mount
from plugins.runtimes.base import (
    CLUSTER_CONFIG_TARGET,
    PORT_NAME_PATTERN,
    ClusterNet,
    InvalidSpec,
    KernelSpec,
    ServicePort,
)
from plugins.runtimes.base import format_service_ports as format_ports_label
from plugins.runtimes.base import parse_service_ports as parse_ports_label

from .cgroups import Limits
from .settings import PodmanSettings

__all__ = [
    "LABEL_MEM_LIMIT",
    "LABEL_PORTS",
    "container_name",
    "create_body",
    "format_ports_label",
    "parse_ports_label",
    "validate_env",
    "validate_mounts",
]

LABEL_PORTS: Final = "jobgate.ports"  # "jupyter:http:8888,api:tcp:9000"
LABEL_MEM_LIMIT: Final = "jobgate.mem-limit"  # bytes, only when the limit is enforced
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,190}$")
_PORT_NAME = re.compile(f"^{PORT_NAME_PATTERN}$")
_ENV_NAME = re.compile(r"^[^=\0]+$")


def container_name(kernel_id: str) -> str:
    """One name per kernel, so a second ``start`` of the same kernel finds the first."""
    if not _NAME.match(kernel_id):
        raise InvalidSpec(f"kernel id {kernel_id!r} cannot name a container")
    return f"jobgate-{kernel_id}"


def validate_env(env: dict[str, str]) -> dict[str, str]:
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise InvalidSpec(f"environment variable name {name!r} is not valid")
        if "\0" in value:
            raise InvalidSpec(f"environment variable {name} contains a NUL byte")
    return env


def _clean_target(target: str) -> str:
    if not target.startswith("/") or "\0" in target:
        raise InvalidSpec(f"mount target must be an absolute path: {target!r}")
    if ".." in target.split("/"):
        raise InvalidSpec(f"mount target must not contain '..': {target!r}")
    clean = posixpath.normpath(target)
    if clean == "/":
        raise InvalidSpec("mount target must not be /")
    return clean


def validate_mounts(mounts: list[Mount], allowed_roots: list[Path]) -> list[Mount]:
    """User mounts with sources resolved; InvalidSpec for anything outside the allowed roots."""
    checked: list[Mount] = []
    roots = [Path(os.path.realpath(r)) for r in allowed_roots]
    for mount in mounts:
        if not mount.source.startswith("/") or "\0" in mount.source:
            raise InvalidSpec(f"mount source must be an absolute host path: {mount.source!r}")
        source = Path(os.path.realpath(mount.source))  # follows symlinks: no escape through one
        if not any(source == root or source.is_relative_to(root) for root in roots):
            allowed = ", ".join(str(r) for r in allowed_roots) or "none configured"
            raise InvalidSpec(
                f"mount source {mount.source} is not under an allowed root ({allowed})"
            )
        if not source.exists():
            raise InvalidSpec(f"mount source {mount.source} does not exist")
        checked.append(Mount(str(source), _clean_target(mount.target), mount.read_only))
    return checked


def _validate_ports(ports: list[ServicePort], network: str) -> None:
    seen: set[str] = set()
    for port in ports:
        if not _PORT_NAME.match(port.name) or port.name in seen:
            raise InvalidSpec(f"service port name {port.name!r} is invalid or repeated")
        if port.protocol not in ("http", "tcp"):
            raise InvalidSpec(f"service port {port.name}: protocol must be http or tcp")
        if not 1 <= port.container_port <= 65535:
            raise InvalidSpec(f"service port {port.name}: {port.container_port} is not a port")
        seen.add(port.name)
    if ports and network == "none":
        raise InvalidSpec("this node runs containers without a network: no ports can be published")


def _mount_entry(mount: Mount, *extra: str) -> dict[str, Any]:
    options = ["rbind", "ro" if mount.read_only else "rw", *extra]
    return {"type": "bind", "source": mount.source, "destination": mount.target, "options": options}


def _folder_mounts(spec: KernelSpec) -> list[Mount]:
    """Data folders: their directories come from the worker (the folders root), their
    targets from the user, cleaned like any other."""
    return [Mount(m.source, _clean_target(m.target), m.read_only) for m in spec.folders]


def _mounts(
    spec: KernelSpec, settings: PodmanSettings, home: Path | None, taken: set[str]
) -> tuple[list[Mount], str | None]:
    """The container's mounts and working directory.

    A session's working tree (the worker's own per-kernel copy, so not subject to the
    user's mount roots) is bind-mounted read-write at ``working_dir_target``, where the
    job starts unless it names another workdir. Rootless: the host user who owns the
    copy is the container's root, so a job running as root (the images' default) owns
    its files there; a non-root image user can read them.

    Without a working tree, *home* (an empty per-kernel host directory) is bind-mounted
    there instead: ``/home/work`` is then never in the container's own filesystem, so a
    commit of the session (``podman commit`` leaves bind mounts out) never contains it
    (unless a mount or a data folder in *taken* is already there).
    """
    mounts = validate_mounts(spec.mounts, settings.allowed_mount_roots) + spec.reservation.mounts
    cluster = spec.cluster
    if cluster is not None and cluster.config_dir is not None:  # the worker's own files
        mounts.append(Mount(str(cluster.config_dir), CLUSTER_CONFIG_TARGET))
        mounts.append(Mount(str(cluster.config_dir / "ssh"), "/root/.ssh"))
    workdir = spec.workdir
    if spec.working_dir is not None:
        mounts.append(Mount(str(spec.working_dir), settings.working_dir_target))
        workdir = workdir or settings.working_dir_target
    elif home is not None and settings.working_dir_target not in taken | {m.target for m in mounts}:
        mounts.append(Mount(str(home), settings.working_dir_target))
    return mounts, workdir


def _network(settings: PodmanSettings, spec: KernelSpec) -> dict[str, Any]:
    """The network namespace; with ``host_loopback``, 10.0.2.2 is the host's 127.0.0.1.
    Egress ``none`` with nothing to publish and no peers: no network at all."""
    lone = not spec.ports and (spec.cluster is None or spec.cluster.link is not None)
    mode = "none" if spec.egress.mode == "none" and lone else settings.network
    network: dict[str, Any] = {"netns": {"nsmode": mode}}
    if settings.host_loopback and mode == "slirp4netns":
        network["network_options"] = {"slirp4netns": ["allow_host_loopback=true"]}
    return network


def create_body(
    spec: KernelSpec,
    settings: PodmanSettings,
    *,
    native: Limits | None,
    mem_label: int | None,
    home: Path | None = None,
) -> dict[str, Any]:
    """The libpod SpecGenerator for *spec*.

    *native*: limits Podman itself enforces (cgroup v2); None where the runtime writes them
    (v1-delegated) or nothing can (v1-none). *mem_label*: the memory limit that holds, for
    the out-of-memory reason after a restart. *home*: see :func:`_mounts`.
    """
    if not spec.image:
        raise InvalidSpec("the podman runtime needs an image")
    if any("\0" in arg for arg in spec.command):
        raise InvalidSpec("command contains a NUL byte")
    if spec.workdir is not None and not spec.workdir.startswith("/"):
        raise InvalidSpec(f"working directory must be absolute: {spec.workdir!r}")
    folders = _folder_mounts(spec)
    mounts, workdir = _mounts(spec, settings, home, taken={m.target for m in folders})
    targets = [m.target for m in [*mounts, *folders]]
    if len(set(targets)) != len(targets):
        raise InvalidSpec(f"two mounts share a target: {sorted(targets)}")
    _validate_ports(spec.ports, settings.network)
    labels = dict(spec.labels)
    if spec.ports:
        labels[LABEL_PORTS] = format_ports_label(spec.ports)
    if mem_label is not None:
        labels[LABEL_MEM_LIMIT] = str(mem_label)
    body: dict[str, Any] = {
        "name": container_name(spec.kernel_id),
        "image": spec.image,
        "env": validate_env({**settings.default_env, **spec.full_env}),
        "labels": labels,
        "init": True,  # catatonit as pid 1: reaps zombies, forwards SIGTERM, fast stop
        "privileged": False,
        "no_new_privileges": True,
        "cap_drop": list(settings.cap_drop),
        "cap_add": list(settings.cap_add),
        **_network(settings, spec),
        "stop_timeout": int(settings.stop_grace),
        # folders after the working directory: /home/work/NAME lands inside /home/work;
        # default user namespace (container root = the Podman user), see docs/folders.md
        "mounts": [_mount_entry(m) for m in mounts]
        + [_mount_entry(m, "nosuid", "nodev") for m in folders],
        "devices": [
            {"path": d} for d in [*spec.reservation.devices, *spec.reservation.cdi_devices]
        ],
    }
    if spec.command:
        body["command"] = list(spec.command)
    if workdir:
        body["work_dir"] = workdir
        body["create_working_dir"] = True  # as Docker does; Podman refuses a missing one
    if spec.ports:
        body["portmappings"] = [
            {
                "container_port": p.container_port,
                "host_ip": settings.publish_host_ip,
                "host_port": 0,  # Podman picks a free one; read back after start
                "protocol": "tcp",
            }
            for p in spec.ports
        ]
    if settings.nofile is not None:
        body["r_limits"] = [{"type": "nofile", "soft": settings.nofile, "hard": settings.nofile}]
    if native is not None and not native.empty:
        body["resource_limits"] = native.podman_resource_limits()
    return _cluster_body(body, spec)


#: before the command of a cluster session's container: start sshd when the image has it
#: (docs/cluster-sessions.md); the command then runs as it would alone
SSHD_PREAMBLE: Final = (
    f"if [ -x /usr/sbin/sshd ] && [ -f {CLUSTER_CONFIG_TARGET}/sshd_config ]; then "
    "mkdir -p /run/sshd && chmod 0755 /run/sshd && "
    f"/usr/sbin/sshd -f {CLUSTER_CONFIG_TARGET}/sshd_config "
    '|| echo "jobgate: sshd did not start" >&2; fi; exec "$@"'
)


def _cluster_body(body: dict[str, Any], spec: KernelSpec) -> dict[str, Any]:
    """Name, network and sshd of a cluster session's container."""
    cluster: ClusterNet | None = spec.cluster
    if cluster is None:
        return body
    body["hostname"] = cluster.hostname
    if cluster.network is not None:  # single-node: the session's own network, fixed address
        body["netns"] = {"nsmode": "bridge"}
        joined: dict[str, Any] = {"aliases": [cluster.hostname]}
        if cluster.hostname in cluster.hosts:
            joined["static_ips"] = [cluster.hosts[cluster.hostname]]
        body["networks"] = {cluster.network: joined}
    elif cluster.attach is None:  # multi-node: its own namespace; peers over the overlay
        raise InvalidSpec("a multi-node container needs its session's overlay")
    body["hostadd"] = [f"{name}:{address}" for name, address in sorted(cluster.hosts.items())]
    # sshd separates privileges into a chroot (Podman's default set has SYS_CHROOT too)
    body["cap_add"] = sorted({*body["cap_add"], "SYS_CHROOT"})
    if spec.command and cluster.config_dir is not None:
        body["command"] = ["/bin/sh", "-c", SSHD_PREAMBLE, "jobgate-cluster", *spec.command]
    return body
