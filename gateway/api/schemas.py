"""Request and response bodies (Create / Public variants), validated at the edge.

Unknown fields are refused (``extra="forbid"``) so a typo such as ``comand`` is a 422
naming the field, never a silently ignored option. The session request (``SessionCreate``,
``MountSpec``) is the domain's own (``gateway.domain.requests``), re-exported here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from gateway.api.rules import USER_NAME_PATTERN
from gateway.domain.requests import Input, MountSpec, SessionCreate

__all__ = [
    "ApiKeyCreated",
    "HistoryItem",
    "KernelPublic",
    "MountSpec",
    "NodeList",
    "NodePublic",
    "Page",
    "SessionCreate",
    "SessionList",
    "SessionPublic",
    "UserCreate",
    "UserPublic",
]


class HistoryItem(BaseModel):
    from_status: str | None
    to_status: str
    reason: str
    at: datetime


class KernelPublic(BaseModel):
    id: str
    index: int
    hostname: str = "main1"  # main1, sub1, ... (docs/cluster-sessions.md)
    status: str
    node: str | None
    slots: dict[str, str]
    devices: dict[str, dict[str, str]]
    cpuset: list[int] | None
    ports: dict[str, int]
    exit_code: int | None
    attempt: int = 1  # its placement: one more each time a lost node made it run again


class SessionPublic(BaseModel):
    id: str
    name: str | None
    type: str
    owner: str
    project: str | None
    status: str
    status_reason: str
    pending_reason: str | None
    exit_code: int | None
    image: str | None
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    working_dir: str | None = None
    resources: dict[str, str]
    resource_group: str
    priority: int
    cluster_size: int
    cluster_mode: str | None = None  # single-node | multi-node
    stop_when: str = "main-done"
    constraints: dict[str, str]
    depends_on: list[str]
    starts_at: datetime | None
    node: str | None
    kernels: list[KernelPublic]
    created_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    status_changed_at: datetime
    idle_timeout: int | None
    max_retries: int | None = None  # as asked; None: the resource group's default
    retries: int = 0  # re-runs after lost nodes so far
    #: as asked (None: a batch session yes, an interactive one no, where its group preempts)
    preemptible: bool | None = None
    preemptions: int = 0  # times it was preempted and queued again
    preempted_by: str | None = None  # the session it was preempted for last
    #: data folders every container mounts: {"id", "name", "target", "read_only", "automount"}
    folders: list[dict[str, Any]] = Field(default_factory=list)
    apps: list[str]
    #: an array's sessions (``count``): its id (its first session's), index and size
    array_id: str | None = None
    array_index: int | None = None
    array_size: int | None = None
    history: list[HistoryItem] | None = None
    #: where its end is announced; the secret that signs it is shown in the create answer only
    callback_url: str | None = None
    callback_secret: str | None = None
    #: interactive sessions: when the proxy last carried traffic, and when idleness ends it
    last_activity_at: datetime | None = None
    idle_deadline: datetime | None = None


class Page(BaseModel):
    next_cursor: str | None = None


class SessionList(Page):
    items: list[SessionPublic]


class NodePublic(BaseModel):
    id: str
    hostname: str
    address: str
    status: str  # ready | disconnected (its worker restarts, its kernels run on) | lost
    admin_state: str  # ready | draining | cordoned
    runtime: str
    resource_group: str
    arch: str
    labels: dict[str, str]
    capacity: dict[str, str]
    occupied: dict[str, str]
    free: dict[str, str]
    limits_enforced: bool
    bind_mounts: bool = Field(description="its runtime can mount host directories")
    images: str = Field(
        description="its runtime's use of images: required (podman), ignored (process), "
        "optional (sim)"
    )
    cgroup: str
    runtime_detail: str
    fraction_enforcement: str | None
    egress: list[str] = Field(
        description="the egress modes its runtime keeps sessions to (open, no-private, none)"
    )
    devices: list[dict[str, Any]]
    #: slot -> {"quantum": "0.1", "unit": "share" | "device"}: the steps a request takes
    slot_types: dict[str, dict[str, str]] = Field(default_factory=dict)
    #: device id -> how much of it is allocated now
    device_used: dict[str, str] = Field(default_factory=dict)
    stats: list[dict[str, Any]]
    running_kernels: int
    last_seen_at: datetime
    registered_at: datetime


class NodeList(BaseModel):
    items: list[NodePublic]


class UserCreate(Input):
    name: str = Field(pattern=USER_NAME_PATTERN)
    role: Literal["admin", "user"] = "user"


class UserPublic(BaseModel):
    id: str
    name: str
    role: str
    created_at: datetime


class ApiKeyCreate(Input):
    name: str = Field(default="", max_length=64)


class ApiKeyCreated(BaseModel):
    id: str
    user: str
    name: str
    prefix: str
    key: str = Field(description="shown once; store it now")
