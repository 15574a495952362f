"""The container runtime contract (entry-point group ``jobgate.runtimes.v1``).

The worker drives a runtime through one kernel's life::

    await rt.prepare(spec, progress)        # pull the image; ImageNotFound ends it at once
    handle = await rt.start(spec)           # create + start; returns once it runs
                                            # (StartDeferred: not now, place it again)
    async for chunk in rt.logs(handle, {}): # stdout/stderr with byte offsets, until exit
        ...
    status = await rt.wait(handle)          # exit code, OOM, reason
    await rt.remove(handle)

``await rt.commit(handle, image)`` turns a running kernel's container into an image in a
registry (only container runtimes can; the others raise :class:`CommitUnsupported`).

And, after a restart of the worker, ``await rt.list_kernels()`` finds every kernel this
node started (by label, pid file, ...) so the worker re-attaches instead of killing them.
``logs()`` takes the byte offsets already shipped, so a re-attached worker resumes where
it stopped. Runtimes never see the database or the gateway.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from plugins.accelerators.base import Reservation
from plugins.common import EgressMode, Mount
from plugins.resources import ResourceSlots

__all__ = [
    "CLUSTER_CONFIG_TARGET",
    "LABEL_INSTANCE",
    "LABEL_KERNEL",
    "LABEL_NODE",
    "LABEL_SESSION",
    "PORT_NAME_PATTERN",
    "SERVICE_PORTS_LABEL",
    "ClusterNet",
    "CommitUnsupported",
    "Egress",
    "ExitStatus",
    "ImageNotFound",
    "InvalidSpec",
    "KernelHandle",
    "KernelSpec",
    "LogChunk",
    "NetworkRuntime",
    "ProgressCallback",
    "RegistryUnreachable",
    "Runtime",
    "RuntimeContext",
    "RuntimeFailure",
    "RuntimeInfo",
    "ServicePort",
    "StartDeferred",
    "format_service_ports",
    "parse_service_ports",
]

LABEL_SESSION = "jobgate.session"
LABEL_KERNEL = "jobgate.kernel"
LABEL_NODE = "jobgate.node"
#: the worker instance (one per data dir) that started it: workers sharing a Podman user
#: and even a node id never adopt each other's containers (workers/identity.py)
LABEL_INSTANCE = "jobgate.instance"

Stream = Literal["stdout", "stderr"]
ProgressCallback = Callable[[str], Awaitable[None]]


class RuntimeFailure(RuntimeError):
    """The runtime could not do what was asked; the message is shown to the user."""


class StartDeferred(RuntimeFailure):
    """It cannot start here *now* (another scheduler's jobs hold the node, ...), and
    nothing of it is left running: the worker reports a ``start_failed`` marked
    ``deferred``, and the gateway places the session again (PENDING, after a backoff)
    instead of ending it ERROR. The message says why, in the words of whoever refused."""


class ImageNotFound(RuntimeFailure):
    """The image is neither present nor pullable. Final: never retried."""

    def __init__(self, image: str, detail: str = "") -> None:
        super().__init__(f"image not found: {image}" + (f" ({detail})" if detail else ""))
        self.image = image


class RegistryUnreachable(ImageNotFound):
    """The image is not here and its registry cannot be reached (no network, a name
    that does not resolve, a refused or timed-out connection). Final, as ImageNotFound:
    the message says which, so nobody goes looking for a typo in the image's name."""

    def __init__(self, image: str, registry: str, detail: str = "") -> None:
        RuntimeFailure.__init__(
            self,
            f"registry unreachable: {registry} (pulling {image})"
            + (f" ({detail})" if detail else ""),
        )
        self.image = image
        self.registry = registry


class CommitUnsupported(RuntimeFailure):
    """This runtime has no image to commit a kernel to (processes, simulated kernels)."""


class InvalidSpec(RuntimeFailure):
    """The kernel spec asks for something this runtime refuses (a path, a device...)."""


@dataclass(frozen=True, slots=True)
class ServicePort:
    """A port an app listens on inside the container, e.g. ``jupyter:http:8888``."""

    name: str
    protocol: str  # "http" | "tcp"
    container_port: int


SERVICE_PORTS_LABEL = "jobgate.service-ports"
# A service port's name is also its app name in proxy URLs and DNS labels
# ({session}--{app}); contract.routes.APP_NAME_PATTERN is the same rule (a test checks).
PORT_NAME_PATTERN: Final = r"[a-z0-9][a-z0-9_-]{0,31}"
_PORT_NAME = re.compile(f"^{PORT_NAME_PATTERN}$")


def parse_service_ports(text: str) -> list[ServicePort]:
    """``jupyter:http:8888,code-server:http:8080`` -> ServicePorts (junk items skipped)."""
    ports: list[ServicePort] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, rest = item.partition(":")
        protocol, _, number = rest.partition(":")
        if number.isdigit() and _PORT_NAME.match(name) and 0 < int(number) < 65536:
            ports.append(ServicePort(name, protocol or "http", int(number)))
    return ports


def format_service_ports(ports: list[ServicePort]) -> str:
    return ",".join(f"{p.name}:{p.protocol}:{p.container_port}" for p in ports)


@dataclass(frozen=True, slots=True)
class Egress:
    """Where a container may connect (its resource group's ``egress``, docs/security.md).

    ``mode``: ``open``, anything its node reaches; ``no-private``, no loopback,
    link-local, private-range or node address except the networks in ``allow``;
    ``none``, no outbound connection (the proxy still reaches its published ports).
    """

    mode: EgressMode = "open"
    allow: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterNet:
    """How one container of a cluster session joins the others (the worker fills it).

    ``hosts``: every container's name -> address, written into ``/etc/hosts`` (peers are
    found without a DNS server, which may drop queries while networks come and go).
    ``network``: a private network (made with :class:`NetworkRuntime`) the container
    joins at its own address in ``hosts`` (single-node); None (multi-node): the
    container keeps its own namespace like a lone one, and reaches the peers over the
    interface ``link``, which ``attach`` puts into the created container (called with its
    pid before it starts; a runtime without its own namespaces ignores both).
    ``config_dir``: the worker's per-container directory of ssh keys, ssh/sshd
    configuration and MPI hostfile, mounted at :data:`CLUSTER_CONFIG_TARGET`, its
    ``ssh`` folder at ``/root/.ssh``; ``sshd`` is started from there before the command.
    """

    hostname: str
    network: str | None = None
    hosts: dict[str, str] = field(default_factory=dict)
    config_dir: Path | None = None
    link: str | None = None
    attach: Callable[[int], Awaitable[None]] | None = None


CLUSTER_CONFIG_TARGET: Final = "/opt/jobgate/cluster"


@runtime_checkable
class NetworkRuntime(Protocol):
    """A runtime that can make private networks (cluster sessions)."""

    async def create_network(self, name: str) -> str:
        """Create it (nothing if it exists); its IPv4 subnet (CIDR), from which the worker
        gives each container of the session a fixed address. RuntimeFailure with the
        reason if it cannot."""
        ...

    async def remove_network(self, name: str) -> None:
        """Remove it (nothing if it is gone)."""
        ...

    async def list_networks(self) -> list[str]:
        """The networks this node's worker instance made (to sweep after a restart)."""
        ...

    async def netns_pid(self) -> int | None:
        """A process in the network namespace where this node's containers publish ports
        and reach the node's address (where a session's overlay forwarder must live);
        None: the caller's own."""
        ...


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """Everything needed to run one container of a session; built by the worker."""

    kernel_id: str
    session_id: str
    node_id: str
    command: list[str]
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    #: the host directory holding this kernel's own copy of the session's working tree
    #: (unpacked by the worker); the job starts inside it. None: no working directory.
    working_dir: Path | None = None
    resources: ResourceSlots = field(default_factory=ResourceSlots)
    mounts: list[Mount] = field(default_factory=list)
    #: data folders (worker-resolved directories on the shared folders root; not subject
    #: to the user mount roots), the same for every kernel of the session
    folders: list[Mount] = field(default_factory=list)
    ports: list[ServicePort] = field(default_factory=list)
    reservation: Reservation = field(default_factory=Reservation)
    cpuset: list[int] | None = None
    pids_limit: int | None = None
    #: a cluster session's container (docs/cluster-sessions.md); None: a lone container
    cluster: ClusterNet | None = None
    #: where it may connect; a runtime refuses a mode it did not report in its info
    egress: Egress = field(default_factory=Egress)

    @property
    def labels(self) -> dict[str, str]:
        return {
            LABEL_SESSION: self.session_id,
            LABEL_KERNEL: self.kernel_id,
            LABEL_NODE: self.node_id,
        }

    @property
    def full_env(self) -> dict[str, str]:
        """The session's env with the accelerator reservation's variables on top."""
        return {**self.env, **self.reservation.env}


@dataclass(frozen=True, slots=True)
class KernelHandle:
    """A started kernel as its runtime knows it; enough to re-attach after a restart."""

    kernel_id: str
    session_id: str
    ref: str  # pid, container id, ...
    ports: dict[str, int] = field(default_factory=dict)  # service name -> host port
    started_at: float = 0.0  # epoch seconds
    exited: bool = False  # found already exited by list_kernels()
    #: False: created but its process never ran (a worker died between create and start)
    started: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # runtime-private (spec echo, ...)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    exit_code: int
    oom_killed: bool = False
    reason: str | None = None  # e.g. "out of memory (limit 64MiB)", "killed by signal 9"
    #: when it ended (epoch seconds), where the runtime recorded it: a kernel that ended
    #: while no worker ran is reported with its real end, not the restart's moment
    ended_at: float | None = None


@dataclass(frozen=True, slots=True)
class LogChunk:
    stream: Stream
    offset: int  # byte offset of data[0] within its stream
    data: bytes


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """What a runtime reports about itself on this node (heartbeat, ``nodes ls``)."""

    name: str
    available: bool
    version: str = ""
    limits_enforced: bool = False
    cgroup: str = "n/a"  # "v2", "v1-delegated", "v1-none", "n/a"
    bind_mounts: bool = True  # can put a host directory inside a session
    #: how it treats a session's image: "required" (containers: no image, no session),
    #: "ignored" (local processes run on the host), "optional" (sim: either)
    images: str = "optional"
    detail: str = ""
    #: the egress modes (:class:`Egress`) it keeps its containers to; ``open`` is none
    egress: tuple[EgressMode, ...] = ("open",)


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """Where a runtime may keep its own state on this node, and whose kernels are its."""

    node_id: str
    state_dir: Path
    #: the worker instance; label every kernel with it and re-attach only to those
    instance: str = ""


class Runtime(Protocol):
    """Implemented by every runtime plugin; built as ``factory(settings, context)``."""

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]]

    async def info(self) -> RuntimeInfo: ...

    async def prepare(self, spec: KernelSpec, progress: ProgressCallback) -> None: ...

    async def image_labels(self, image: str) -> dict[str, str]:
        """An image's labels (after prepare); ``{}`` where the runtime has no images."""
        ...

    async def start(self, spec: KernelSpec) -> KernelHandle: ...

    async def list_kernels(self) -> list[KernelHandle]: ...

    async def wait(self, handle: KernelHandle) -> ExitStatus: ...

    def logs(self, handle: KernelHandle, offsets: dict[str, int]) -> AsyncIterator[LogChunk]: ...

    async def stop(self, handle: KernelHandle, grace: float) -> None: ...

    async def write_notice(self, handle: KernelHandle, name: str, text: str) -> None:
        """Write *text* to ``.jobgate/<name>`` in the running kernel's home (``/home/work``
        in a container, ``$HOME`` of a process): the preemption notice. RuntimeFailure if
        it cannot; a runtime with no files (sim) does nothing."""
        ...

    async def remove(self, handle: KernelHandle) -> None: ...

    async def commit(self, handle: KernelHandle, image: str) -> str:
        """Commit the running kernel's filesystem (never its bind mounts) to *image* and
        push it to *image*'s registry; the pushed digest. CommitUnsupported if it cannot."""
        ...

    async def close(self) -> None: ...
