"""The gateway <-> worker wire contract: every payload that travels between them.

Both sides import this module; neither imports the other:

* ``start_kernel`` / ``stop_kernel`` jobs go onto the node's own queue
  (``NodeInfo.queue``), with job ids derived from the kernel id, so enqueueing twice is
  harmless and a handler that runs twice does nothing new; a scheduling pass sends its
  starts for one node as one ``start_kernels`` job (``{"jobs": [StartKernel, ...]}``)
  and the worker starts each kernel once whatever arrives twice;
* ``handle_events`` jobs carry batches of :class:`KernelEvent` and :class:`NodeInfo`
  from workers to the gateway on ``EVENTS_QUEUE``;
* heartbeats are Redis keys with a TTL holding a :class:`Heartbeat`
  (``contract.keys.heartbeat_key``);
* ``commit_kernel`` jobs (:class:`CommitKernel`) turn a running kernel's container into
  an image pushed to the cluster registry; the worker answers with an
  :class:`ImageCommitted` in the next :class:`EventBatch`;
* log output goes over HTTP (``POST /v1/internal/kernels/{id}/logs`` with the node token)
  as a :class:`LogUpload`, answered by :class:`LogOffsets`.

Queue names and job ids are in :mod:`contract.keys`. Every payload is JSON (see
:mod:`contract.arq`). Messages ignore fields they do not know, so a newer worker and an
older gateway (or the reverse) still understand each other.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CommitKernel",
    "EventBatch",
    "EventKind",
    "Heartbeat",
    "ImageCommitted",
    "KernelEvent",
    "KernelReport",
    "LogChunkWire",
    "LogOffsets",
    "LogUpload",
    "NodeInfo",
    "NodeJoin",
    "NodeJoined",
    "NodeRedisUser",
    "SecretValue",
    "SecretValues",
    "StartKernel",
    "StopKernel",
    "WireApp",
    "WireCluster",
    "WireClusterMember",
    "WireEgress",
    "WireFolder",
    "WireMount",
    "WireSecret",
]


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class WireMount(_Message):
    source: str
    target: str
    read_only: bool = False


class WireSecret(_Message):
    """A secret a kernel receives (``contract.secrets``): its name and where it goes,
    never its value (the worker fetches that with its own credential)."""

    name: str
    env: str | None = None
    path: str | None = None


class SecretValue(WireSecret):
    """A secret's value, as ``GET /v1/internal/kernels/{id}/secrets`` answers a node."""

    value: str = Field(repr=False)


class SecretValues(_Message):
    items: list[SecretValue] = Field(default_factory=list)


class WireFolder(_Message):
    """A data folder every kernel of the session mounts (``contract.folders``): the worker
    bind-mounts ``FOLDERS_ROOT/<id>`` at *target*."""

    id: str
    name: str
    target: str
    read_only: bool = False
    #: mounted without being asked for (a dot-folder of the owner); a node whose runtime
    #: cannot bind-mount skips it instead of failing the start
    automount: bool = False


class WireApp(_Message):
    """An app a session serves: its container port and how the proxy reaches it."""

    name: str
    port: int
    protocol: str = "http"
    start: str | None = None
    strip_prefix: bool = False


class WireClusterMember(_Message):
    """One container of a cluster session, as every other container sees it."""

    hostname: str  # main1, sub1, ...
    kernel_id: str
    node_id: str
    #: the node's address (multi-node: where its overlay forwarder listens)
    address: str = ""
    #: multi-node: the UDP port of its node's overlay forwarder for this session
    port: int = 0


class WireCluster(_Message):
    """What a container of a cluster session needs to find and reach the others.

    ``ssh_seed`` is the 32-byte seed (hex) of the session's ssh key pair, made by the
    gateway; the worker derives the keys from it into the containers. It travels only
    here (the node's own Redis queue, like the session's env) and is never logged.
    """

    mode: Literal["single-node", "multi-node"]
    index: int = Field(ge=0)
    members: list[WireClusterMember]
    ssh_seed: str = Field(default="", repr=False)
    master_port: int = 29500


class WireEgress(_Message):
    """Where a session's containers may connect: its group's ``egress`` and
    ``egress_allow`` when it was placed (docs/security.md, Egress). An older gateway
    sends none: ``open``, what every session had then."""

    mode: Literal["open", "no-private", "none"] = "open"
    allow: list[str] = Field(default_factory=list)  # CIDRs, for "no-private"


class StartKernel(_Message):
    """Run one container of a session on this node (job ``start_kernel``)."""

    kernel_id: str
    session_id: str
    node_id: str
    session_type: str
    command: list[str]
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    #: "sha256:<hex>": fetch this tar from the gateway (GET /v1/blobs/{digest}, node token),
    #: unpack a fresh copy and start the job inside it
    working_dir: str | None = None
    resources: dict[str, str] = Field(default_factory=dict)  # ResourceSlots.to_json()
    mounts: list[WireMount] = Field(default_factory=list)
    #: data folders, the same list for every kernel of the session
    folders: list[WireFolder] = Field(default_factory=list)
    #: apps from the gateway's image registry (empty: the worker reads the image's label)
    apps: list[WireApp] = Field(default_factory=list)
    #: accelerator slot -> device id -> amount (decimal string)
    devices: dict[str, dict[str, str]] = Field(default_factory=dict)
    cpuset: list[int] | None = None
    egress: WireEgress = Field(default_factory=WireEgress)
    #: which placement of this kernel this is (1, 2, ... after a node was lost); the
    #: worker names the container after it and echoes it in every event (fencing)
    attempt: int = 1
    #: a cluster session's names, peers and ssh seed (None: a one-container session)
    cluster: WireCluster | None = None
    #: an interactive session's app secret (contract.tokens.app_secret): the worker puts
    #: it in the container's environment for the apps to check (contract.apps.secret_env);
    #: it travels only here, like the ssh seed, and is never logged ("": none)
    app_secret: str = Field(default="", repr=False)
    #: user secrets it receives (names and targets only; docs/secrets.md)
    secrets: list[WireSecret] = Field(default_factory=list)


class StopKernel(_Message):
    """Stop a kernel: SIGTERM, ``grace`` seconds, then SIGKILL (job ``stop_kernel``)."""

    kernel_id: str
    session_id: str
    node_id: str = ""
    reason: str = "terminated on request"
    grace: float = 10.0
    #: stop only this attempt (None: whatever attempt of the kernel runs here)
    attempt: int | None = None
    #: preempted for this session: the worker first writes the preemption notice
    #: (``JOBGATE_PREEMPTED=1`` ... in ``/home/work/.jobgate/preempted``), docs/fair-share.md
    preempted_by: str | None = None


class CommitKernel(_Message):
    """Commit a kernel's container to ``image`` and push it there (job ``commit_kernel``).

    ``image`` is the full reference in the cluster registry (``host:port/name:tag``);
    bind mounts (the working tree at /home/work, user mounts) are never part of it."""

    kernel_id: str
    session_id: str
    node_id: str
    image: str
    #: the registry is plain HTTP (a loopback or trusted-network registry)
    insecure: bool = False


class ImageCommitted(_Message):
    """The result of a ``commit_kernel`` job: ``ok`` or the reason in words."""

    image: str
    session_id: str
    ok: bool
    detail: str = ""
    digest: str = ""


EventKind = Literal[
    "preparing",  # accepted by the worker; image pull and device reservation under way
    "progress",  # a line of progress while preparing (pull percentage ...)
    "running",  # the container runs
    "exited",  # it ended by itself or because it was stopped
    "start_failed",  # the platform could not start it (ERROR; PENDING again if deferred)
    "not_started",  # a stop arrived before it started (CANCELLED)
    "lost",  # the worker restarted and the container is gone
]


class KernelEvent(_Message):
    kind: EventKind
    kernel_id: str
    session_id: str
    node_id: str
    ts: float  # epoch seconds on the worker
    message: str | None = None  # progress text or the reason in words
    exit_code: int | None = None
    oom_killed: bool = False
    requested_stop: bool = False  # the exit follows a stop_kernel job
    ports: dict[str, int] = Field(default_factory=dict)  # app name -> host port
    apps: list[WireApp] = Field(default_factory=list)  # with "running": what it serves
    container_id: str | None = None
    #: the attempt of the kernel this event is about (None: an older worker that did not
    #: say); the gateway ignores events of an attempt it moved elsewhere
    attempt: int | None = None
    #: "exited": when the command ended (epoch seconds on the worker), where the runtime
    #: recorded it - a kernel that ended while no worker ran ends then, not at the
    #: restart (None: at the moment the gateway applies the event)
    ended_at: float | None = None
    #: "start_failed": it could not start *now* (the runtime said so: a Slurm job Slurm
    #: did not start in time, ...); nothing of it runs, and the gateway places the
    #: session again (PENDING after a backoff) instead of ending it ERROR. A flag, not a
    #: kind of its own: a gateway that does not know it still reads the event, as the
    #: start failure it was before
    deferred: bool = False


class KernelReport(_Message):
    """A kernel a worker holds (registration: the gateway settles the ones not listed)."""

    kernel_id: str
    session_id: str
    attempt: int | None = None


class NodeInfo(_Message):
    """Sent when a worker starts (registration); liveness and device stats travel in the
    heartbeat key instead."""

    node_id: str
    hostname: str
    address: str
    queue: str
    runtime: str
    resource_group: str = "default"
    arch: str = "x86_64"
    labels: dict[str, str] = Field(default_factory=dict)
    capacity: dict[str, str]  # ResourceSlots.to_json()
    limits_enforced: bool = False
    bind_mounts: bool = True  # older workers did not say: their runtimes refuse at start
    #: the runtime's use of images: "required" | "ignored" | "optional" (older workers)
    images: str = "optional"
    #: the egress modes its runtime keeps sessions to (older workers: none but open)
    egress: list[str] = Field(default_factory=lambda: ["open"])
    cgroup: str = "n/a"
    runtime_detail: str = ""
    version: str = ""
    devices: list[dict[str, Any]] = Field(default_factory=list)  # Device.to_json()
    #: slot -> {"quantum": "0.1", "unit": "share" | "device"}
    slot_types: dict[str, dict[str, str]] = Field(default_factory=dict)
    fraction_enforcement: str | None = None
    numa_cpus: dict[str, list[int]] = Field(default_factory=dict)
    kernels: list[KernelReport] = Field(default_factory=list)  # running now
    #: when the worker listed ``kernels`` (epoch seconds on the worker): a kernel the
    #: gateway saw start or change after that is not judged by this list (None: an
    #: older worker)
    ts: float | None = None


class EventBatch(_Message):
    """The argument of one ``handle_events`` job."""

    node: NodeInfo | None = None  # a registration, when the worker (re)starts
    events: list[KernelEvent] = Field(default_factory=list)
    commits: list[ImageCommitted] = Field(default_factory=list)


class Heartbeat(_Message):
    """The value of a node's heartbeat key, rewritten every interval with a TTL."""

    node_id: str
    ts: float  # epoch seconds on the worker
    kernels: list[str] = Field(default_factory=list)  # kernel ids running there
    limits_enforced: bool = False
    stats: list[dict[str, Any]] = Field(default_factory=list)  # DeviceStats.to_json()


class LogChunkWire(_Message):
    stream: Literal["stdout", "stderr"]
    offset: int = Field(ge=0)  # byte offset of ``data`` in its stream
    data: str  # base64


class LogUpload(_Message):
    """The body of ``POST /v1/internal/kernels/{kernel_id}/logs``."""

    session_id: str
    chunks: list[LogChunkWire] = Field(max_length=1024)
    #: the kernel attempt that printed it: output of an attempt the gateway moved
    #: elsewhere is kept under that attempt; one it never placed is refused (404)
    #: (None: an older worker, taken for the kernel's current attempt)
    attempt: int | None = Field(default=None, ge=1)


class NodeJoin(_Message):
    """The body of ``POST /v1/internal/nodes/join`` (with the join token)."""

    #: the same rule as other names (gateway.domain.requests.NAME_PATTERN; in words in
    #: gateway/api/rules.py): a hostname and a suffix fit
    node_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class NodeJoined(_Message):
    """The answer: the node's own credential, shown this once (only its hash is kept)."""

    node_id: str
    credential: str


class NodeRedisUser(_Message):
    """The answer of ``POST /v1/internal/nodes/redis-user``: the node's own Redis user,
    made (again) for it now, whose password it derives from its credential
    (``contract/acl.py``); None where the gateway gives nodes no users of their own."""

    user: str | None = None


class LogOffsets(_Message):
    """The answer: how many bytes of each stream the gateway now holds."""

    offsets: dict[str, int]
