"""User secrets (docs/secrets.md): sealed at rest, never answered back after creation.

Owned by a user or a project (``owner_key`` as folders'); a user sees their own and their
projects' (by name, their own first), admins no more than that: there is no way to read a
value through the API at all. Values leave the gateway only towards the node where a
kernel that asks for them is placed (``values_for_kernel``, behind the node's own
credential) and into the log masker of the sessions that receive them
(``masker_for_session``). No value is ever logged here.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import (
    Kernel,
    Project,
    ProjectMember,
    Secret,
    Session,
    User,
    new_id,
    utcnow,
)
from gateway.domain.errors import Conflict, Invalid, NotFound
from gateway.domain.masking import MIN_MASKED, Masker
from gateway.domain.sealing import (
    MasterKey,
    Sealed,
    associated_data,
    open_value,
    rewrap,
    seal,
)
from gateway.services.owners import Owner, owner_key, resolve_owner

__all__ = [
    "MAX_VALUE_BYTES",
    "MAX_VALUE_CHARS",
    "NOT_CONFIGURED",
    "SecretRef",
    "SecretService",
    "SecretView",
    "rekey",
]

log = logging.getLogger(__name__)

#: a value's length in characters (the API's limit) and so at most 4x that in bytes
MAX_VALUE_CHARS = 64 * 1024
MAX_VALUE_BYTES = 4 * MAX_VALUE_CHARS
NOT_CONFIGURED = "secrets are not configured: set JOBGATE_SECRETS_KEY (docs/secrets.md)"
#: sessions whose maskers are kept (a running session's appends stay cheap)
MASKERS_KEPT = 4096


@dataclass(frozen=True, slots=True)
class SecretView:
    """What anyone may see of a secret: never its value."""

    name: str
    owner: str  # "user NAME" | "project NAME"
    project: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A session's request for a secret: the name and where it goes."""

    name: str
    env: str | None = None
    path: str | None = None


def _sealed(row: Secret) -> Sealed:
    return Sealed(row.ciphertext, row.wrapped_key, row.key_id)


class SecretService:
    def __init__(self, db: SessionFactory, key: MasterKey | None) -> None:
        self.db = db
        self.key = key
        self._maskers: OrderedDict[str, Masker] = OrderedDict()

    def _need_key(self) -> MasterKey:
        if self.key is None:
            raise Conflict(NOT_CONFIGURED)
        return self.key

    # -- owners -----------------------------------------------------------------------
    @staticmethod
    async def _owner(db: AsyncSession, principal: Principal, project: str | None) -> Owner:
        """The secret's owner; admins are members of a project like everyone else here."""
        return await resolve_owner(db, principal, project, admins_any=False)

    async def _visible_keys(self, db: AsyncSession, principal: Principal) -> list[str]:
        """Owner keys a principal sees secrets of: their own first, then their projects'."""
        projects = (
            await db.execute(
                select(ProjectMember.project_id).where(ProjectMember.user_id == principal.user_id)
            )
        ).scalars()
        return [owner_key("user", principal.user_id)] + [
            owner_key("project", p) for p in sorted(projects)
        ]

    async def _find(
        self, db: AsyncSession, principal: Principal, name: str, project: str | None
    ) -> Secret:
        """The principal's secret *name* (of *project* if given); another's is a 404."""
        if project is not None:
            keys = [(await self._owner(db, principal, project)).key]
        else:
            keys = [owner_key("user", principal.user_id)]
        row = (
            await db.execute(select(Secret).where(Secret.owner_key.in_(keys), Secret.name == name))
        ).scalar_one_or_none()
        if row is None:
            where = f" in project {project!r}" if project else ""
            raise NotFound(f"no secret {name!r}{where}", field="name")
        return row

    async def _views(self, db: AsyncSession, rows: list[Secret]) -> list[SecretView]:
        users: dict[str, str] = {}
        projects: dict[str, str] = {}
        project_ids = {r.owner_project_id for r in rows if r.owner_project_id}
        if project_ids:
            found = await db.execute(
                select(Project.id, Project.name).where(Project.id.in_(project_ids))
            )
            projects = {pid: pname for pid, pname in found.all()}
        user_ids = {r.owner_user_id for r in rows if r.owner_user_id}
        if user_ids:
            found = await db.execute(select(User.id, User.name).where(User.id.in_(user_ids)))
            users = {uid: uname for uid, uname in found.all()}
        views = []
        for r in rows:
            project = projects.get(r.owner_project_id or "")
            owner = f"project {project}" if project else f"user {users.get(r.owner_user_id or '')}"
            views.append(SecretView(r.name, owner, project, r.created_at, r.updated_at))
        return views

    # -- the API ----------------------------------------------------------------------
    async def create(
        self, principal: Principal, name: str, value: bytes, project: str | None
    ) -> SecretView:
        key = self._need_key()
        _check_value(value)
        async with self.db() as db, db.begin():
            owner = await self._owner(db, principal, project)
            taken = await db.scalar(
                select(Secret.id).where(Secret.owner_key == owner.key, Secret.name == name)
            )
            if taken is not None:
                raise Conflict(f"{owner.label} already has a secret {name!r}", field="name")
            now = utcnow()
            secret_id = new_id()
            sealed = seal(key, associated_data(secret_id, name), value)
            row = Secret(
                id=secret_id,
                name=name,
                owner_key=owner.key,
                owner_user_id=owner.user_id,
                owner_project_id=owner.project_id,
                ciphertext=sealed.ciphertext,
                wrapped_key=sealed.wrapped_key,
                key_id=sealed.key_id,
                created_by=principal.user_id,
                created_at=now,
                updated_at=now,
            )
            db.add(row)
            try:
                await db.flush()
            except IntegrityError:
                raise Conflict(
                    f"{owner.label} already has a secret {name!r}", field="name"
                ) from None
        log.info("secret %s of %s created by %s", name, owner.label, principal.name)
        return SecretView(name, owner.label, project, now, now)

    async def listing(self, principal: Principal) -> list[SecretView]:
        async with self.db() as db:
            keys = await self._visible_keys(db, principal)
            rows = list(
                (
                    await db.execute(
                        select(Secret).where(Secret.owner_key.in_(keys)).order_by(Secret.name)
                    )
                ).scalars()
            )
            order = {k: i for i, k in enumerate(keys)}
            rows.sort(key=lambda r: (order[r.owner_key], r.name))
            return await self._views(db, rows)

    async def rotate(
        self, principal: Principal, name: str, value: bytes, project: str | None
    ) -> SecretView:
        key = self._need_key()
        _check_value(value)
        async with self.db() as db, db.begin():
            row = await self._find(db, principal, name, project)
            sealed = seal(key, associated_data(row.id, row.name), value)
            row.ciphertext, row.wrapped_key, row.key_id = (
                sealed.ciphertext,
                sealed.wrapped_key,
                sealed.key_id,
            )
            row.updated_at = utcnow()
            (view,) = await self._views(db, [row])
        log.info("secret %s of %s rotated by %s", name, view.owner, principal.name)
        return view

    async def delete(self, principal: Principal, name: str, project: str | None) -> None:
        async with self.db() as db, db.begin():
            row = await self._find(db, principal, name, project)
            await db.execute(delete(Secret).where(Secret.id == row.id))
        log.info("secret %s deleted by %s", name, principal.name)

    # -- sessions ---------------------------------------------------------------------
    async def references(
        self, db: AsyncSession, principal: Principal, wanted: list[SecretRef]
    ) -> list[dict[str, Any]]:
        """What a session stores of the secrets it asks for: ids, names and targets (the
        user's own by that name first, then their projects'); an unknown name, or one
        the principal does not see, is a 422 naming it."""
        if not wanted:
            return []
        self._need_key()
        keys = await self._visible_keys(db, principal)
        names = sorted({w.name for w in wanted})
        rows = (
            await db.execute(
                select(Secret.id, Secret.name, Secret.owner_key).where(
                    Secret.owner_key.in_(keys), Secret.name.in_(names)
                )
            )
        ).all()
        order = {k: i for i, k in enumerate(keys)}
        best: dict[str, tuple[int, str]] = {}
        for secret_id, name, holder in rows:
            rank = order[holder]
            if name not in best or rank < best[name][0]:
                best[name] = (rank, secret_id)
        missing = [n for n in names if n not in best]
        if missing:
            raise Invalid(
                f"no secret {missing[0]!r} (yours or your projects'): create it first "
                "(jobgate secrets create)",
                field="secrets",
                secret=missing[0],
            )
        return [
            {
                "id": best[w.name][1],
                "name": w.name,
                "env": w.env or (w.name if w.path is None else None),
                "path": w.path,
            }
            for w in wanted
        ]

    async def values_for_kernel(self, kernel_id: str) -> list[dict[str, Any]]:
        """The secrets of *kernel_id*'s session, opened, with their targets (the caller
        checked the node: ``NodeCredentialService.check_kernel``). A secret deleted since
        the submit is left out."""
        key = self._need_key()
        async with self.db() as db:
            refs = await db.scalar(
                select(Session.secrets)
                .join(Kernel, Kernel.session_id == Session.id)
                .where(Kernel.id == kernel_id)
            )
            if refs is None:
                raise NotFound(f"no kernel {kernel_id}")
            items: list[dict[str, Any]] = list(refs.get("items", []))
            opened = await self._open(db, key, [i["id"] for i in items])
        return [i | {"value": opened[i["id"]].decode()} for i in items if i["id"] in opened]

    async def _open(self, db: AsyncSession, key: MasterKey, ids: list[str]) -> dict[str, bytes]:
        if not ids:
            return {}
        rows = (await db.execute(select(Secret).where(Secret.id.in_(ids)))).scalars()
        return {r.id: open_value(key, associated_data(r.id, r.name), _sealed(r)) for r in rows}

    async def masker_for_session(self, db: AsyncSession, session_id: str) -> Masker:
        """The values a session receives, to mask in its logs (kept per session)."""
        masker = self._maskers.get(session_id)
        if masker is not None:
            self._maskers.move_to_end(session_id)
            return masker
        refs = await db.scalar(select(Session.secrets).where(Session.id == session_id))
        ids = [i["id"] for i in (refs or {}).get("items", [])]
        values: dict[str, bytes] = {}
        if ids and self.key is not None:
            values = await self._open(db, self.key, ids)
        masker = Masker(values.values())
        self._maskers[session_id] = masker
        if len(self._maskers) > MASKERS_KEPT:
            self._maskers.popitem(last=False)
        return masker


async def rekey(db: AsyncSession, old: MasterKey, new: MasterKey) -> tuple[int, int]:
    """Every row's data key wrapped again by *new* (values and ciphertexts untouched),
    in the caller's transaction: (rewrapped, already under *new*). A row that *old* does
    not open stops it all (SealingError): nothing is half done."""
    done = kept = 0
    rows = (await db.execute(select(Secret).order_by(Secret.id).with_for_update())).scalars()
    for row in rows:
        if row.key_id == new.key_id:
            kept += 1
            continue
        sealed = rewrap(old, new, associated_data(row.id, row.name), _sealed(row))
        row.wrapped_key, row.key_id = sealed.wrapped_key, sealed.key_id
        done += 1
    return done, kept


def _check_value(value: bytes) -> None:
    if len(value) < MIN_MASKED:
        raise Invalid(
            f"a secret's value must be at least {MIN_MASKED} bytes (shorter ones cannot be "
            "masked in logs)",
            field="value",
        )
    if len(value) > MAX_VALUE_BYTES:
        raise Invalid(f"a secret's value must be at most {MAX_VALUE_BYTES} bytes", field="value")
    try:
        value.decode()
    except UnicodeDecodeError:
        raise Invalid("a secret's value must be UTF-8 text", field="value") from None
