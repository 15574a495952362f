"""What the planner reads (a Snapshot) and what it returns (a Plan).

``plan(snapshot) -> Plan`` is a pure function: the gateway builds the snapshot from the
database, the planner decides, and the gateway's applier re-checks and commits the plan
in one transaction. Nothing here does I/O, so every planner can be unit-tested with
tables of named cases and benchmarked with thousands of synthetic nodes.

Every field added after the first version has a default, so a snapshot built with only
``now``, ``nodes`` and ``pending`` still plans (no quotas, no names, default pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Literal

from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.fairshare import FairShareView

__all__ = [
    "DeviceState",
    "KernelPlacement",
    "Limits",
    "NodeState",
    "Placement",
    "Plan",
    "RunningSession",
    "SessionRequest",
    "Snapshot",
    "Usage",
]

NodeStatus = Literal["ready", "draining", "cordoned", "lost"]


@dataclass(slots=True)
class DeviceState:
    """One accelerator on a node, with what is already allocated of its slot."""

    id: str
    slot: str  # "cuda.shares", "cuda.device", "rocm.device", ...
    capacity: Decimal
    used: Decimal = Decimal(0)
    numa_node: int | None = None
    model: str = ""
    memory: int = 0
    healthy: bool = True
    #: smallest step an allocation of this slot may take (the accelerator's SlotType
    #: quantum); None: 1 for whole-device slots, the group's ``share_quantum`` otherwise
    quantum: Decimal | None = None
    #: "device": taken whole; "share": fractions of it may be given out.
    #: None: "device" when the slot name ends in ``.device``, else "share"
    unit: Literal["device", "share"] | None = None

    @property
    def free(self) -> Decimal:
        return self.capacity - self.used if self.healthy else Decimal(0)


@dataclass(slots=True)
class NodeState:
    """A node as the planner sees it. ``used`` counts every live allocation."""

    id: str
    capacity: ResourceSlots
    used: ResourceSlots = field(default_factory=ResourceSlots)
    resource_group: str = "default"
    status: NodeStatus = "ready"
    arch: str = "x86_64"
    labels: dict[str, str] = field(default_factory=dict)
    devices: list[DeviceState] = field(default_factory=list)
    limits_enforced: bool = False
    bind_mounts: bool = True  # its runtime can mount host directories
    images: str = "optional"  # its runtime's use of images: required | ignored | optional
    fraction_enforcement: str | None = None  # "mps" | "preload" | "none" | None
    numa_cpus: dict[int, list[int]] = field(default_factory=dict)  # NUMA node -> cpu ids
    used_cpus: set[int] = field(default_factory=set)  # cpus pinned to live kernels
    version: int = 0  # optimistic-concurrency token the applier checks

    @property
    def free(self) -> ResourceSlots:
        return self.capacity - self.used


@dataclass(slots=True)
class SessionRequest:
    """A pending session: what it asks for, per container (kernel)."""

    id: str
    owner: str
    requested: ResourceSlots
    created_at: datetime
    resource_group: str = "default"
    priority: int = 50
    cluster_size: int = 1
    #: "single-node": every container on one node; "multi-node": one node when one fits
    #: them all, else spread over the group's nodes; None: the gang step's own rule
    cluster_mode: str | None = None
    project: str | None = None
    constraints: dict[str, str] = field(default_factory=dict)  # node label -> value
    arch: str | None = None
    requires_limits: bool = False  # asked for cpu/mem and the operator wants them enforced
    needs_mounts: bool = False  # mounts host directories
    has_image: bool | None = None  # names an image (None: unknown, any node will do)
    attempts: int = 0  # passes in a row it did not fit
    depends_on: list[str] = field(default_factory=list)
    starts_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RunningSession:
    """A RUNNING session of the group that may be preempted (the gateway lists only
    those: preemptible, and preempted fewer than the group's max_preemptions times)."""

    id: str
    owner: str
    kernels: tuple[KernelPlacement, ...]
    created_at: datetime
    started_at: datetime
    priority: int = 50
    project: str | None = None
    #: the session that preempted it last: it never preempts that one back
    preempted_by: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """What one user or project holds now: its SCHEDULED..TERMINATING sessions and slots.

    ``slots`` is the sum over every container of those sessions.
    """

    sessions: int = 0
    slots: ResourceSlots = field(default_factory=ResourceSlots)


@dataclass(frozen=True, slots=True)
class Limits:
    """The effective policy of one user or project; ``None`` (or an absent slot) = no limit."""

    max_sessions: int | None = None
    max_slots: ResourceSlots | None = None


@dataclass(slots=True)
class Snapshot:
    """A read-only view of one resource group at one instant (database clock).

    Quota usage and limits are whatever scope the gateway chooses (usually global per
    user/project); sessions placed earlier in the same pass are added by the planner.
    """

    now: datetime
    nodes: list[NodeState]
    pending: list[SessionRequest]
    resource_group: str = "default"
    #: the group's pipeline configuration (``resource_groups.scheduler`` validated)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    #: user id -> what it holds now (absent = nothing)
    user_usage: dict[str, Usage] = field(default_factory=dict)
    #: project id -> what it holds now (absent = nothing)
    project_usage: dict[str, Usage] = field(default_factory=dict)
    #: user id -> effective limits (absent = unlimited)
    user_limits: dict[str, Limits] = field(default_factory=dict)
    #: project id -> effective limits (absent = unlimited)
    project_limits: dict[str, Limits] = field(default_factory=dict)
    #: display names for reasons (absent = the id is shown)
    user_names: dict[str, str] = field(default_factory=dict)
    project_names: dict[str, str] = field(default_factory=dict)
    #: status ("RUNNING", "SUCCEEDED", "FAILED", ...) of every session a pending one
    #: depends on; pending sessions of this snapshot need not be listed
    dependency_status: dict[str, str] = field(default_factory=dict)
    #: the whole cluster's capacity, the denominator of DRF shares (None: these nodes)
    cluster_capacity: ResourceSlots | None = None
    #: decayed historical usage and shares, for the fair-share sequencer (None: none)
    fair_share: FairShareView | None = None
    #: spent budgets: ("user", user id), ("project", project id) or ("member",
    #: "project id/user id") -> each spent kind ("gpu": every accelerator slot, "cpu",
    #: "mem") -> when new sessions of theirs that ask for that kind may start again
    budget_holds: dict[tuple[str, str], dict[str, datetime]] = field(default_factory=dict)
    #: the group's preemptible running sessions (only when its config turns preemption on)
    running: list[RunningSession] = field(default_factory=list)
    #: pending session id -> the sessions preempted for it that have not ended yet
    preempting: dict[str, list[str]] = field(default_factory=dict)


@dataclass(slots=True)
class KernelPlacement:
    node_id: str
    slots: ResourceSlots
    #: accelerator slot -> device id -> amount on that device
    devices: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    cpuset: list[int] | None = None


@dataclass(slots=True)
class Placement:
    session_id: str
    kernels: list[KernelPlacement]


@dataclass(slots=True)
class Plan:
    """The planner's decision for one pass."""

    placements: list[Placement] = field(default_factory=list)
    #: session id -> why it still waits, in words a user can read
    waiting: dict[str, str] = field(default_factory=dict)
    #: session id -> why it can never run (a dependency failed, ...)
    cancelled: dict[str, str] = field(default_factory=dict)
    #: session id -> reason code of its ``waiting`` or ``cancelled`` entry (constants in
    #: ``plugins.scheduling.reasons``); the gateway counts ``schedule_attempts`` up for
    #: the codes in ``reasons.DID_NOT_FIT`` and resets them on placement
    codes: dict[str, str] = field(default_factory=dict)
    #: victim id -> (the pending session it is stopped for, why, in words)
    preempted: dict[str, tuple[str, str]] = field(default_factory=dict)
