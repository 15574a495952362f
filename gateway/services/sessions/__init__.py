"""Write side of sessions: create (validated, idempotent; one session or an array of
``count``, docs/arrays.md) and terminate. ``SessionService`` is the facade the routes,
templates and endpoints use; the work is split by job:

* ``admission.py`` - may this request be created: sizes, blobs, names, projects,
  dependencies, folders, secrets; ``limits.py`` (quotas) and ``placement.py`` (resources,
  the group, feasibility on its node shapes), each with its caches (``cache.Timed``);
* ``creation.py`` - checks, then rows (``gateway.db.session_rows``) to the group-commit
  ``SessionWriter``, then a schedule request;
* ``termination.py`` - through ``lifecycle``.

Each public method does its Redis side effects (schedule request, stop jobs, live
events) only after its commit, so a failed request leaves no half-written row and no job
pointing at a row that does not exist. Terminate owns its transaction; create checks
first - what nearly every create reads comes from one read shared with the creates
waiting beside it (``lookups.py``), the rest from caches or, only when the request asks
for it (a name, a project, folders, dependencies, a key), a session of its own - and
hands its rows to ``SessionWriter``, which commits them together with whatever other
creates are waiting (group commit, ``session_writer.py``).
"""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Session
from gateway.domain.requests import SecretMount, SessionCreate
from gateway.queue import ScheduleRequests
from gateway.services.blobs import BlobStore
from gateway.services.folders import FolderService
from gateway.services.secrets import SecretService
from gateway.services.sessions.admission import Admission
from gateway.services.sessions.creation import Created, Creation, new_kernel
from gateway.services.sessions.termination import terminate
from plugins.resources import ResourceSlots

__all__ = ["Created", "SessionService", "new_kernel"]


class SessionService:
    def __init__(
        self,
        db: SessionFactory,
        pool: ArqRedis,
        settings: GatewaySettings,
        blobs: BlobStore | None = None,
        folders: FolderService | None = None,
        secrets: SecretService | None = None,
    ) -> None:
        self.db = db
        self.pool = pool
        self.settings = settings
        self.folders = folders  # endpoint revisions resolve their folders with it
        self.admission = Admission(db, settings, blobs, folders, secrets)
        self.creation = Creation(db, ScheduleRequests(pool), settings, self.admission)

    async def create(
        self, principal: Principal, body: SessionCreate, idempotency_key: str | None
    ) -> Created:
        return await self.creation.create(principal, body, idempotency_key)

    async def check_replica(
        self, db: AsyncSession, body: SessionCreate
    ) -> tuple[ResourceSlots, str | None]:
        """An endpoint replica's request, checked as a session's would be."""
        return await self.admission.check_replica(db, body)

    async def secret_refs(
        self, db: AsyncSession, owner: Principal, mounts: list[SecretMount]
    ) -> list[dict[str, Any]]:
        """Secrets resolved under *owner* to references (never values), as a create's
        are: endpoint revisions keep them, templates check them."""
        return await self.admission.secret_refs(db, owner, mounts)

    def check_request(self, body: SessionCreate) -> None:
        """What can be checked of a request without the database (templates use it)."""
        self.admission.check_request(body)

    async def terminate(
        self, principal: Principal, session_id: str, *, force: bool = False
    ) -> Session:
        grace = 0.0 if force else self.settings.stop_grace_s
        return await terminate(self.db, self.pool, principal, session_id, grace=grace)
