"""Whether a session may be created: the request's sizes and mount roots, its working
directory blob, its name, project, dependencies and data folders; quotas (``limits.py``)
and where it could run (``placement.py``) are checked by their own modules."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Project, ProjectMember, ResourceGroup, Session
from gateway.domain.errors import Conflict, Forbidden, Invalid, NotFound
from gateway.domain.requests import SecretMount, SessionCreate
from gateway.domain.status import TERMINAL
from gateway.domain.validation import within_roots
from gateway.domain.webhooks import check_url
from gateway.services.blobs import BlobStore
from gateway.services.folders import FolderService
from gateway.services.lookups import Facts
from gateway.services.secrets import SecretRef, SecretService
from gateway.services.sessions.limits import Limits
from gateway.services.sessions.placement import Placement
from gateway.services.sessions.reads import Reads
from plugins.resources import ResourceSlots

__all__ = ["Admission"]

NAMES_PER_QUERY = 1000  # an array's names are checked this many at a time


class Admission:
    """The checks of a create (and of an endpoint revision's replicas); owns the quota
    (``limits``) and placement (``placement``) checks and their caches."""

    def __init__(
        self,
        db: SessionFactory,
        settings: GatewaySettings,
        blobs: BlobStore | None,
        folders: FolderService | None,
        secrets: SecretService | None = None,
    ) -> None:
        self.settings = settings
        self.secret_service = secrets
        self.blobs = blobs
        self.folder_service = folders
        self.limits = Limits(db)
        self.placement = Placement(settings)

    async def check_replica(
        self, db: AsyncSession, body: SessionCreate
    ) -> tuple[ResourceSlots, str | None]:
        """An endpoint replica's request, checked as a session's would be (sizes, working
        dir, resources, feasibility, group): its slots with the defaults, and its image.
        Its secrets are resolved under the endpoint's owner by ``secret_refs``."""
        self.check_request(body)
        row = await db.get(ResourceGroup, body.resource_group)
        config = self.placement.config(row)
        resources = await self.placement.resources(lambda: db, body, config)
        self.placement.check_group(row, body, config)  # its cluster limits before feasibility
        image = await self.placement.feasible(lambda: db, body, resources, config)
        return resources, image

    def check_request(self, body: SessionCreate) -> None:
        """What can be checked of a request without the database (templates use it)."""
        self.check_sizes(body)
        self.check_working_dir(body)

    def check_sizes(self, body: SessionCreate) -> None:
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

    def check_working_dir(self, body: SessionCreate) -> None:
        """The working-directory blob must be here (HEAD-style touch: GC keeps it)."""
        if body.working_dir is None:
            return
        if self.blobs is None or not self.blobs.exists(body.working_dir, touch=True):
            raise NotFound(
                f"no blob {body.working_dir}: upload it first (PUT /v1/blobs/{body.working_dir})",
                field="working_dir",
            )

    async def folders(
        self, reads: Reads, principal: Principal, body: SessionCreate, facts: Facts
    ) -> list[dict[str, Any]]:
        if self.folder_service is None:
            if body.folders:
                raise Invalid("this gateway has no data folders", field="folders")
            return []
        if not body.folders and not facts.automount:
            return []  # nothing to resolve or check
        return await self.folder_service.mounts_for(
            reads(), principal, body.folders, automount=facts.automount
        )

    async def secrets(
        self, reads: Reads, principal: Principal, body: SessionCreate
    ) -> list[dict[str, Any]]:
        """References to the secrets the session asks for (never their values); an
        unknown one is a 422 naming it."""
        if not body.secrets:
            return []
        return await self.secret_refs(reads(), principal, body.secrets)

    async def secret_refs(
        self, db: AsyncSession, owner: Principal, mounts: list[SecretMount]
    ) -> list[dict[str, Any]]:
        """*mounts* resolved under *owner* (a session's creator, an endpoint's or a
        template's owner): ids, names and targets; an unknown one is a 422 naming it."""
        if not mounts:
            return []
        if self.secret_service is None:
            raise Invalid("this gateway has no secrets", field="secrets")
        wanted = [SecretRef(s.name, s.env, s.path) for s in mounts]
        return await self.secret_service.references(db, owner, wanted)

    async def check_names(
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

    async def project(self, db: AsyncSession, principal: Principal, name: str) -> str:
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

    async def check_dependencies(
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
