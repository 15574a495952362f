"""Write side of sessions: create (validated, idempotent) and terminate.

Each public function owns its transaction and does its Redis side effects (schedule
request, stop jobs, live events) only after the commit, so a failed request leaves no
half-written row and no job pointing at a row that does not exist.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast

from arq.connections import ArqRedis
from sqlalchemy import Table, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.clock import clock, db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import (
    Image,
    Kernel,
    Node,
    Project,
    ProjectMember,
    ResourceGroup,
    ResourcePolicy,
    Session,
    SessionDependency,
    StatusHistory,
    new_id,
)
from gateway.domain.errors import Conflict, Forbidden, Invalid, QuotaExceeded
from gateway.domain.feasibility import NodeShape, check_feasible
from gateway.domain.requests import SessionCreate
from gateway.domain.status import TERMINAL, KernelStatus, SessionStatus
from gateway.domain.validation import within_roots
from gateway.images import check_usable
from gateway.lifecycle import begin_termination
from gateway.outbox import Outbox
from gateway.queue import request_schedule
from gateway.scheduler.policy import DEFAULT_SUBJECT
from gateway.services.blobs import BlobStore
from gateway.services.views import SessionDetails, get_owned
from plugins.resources import CPU, MEM, InvalidResource, ResourceSlots

__all__ = ["SessionService"]

SESSIONS = cast(Table, Session.__table__)
HISTORY = cast(Table, StatusHistory.__table__)
KERNELS = cast(Table, Kernel.__table__)

POLICY_CACHE_S = 5.0
SHAPES_CACHE_S = 10.0  # node shapes per group (feasibility at submit); refusals re-read
BUILTIN_SLOTS = frozenset({CPU, MEM, "cuda.device", "cuda.shares", "rocm.device", "tpu.device"})
S = SessionStatus


@dataclass(frozen=True, slots=True)
class Created:
    session: Session
    created: bool  # False: an Idempotency-Key replay
    details: SessionDetails | None = None  # the new session's details (no re-read)


def request_hash(body: SessionCreate) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class SessionService:
    def __init__(
        self,
        db: SessionFactory,
        pool: ArqRedis,
        settings: GatewaySettings,
        blobs: BlobStore | None = None,
    ) -> None:
        self.db = db
        self.blobs = blobs
        self.pool = pool
        self.settings = settings
        self.defaults = ResourceSlots.parse({CPU: "0.5", MEM: "512m"})
        self._slots_cache: tuple[float, frozenset[str]] = (0.0, BUILTIN_SLOTS)
        self._limits_cache: tuple[float, dict[tuple[str, str], int]] = (-POLICY_CACHE_S, {})
        self._shapes_cache: tuple[float, dict[str, list[NodeShape]]] = (-SHAPES_CACHE_S, {})

    # -- create -----------------------------------------------------------------------
    async def create(
        self, principal: Principal, body: SessionCreate, idempotency_key: str | None
    ) -> Created:
        digest = request_hash(body)
        self._check_sizes(body)
        try:
            async with self.db() as db, db.begin():
                if idempotency_key:
                    replay = await self._replay(db, principal, idempotency_key, digest)
                    if replay is not None:
                        return Created(replay, created=False)
                session, kernels, project = await self._insert(
                    db, principal, body, idempotency_key, digest
                )
                details = SessionDetails(
                    session, kernels, list(body.depends_on), principal.name, project
                )
        except IntegrityError:
            # a concurrent request won the race: with the same key, answer with its
            # session; with the same name, say which live session has it
            async with self.db() as db, db.begin():
                if idempotency_key:
                    replay = await self._replay(db, principal, idempotency_key, digest)
                    if replay is not None:
                        return Created(replay, created=False)
                await self._check_name(db, principal, body.name)
            raise
        await request_schedule(self.pool, session.resource_group)
        return Created(session, created=True, details=details)

    def _check_sizes(self, body: SessionCreate) -> None:
        env_bytes = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in body.env.items())
        if env_bytes > self.settings.max_env_bytes:
            raise Invalid(
                f"env is {env_bytes} bytes; the limit is {self.settings.max_env_bytes}",
                field="env",
            )
        cmd_bytes = sum(len(a.encode()) + 1 for a in body.command)
        if cmd_bytes > self.settings.max_command_bytes:
            raise Invalid(
                f"command is {cmd_bytes} bytes; the limit is {self.settings.max_command_bytes}",
                field="command",
            )
        if body.type == "batch" and not body.command and not body.image:
            raise Invalid("a batch session needs a command", field="command")
        if body.command and not body.command[0].strip():
            raise Invalid("the command's first word is empty", field="command")
        roots = self.settings.allowed_mount_roots
        for i, mount in enumerate(body.mounts):
            if not within_roots(mount.source, roots):
                allowed = ", ".join(roots) or "none are configured (JOBGATE_ALLOWED_MOUNT_ROOTS)"
                raise Invalid(
                    f"{mount.source} is outside the host paths sessions may mount ({allowed})",
                    field=f"mounts.{i}.source",
                )

    def _check_working_dir(self, body: SessionCreate) -> None:
        """The working-directory blob must be here (HEAD-style touch: GC keeps it)."""
        if body.working_dir is None:
            return
        if self.blobs is None or not self.blobs.exists(body.working_dir, touch=True):
            raise Invalid(
                f"no blob {body.working_dir}: upload it first (PUT /v1/blobs/{body.working_dir})",
                field="working_dir",
            )

    async def _replay(
        self, db: AsyncSession, principal: Principal, key: str, digest: str
    ) -> Session | None:
        row = (
            await db.execute(
                select(Session).where(
                    Session.owner_id == principal.user_id, Session.idempotency_key == key
                )
            )
        ).scalar_one_or_none()
        if row is not None and row.request_hash != digest:
            raise Invalid(
                "this Idempotency-Key was already used for a different request",
                field="Idempotency-Key",
            )
        return row

    async def _resources(
        self, db: AsyncSession, raw: dict[str, str | int | float]
    ) -> ResourceSlots:
        try:
            slots = ResourceSlots.parse(raw)
        except InvalidResource as exc:
            raise Invalid(exc.message, field=f"resources.{exc.slot}") from None
        known = await self._known_slots(db)
        for name in slots:
            if name not in known:
                raise Invalid(
                    f"unknown resource {name!r} (known: {', '.join(sorted(known))})",
                    field=f"resources.{name}",
                )
        missing = {k: v for k, v in self.defaults.items() if k not in raw}
        return slots + ResourceSlots(missing)

    async def _known_slots(self, db: AsyncSession) -> frozenset[str]:
        stamp, cached = self._slots_cache
        if time.monotonic() - stamp < 10:
            return cached
        found: set[str] = set(BUILTIN_SLOTS)
        for (capacity,) in await db.execute(select(Node.capacity)):
            found.update(capacity)
        known = frozenset(found)
        self._slots_cache = (time.monotonic(), known)
        return known

    async def _insert(
        self,
        db: AsyncSession,
        principal: Principal,
        body: SessionCreate,
        key: str | None,
        digest: str,
    ) -> tuple[Session, list[Kernel], str | None]:
        self._check_working_dir(body)  # after a replay: an old key answers even if GC ran
        await self._check_name(db, principal, body.name)
        resources = await self._resources(db, body.resources)
        await check_usable(db, principal, body.image)  # another user's private one: 404
        image = await self._feasible(db, body, resources)
        project_id = await self._project(db, principal, body.project)
        await self._check_group(db, body.resource_group)
        await self._check_pending(db, principal, project_id, body.project)
        starts_at = body.starts_at
        if isinstance(starts_at, timedelta):
            starts_at = await db_now(db) + starts_at
        values: dict[str, Any] = dict(
            id=new_id(),
            name=body.name,
            owner_id=principal.user_id,
            project_id=project_id,
            type=body.type,
            status=S.PENDING,
            status_reason=f"submitted by {principal.name}",
            status_changed_at=clock(db),
            image=image,
            command={"argv": body.command},
            env=dict(body.env),
            workdir=body.workdir,
            working_dir=body.working_dir,
            mounts={"items": [m.model_dump() for m in body.mounts]},
            resources=resources.to_json(),
            limits_requested=CPU in body.resources or MEM in body.resources,
            mounts_requested=bool(body.mounts),
            cluster_size=body.cluster_size,
            resource_group=body.resource_group,
            priority=body.priority,
            constraints=dict(body.constraints),
            starts_at=starts_at,
            idempotency_key=key,
            request_hash=digest,
            idle_timeout_s=body.idle_timeout,
            max_retries=body.max_retries,
            apps=await self._registered_apps(db, body),
            pending_reason="waiting for the scheduler",
            created_at=clock(db),  # the database's clock, in the INSERT: no extra round trip
        )
        # Core inserts on the tables, not the ORM: this is the hottest write path, and
        # three plain INSERTs cost a fraction of the ORM's bookkeeping for the same rows
        now = (
            await db.execute(insert(SESSIONS).values(values).returning(SESSIONS.c.created_at))
        ).scalar_one()
        values["created_at"] = values["status_changed_at"] = now
        kernel_rows = [
            {"id": new_id(), "session_id": values["id"], "cluster_idx": index, "updated_at": now}
            for index in range(body.cluster_size)
        ]
        await db.execute(insert(HISTORY).values(_history_created(values["id"], principal, now)))
        await db.execute(insert(KERNELS), kernel_rows)
        await self._dependencies(db, principal, values["id"], body)
        session = Session(**values)  # a transient copy of the row, for the response
        kernels = [
            Kernel(**row, status=KernelStatus.PENDING, slots={}, devices={}, cpuset={}, ports={})
            for row in kernel_rows
        ]
        return session, kernels, body.project if project_id else None

    async def _feasible(
        self, db: AsyncSession, body: SessionCreate, resources: ResourceSlots
    ) -> str | None:
        """Refuse what no node of the group could ever run; return the session's image.

        The group's node shapes are cached; a refusal is only given after a fresh read,
        so a node that registered a moment ago is never overlooked.
        """
        group = body.resource_group
        for fresh in (False, True):
            shapes = await self._shapes(db, group, fresh=fresh)
            image = body.image
            processes_only = bool(shapes) and all(s.images == "ignored" for s in shapes)
            if image is None and not processes_only:  # a default image means nothing there
                image = self.settings.default_image or None
            try:
                check_feasible(group, shapes, resources, image)
            except Invalid:
                if fresh:
                    raise
                continue
            return image
        raise AssertionError("unreachable")

    async def _shapes(self, db: AsyncSession, group: str, *, fresh: bool) -> list[NodeShape]:
        stamp, cached = self._shapes_cache
        if fresh or time.monotonic() - stamp >= SHAPES_CACHE_S or group not in cached:
            cached = await self._load_shapes(db)
            self._shapes_cache = (time.monotonic(), cached)
        return cached.get(group, [])

    async def _load_shapes(self, db: AsyncSession) -> dict[str, list[NodeShape]]:
        rows = await db.execute(
            select(Node.resource_group, Node.runtime, Node.capacity, Node.slot_types, Node.images)
        )
        groups: dict[str, set[NodeShape]] = {}
        for group, runtime, capacity, slot_types, images in rows:
            quanta = tuple(
                sorted(
                    (slot, Decimal(str(kind["quantum"])))
                    for slot, kind in (slot_types or {}).items()
                    if isinstance(kind, dict) and kind.get("quantum")
                )
            )
            shape = NodeShape(runtime, ResourceSlots.from_json(capacity), quanta, images)
            groups.setdefault(group, set()).add(shape)
        return {group: list(shapes) for group, shapes in groups.items()}

    async def _check_name(self, db: AsyncSession, principal: Principal, name: str | None) -> None:
        """A name is unique among the owner's live sessions (the partial unique index
        ``uq_sessions_owner_live_name`` enforces it; this says which session has it)."""
        if name is None:
            return
        taken = (
            await db.execute(
                select(Session.id).where(
                    Session.owner_id == principal.user_id,
                    Session.name == name,
                    Session.status.not_in([str(s) for s in TERMINAL]),
                )
            )
        ).scalar_one_or_none()
        if taken is not None:
            raise Conflict(
                f"the name {name!r} is taken by live session {taken}; "
                "names are unique among your sessions until they end",
                field="name",
                session=taken,
            )

    async def _project(
        self, db: AsyncSession, principal: Principal, name: str | None
    ) -> str | None:
        if name is None:
            return None
        project = (
            await db.execute(select(Project).where(Project.name == name))
        ).scalar_one_or_none()
        if project is None:
            raise Invalid(f"no project {name!r}", field="project")
        if not principal.is_admin:
            member = await db.get(ProjectMember, (project.id, principal.user_id))
            if member is None:
                raise Forbidden(f"{principal.name} is not a member of project {name!r}")
        return project.id

    async def _check_pending(
        self, db: AsyncSession, principal: Principal, project_id: str | None, project: str | None
    ) -> None:
        """The max_pending policies of the user and the project (a soft limit under races)."""
        limits = await self._pending_limits(db)
        if not limits:
            return
        subjects: list[tuple[str, str, str, Any]] = [
            ("user", principal.user_id, f"user {principal.name}", Session.owner_id)
        ]
        if project_id:
            subjects.append(("project", project_id, f"project {project}", Session.project_id))
        for scope, subject, label, column in subjects:
            limit = limits.get((scope, subject), limits.get((scope, DEFAULT_SUBJECT)))
            if limit is None:
                continue
            pending = (
                await db.execute(
                    select(func.count())
                    .select_from(Session)
                    .where(column == subject, Session.status == S.PENDING)
                )
            ).scalar_one()
            if pending >= limit:
                raise QuotaExceeded(
                    f"quota: {label} already has {pending} of {limit} pending sessions"
                )

    async def _pending_limits(self, db: AsyncSession) -> dict[tuple[str, str], int]:
        """(scope, subject) -> max_pending, re-read every few seconds (policies rarely change)."""
        stamp, cached = self._limits_cache
        if time.monotonic() - stamp < POLICY_CACHE_S:
            return cached
        rows = await db.execute(
            select(
                ResourcePolicy.scope, ResourcePolicy.subject_id, ResourcePolicy.max_pending
            ).where(ResourcePolicy.max_pending.is_not(None))
        )
        limits = {(scope, subject): limit for scope, subject, limit in rows if limit is not None}
        self._limits_cache = (time.monotonic(), limits)
        return limits

    async def _registered_apps(self, db: AsyncSession, body: SessionCreate) -> dict[str, Any]:
        """An interactive session's apps from the image registry (else the worker reads
        the image's own label once the image is on the node)."""
        image = body.image or self.settings.default_image
        if body.type != "interactive" or not image:
            return {}
        row = await db.get(Image, image)
        return dict(row.apps) if row is not None else {}

    async def _check_group(self, db: AsyncSession, group: str) -> None:
        if group == "default":
            return
        if await db.get(ResourceGroup, group) is None:
            raise Invalid(f"no resource group {group!r}", field="resource_group")

    async def _dependencies(
        self, db: AsyncSession, principal: Principal, session_id: str, body: SessionCreate
    ) -> None:
        ids = body.depends_on
        if not ids:
            return
        if body.type != "batch":
            raise Invalid("only batch sessions can depend on others", field="depends_on")
        query = select(Session.id).where(Session.id.in_(ids))
        if not principal.is_admin:
            query = query.where(Session.owner_id == principal.user_id)
        found = set((await db.execute(query)).scalars())
        unknown = [i for i in ids if i not in found]
        if unknown:
            raise Invalid(f"no session {unknown[0]}", field="depends_on")
        await db.execute(
            insert(SessionDependency),
            [{"session_id": session_id, "depends_on_id": dep} for dep in ids],
        )

    # -- terminate --------------------------------------------------------------------
    async def terminate(
        self, principal: Principal, session_id: str, *, force: bool = False
    ) -> Session:
        outbox = Outbox()
        async with self.db() as db, db.begin():
            session = await get_owned(db, principal, session_id)
            await db.refresh(session, with_for_update={"key_share": True})
            await begin_termination(
                db,
                session,
                outbox,
                cancel_reason=f"cancelled by {principal.name}",
                stop_reason=f"termination requested by {principal.name}",
                grace=0.0 if force else self.settings.stop_grace_s,
            )
        await outbox.flush(self.pool)
        return session


def _history_created(session_id: str, principal: Principal, now: datetime) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "from_status": None,
        "to_status": S.PENDING,
        "reason": f"submitted by {principal.name}",
        "created_at": now,
    }
