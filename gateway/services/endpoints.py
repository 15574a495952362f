"""Write and read side of inference endpoints (the controller does the rest).

Each write owns its transaction and, after the commit, pokes the controller (a message on
``ENDPOINT_WAKE_CHANNEL``) so replicas and the route follow at once instead of at the
next tick. Another user's endpoint is a 404, as if it did not exist. Scale, update,
rollback and delete lock the endpoint's row, as the controller loop does; when PostgreSQL
picks one of them as a deadlock's (or serialization conflict's) victim, its whole
transaction runs again (:mod:`gateway.db.retry`), and what follows the commit (the poke,
the outbox) happens once, after the attempt that committed.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from arq.connections import ArqRedis
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from contract.endpoints import (
    ReplicaHealth,
    delete_endpoint_route,
    new_endpoint_token,
    token_digest,
)
from contract.keys import ENDPOINT_WAKE_CHANNEL, endpoint_ready_key, endpoint_wake_key
from gateway.auth import Principal
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.locks import lock_rows
from gateway.db.models import (
    Endpoint,
    EndpointEvent,
    EndpointRevision,
    EndpointToken,
    Kernel,
    Session,
    User,
    new_id,
)
from gateway.db.retry import retry_conflicts
from gateway.domain.autoscale import AutoscaleSettings
from gateway.domain.endpoints import (
    EndpointCreate,
    EndpointScale,
    EndpointUpdate,
    RevisionSpec,
    TokenCreate,
    parse_expiry,
)
from gateway.domain.errors import Conflict, Forbidden, Invalid, JobgateError, NotFound
from gateway.domain.requests import SessionCreate
from gateway.domain.status import TERMINAL
from gateway.endpoints.observe import Load, read_health, read_load
from gateway.lifecycle import begin_termination
from gateway.outbox import Outbox
from gateway.services.idempotency import replayed
from gateway.services.sessions import SessionService

__all__ = [
    "Endpoint",
    "EndpointDetails",
    "EndpointRevision",
    "EndpointService",
    "EndpointToken",
    "IssuedToken",
    "ReplicaView",
]

EVENTS_SHOWN = 20


@dataclass(frozen=True, slots=True)
class ReplicaView:
    session: Session
    node: str | None
    health: ReplicaHealth | None
    in_flight: int
    rps: float  # requests per second, all proxies


@dataclass
class EndpointDetails:
    endpoint: Endpoint
    revision: EndpointRevision
    owner: str
    replicas: list[ReplicaView] = field(default_factory=list)
    events: list[EndpointEvent] = field(default_factory=list)
    revisions: list[EndpointRevision] = field(default_factory=list)
    load: Load = field(default_factory=Load)


@dataclass(frozen=True, slots=True)
class IssuedToken:
    row: EndpointToken
    token: str  # shown once


def _hash(body: EndpointCreate) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


NOTHING_TO_SERVE = "nothing to serve: give a command (after --) or an image that runs its own"


def _rolling_out(endpoint: Endpoint, why: str, now: datetime) -> None:
    """A new target revision: DEPLOYING until the controller saw it roll out (never the
    old revision's HEALTHY, which the answer would otherwise carry)."""
    endpoint.failures = 0
    endpoint.retry_at = None
    endpoint.last_failure = ""
    endpoint.status, endpoint.status_reason = "DEPLOYING", why
    endpoint.updated_at = now


def _created_reason(min_replicas: int) -> str:
    if min_replicas == 0:
        return "created; no replica starts until a request comes (min 0)"
    return f"created; {min_replicas} replica(s) start shortly"


class EndpointService:
    def __init__(self, db: SessionFactory, pool: ArqRedis, sessions: SessionService) -> None:
        self.db = db
        self.pool = pool
        self.sessions = sessions

    async def _poke(self, endpoint_id: str) -> None:
        await self.pool.publish(ENDPOINT_WAKE_CHANNEL, endpoint_id)

    # -- create ---------------------------------------------------------------------------
    async def create(
        self, principal: Principal, body: EndpointCreate, idempotency_key: str | None
    ) -> tuple[Endpoint, bool]:
        if not body.command and body.image is None:
            raise Invalid(NOTHING_TO_SERVE, field="command")
        digest = _hash(body)
        try:
            async with self.db() as db, db.begin():
                if idempotency_key is not None:
                    replay = await replayed(db, Endpoint, principal, idempotency_key, digest)
                    if replay is not None:
                        return replay, False
                await self._check_name(db, body.name)
                revision = await self._revision_values(db, principal, principal, body)
                now = await db_now(db)
                endpoint = Endpoint(
                    id=new_id(),
                    name=body.name,
                    owner_id=principal.user_id,
                    public=body.public,
                    revision=1,
                    autoscale=body.autoscale.model_dump(),
                    desired_replicas=body.autoscale.min_replicas,
                    status="DEPLOYING",
                    status_reason=_created_reason(body.autoscale.min_replicas),
                    idempotency_key=idempotency_key,
                    request_hash=digest,
                    created_at=now,
                    updated_at=now,
                    last_failure="",
                    failures=0,
                )
                db.add(endpoint)
                await db.flush()
                db.add(EndpointRevision(endpoint_id=endpoint.id, number=1, **revision))
                db.add(_event(endpoint, "created", f"created by {principal.name}", now))
        except (IntegrityError, JobgateError) as exc:
            # a concurrent request with the same key may have committed since this one
            # looked (its endpoint now has the key and the name): that one is the answer
            if idempotency_key is None and not isinstance(exc, IntegrityError):
                raise
            async with self.db() as db:
                if idempotency_key is not None:
                    replay = await replayed(db, Endpoint, principal, idempotency_key, digest)
                    if replay is not None:
                        return replay, False
                if isinstance(exc, IntegrityError):  # a name another request took
                    await self._check_name(db, body.name)
            raise
        await self._poke(endpoint.id)
        return endpoint, True

    async def _check_name(self, db: AsyncSession, name: str) -> None:
        taken = (
            await db.execute(
                select(Endpoint.id).where(Endpoint.name == name, Endpoint.deleted_at.is_(None))
            )
        ).scalar_one_or_none()
        if taken is not None:
            raise Conflict(f"the endpoint name {name!r} is taken", field="name")

    async def _revision_values(
        self, db: AsyncSession, principal: Principal, owner: Principal, spec: RevisionSpec
    ) -> dict[str, Any]:
        """A revision's columns, checked as a session of its replicas would be.

        Its folders and secrets are resolved to ids under the endpoint's *owner* now and
        kept with the command (``{"argv": [...], "folders": [...], "secrets": [...]}``),
        so a later rename changes nothing and each replica carries the same references
        (never a value). An unknown secret, or one the owner does not see, is a 422; only
        the owner makes a revision that receives secrets (an admin's command would run
        with the owner's values).
        """
        probe_body = SessionCreate(
            type="batch",
            image=spec.image,
            command=spec.command or ["serve"],
            env=spec.env,
            working_dir=spec.working_dir,
            resources=spec.resources,
            resource_group=spec.resource_group,
        )
        resources, image = await self.sessions.check_replica(db, probe_body)
        command: dict[str, Any] = {"argv": list(spec.command)}
        if spec.folders:
            if self.sessions.folders is None:
                raise Invalid("this gateway has no data folders", field="folders")
            command["folders"] = await self.sessions.folders.mounts_for(db, owner, spec.folders)
        if spec.secrets:
            if principal.user_id != owner.user_id:
                raise Forbidden(
                    f"only {owner.name} can make a revision of their endpoint that receives "
                    "secrets (give secrets: [] to make one without)",
                    field="secrets",
                )
            command["secrets"] = await self.sessions.secret_refs(db, owner, spec.secrets)
        return dict(
            image=image,
            command=command,
            port=spec.port,
            resources=resources.to_json(),
            env=dict(spec.env),
            working_dir=spec.working_dir,
            resource_group=spec.resource_group,
            probe=spec.probe.model_dump(),
            rollout=spec.rollout.model_dump(),
            state="active",
            reason="",
            created_by=principal.name,
        )

    # -- read -----------------------------------------------------------------------------
    async def get_owned(self, db: AsyncSession, principal: Principal, name: str) -> Endpoint:
        query = select(Endpoint).where(Endpoint.name == name, Endpoint.deleted_at.is_(None))
        if not principal.is_admin:
            query = query.where(Endpoint.owner_id == principal.user_id)
        row = (await db.execute(query)).scalar_one_or_none()
        if row is None:
            raise NotFound(f"no endpoint {name}")
        return row

    async def list_endpoints(
        self, principal: Principal, *, all_users: bool = False
    ) -> list[Endpoint]:
        query = select(Endpoint).where(Endpoint.deleted_at.is_(None)).order_by(Endpoint.name)
        if not (principal.is_admin and all_users):
            query = query.where(Endpoint.owner_id == principal.user_id)
        async with self.db() as db:
            return list((await db.execute(query)).scalars())

    async def details(self, principal: Principal, name: str) -> EndpointDetails:
        async with self.db() as db:
            endpoint = await self.get_owned(db, principal, name)
            return await self._details(db, endpoint)

    async def _details(self, db: AsyncSession, endpoint: Endpoint) -> EndpointDetails:
        revision = await db.get(EndpointRevision, (endpoint.id, endpoint.revision))
        assert revision is not None
        owner = await db.get(User, endpoint.owner_id)
        rows = await db.execute(
            select(Session, Kernel.node_id)
            .join(Kernel, Kernel.session_id == Session.id)
            .where(
                Session.endpoint_id == endpoint.id,
                Session.status.not_in([str(s) for s in TERMINAL]),
            )
            .order_by(Session.replica_index)
        )
        health = await read_health(self.pool, endpoint.id)
        load = await read_load(self.pool, endpoint.id, time.time())
        replicas = [
            ReplicaView(
                s,
                node,
                health.get(s.id),
                load.per_replica.get(s.id, 0),
                load.per_replica_rps.get(s.id, 0.0),
            )
            for s, node in rows
        ]
        events = list(
            (
                await db.execute(
                    select(EndpointEvent)
                    .where(EndpointEvent.endpoint_id == endpoint.id)
                    .order_by(EndpointEvent.id.desc())
                    .limit(EVENTS_SHOWN)
                )
            ).scalars()
        )
        revisions = list(
            (
                await db.execute(
                    select(EndpointRevision)
                    .where(EndpointRevision.endpoint_id == endpoint.id)
                    .order_by(EndpointRevision.number)
                )
            ).scalars()
        )
        return EndpointDetails(
            endpoint,
            revision,
            owner.name if owner else "",
            replicas,
            events,
            revisions,
            load,
        )

    # -- change ---------------------------------------------------------------------------
    async def scale(self, principal: Principal, name: str, body: EndpointScale) -> Endpoint:
        low, high = body.min_replicas, body.max_replicas
        if low is not None and high is not None and low > high:  # wrong whatever it has
            raise Invalid(
                f"min_replicas ({low}) is above max_replicas ({high})", field="min_replicas"
            )
        endpoint = await retry_conflicts(
            lambda: self._scale(principal, name, body), what=f"scale endpoint {name}"
        )
        await self._poke(endpoint.id)
        return endpoint

    async def _scale(self, principal: Principal, name: str, body: EndpointScale) -> Endpoint:
        async with self.db() as db, db.begin():
            endpoint = await self._locked(db, principal, name)
            current = AutoscaleSettings.model_validate(endpoint.autoscale)
            try:
                settings = body.apply(current)
            except ValueError as exc:  # crosses the settings it has now
                raise Conflict(_first_error(exc), field="min_replicas") from None
            now = await db_now(db)
            endpoint.autoscale = settings.model_dump()
            endpoint.updated_at = now
            db.add(
                _event(
                    endpoint,
                    "scale",
                    f"{principal.name} set replicas {settings.min_replicas}"
                    f"-{settings.max_replicas}",
                    now,
                    body.model_dump(exclude_none=True),
                )
            )
        return endpoint

    async def update(self, principal: Principal, name: str, body: EndpointUpdate) -> Endpoint:
        endpoint = await retry_conflicts(
            lambda: self._update(principal, name, body), what=f"update endpoint {name}"
        )
        await self._poke(endpoint.id)
        return endpoint

    async def _update(self, principal: Principal, name: str, body: EndpointUpdate) -> Endpoint:
        async with self.db() as db, db.begin():
            endpoint = await self._locked(db, principal, name)
            current = await db.get(EndpointRevision, (endpoint.id, endpoint.revision))
            assert current is not None
            try:
                spec = body.merged(_spec_of(current))
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(p) for p in error["loc"])
                raise Invalid(f"{where}: {error['msg']}", field=where) from None
            if not spec.command and spec.image is None:  # well-formed, but with the current
                raise Conflict(
                    NOTHING_TO_SERVE + " (the current revision has no image)", field="command"
                )
            values = await self._revision_values(db, principal, await _owner(db, endpoint), spec)
            number = (
                await db.execute(
                    select(func.max(EndpointRevision.number)).where(
                        EndpointRevision.endpoint_id == endpoint.id
                    )
                )
            ).scalar_one() + 1
            now = await db_now(db)
            db.add(EndpointRevision(endpoint_id=endpoint.id, number=number, **values))
            endpoint.revision = number
            _rolling_out(endpoint, f"rolling out revision {number}", now)
            db.add(
                _event(
                    endpoint,
                    "update",
                    f"{principal.name} made revision {number}",
                    now,
                    {"image": values["image"]},
                )
            )
        return endpoint

    async def rollback(self, principal: Principal, name: str, to: int | None) -> Endpoint:
        endpoint = await retry_conflicts(
            lambda: self._rollback(principal, name, to), what=f"roll back endpoint {name}"
        )
        await self._poke(endpoint.id)
        return endpoint

    async def _rollback(self, principal: Principal, name: str, to: int | None) -> Endpoint:
        async with self.db() as db, db.begin():
            endpoint = await self._locked(db, principal, name)
            if to is None:  # the last good one, else the newest other one
                stable = endpoint.stable_revision
                to = stable if stable and stable != endpoint.revision else None
                to = (
                    to
                    or (
                        await db.execute(
                            select(func.max(EndpointRevision.number)).where(
                                EndpointRevision.endpoint_id == endpoint.id,
                                EndpointRevision.number != endpoint.revision,
                            )
                        )
                    ).scalar_one()
                )
                if to is None:
                    raise Conflict(f"endpoint {name} has only one revision", field="to")
            if to == endpoint.revision:
                raise Conflict(f"revision {to} is already the current one", field="to")
            target = await db.get(EndpointRevision, (endpoint.id, to)) if to >= 1 else None
            if target is None:
                raise NotFound(f"endpoint {name} has no revision {to}", field="to")
            now = await db_now(db)
            before = endpoint.revision
            endpoint.revision = to
            _rolling_out(endpoint, f"rolling back to revision {to}", now)
            target.state = "active"
            db.add(
                _event(
                    endpoint,
                    "rollback",
                    f"{principal.name} rolled back from revision {before} to {to}",
                    now,
                    {"from": before, "to": to},
                )
            )
        return endpoint

    async def delete(self, principal: Principal, name: str) -> Endpoint:
        """Mark *name* deleted and stop its replicas. The endpoint's row is locked before
        its sessions (the event consumer goes the other way), so a deadlock's victim runs
        again (:mod:`gateway.db.retry`)."""

        async def attempt() -> tuple[Endpoint, Outbox]:
            outbox = Outbox()
            return await self._delete(principal, name, outbox), outbox

        endpoint, outbox = await retry_conflicts(attempt, what=f"delete endpoint {name}")
        await outbox.flush(self.pool)
        await delete_endpoint_route(self.pool, name)
        await self.pool.delete(endpoint_ready_key(endpoint.id), endpoint_wake_key(endpoint.id))
        await self._poke(endpoint.id)
        return endpoint

    async def _delete(self, principal: Principal, name: str, outbox: Outbox) -> Endpoint:
        async with self.db() as db, db.begin():
            endpoint = await self._locked(db, principal, name)
            now = await db_now(db)
            endpoint.deleted_at = now
            endpoint.status = "DELETED"
            endpoint.status_reason = f"deleted by {principal.name}"
            endpoint.desired_replicas = 0
            db.add(_event(endpoint, "delete", f"deleted by {principal.name}", now))
            live = Session.status.not_in([str(s) for s in TERMINAL])
            for session in await lock_rows(
                db, Session, (Session.endpoint_id == endpoint.id) & live
            ):
                reason = f"endpoint {name} deleted by {principal.name}"
                await begin_termination(
                    db,
                    session,
                    outbox,
                    cancel_reason=reason,
                    stop_reason=reason,
                    grace=self.sessions.settings.stop_grace_s,
                )
        return endpoint

    async def _locked(self, db: AsyncSession, principal: Principal, name: str) -> Endpoint:
        endpoint = await self.get_owned(db, principal, name)
        await db.refresh(endpoint, with_for_update={"key_share": True})
        return endpoint

    # -- tokens ---------------------------------------------------------------------------
    async def create_token(self, principal: Principal, name: str, body: TokenCreate) -> IssuedToken:
        token = new_endpoint_token()
        async with self.db() as db, db.begin():
            endpoint = await self.get_owned(db, principal, name)
            now = await db_now(db)
            expires = now + parse_expiry(body.expires) if body.expires else None
            row = EndpointToken(
                id=new_id(),
                endpoint_id=endpoint.id,
                name=body.name,
                digest=token_digest(token),
                prefix=token[:10],
                created_at=now,
                expires_at=expires,
            )
            db.add(row)
            db.add(_event(endpoint, "token", f"{principal.name} created token {row.id}", now))
        await self._poke(endpoint.id)
        return IssuedToken(row, token)

    async def list_tokens(self, principal: Principal, name: str) -> list[EndpointToken]:
        async with self.db() as db:
            endpoint = await self.get_owned(db, principal, name)
            query = (
                select(EndpointToken)
                .where(EndpointToken.endpoint_id == endpoint.id)
                .order_by(EndpointToken.created_at)
            )
            return list((await db.execute(query)).scalars())

    async def revoke_token(self, principal: Principal, name: str, token_id: str) -> None:
        async with self.db() as db, db.begin():
            endpoint = await self.get_owned(db, principal, name)
            row = await db.get(EndpointToken, token_id)
            if row is None or row.endpoint_id != endpoint.id:
                raise NotFound(f"endpoint {name} has no token {token_id}")
            now = await db_now(db)
            if row.revoked_at is None:
                row.revoked_at = now
                db.add(_event(endpoint, "token", f"{principal.name} revoked {token_id}", now))
        await self._poke(endpoint.id)


def _event(
    endpoint: Endpoint,
    kind: str,
    message: str,
    now: datetime,
    inputs: dict[str, Any] | None = None,
) -> EndpointEvent:
    return EndpointEvent(
        endpoint_id=endpoint.id, kind=kind, message=message, inputs=inputs or {}, created_at=now
    )


async def _owner(db: AsyncSession, endpoint: Endpoint) -> Principal:
    user = await db.get(User, endpoint.owner_id)
    assert user is not None
    return Principal(user_id=user.id, name=user.name, role=user.role)


def _spec_of(revision: EndpointRevision) -> dict[str, Any]:
    return {
        "image": revision.image,
        "command": list(revision.command.get("argv", [])),
        "port": revision.port,
        "resources": dict(revision.resources),
        "env": dict(revision.env),
        "working_dir": revision.working_dir,
        "resource_group": revision.resource_group,
        "probe": dict(revision.probe),
        "rollout": dict(revision.rollout),
        "folders": [  # by id: what was resolved when the revision was made
            {"name": f["id"], "target": f["target"], "read_only": f["read_only"]}
            for f in revision.command.get("folders", [])
        ],
        # by name: a new revision finds them again under the owner (a deleted one is a
        # 422 then, a secret made again under the name is taken)
        "secrets": [
            {"name": s["name"], "env": s["env"], "path": s["path"]}
            for s in revision.command.get("secrets", [])
        ],
    }


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = errors()
        if found:
            return str(found[0].get("msg", exc)).removeprefix("Value error, ")
    return str(exc)
