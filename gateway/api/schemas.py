"""Request and response bodies (Create / Public variants), validated at the edge.

Unknown fields are refused (``extra="forbid"``) so a typo such as ``comand`` is a 422
naming the field, never a silently ignored option.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.api.validation import ENV_NAME, parse_start, valid_image_reference

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

SessionType = Literal["batch", "interactive"]
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MountSpec(_Input):
    source: str = Field(description="absolute host path inside an operator-allowed root")
    target: str = Field(description="absolute path in the session")
    read_only: bool = False

    @field_validator("source", "target")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value or ".." in value.split("/"):
            raise ValueError("must be an absolute path without '..'")
        return value


class SessionCreate(_Input):
    """What a client asks for. Resources are per container (kernel)."""

    type: SessionType = "batch"
    name: str | None = Field(default=None, pattern=_NAME)
    image: str | None = Field(
        default=None, description="image reference; runtime default if absent"
    )
    command: list[str] = Field(default_factory=list, max_length=4096)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = Field(default=None, max_length=1024)
    resources: dict[str, str | int | float] = Field(
        default_factory=dict, description='e.g. {"cpu": "2", "mem": "4g", "cuda.shares": "0.5"}'
    )
    mounts: list[MountSpec] = Field(default_factory=list, max_length=64)
    resource_group: str = Field(default="default", pattern=_NAME)
    project: str | None = Field(default=None, pattern=_NAME)
    priority: int = Field(default=50, ge=0, le=100)
    cluster_size: int = Field(default=1, ge=1, le=64)
    constraints: dict[str, str] = Field(default_factory=dict, description="node labels to match")
    depends_on: list[str] = Field(default_factory=list, max_length=256)
    starts_at: datetime | timedelta | None = Field(
        default=None, description="ISO 8601 time or a delay such as +10m (database clock)"
    )
    idle_timeout: int | None = Field(default=None, ge=60, description="seconds (interactive)")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and not valid_image_reference(value):
            raise ValueError(f"not an image reference: {value!r}")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if any("\x00" in arg for arg in value):
            raise ValueError("arguments must not contain NUL bytes")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not ENV_NAME.match(key):
                raise ValueError(f"not an environment variable name: {key!r}")
            if "\x00" in item:
                raise ValueError(f"value of {key} contains a NUL byte")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\x00" in value):
            raise ValueError("must be an absolute path")
        return value

    @field_validator("starts_at", mode="before")
    @classmethod
    def _starts_at(cls, value: object) -> object:
        return parse_start(value) if isinstance(value, str) else value

    @field_validator("depends_on")
    @classmethod
    def _deps(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


class HistoryItem(BaseModel):
    from_status: str | None
    to_status: str
    reason: str
    at: datetime


class KernelPublic(BaseModel):
    id: str
    index: int
    status: str
    node: str | None
    slots: dict[str, str]
    devices: dict[str, dict[str, str]]
    cpuset: list[int] | None
    ports: dict[str, int]
    exit_code: int | None


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
    resources: dict[str, str]
    resource_group: str
    priority: int
    cluster_size: int
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
    apps: list[str]
    history: list[HistoryItem] | None = None
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
    status: str  # ready | lost
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
    cgroup: str
    runtime_detail: str
    fraction_enforcement: str | None
    devices: list[dict[str, Any]]
    stats: list[dict[str, Any]]
    running_kernels: int
    last_seen_at: datetime
    registered_at: datetime


class NodeList(BaseModel):
    items: list[NodePublic]


class UserCreate(_Input):
    name: str = Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    role: Literal["admin", "user"] = "user"


class UserPublic(BaseModel):
    id: str
    name: str
    role: str
    created_at: datetime


class ApiKeyCreate(_Input):
    name: str = Field(default="", max_length=64)


class ApiKeyCreated(BaseModel):
    id: str
    user: str
    name: str
    prefix: str
    key: str = Field(description="shown once; store it now")
