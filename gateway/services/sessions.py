"""Write side of sessions: create (validated, idempotent; one session or an array of
``count``, docs/arrays.md) and terminate.

Each public function does its Redis side effects (schedule request, stop jobs, live
events) only after its commit, so a failed request leaves no half-written row and no job
pointing at a row that does not exist. Terminate owns its transaction; create checks
first - what nearly every create reads comes from one read shared with the creates
waiting beside it (``lookups.py``), the rest from caches or, only when the request asks
for it (a name, a project, folders, dependencies, a key), a session of its own - and
hands its rows to ``SessionWriter``, which commits them together with whatever other
creates are waiting (group commit, ``session_writer.py``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, cast

from arq.connections import ArqRedis
from sqlalchemy import Table, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
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
    StatusHistory,
    new_id,
    transient,
)
from gateway.domain.errors import Conflict, Forbidden, Invalid, NotFound, QuotaExceeded
from gateway.domain.feasibility import NodeShape, check_feasible
from gateway.domain.requests import SessionCreate
from gateway.domain.signatures import new_secret
from gateway.domain.status import TERMINAL, KernelStatus, SessionStatus
from gateway.domain.validation import within_roots
from gateway.domain.webhooks import check_url
from gateway.images import check_usable
from gateway.lifecycle import begin_termination
from gateway.outbox import Outbox
from gateway.queue import ScheduleRequests
from gateway.scheduler.policy import DEFAULT_SUBJECT
from gateway.scheduler.snapshot import group_config
from gateway.services.blobs import BlobStore
from gateway.services.folders import FolderService
from gateway.services.idempotency import replayed
from gateway.services.lookups import Ask, Facts, Lookups
from gateway.services.session_writer import NewSessions, SessionWriter
from gateway.services.views import SessionDetails, get_owned
from plugins.resources import CPU, MEM, InvalidResource, ResourceSlots

__all__ = ["SessionService", "new_kernel"]

SESSIONS = cast(Table, Session.__table__)
HISTORY = cast(Table, StatusHistory.__table__)
KERNELS = cast(Table, Kernel.__table__)

ARRAY_ID_ENV = "JOBGATE_ARRAY_ID"
ARRAY_INDEX_ENV = "JOBGATE_ARRAY_INDEX"
ARRAY_SIZE_ENV = "JOBGATE_ARRAY_SIZE"
NAMES_PER_QUERY = 1000  # an array's names are checked this many at a time
POLICY_CACHE_S = 5.0
SHAPES_CACHE_S = 10.0  # node shapes per group (feasibility at submit); refusals re-read
FEASIBLE_CACHE_ENTRIES = 1000  # requests that passed on those shapes, remembered
BUILTIN_SLOTS = frozenset({CPU, MEM, "cuda.device", "cuda.shares", "rocm.device", "tpu.device"})
S = SessionStatus


def new_kernel() -> dict[str, Any]:
    """What a new kernel row holds besides its ids (the database's defaults), for the
    answer: fresh dicts on every call, so no two answers share one."""
    return dict(status=KernelStatus.PENDING, slots={}, devices={}, cpuset={}, ports={})


#: the session a check reads with, opened on first use (``OnDemand``)
Reads = Callable[[], AsyncSession]


class OnDemand:
    """A create's own database session, opened the first time a check asks for it: most
    creates read only what is cached or shared (``lookups.py``), and an unused session
    still costs some 50 µs to make and close."""

    def __init__(self, factory: SessionFactory) -> None:
        self.factory = factory
        self._db: AsyncSession | None = None

    def __call__(self) -> AsyncSession:
        if self._db is None:
            self._db = self.factory()
        return self._db

    async def aclose(self) -> None:
        if self._db is not None:
            await self._db.close()


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
        folders: FolderService | None = None,
    ) -> None:
        self.db = db
        self.blobs = blobs
        self.folders = folders
        self.pool = pool
        self.schedule = ScheduleRequests(pool)
        self.writer = SessionWriter(db)
        self.lookups = Lookups(db)
        self.settings = settings
        self.defaults = ResourceSlots.parse({CPU: "0.5", MEM: "512m"})
        self._slots_cache: tuple[float, frozenset[str]] = (0.0, BUILTIN_SLOTS)
        self._limits_cache: tuple[float, dict[tuple[str, str], int]] = (-POLICY_CACHE_S, {})
        self._shapes_cache: tuple[float, dict[str, list[NodeShape]]] = (-SHAPES_CACHE_S, {})
        #: (group, image, resources) that passed on the cached shapes -> the image
        self._passed: dict[tuple[str, str | None, frozenset[Any]], str | None] = {}

    # -- create -----------------------------------------------------------------------
    async def create(
        self, principal: Principal, body: SessionCreate, idempotency_key: str | None
    ) -> Created:
        # the hash only serves replays: a request without a key has none to compare
        digest = request_hash(body) if idempotency_key else ""
        self._check_sizes(body)
        limits = await self._pending_limits()
        # what most creates read, shared with concurrent ones (before this request holds
        # a connection of its own: waiting for the shared read while holding one could
        # starve the pool)
        facts = await self.lookups.fetch(
            Ask(
                principal.user_id,
                body.resource_group,
                image=body.image or (self.settings.default_image or None),
                automount=self.folders is not None and body.automount,
                pending=_max_pending(limits, "user", principal.user_id) is not None,
            )
        )
        try:
            # the rest: reads, no transaction; most creates need none of them
            async with aclosing(OnDemand(self.db)) as reads:
                if idempotency_key:
                    replay = await replayed(reads(), Session, principal, idempotency_key, digest)
                    if replay is not None:
                        return Created(replay, created=False)
                new, project = await self._prepare(
                    reads, principal, body, idempotency_key, digest, facts, limits
                )
            await self.writer.write(new)  # group commit with concurrent creates
        except IntegrityError:
            # a concurrent request won the race: with the same key, answer with its
            # session; with the same name, say which live session has it
            async with self.db() as db, db.begin():
                if idempotency_key:
                    replay = await replayed(db, Session, principal, idempotency_key, digest)
                    if replay is not None:
                        return Created(replay, created=False)
                await self._check_names(db, principal, [name for name, _ in _array_rows(body)])
            raise
        session = transient(Session, new.rows[0])  # the first row, for the answer
        kernels = [
            transient(Kernel, row | new_kernel()) for row in new.kernels[: body.cluster_size]
        ]
        details = SessionDetails(session, kernels, list(body.depends_on), principal.name, project)
        await self.schedule.request(session.resource_group)
        return Created(session, created=True, details=details)

    async def check_replica(
        self, db: AsyncSession, body: SessionCreate
    ) -> tuple[ResourceSlots, str | None]:
        """An endpoint replica's request, checked as a session's would be (sizes, working
        dir, resources, feasibility, group): its slots with the defaults, and its image."""
        self.check_request(body)
        resources = await self._resources(lambda: db, body.resources)
        image = await self._feasible(lambda: db, body, resources)
        self._check_group(await db.get(ResourceGroup, body.resource_group), body)
        return resources, image

    def check_request(self, body: SessionCreate) -> None:
        """What can be checked of a request without the database (templates use it)."""
        self._check_sizes(body)
        self._check_working_dir(body)

    def _check_sizes(self, body: SessionCreate) -> None:
        if body.count is not None and body.count > self.settings.max_array_count:
            raise Invalid(
                f"count is {body.count}; the limit is {self.settings.max_array_count} "
                "sessions per request (JOBGATE_MAX_ARRAY_COUNT)",
                field="count",
            )
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
        if body.callback_url is not None:
            refusal = check_url(body.callback_url, self.settings.webhook_networks)
            if refusal:
                raise Invalid(refusal, field="callback_url")
        roots = self.settings.allowed_mount_roots
        for i, mount in enumerate(body.mounts):
            if not within_roots(mount.source, roots):
                allowed = ", ".join(roots) or "none are configured (JOBGATE_ALLOWED_MOUNT_ROOTS)"
                raise Forbidden(
                    f"{mount.source} is outside the host paths sessions may mount ({allowed})",
                    field=f"mounts.{i}.source",
                )

    def _check_working_dir(self, body: SessionCreate) -> None:
        """The working-directory blob must be here (HEAD-style touch: GC keeps it)."""
        if body.working_dir is None:
            return
        if self.blobs is None or not self.blobs.exists(body.working_dir, touch=True):
            raise NotFound(
                f"no blob {body.working_dir}: upload it first (PUT /v1/blobs/{body.working_dir})",
                field="working_dir",
            )

    async def _resources(self, reads: Reads, raw: dict[str, str | int | float]) -> ResourceSlots:
        try:
            slots = ResourceSlots.parse(raw)
        except InvalidResource as exc:
            raise Invalid(exc.message, field=f"resources.{exc.slot}") from None
        known = await self._known_slots(reads)
        for name in slots:
            if name not in known:
                raise Conflict(
                    f"unknown resource {name!r}: no node has it "
                    f"(known: {', '.join(sorted(known))})",
                    field=f"resources.{name}",
                )
        missing = {k: v for k, v in self.defaults.items() if k not in raw}
        return slots + ResourceSlots(missing)

    async def _known_slots(self, reads: Reads) -> frozenset[str]:
        stamp, cached = self._slots_cache
        if time.monotonic() - stamp < 10:
            return cached
        found: set[str] = set(BUILTIN_SLOTS)
        for (capacity,) in await reads().execute(select(Node.capacity)):
            found.update(capacity)
        known = frozenset(found)
        self._slots_cache = (time.monotonic(), known)
        return known

    async def _prepare(
        self,
        reads: Reads,
        principal: Principal,
        body: SessionCreate,
        key: str | None,
        digest: str,
        facts: Facts,
        limits: dict[tuple[str, str], int],
    ) -> tuple[NewSessions, str | None]:
        """Check the request and build its rows (one session, or an array's); *facts*
        and *limits* were read for it, *reads* opens a session for what else it asks."""
        self._check_working_dir(body)  # after a replay: an old key answers even if GC ran
        rows = _array_rows(body)
        if body.name is not None:
            await self._check_names(reads(), principal, [name for name, _ in rows])
        resources = await self._resources(reads, body.resources)
        check_usable(principal, body.image, facts.image)  # another user's private one: 404
        image = await self._feasible(reads, body, resources)
        project_id = await self._project(reads(), principal, body.project) if body.project else None
        self._check_group(facts.group, body)
        await self._check_pending(
            reads, principal, project_id, body.project, len(rows), facts, limits
        )
        folders = await self._folders(reads, principal, body, facts)
        starts_at = body.starts_at
        if isinstance(starts_at, timedelta):
            starts_at = await db_now(reads()) + starts_at
        common: dict[str, Any] = dict(
            owner_id=principal.user_id,
            project_id=project_id,
            type=body.type,
            status=S.PENDING,
            status_reason=f"submitted by {principal.name}",
            image=image,
            command={"argv": body.command},
            workdir=body.workdir,
            working_dir=body.working_dir,
            mounts={"items": [m.model_dump() for m in body.mounts]},
            resources=resources.to_json(),
            limits_requested=CPU in body.resources or MEM in body.resources,
            folders={"items": folders},
            # automounted folders only where the node can mount them (skipped elsewhere)
            mounts_requested=bool(body.mounts) or any(not f["automount"] for f in folders),
            cluster_size=body.cluster_size,
            cluster_mode=body.cluster_mode,
            stop_when=body.stop_when,
            cluster_key=None,  # each session its own, below
            resource_group=body.resource_group,
            priority=body.priority,
            constraints=dict(body.constraints),
            starts_at=starts_at,
            idempotency_key=None,
            request_hash=digest or None,
            idle_timeout_s=body.idle_timeout,
            max_retries=body.max_retries,
            apps=self._registered_apps(body, facts.image),
            callback_url=body.callback_url,
            callback_secret=(body.callback_secret or new_secret()) if body.callback_url else None,
            pending_reason="waiting for the scheduler",
            array_id=None,
            array_index=None,
            array_size=None,
        )
        first = new_id()
        params = [
            common | {"id": first if i == 0 else new_id(), "name": name, "env": env}
            for i, (name, env) in enumerate(rows)
        ]
        params[0]["idempotency_key"] = key  # one row holds the key: a replay finds it
        if body.cluster_mode:  # each session its own ssh seed (an array's too)
            for row in params:
                row["cluster_key"] = secrets.token_hex(32)
        if body.count is not None:
            for i, row in enumerate(params):
                row.update(array_id=first, array_index=i, array_size=len(params))
                row["env"] = row["env"] | _array_env(first, i, len(params))
        if body.depends_on:
            await self._check_dependencies(reads(), principal, body)
        new = NewSessions(
            params,
            body.cluster_size,
            f"submitted by {principal.name}",
            list(body.depends_on),
            folder_ids=[f["id"] for f in folders],
        )
        return new, body.project

    async def _folders(
        self, reads: Reads, principal: Principal, body: SessionCreate, facts: Facts
    ) -> list[dict[str, Any]]:
        if self.folders is None:
            if body.folders:
                raise Invalid("this gateway has no data folders", field="folders")
            return []
        if not body.folders and not facts.automount:
            return []  # nothing to resolve or check
        return await self.folders.mounts_for(
            reads(), principal, body.folders, automount=facts.automount
        )

    async def _feasible(
        self, reads: Reads, body: SessionCreate, resources: ResourceSlots
    ) -> str | None:
        """Refuse what no node of the group could ever run; return the session's image.

        The group's node shapes are cached; a refusal is only given after a fresh read,
        so a node that registered a moment ago is never overlooked. What passed is
        remembered until the shapes are read again (most requests ask the same).
        """
        group = body.resource_group
        passed = (group, body.image, frozenset(resources.items()))
        if passed in self._passed and time.monotonic() - self._shapes_cache[0] < SHAPES_CACHE_S:
            return self._passed[passed]
        for fresh in (False, True):
            shapes = await self._shapes(reads, group, fresh=fresh)
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
            if shapes and len(self._passed) < FEASIBLE_CACHE_ENTRIES:  # none: nothing known
                self._passed[passed] = image
            return image
        raise AssertionError("unreachable")

    async def _shapes(self, reads: Reads, group: str, *, fresh: bool) -> list[NodeShape]:
        stamp, cached = self._shapes_cache
        if fresh or time.monotonic() - stamp >= SHAPES_CACHE_S or group not in cached:
            cached = await self._load_shapes(reads())
            self._shapes_cache = (time.monotonic(), cached)
            self._passed = {}
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

    async def _check_names(
        self, db: AsyncSession, principal: Principal, names: list[str | None]
    ) -> None:
        """A name is unique among the owner's live sessions (the partial unique index
        ``uq_sessions_owner_live_name`` enforces it; this says which session has it)."""
        wanted = [name for name in names if name is not None]
        for start in range(0, len(wanted), NAMES_PER_QUERY):
            taken = (
                await db.execute(
                    select(Session.name, Session.id)
                    .where(
                        Session.owner_id == principal.user_id,
                        Session.name.in_(wanted[start : start + NAMES_PER_QUERY]),
                        Session.status.not_in([str(s) for s in TERMINAL]),
                    )
                    .limit(1)
                )
            ).first()
            if taken is not None:
                raise Conflict(
                    f"the name {taken.name!r} is taken by live session {taken.id}; "
                    "names are unique among your sessions until they end",
                    field="name",
                    session=taken.id,
                )

    async def _project(self, db: AsyncSession, principal: Principal, name: str) -> str:
        project = (
            await db.execute(select(Project).where(Project.name == name))
        ).scalar_one_or_none()
        if project is None:
            raise NotFound(f"no project {name!r}", field="project")
        if not principal.is_admin:
            member = await db.get(ProjectMember, (project.id, principal.user_id))
            if member is None:
                raise Forbidden(f"{principal.name} is not a member of project {name!r}")
        return project.id

    async def _check_pending(
        self,
        reads: Reads,
        principal: Principal,
        project_id: str | None,
        project: str | None,
        adding: int,
        facts: Facts,
        limits: dict[tuple[str, str], int],
    ) -> None:
        """The max_pending policies (*limits*) of the user and the project (a soft limit
        under races); an array must fit whole. The user's count is in *facts* (read only
        when a user limit applies); the project's is counted here, when one applies."""
        user_limit = _max_pending(limits, "user", principal.user_id)
        if user_limit is not None:
            _refuse_over(f"user {principal.name}", facts.pending, adding, user_limit)
        if project_id is None:
            return
        project_limit = _max_pending(limits, "project", project_id)
        if project_limit is not None:
            pending = (
                await reads().execute(
                    select(func.count())
                    .select_from(Session)
                    .where(Session.project_id == project_id, Session.status == S.PENDING)
                )
            ).scalar_one()
            _refuse_over(f"project {project}", pending, adding, project_limit)

    async def _pending_limits(self) -> dict[tuple[str, str], int]:
        """(scope, subject) -> max_pending, re-read every few seconds (policies rarely change)."""
        stamp, cached = self._limits_cache
        if time.monotonic() - stamp < POLICY_CACHE_S:
            return cached
        async with self.db() as db:
            rows = await db.execute(
                select(
                    ResourcePolicy.scope, ResourcePolicy.subject_id, ResourcePolicy.max_pending
                ).where(ResourcePolicy.max_pending.is_not(None))
            )
            limits = {(scope, subject): n for scope, subject, n in rows if n is not None}
        self._limits_cache = (time.monotonic(), limits)
        return limits

    def _registered_apps(self, body: SessionCreate, row: Image | None) -> dict[str, Any]:
        """An interactive session's apps from the image registry (*row*: its image's, else
        the worker reads the image's own label once the image is on the node)."""
        if body.type != "interactive" or row is None:
            return {}
        return dict(row.apps)

    def _check_group(self, row: ResourceGroup | None, body: SessionCreate) -> None:
        """The group (*row*) exists, and allows the cluster the session asks for."""
        group = body.resource_group
        if row is None and group != "default":
            raise NotFound(f"no resource group {group!r}", field="resource_group")
        if body.cluster_size < 2:
            return
        config = group_config(row, self.settings)
        if body.cluster_size > config.max_cluster_size:
            raise Conflict(
                f"cluster_size {body.cluster_size} is above resource group {group}'s "
                f"limit of {config.max_cluster_size}",
                field="cluster_size",
            )
        if body.cluster_mode not in config.cluster_modes:
            allowed = ", ".join(config.cluster_modes) or "none"
            raise Conflict(
                f"resource group {group} does not allow {body.cluster_mode} clusters "
                f"(allowed: {allowed})",
                field="cluster_mode",
            )

    async def _check_dependencies(
        self, db: AsyncSession, principal: Principal, body: SessionCreate
    ) -> None:
        ids = body.depends_on
        if body.type != "batch":
            raise Invalid("only batch sessions can depend on others", field="depends_on")
        query = select(Session.id).where(Session.id.in_(ids))
        if not principal.is_admin:
            query = query.where(Session.owner_id == principal.user_id)
        found = set((await db.execute(query)).scalars())
        unknown = [i for i in ids if i not in found]
        if unknown:
            raise NotFound(f"no session {unknown[0]}", field="depends_on")

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


def _array_rows(body: SessionCreate) -> list[tuple[str | None, dict[str, str]]]:
    """(name, env) per session: one for a plain request, ``count`` for an array, whose
    sessions are named ``NAME-INDEX`` when the request has a name."""
    if body.count is None:
        return [(body.name, dict(body.env))]
    return [(f"{body.name}-{i}" if body.name else None, dict(body.env)) for i in range(body.count)]


def _array_env(array_id: str, index: int, size: int) -> dict[str, str]:
    return {
        ARRAY_ID_ENV: array_id,
        ARRAY_INDEX_ENV: str(index),
        ARRAY_SIZE_ENV: str(size),
    }


def _max_pending(limits: dict[tuple[str, str], int], scope: str, subject: str) -> int | None:
    """The max_pending policy that applies to *subject*: its own, else its scope's default."""
    return limits.get((scope, subject), limits.get((scope, DEFAULT_SUBJECT)))


def _refuse_over(label: str, pending: int, adding: int, limit: int) -> None:
    if pending + adding > limit:
        more = f"; {adding} more do not fit" if adding > 1 else ""
        raise QuotaExceeded(
            f"quota: {label} already has {pending} of {limit} pending sessions{more}"
        )
