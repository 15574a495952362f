"""SQLAlchemy models: the source of truth for sessions, nodes, users and allocations.

::

    users ──< api_keys              projects ──< project_members >── users
      │                             resource_policies (per user / per project)
      └──< sessions ──< kernels >── nodes          resource_groups ──< nodes
              │   └──< session_status_history
              ├──< session_dependencies
              └──< session_logs (chunks, by kernel and stream)

A session is what a user asked for; its kernels are its containers (one, or several
for a cluster session), each placed on a node with its own allocation. A node row keeps
the sum of its live allocations (``occupied``, per device in ``device_used``, pinned
cores in ``used_cpus``) so the scheduler reads free capacity without scanning kernels;
the plan applier and the event consumer change those sums under a row lock.

Lock order, in every transaction that locks more than one row: sessions, then kernels,
then nodes, each in id order. Two writers then never wait for each other in a circle.
Rows are locked FOR NO KEY UPDATE (``key_share=True``): no key ever changes, and inserts
that merely point at a row (history, logs, kernels) do not wait for it.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from gateway.domain.status import TERMINAL

__all__ = [
    "ApiKey",
    "Base",
    "Image",
    "Kernel",
    "Node",
    "Project",
    "ProjectMember",
    "ResourceGroup",
    "ResourcePolicy",
    "Session",
    "SessionDependency",
    "SessionLog",
    "StatusHistory",
    "User",
    "new_id",
    "utcnow",
]

JSONType = JSON().with_variant(JSONB(), "postgresql")


def new_id() -> str:
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out, on both PostgreSQL and SQLite (which drops tz)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSONType}


# ---- identity ------------------------------------------------------------------------
class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16), default="user")  # admin | user
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64), default="")
    #: sha256 of the whole key; keys are 256-bit random, so a fast hash is the right one
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # shown in listings: "jg_3fA9x2"
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProjectMember(Base):
    __tablename__ = "project_members"

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class ResourcePolicy(Base):
    """Limits for one user or one project; NULL means unlimited."""

    __tablename__ = "resource_policies"
    __table_args__ = (UniqueConstraint("scope", "subject_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    scope: Mapped[str] = mapped_column(String(16))  # user | project
    subject_id: Mapped[str] = mapped_column(String(36))
    max_sessions: Mapped[int | None] = mapped_column(Integer, default=None)
    max_pending: Mapped[int | None] = mapped_column(Integer, default=None)
    max_slots: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    #: may the subject's owners commit their sessions to private images (None: no)
    allow_commit: Mapped[bool | None] = mapped_column(Boolean, default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


# ---- nodes ---------------------------------------------------------------------------
class ResourceGroup(Base):
    __tablename__ = "resource_groups"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    #: the scheduler pipeline configuration for this group (SchedulerConfig as JSON)
    scheduler: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255), default="")
    address: Mapped[str] = mapped_column(String(255), default="")
    queue: Mapped[str] = mapped_column(String(255))
    runtime: Mapped[str] = mapped_column(String(32))
    resource_group: Mapped[str] = mapped_column(String(64), default="default", index=True)
    arch: Mapped[str] = mapped_column(String(32), default="x86_64")
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: operator state: ready | draining | cordoned (liveness comes from the heartbeat)
    admin_state: Mapped[str] = mapped_column(String(16), default="ready")
    capacity: Mapped[dict[str, Any]] = mapped_column(default=dict)  # slot -> amount
    occupied: Mapped[dict[str, Any]] = mapped_column(default=dict)  # slot -> amount
    devices: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"items": [Device...]}
    slot_types: Mapped[dict[str, Any]] = mapped_column(default=dict)  # slot -> quantum, unit
    device_used: Mapped[dict[str, Any]] = mapped_column(default=dict)  # device id -> amount
    numa_cpus: Mapped[dict[str, Any]] = mapped_column(default=dict)  # numa node -> [cpu]
    used_cpus: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"cpus": [...]}
    fraction_enforcement: Mapped[str | None] = mapped_column(String(16), default=None)
    limits_enforced: Mapped[bool] = mapped_column(Boolean, default=False)
    #: its runtime can bind-mount host directories (the process runtime cannot)
    bind_mounts: Mapped[bool] = mapped_column(Boolean, default=True)
    #: its runtime's use of images: required (podman) | ignored (process) | optional
    images: Mapped[str] = mapped_column(String(16), default="optional")
    cgroup: Mapped[str] = mapped_column(String(32), default="n/a")
    runtime_detail: Mapped[str] = mapped_column(Text, default="")
    agent_version: Mapped[str] = mapped_column(String(64), default="")
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


# ---- sessions ------------------------------------------------------------------------
#: the rows ``uq_sessions_owner_live_name`` covers: live sessions with a name
LIVE_NAME_WHERE = "name IS NOT NULL AND status NOT IN ({})".format(
    ", ".join(f"'{s}'" for s in sorted(TERMINAL))
)


class Session(Base):
    __tablename__ = "sessions"
    __table_args__ = (
        UniqueConstraint("owner_id", "idempotency_key", name="uq_sessions_idempotency"),
        Index("ix_sessions_status_group", "status", "resource_group"),
        Index("ix_sessions_owner_created", "owner_id", "created_at"),
        # a name is unique among an owner's live sessions (the database says so, so two
        # concurrent creates cannot both take it); ended sessions keep their names
        Index(
            "uq_sessions_owner_live_name",
            "owner_id",
            "name",
            unique=True,
            postgresql_where=text(LIVE_NAME_WHERE),
            sqlite_where=text(LIVE_NAME_WHERE),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str | None] = mapped_column(String(128), default=None)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id"), default=None)
    type: Mapped[str] = mapped_column(String(16))  # batch | interactive
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str] = mapped_column(Text, default="")
    status_changed_at: Mapped[datetime] = mapped_column(default=utcnow)
    image: Mapped[str | None] = mapped_column(String(512), default=None)
    command: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"argv": [...]}
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    workdir: Mapped[str | None] = mapped_column(String(1024), default=None)
    #: "sha256:<hex>" of the uploaded working-directory tar (gateway blob store), or None
    working_dir: Mapped[str | None] = mapped_column(String(71), default=None)
    mounts: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"items": [Mount...]}
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)  # per kernel
    #: the user asked for cpu/mem explicitly (nodes that cannot enforce limits may refuse)
    limits_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    #: it mounts host directories (only nodes whose runtime can bind-mount take it)
    mounts_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    cluster_size: Mapped[int] = mapped_column(Integer, default=1)
    resource_group: Mapped[str] = mapped_column(String(64), default="default")
    priority: Mapped[int] = mapped_column(Integer, default=50)
    constraints: Mapped[dict[str, Any]] = mapped_column(default=dict)
    starts_at: Mapped[datetime | None] = mapped_column(default=None)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    request_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    #: why it still waits, from the latest scheduling pass
    pending_reason: Mapped[str] = mapped_column(Text, default="")
    schedule_attempts: Mapped[int] = mapped_column(Integer, default=0)
    idle_timeout_s: Mapped[int | None] = mapped_column(Integer, default=None)
    #: re-runs allowed after a node is lost (None: the resource group's default)
    max_retries: Mapped[int | None] = mapped_column(Integer, default=None)
    #: re-runs used so far (docs/node-loss.md)
    retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: the node lost under its latest attempt, until the next placement names it
    lost_node: Mapped[str | None] = mapped_column(String(128), default=None)
    #: apps it serves: name -> {"port", "protocol", "strip_prefix", "start"}
    apps: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    scheduled_at: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    ended_at: Mapped[datetime | None] = mapped_column(default=None)
    terminate_requested_at: Mapped[datetime | None] = mapped_column(default=None)


class SessionDependency(Base):
    __tablename__ = "session_dependencies"

    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    depends_on_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class Kernel(Base):
    """One container of a session, with the allocation it holds on its node."""

    __tablename__ = "kernels"
    __table_args__ = (Index("ix_kernels_node_status", "node_id", "status"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    cluster_idx: Mapped[int] = mapped_column(Integer, default=0)
    #: its placement: 1, then one more each time it is placed again (a node was lost);
    #: events and registrations naming another attempt are stale (fencing)
    attempt: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: a KernelStatus (gateway.domain.status): pending, scheduled, ... stopping, exited ...
    status: Mapped[str] = mapped_column(String(16), default="pending")
    node_id: Mapped[str | None] = mapped_column(ForeignKey("nodes.id"), default=None)
    slots: Mapped[dict[str, Any]] = mapped_column(default=dict)  # allocated slots
    devices: Mapped[dict[str, Any]] = mapped_column(default=dict)  # slot -> device -> amt
    cpuset: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"cpus": [...]}
    ports: Mapped[dict[str, Any]] = mapped_column(default=dict)  # app -> host port
    container_id: Mapped[str | None] = mapped_column(String(128), default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    log_offsets: Mapped[dict[str, Any]] = mapped_column(default=dict)  # stream -> bytes kept
    released: Mapped[bool] = mapped_column(Boolean, default=False)  # allocation given back
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    ended_at: Mapped[datetime | None] = mapped_column(default=None)


class StatusHistory(Base):
    __tablename__ = "session_status_history"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    from_status: Mapped[str | None] = mapped_column(String(16), default=None)
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SessionLog(Base):
    """A chunk of one stream of one kernel, appended in arrival order."""

    __tablename__ = "session_logs"
    __table_args__ = (Index("ix_session_logs_session_id", "session_id", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    kernel_id: Mapped[str] = mapped_column(String(36))
    stream: Mapped[str] = mapped_column(String(8))  # stdout | stderr | system
    offset: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Image(Base):
    """An image jobgate knows: operator-registered apps (they override the image's own
    label), or a session committed to a private image of its owner."""

    __tablename__ = "images"

    name: Mapped[str] = mapped_column(String(512), primary_key=True)
    #: name -> {"port", "protocol", "strip_prefix", "start"}
    apps: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: None: a public image (operator-registered); else the user a commit made it for
    owner_id: Mapped[str | None] = mapped_column(String(36), default=None, index=True)
    visibility: Mapped[str] = mapped_column(String(16), default="public")  # | private
    #: a committed image: committing -> ready | failed (registered images are ready)
    state: Mapped[str] = mapped_column(String(16), default="ready")
    session_id: Mapped[str | None] = mapped_column(String(36), default=None)
    detail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
