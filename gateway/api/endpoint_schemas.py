"""Responses of ``/v1/endpoints`` (the requests are in ``gateway.domain.endpoints``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from contract.endpoints import Probe
from gateway.domain.autoscale import AutoscaleSettings
from gateway.domain.rollout import RolloutSettings

__all__ = [
    "EndpointEventPublic",
    "EndpointPublic",
    "EndpointSummary",
    "ReplicaPublic",
    "RevisionPublic",
    "SecretTarget",
    "TokenCreated",
    "TokenPublic",
]


class SecretTarget(BaseModel):
    """A secret a revision's replicas receive and where: its name, never its value."""

    name: str
    env: str | None = None
    path: str | None = None


class RevisionPublic(BaseModel):
    number: int
    image: str | None
    command: list[str]
    port: int
    resources: dict[str, Any]
    env: dict[str, str]
    working_dir: str | None
    resource_group: str
    probe: Probe
    rollout: RolloutSettings
    folders: list[dict[str, Any]] = Field(
        default_factory=list, description="data folders each replica mounts: id, name, target"
    )
    secrets: list[SecretTarget] = Field(
        default_factory=list, description="secrets each replica receives: names, never values"
    )
    state: str = Field(description="active, or rolled-back (it never became ready)")
    reason: str
    created_by: str
    created_at: datetime


class ReplicaPublic(BaseModel):
    index: int
    session_id: str
    revision: int
    state: str = Field(description="starting | serving | draining | stopped")
    session_status: str
    node: str | None
    ready: bool
    health: str = Field(description="why it is not ready, from the proxy's probe")
    in_flight: int
    rps: float = Field(description="requests per second sent to it, all proxies, last ~10 s")
    reason: str


class EndpointEventPublic(BaseModel):
    at: datetime
    kind: str
    message: str
    inputs: dict[str, Any]


class EndpointSummary(BaseModel):
    id: str
    name: str
    owner: str
    url: str
    public: bool
    status: str
    status_reason: str
    revision: int
    desired_replicas: int
    ready_replicas: int
    autoscale: AutoscaleSettings
    to_zero_after_s: float | None = Field(
        description="about how long after the last request the endpoint is at zero "
        "replicas: the longer of idle_to_zero_s and stable_window_s, plus "
        "scale_down_delay_s; null when min_replicas keeps some"
    )
    created_at: datetime
    updated_at: datetime


class EndpointPublic(EndpointSummary):
    stable_revision: int | None
    current: RevisionPublic
    replicas: list[ReplicaPublic]
    in_flight: int
    queued: int
    rps: float = Field(description="requests per second, all proxies, last ~10 s")
    events: list[EndpointEventPublic] = Field(description="recent decisions, newest first")
    revisions: list[RevisionPublic]


class TokenPublic(BaseModel):
    id: str
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="shown once; only its SHA-256 is kept")
