"""Create: a request checked (``admission.py``), its rows built (one session, or an
array of ``count``, docs/arrays.md; ``gateway.db.session_rows``) and handed to
``SessionWriter``, which commits them with whatever other creates are waiting."""

from __future__ import annotations

import hashlib
import json
import secrets
from contextlib import aclosing
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import Image, Kernel, Session, new_id, transient
from gateway.db.session_rows import session_row
from gateway.domain.errors import JobgateError
from gateway.domain.requests import SessionCreate
from gateway.domain.signatures import new_secret
from gateway.domain.status import KernelStatus
from gateway.images import check_usable
from gateway.queue import ScheduleRequests
from gateway.services.idempotency import replayed
from gateway.services.lookups import Ask, Facts, Lookups
from gateway.services.session_writer import NewSessions, SessionWriter
from gateway.services.sessions.admission import Admission
from gateway.services.sessions.limits import Policies
from gateway.services.sessions.reads import OnDemand, Reads
from gateway.services.views import SessionDetails
from plugins.resources import CPU, MEM

__all__ = ["Created", "Creation", "new_kernel", "request_hash"]

ARRAY_ID_ENV = "JOBGATE_ARRAY_ID"
ARRAY_INDEX_ENV = "JOBGATE_ARRAY_INDEX"
ARRAY_SIZE_ENV = "JOBGATE_ARRAY_SIZE"


def new_kernel() -> dict[str, Any]:
    """What a new kernel row holds besides its ids (the database's defaults), for the
    answer: fresh dicts on every call, so no two answers share one."""
    return dict(status=KernelStatus.PENDING, slots={}, devices={}, cpuset={}, ports={})


@dataclass(frozen=True, slots=True)
class Created:
    session: Session
    created: bool  # False: an Idempotency-Key replay
    details: SessionDetails | None = None  # the new session's details (no re-read)


def request_hash(body: SessionCreate) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Creation:
    """A create: one shared read (``Lookups``), the checks, the rows, a group commit."""

    def __init__(
        self,
        db: SessionFactory,
        schedule: ScheduleRequests,
        settings: GatewaySettings,
        admission: Admission,
    ) -> None:
        self.db = db
        self.schedule = schedule
        self.settings = settings
        self.admission = admission
        self.writer = SessionWriter(db)
        self.lookups = Lookups(db)

    async def create(
        self, principal: Principal, body: SessionCreate, idempotency_key: str | None
    ) -> Created:
        # the hash only serves replays: a request without a key has none to compare
        digest = request_hash(body) if idempotency_key is not None else ""
        self.admission.check_sizes(body)
        limits = await self.admission.limits.policies()
        # what most creates read, shared with concurrent ones (before this request holds
        # a connection of its own: waiting for the shared read while holding one could
        # starve the pool)
        facts = await self.lookups.fetch(
            Ask(
                principal.user_id,
                body.resource_group,
                image=body.image or (self.settings.default_image or None),
                automount=self.admission.folder_service is not None and body.automount,
                pending=limits.max_pending("user", principal.user_id) is not None,
            )
        )
        try:
            # the rest: reads, no transaction; most creates need none of them
            async with aclosing(OnDemand(self.db)) as reads:
                if idempotency_key is not None:
                    replay = await replayed(reads(), Session, principal, idempotency_key, digest)
                    if replay is not None:
                        return Created(replay, created=False)
                new, project = await self._prepare(
                    reads, principal, body, idempotency_key, digest, facts, limits
                )
            await self.writer.write(new)  # group commit with concurrent creates
        except (IntegrityError, JobgateError) as exc:
            # a concurrent request with the same key may have committed since this one
            # looked (its session now has the key, holds the name, counts as pending):
            # its session is the answer (an insert in conflict waited for its commit)
            if idempotency_key is None and not isinstance(exc, IntegrityError):
                raise
            async with self.db() as db:
                if idempotency_key is not None:
                    replay = await replayed(db, Session, principal, idempotency_key, digest)
                    if replay is not None:
                        return Created(replay, created=False)
                if isinstance(exc, IntegrityError):  # a name another request took: say whose
                    await self.admission.check_names(
                        db, principal, [name for name, _ in _array_rows(body)]
                    )
            raise
        session = transient(Session, new.rows[0])  # the first row, for the answer
        kernels = [
            transient(Kernel, row | new_kernel()) for row in new.kernels[: body.cluster_size]
        ]
        details = SessionDetails(session, kernels, list(body.depends_on), principal.name, project)
        await self.schedule.request(session.resource_group)
        return Created(session, created=True, details=details)

    async def _prepare(
        self,
        reads: Reads,
        principal: Principal,
        body: SessionCreate,
        key: str | None,
        digest: str,
        facts: Facts,
        limits: Policies,
    ) -> tuple[NewSessions, str | None]:
        """Check the request and build its rows (one session, or an array's); *facts*
        and *limits* were read for it, *reads* opens a session for what else it asks."""
        check, place, quota = self.admission, self.admission.placement, self.admission.limits
        check.check_working_dir(body)  # after a replay: an old key answers even if GC ran
        rows = _array_rows(body)
        if body.name is not None:
            await check.check_names(reads(), principal, [name for name, _ in rows])
        config = place.config(facts.group)
        resources = await place.resources(reads, body, config)
        check_usable(principal, body.image, facts.image)  # another user's private one: 404
        place.check_group(facts.group, body, config)  # its cluster limits before feasibility
        image = await place.feasible(reads, body, resources, config)
        project_id = await check.project(reads(), principal, body.project) if body.project else None
        priority = await quota.priority(principal, project_id, body, limits)
        await quota.check_slot_limits(principal, project_id, body, resources, limits)
        await quota.check_pending(
            reads, principal, project_id, body.project, len(rows), facts, limits
        )
        folders = await check.folders(reads, principal, body, facts)
        secret_refs = await check.secrets(reads, principal, body)
        starts_at = body.starts_at
        if isinstance(starts_at, timedelta):
            starts_at = await db_now(reads()) + starts_at
        reason = f"submitted by {principal.name}"
        common = session_row(
            owner_id=principal.user_id,
            type=body.type,
            reason=reason,
            image=image,
            argv=body.command,
            env={},  # each session its own, below
            resources=resources.to_json(),
            resource_group=body.resource_group,
            priority=priority,
            apps=self._registered_apps(body, facts.image),
            mounts=[m.model_dump() for m in body.mounts],
            folders=folders,
            project_id=project_id,
            workdir=body.workdir,
            working_dir=body.working_dir,
            limits_requested=CPU in body.resources or MEM in body.resources,
            # automounted folders only where the node can mount them (skipped elsewhere)
            mounts_requested=bool(body.mounts) or any(not f["automount"] for f in folders),
            cluster_size=body.cluster_size,
            cluster_mode=body.cluster_mode,
            stop_when=body.stop_when,
            constraints=dict(body.constraints),
            starts_at=starts_at,
            request_hash=digest or None,
            idle_timeout_s=body.idle_timeout,
            max_retries=body.max_retries,
            preemptible=body.preemptible,
            callback_url=body.callback_url,
            callback_secret=(body.callback_secret or new_secret()) if body.callback_url else None,
            secrets={"items": secret_refs} if secret_refs else {},
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
            await check.check_dependencies(reads(), principal, body)
        new = NewSessions(
            params,
            body.cluster_size,
            reason,
            list(body.depends_on),
            folder_ids=[f["id"] for f in folders],
        )
        return new, body.project

    def _registered_apps(self, body: SessionCreate, row: Image | None) -> dict[str, Any]:
        """An interactive session's apps from the image registry (*row*: its image's, else
        the worker reads the image's own label once the image is on the node)."""
        if body.type != "interactive" or row is None:
            return {}
        return dict(row.apps)


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
