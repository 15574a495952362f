"""SQLAlchemy models: the source of truth for sessions, nodes, users and allocations.

::

    users ──< api_keys              projects ──< project_members >── users
      │                             resource_policies (per user / per project)
      ├──< endpoints ──< endpoint_revisions, endpoint_tokens, endpoint_events
      │       └──< sessions (replicas: type inference, endpoint_id + revision + index)
      └──< sessions ──< kernels >── nodes          resource_groups ──< nodes
              │   └──< session_status_history
              ├──< session_dependencies
              ├──< session_logs (chunks, by kernel and stream)
              └──< session_folders >── folders ──< folder_shares >── users

    job_templates ──< hook_triggers ──< hook_deliveries        (docs/pipelines.md)
    webhooks ──< webhook_deliveries >── webhook_events (the outbox of events)
    usage: one row per kernel attempt that ran (gateway/db/usage.py; no foreign keys)
    audit_log: one row per state-changing API call (append-only; no foreign keys)

A session is what a user asked for; its kernels are its containers (one, or several
for a cluster session), each placed on a node with its own allocation. A node row keeps
the sum of its live allocations (``occupied``, per device in ``device_used``, pinned
cores in ``used_cpus``) so the scheduler reads free capacity without scanning kernels;
the plan applier and the event consumer change those sums under a row lock.

Lock order, in every transaction that locks more than one row: (an endpoint, then its
replica) sessions, then kernels, then nodes, each in id order. Two writers then never
wait for each other in a circle.
Rows are locked FOR NO KEY UPDATE (``key_share=True``): no key ever changes, and inserts
that merely point at a row (history, logs, kernels) do not wait for it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
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
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from gateway.domain.status import TERMINAL

__all__ = [
    "ApiKey",
    "AuditRecord",
    "Base",
    "Endpoint",
    "EndpointEvent",
    "EndpointRevision",
    "EndpointToken",
    "Folder",
    "FolderShare",
    "HookDelivery",
    "HookTrigger",
    "Image",
    "JobTemplate",
    "Kernel",
    "Node",
    "NodeCredential",
    "Project",
    "ProjectMember",
    "ResourceGroup",
    "ResourcePolicy",
    "Secret",
    "Session",
    "SessionDependency",
    "SessionFolder",
    "SessionLog",
    "StatusHistory",
    "Usage",
    "User",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "new_id",
    "transient",
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


ModelT = TypeVar("ModelT", bound=Base)


def transient(model: type[ModelT], values: Mapping[str, Any]) -> ModelT:
    """An unsaved *model* instance that holds *values* as they are, to be read only (the
    answer to a create, from the rows just inserted). ``model(**values)`` runs an
    attribute event per column, ten times the cost; this sets them as a load does.
    Columns not in *values* read as None; never add the result to a database session."""
    instance = cast(ModelT, sa_inspect(model).class_manager.new_instance())
    instance.__dict__.update(values)
    return instance


# ---- identity ------------------------------------------------------------------------
class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16), default="user")  # admin | user
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)


class ApiKey(Base):
    """A user's API key (``gateway/auth.py``; scopes: ``gateway/domain/keys.py``)."""

    __tablename__ = "api_keys"
    __table_args__ = (
        # a name is unique among a user's unrevoked keys (``jobgate keys revoke NAME``)
        Index(
            "uq_api_keys_user_live_name",
            "user_id",
            "name",
            unique=True,
            postgresql_where=text("revoked_at IS NULL"),
            sqlite_where=text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64), default="")
    #: sha256 of the whole key; keys are 256-bit random, so a fast hash is the right one
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # shown in listings: "jg_3fA9x2"
    #: space-separated scopes; NULL: all its user may do (keys made before scopes)
    scopes: Mapped[str | None] = mapped_column(String(128), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    #: written at most once a minute per key and gateway process (auth.KeyCache.due)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: its weight in the fair-share sequencer (docs/fair-share.md): above 0, default 1
    share: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")


class ProjectMember(Base):
    __tablename__ = "project_members"

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    #: "oidc:PROVIDER" when a sign-in's binding rule made it (and the next sign-in whose
    #: claims no longer match takes it away); None when an admin added it
    via: Mapped[str | None] = mapped_column(String(80), default=None)


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
    #: bytes the subject's data folders may hold (docs/folders.md)
    max_folder_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    #: may the subject's owners commit their sessions to private images (None: no)
    allow_commit: Mapped[bool | None] = mapped_column(Boolean, default=None)
    #: the highest priority the subject's sessions may ask for (None: 100); with
    #: preemption on, priority decides who may stop whom (docs/fair-share.md)
    max_priority: Mapped[int | None] = mapped_column(Integer, default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Budget(Base):
    """Slot-hours a user or project may spend per period (docs/fair-share.md, Budgets).

    ``limits``: kind (gpu | cpu | mem) -> slot-hours; ``members`` (projects only): user id
    -> kind -> slot-hours, that member's part of the project's budget. ``state`` is what
    the last check found (gateway/scheduler/budgets.py): per holder ("" for the subject
    itself, else a member's user id) its alert level, what it spent and until when it is
    spent (``until``; ``kinds``: each spent kind's own time), and the calendar period
    that was counted.
    """

    __tablename__ = "budgets"
    __table_args__ = (UniqueConstraint("scope", "subject_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    scope: Mapped[str] = mapped_column(String(16))  # user | project
    subject_id: Mapped[str] = mapped_column(String(36))
    period: Mapped[str] = mapped_column(String(8))  # day | week | month
    rolling: Mapped[bool] = mapped_column(Boolean, default=False)
    limits: Mapped[dict[str, Any]] = mapped_column(default=dict)
    members: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: when an admin last changed it (the checks that rewrite ``state`` leave it)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


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
    #: the egress modes it keeps sessions to, comma-separated (``open,no-private,none``)
    egress: Mapped[str] = mapped_column(String(32), default="open", server_default="open")
    cgroup: Mapped[str] = mapped_column(String(32), default="n/a")
    runtime_detail: Mapped[str] = mapped_column(Text, default="")
    agent_version: Mapped[str] = mapped_column(String(64), default="")
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class NodeCredential(Base):
    """A node's own credential for the internal routes, issued when it joins with the
    join token; only its SHA-256 is kept. No foreign key: a node joins before it
    registers (the registration, over Redis, writes its ``nodes`` row)."""

    __tablename__ = "node_credentials"

    node_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: set by ``jobgate nodes revoke``: the credential is refused; the node may join again
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    #: SHA-256 of the node's Redis password (contract/acl.py), while Redis has a user per
    #: node (JOBGATE_REDIS_USERS): the gateway makes the user again if Redis lost it
    redis_digest: Mapped[str | None] = mapped_column(String(64), default=None)


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
        Index("ix_sessions_array", "array_id", "array_index"),
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
    #: data folders, resolved at submit: {"items": [{"id", "name", "target", "read_only",
    #: "automount"}]} (also in session_folders, for "which sessions use this folder")
    folders: Mapped[dict[str, Any]] = mapped_column(default=dict)
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)  # per kernel
    #: the user asked for cpu/mem explicitly (nodes that cannot enforce limits may refuse)
    limits_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    #: it mounts host directories (only nodes whose runtime can bind-mount take it)
    mounts_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    cluster_size: Mapped[int] = mapped_column(Integer, default=1)
    #: single-node | multi-node (None: a one-container session); docs/cluster-sessions.md
    cluster_mode: Mapped[str | None] = mapped_column(String(16), default=None)
    #: main-done (the session ends when main1 ends) | all-done
    stop_when: Mapped[str] = mapped_column(
        String(16), default="main-done", server_default="main-done"
    )
    #: seed (hex) of the session's ssh key pair; travels only in start jobs, never shown
    cluster_key: Mapped[str | None] = mapped_column(String(64), default=None)
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
    #: may the scheduler preempt it (None: a batch session yes, when its group allows
    #: preemption; interactive sessions and endpoint replicas no; docs/fair-share.md)
    preemptible: Mapped[bool | None] = mapped_column(Boolean, default=None)
    #: times it was preempted and queued again (past the group's max_preemptions it is
    #: no longer preemptible)
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: the session that preempted it last (it never preempts that one back)
    preempted_by: Mapped[str | None] = mapped_column(String(36), default=None)
    #: the node lost under its latest attempt, until the next placement names it
    lost_node: Mapped[str | None] = mapped_column(String(128), default=None)
    #: apps it serves: name -> {"port", "protocol", "strip_prefix", "start"}
    apps: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: an inference endpoint's replica: its endpoint, revision and replica number, and
    #: its place in the rollout (starting | serving | draining; contract.endpoints)
    endpoint_id: Mapped[str | None] = mapped_column(
        ForeignKey("endpoints.id", ondelete="SET NULL"), default=None, index=True
    )
    endpoint_revision: Mapped[int | None] = mapped_column(Integer, default=None)
    replica_index: Mapped[int | None] = mapped_column(Integer, default=None)
    replica_state: Mapped[str | None] = mapped_column(String(16), default=None)
    replica_state_at: Mapped[datetime | None] = mapped_column(default=None)
    #: where its end is announced (a signed webhook, docs/pipelines.md), and the secret
    callback_url: Mapped[str | None] = mapped_column(String(2048), default=None)
    callback_secret: Mapped[str | None] = mapped_column(String(128), default=None)
    #: user secrets it receives, resolved at submit (references only, never values):
    #: {"items": [{"id", "name", "env", "path"}]} (docs/secrets.md)
    secrets: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: an array's sessions share its id (the first one's id); index 0..size-1
    array_id: Mapped[str | None] = mapped_column(String(36), default=None)
    array_index: Mapped[int | None] = mapped_column(Integer, default=None)
    array_size: Mapped[int | None] = mapped_column(Integer, default=None)
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
    #: a multi-node session's overlay port on its node (UDP; docs/cluster-sessions.md):
    #: the scheduler gives each (session, node) its own among the node's live kernels
    cluster_port: Mapped[int | None] = mapped_column(Integer, default=None)
    ports: Mapped[dict[str, Any]] = mapped_column(default=dict)  # app -> host port
    container_id: Mapped[str | None] = mapped_column(String(128), default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    #: per attempt ("1", "2", ...): stream -> bytes received (gateway/services/logs.py)
    log_offsets: Mapped[dict[str, Any]] = mapped_column(default=dict)
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


class Usage(Base):
    """What one attempt of a kernel held, from its start (RUNNING) to its end: the
    accounting record (docs/usage.md). Written by :mod:`gateway.db.usage` in the flush
    that moves the kernel, so in the same transaction; ``ended_at`` is NULL while it
    runs. Plain ids, no foreign keys: the record is the bill, whatever becomes of them."""

    __tablename__ = "usage"
    __table_args__ = (
        Index("ix_usage_started_at", "started_at"),
        Index("ix_usage_ended_at", "ended_at"),
    )

    kernel_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = mapped_column(String(36))
    owner_id: Mapped[str] = mapped_column(String(36), index=True)
    project_id: Mapped[str | None] = mapped_column(String(36), default=None, index=True)
    resource_group: Mapped[str] = mapped_column(String(64))
    node_id: Mapped[str | None] = mapped_column(String(128), default=None)
    #: the amounts the scheduler allocated (ResourceSlots.to_json: slot -> decimal text)
    slots: Mapped[dict[str, Any]] = mapped_column(default=dict)
    started_at: Mapped[datetime] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column(default=None)


class SessionLog(Base):
    """A chunk of one stream of one attempt of one kernel, appended in arrival order."""

    __tablename__ = "session_logs"
    __table_args__ = (Index("ix_session_logs_session_id", "session_id", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    kernel_id: Mapped[str] = mapped_column(String(36))
    #: the kernel's attempt that printed it (a superseded attempt's late output included)
    attempt: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
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
    #: a committed image: committing -> ready | failed, then deleted by its owner (kept:
    #: its name stays theirs and nobody may use it); registered images are ready
    state: Mapped[str] = mapped_column(String(16), default="ready")
    session_id: Mapped[str | None] = mapped_column(String(36), default=None)
    detail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


# ---- inference endpoints ---------------------------------------------------------------
#: the rows ``uq_endpoints_live_name`` covers: endpoints not deleted
LIVE_ENDPOINT_WHERE = "deleted_at IS NULL"


class Endpoint(Base):
    """One stable URL in front of replicas; its name is unique among live endpoints."""

    __tablename__ = "endpoints"
    __table_args__ = (
        UniqueConstraint("owner_id", "idempotency_key", name="uq_endpoints_idempotency"),
        Index(
            "uq_endpoints_live_name",
            "name",
            unique=True,
            postgresql_where=text(LIVE_ENDPOINT_WHERE),
            sqlite_where=text(LIVE_ENDPOINT_WHERE),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(40))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    public: Mapped[bool] = mapped_column(Boolean, default=False)
    #: the revision that should serve (a rollout moves towards it)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    #: the newest revision that became ready (where an automatic rollback goes)
    stable_revision: Mapped[int | None] = mapped_column(Integer, default=None)
    #: AutoscaleSettings (gateway.domain.autoscale) as JSON: min, max, targets, windows
    autoscale: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: the controller's latest decision, and its backoff after failed replicas
    desired_replicas: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    retry_at: Mapped[datetime | None] = mapped_column(default=None)
    last_failure: Mapped[str] = mapped_column(Text, default="")
    #: HEALTHY | DEGRADED | UNAVAILABLE | SCALED_TO_ZERO | DEPLOYING
    status: Mapped[str] = mapped_column(String(16), default="DEPLOYING")
    status_reason: Mapped[str] = mapped_column(Text, default="")
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    request_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)


class EndpointRevision(Base):
    """What a replica runs; every update adds one, none is ever changed or removed."""

    __tablename__ = "endpoint_revisions"

    endpoint_id: Mapped[str] = mapped_column(
        ForeignKey("endpoints.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    image: Mapped[str | None] = mapped_column(String(512), default=None)
    command: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"argv": [...]}
    port: Mapped[int] = mapped_column(Integer)
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    working_dir: Mapped[str | None] = mapped_column(String(71), default=None)
    resource_group: Mapped[str] = mapped_column(String(64), default="default")
    #: contract.endpoints.Probe as JSON
    probe: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: RolloutSettings (gateway.domain.rollout) and the proxy's per-replica limits
    rollout: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: active | rolled-back (never became ready) ; why, in words
    state: Mapped[str] = mapped_column(String(16), default="active")
    reason: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class EndpointToken(Base):
    """A bearer token for one endpoint; only its SHA-256 is kept."""

    __tablename__ = "endpoint_tokens"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    endpoint_id: Mapped[str] = mapped_column(
        ForeignKey("endpoints.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(64), default="")
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class EndpointEvent(Base):
    """What the controller (or a user) did to an endpoint, why, and from which inputs."""

    __tablename__ = "endpoint_events"
    __table_args__ = (Index("ix_endpoint_events_endpoint", "endpoint_id", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))  # scale | start | drain | stop | rollback …
    message: Mapped[str] = mapped_column(Text, default="")
    inputs: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# ---- pipelines: templates, inbound triggers, outbound webhooks (docs/pipelines.md) ----
class JobTemplate(Base):
    """A parameterized session: a session request plus the parameters a run fills in."""

    __tablename__ = "job_templates"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_job_templates_owner_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    description: Mapped[str] = mapped_column(Text, default="")
    #: the session request (SessionCreate as JSON, only the fields given)
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: {"items": [{"name": ..., "default": str | None}]}; no default: required
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class HookTrigger(Base):
    """An inbound CI hook: a signed request to /v1/hooks/{id} runs a template."""

    __tablename__ = "hook_triggers"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_hook_triggers_owner_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    template_id: Mapped[str] = mapped_column(
        ForeignKey("job_templates.id", ondelete="CASCADE"), index=True
    )
    source: Mapped[str] = mapped_column(String(16))  # github | gitlab | standard
    events: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"items": [...]}
    branches: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"items": [globs]}
    secret: Mapped[str] = mapped_column(String(128))
    #: requests refused for a missing or wrong signature (nothing else of them is kept)
    refused: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class HookDelivery(Base):
    """One verified delivery of a trigger and what came of it."""

    __tablename__ = "hook_deliveries"
    __table_args__ = (
        UniqueConstraint("trigger_id", "delivery_id", name="uq_hook_deliveries_delivery"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    trigger_id: Mapped[str] = mapped_column(ForeignKey("hook_triggers.id", ondelete="CASCADE"))
    delivery_id: Mapped[str] = mapped_column(String(255))
    event: Mapped[str] = mapped_column(String(64), default="")
    ref: Mapped[str] = mapped_column(String(255), default="")
    verdict: Mapped[str] = mapped_column(String(16))  # started | filtered | rejected
    detail: Mapped[str] = mapped_column(Text, default="")
    session_id: Mapped[str | None] = mapped_column(String(36), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Webhook(Base):
    """An outbound subscription: events of the owner's (or a project's) sessions."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), default=None
    )
    url: Mapped[str] = mapped_column(String(2048))
    events: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"items": [types]}
    secret: Mapped[str] = mapped_column(String(128))  # whsec_...
    #: after a rotation, the old secret also signs until previous_until
    previous_secret: Mapped[str | None] = mapped_column(String(128), default=None)
    previous_until: Mapped[datetime | None] = mapped_column(default=None)
    #: why it no longer gets deliveries (the receiver answered 410 Gone); None: active
    disabled_reason: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookEvent(Base):
    """The outbox: an event written in the transaction that caused it.

    Its id is the ``webhook-id`` every delivery of it carries (receivers dedupe on it).
    The deliverer fans it out to deliveries, then marks it done."""

    __tablename__ = "webhook_events"
    __table_args__ = (Index("ix_webhook_events_fanned_out", "fanned_out", "created_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    type: Mapped[str] = mapped_column(String(64))
    session_id: Mapped[str | None] = mapped_column(String(36), default=None)
    owner_id: Mapped[str | None] = mapped_column(String(36), default=None)
    project_id: Mapped[str | None] = mapped_column(String(36), default=None)
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    fanned_out: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """One event to one URL (a webhook's, or a session's callback_url), with its attempts."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    event_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_events.id", ondelete="CASCADE"), index=True
    )
    webhook_id: Mapped[str | None] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), default=None, index=True
    )
    #: a session's callback (its own URL and secret) when webhook_id is None
    session_id: Mapped[str | None] = mapped_column(String(36), default=None)
    url: Mapped[str] = mapped_column(String(2048))
    status: Mapped[str] = mapped_column(String(16), default="pending")  # succeeded|failed|...
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: a deliverer holds it until then (a crashed one's claim runs out)
    locked_until: Mapped[datetime | None] = mapped_column(default=None)
    last_status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str] = mapped_column(Text, default="")
    #: {"items": [{"at", "status_code", "error", "ms"}]}, the latest attempts
    log: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# ---- data folders --------------------------------------------------------------------
class Folder(Base):
    """A data folder: a directory ``FOLDERS_ROOT/<id>`` owned by a user or a project.

    The name is for people (unique per owner, trash included); the directory is named
    by the id, so names never reach the file system.
    """

    __tablename__ = "folders"
    __table_args__ = (UniqueConstraint("owner_key", "name", name="uq_folders_owner_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64))
    #: "user:<id>" or "project:<id>" (one column, so the unique name has no NULLs)
    owner_key: Mapped[str] = mapped_column(String(48), index=True)
    owner_user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), default=None
    )
    owner_project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), default=None
    )
    usage: Mapped[str] = mapped_column(String(16), default="general")  # general|model|data
    created_by: Mapped[str | None] = mapped_column(String(36), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    trashed_at: Mapped[datetime | None] = mapped_column(default=None)


class FolderShare(Base):
    __tablename__ = "folder_shares"

    folder_id: Mapped[str] = mapped_column(
        ForeignKey("folders.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    perm: Mapped[str] = mapped_column(String(2))  # ro | rw | wd
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SessionFolder(Base):
    """A folder a session mounts (a live one keeps the folder out of the trash)."""

    __tablename__ = "session_folders"

    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    folder_id: Mapped[str] = mapped_column(
        ForeignKey("folders.id", ondelete="CASCADE"), primary_key=True, index=True
    )


# ---- user secrets --------------------------------------------------------------------
class Secret(Base):
    """A user's or project's secret value, sealed (``gateway/domain/sealing.py``: a data
    key per row, wrapped by the master key; the row id and name bound as associated data).
    The value never leaves the gateway but towards a node running a session that asks for
    it (docs/secrets.md)."""

    __tablename__ = "secrets"
    __table_args__ = (UniqueConstraint("owner_key", "name", name="uq_secrets_owner_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64))
    #: "user:<id>" or "project:<id>" (as folders)
    owner_key: Mapped[str] = mapped_column(String(48), index=True)
    owner_user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), default=None
    )
    owner_project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), default=None
    )
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    wrapped_key: Mapped[bytes] = mapped_column(LargeBinary)
    key_id: Mapped[str] = mapped_column(String(32))
    created_by: Mapped[str | None] = mapped_column(String(36), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


# ---- the audit log -------------------------------------------------------------------
class AuditRecord(Base):
    """One state-changing API call and its answer (``gateway/api/audit.py``; what it
    holds and never holds: docs/security.md). Append-only: nothing updates a row (on
    PostgreSQL a trigger refuses it); only the retention prune deletes. Plain names, no
    foreign keys: the record outlives the user, key or session it names."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_at", "at"),
        Index("ix_audit_log_actor", "actor", "id"),
        Index("ix_audit_log_action", "action", "id"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[datetime] = mapped_column()  # when the request came
    #: the user's name; None when no credential was accepted (or a node's own)
    actor: Mapped[str | None] = mapped_column(String(64), default=None)
    #: how it authenticated: "key ci (jg_3fA9x2)", "node n1", "refused key jg_3fA9x2" ...
    credential: Mapped[str] = mapped_column(String(160), default="")
    action: Mapped[str] = mapped_column(String(64))  # the route's operation id
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(1024))  # the concrete path, no query string
    target: Mapped[str] = mapped_column(String(512), default="")
    status: Mapped[int] = mapped_column(Integer)
    client: Mapped[str] = mapped_column(String(64), default="")


# ---- single sign-on (OpenID Connect) -------------------------------------------------
class OidcProvider(Base):
    """An identity provider users sign in through (``gateway/services/oidc.py``,
    docs/auth.md). Its client secret, when it has one, is sealed like a user secret."""

    __tablename__ = "oidc_providers"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(128), default="")
    issuer: Mapped[str] = mapped_column(String(512))
    client_id: Mapped[str] = mapped_column(String(256))
    #: the client the CLI's device flow uses (a public client), when not client_id
    cli_client_id: Mapped[str] = mapped_column(String(256), default="")
    scopes: Mapped[str] = mapped_column(String(512), default="openid profile email")
    username_claim: Mapped[str] = mapped_column(String(64), default="preferred_username")
    groups_claim: Mapped[str] = mapped_column(String(64), default="groups")
    secret_ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    secret_wrapped_key: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    secret_key_id: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OidcBinding(Base):
    """A binding rule: a sign-in whose *claim* holds *value* makes the user a member of
    *project* and/or gives them *role* (Nomad's binding rules, docs/auth.md)."""

    __tablename__ = "oidc_bindings"
    __table_args__ = (UniqueConstraint("provider_id", "name", name="uq_oidc_bindings_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    provider_id: Mapped[str] = mapped_column(
        ForeignKey("oidc_providers.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(64))
    claim: Mapped[str] = mapped_column(String(64))
    value: Mapped[str] = mapped_column(String(256))
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), default=None
    )
    role: Mapped[str] = mapped_column(String(16), default="user")  # admin | user
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OidcIdentity(Base):
    """Which jobgate user a provider's subject is (made at the first sign-in)."""

    __tablename__ = "oidc_identities"

    provider_id: Mapped[str] = mapped_column(
        ForeignKey("oidc_providers.id", ondelete="CASCADE"), primary_key=True
    )
    subject: Mapped[str] = mapped_column(String(255), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_sign_in_at: Mapped[datetime] = mapped_column(default=utcnow)
