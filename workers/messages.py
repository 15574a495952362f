"""The worker's wire contract: queue names, job ids and the payloads on its queues.

The gateway imports this module (and nothing else of ``workers``) to talk to workers:

* ``start_kernel`` / ``stop_kernel`` jobs go onto the node's own queue
  (``NodeInfo.queue``), with job ids derived from the kernel id, so enqueueing twice is
  harmless and a handler that runs twice does nothing new; a scheduling pass sends its
  starts for one node as one ``start_kernels`` job (``{"jobs": [StartKernel, ...]}``)
  and the worker starts each kernel once whatever arrives twice;
* ``handle_events`` jobs carry batches of :class:`KernelEvent` and :class:`NodeInfo`
  from workers to the gateway on ``EVENTS_QUEUE``;
* heartbeats are Redis keys with a TTL, ``heartbeat_key(node_id)``.

Every payload is JSON (see :mod:`workers.queue`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "EVENTS_QUEUE",
    "SCHEDULER_QUEUE",
    "KernelEvent",
    "KernelReport",
    "NodeInfo",
    "StartKernel",
    "StopKernel",
    "heartbeat_key",
    "node_queue",
]

SCHEDULER_QUEUE = "jobgate:queue:scheduler"
EVENTS_QUEUE = "jobgate:queue:events"
HEARTBEAT_PREFIX = "jobgate:heartbeat:"


def node_queue(node_id: str) -> str:
    return f"jobgate:queue:node:{node_id}"


def heartbeat_key(node_id: str) -> str:
    return HEARTBEAT_PREFIX + node_id


def start_job_id(kernel_id: str) -> str:
    return f"start:{kernel_id}"


def stop_job_id(kernel_id: str) -> str:
    return f"stop:{kernel_id}"


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class WireMount(_Message):
    source: str
    target: str
    read_only: bool = False


class WireApp(_Message):
    """An app a session serves: its container port and how the proxy reaches it."""

    name: str
    port: int
    protocol: str = "http"
    start: str | None = None
    strip_prefix: bool = False


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
    resources: dict[str, str] = Field(default_factory=dict)  # ResourceSlots.to_json()
    mounts: list[WireMount] = Field(default_factory=list)
    #: apps from the gateway's image registry (empty: the worker reads the image's label)
    apps: list[WireApp] = Field(default_factory=list)
    #: accelerator slot -> device id -> amount (decimal string)
    devices: dict[str, dict[str, str]] = Field(default_factory=dict)
    cpuset: list[int] | None = None


class StopKernel(_Message):
    """Stop a kernel: SIGTERM, ``grace`` seconds, then SIGKILL (job ``stop_kernel``)."""

    kernel_id: str
    session_id: str
    node_id: str = ""
    reason: str = "terminated on request"
    grace: float = 10.0


EventKind = Literal[
    "preparing",  # accepted by the worker; image pull and device reservation under way
    "progress",  # a line of progress while preparing (pull percentage ...)
    "running",  # the container runs
    "exited",  # it ended by itself or because it was stopped
    "start_failed",  # the platform could not start it (ERROR)
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


class KernelReport(_Message):
    """A kernel a worker holds (registration: the gateway settles the ones not listed)."""

    kernel_id: str
    session_id: str


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
    cgroup: str = "n/a"
    runtime_detail: str = ""
    version: str = ""
    devices: list[dict[str, Any]] = Field(default_factory=list)  # Device.to_json()
    #: slot -> {"quantum": "0.1", "unit": "share" | "device"}
    slot_types: dict[str, dict[str, str]] = Field(default_factory=dict)
    fraction_enforcement: str | None = None
    numa_cpus: dict[str, list[int]] = Field(default_factory=dict)
    kernels: list[KernelReport] = Field(default_factory=list)  # running now


class EventBatch(_Message):
    """The argument of one ``handle_events`` job."""

    node: NodeInfo | None = None  # a registration, when the worker (re)starts
    events: list[KernelEvent] = Field(default_factory=list)
