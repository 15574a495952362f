"""Data folders: who may do what, quotas, and the folders a new session mounts.

Permissions are ``ro ⊂ rw ⊂ wd`` (read; write; delete). What a user holds on a folder:

=====================================  =======
admin                                  wd
the owning user                        wd
a member of the owning project         wd
a share (``folder_shares``)            its perm
anyone else                            none: the folder does not exist for them (404)
=====================================  =======

Sharing and unsharing are for owners (the owning user, project members, admins).
A folder is named by its id or, for people, by its name: their own folders first, then
their projects', then those shared with them (admins: then anyone's).
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from contract.folders import (
    AUTOMOUNT_PREFIX,
    FOLDER_ID_PATTERN,
    is_automount,
    perm_allows,
)
from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import (
    Folder,
    FolderShare,
    Project,
    ProjectMember,
    ResourcePolicy,
    Session,
    SessionFolder,
    User,
    utcnow,
)
from gateway.domain.errors import Conflict, Forbidden, Invalid, NotFound, QuotaExceeded
from gateway.domain.status import TERMINAL
from gateway.scheduler.policy import DEFAULT_SUBJECT
from gateway.services.folderfs import FolderFS
from gateway.services.owners import resolve_owner

__all__ = [
    "MOUNT_BASE",
    "AutomountFolder",
    "FolderQuotaExceeded",
    "FolderService",
    "FolderView",
    "automount_folders",
]

log = logging.getLogger(__name__)

MOUNT_BASE = "/home/work"
_ID = re.compile(FOLDER_ID_PATTERN)


class FolderQuotaExceeded(Invalid):
    status = 413
    title = "Quota exceeded"


@dataclass
class FolderView:
    folder: Folder
    owner: str  # "user alice" | "project vision"
    perm: str
    shares: dict[str, str]  # user name -> perm (owners see them)
    size: int | None = None
    sessions: list[str] | None = None


@dataclass(frozen=True, slots=True)
class AutomountFolder:
    """A user's dot-folder, mounted into each of its sessions unless it asks otherwise."""

    id: str
    name: str


async def automount_folders(
    db: AsyncSession, user_ids: Collection[str]
) -> dict[str, list[AutomountFolder]]:
    """Each user's dot-folders that are not in the trash, by name (one query for all)."""
    rows = await db.execute(
        select(Folder.owner_user_id, Folder.id, Folder.name)
        .where(
            Folder.owner_user_id.in_(user_ids),
            Folder.trashed_at.is_(None),
            Folder.name.startswith(AUTOMOUNT_PREFIX, autoescape=True),
        )
        .order_by(Folder.name)
    )
    found: dict[str, list[AutomountFolder]] = {}
    for owner, folder_id, name in rows:
        if owner is not None and is_automount(name):
            found.setdefault(owner, []).append(AutomountFolder(folder_id, name))
    return found


class FolderService:
    def __init__(self, db: SessionFactory, fs: FolderFS) -> None:
        self.db = db
        self.fs = fs

    # -- lookups ----------------------------------------------------------------------
    async def _projects(self, db: AsyncSession, principal: Principal) -> set[str]:
        rows = await db.execute(
            select(ProjectMember.project_id).where(ProjectMember.user_id == principal.user_id)
        )
        return set(rows.scalars())

    async def perm(self, db: AsyncSession, principal: Principal, folder: Folder) -> str | None:
        if principal.is_admin or folder.owner_user_id == principal.user_id:
            return "wd"
        if folder.owner_project_id is not None:
            member = await db.get(ProjectMember, (folder.owner_project_id, principal.user_id))
            if member is not None:
                return "wd"
        share = await db.get(FolderShare, (folder.id, principal.user_id))
        return share.perm if share is not None else None

    async def is_owner(self, db: AsyncSession, principal: Principal, folder: Folder) -> bool:
        if principal.is_admin or folder.owner_user_id == principal.user_id:
            return True
        if folder.owner_project_id is None:
            return False
        return await db.get(ProjectMember, (folder.owner_project_id, principal.user_id)) is not None

    async def visible(self, principal: Principal, ref: str) -> None:
        """Nothing if the caller can see the folder *ref* names; 404 otherwise."""
        async with self.db() as db:
            await self.resolve(db, principal, ref)

    async def resolve(
        self, db: AsyncSession, principal: Principal, ref: str, *, lock: bool = False
    ) -> tuple[Folder, str]:
        """The folder *ref* names for this caller and the permission held; 404 if none."""
        column = Folder.id if _ID.match(ref) else Folder.name
        query = select(Folder).where(column == ref)
        if lock:
            query = query.with_for_update()
        candidates = list((await db.execute(query)).scalars())
        projects = await self._projects(db, principal)
        shared = {
            fid
            for (fid,) in await db.execute(
                select(FolderShare.folder_id).where(FolderShare.user_id == principal.user_id)
            )
        }

        def rank(f: Folder) -> int:
            if f.owner_user_id == principal.user_id:
                return 0
            if f.owner_project_id in projects:
                return 1
            if f.id in shared:
                return 2
            return 3 if principal.is_admin else 9

        visible = sorted((rank(f), f.id, f) for f in candidates if rank(f) < 9)
        if not visible:
            raise NotFound(f"no folder {ref!r}")
        best = [f for r, _, f in visible if r == visible[0][0]]
        if len(best) > 1:
            ids = ", ".join(f.id for f in best)
            raise Conflict(f"{len(best)} folders are named {ref!r}; name one by id: {ids}")
        folder = best[0]
        perm = await self.perm(db, principal, folder)
        assert perm is not None
        return folder, perm

    async def _owner_names(self, db: AsyncSession, folders: list[Folder]) -> dict[str, str]:
        users = {f.owner_user_id for f in folders if f.owner_user_id}
        projects = {f.owner_project_id for f in folders if f.owner_project_id}
        names: dict[str, str] = {}
        if users:
            rows = await db.execute(select(User.id, User.name).where(User.id.in_(users)))
            names.update({uid: f"user {name}" for uid, name in rows})
        if projects:
            rows = await db.execute(
                select(Project.id, Project.name).where(Project.id.in_(projects))
            )
            names.update({pid: f"project {name}" for pid, name in rows})
        return names

    async def _shares(self, db: AsyncSession, folder_id: str) -> dict[str, str]:
        rows = await db.execute(
            select(User.name, FolderShare.perm)
            .join(User, User.id == FolderShare.user_id)
            .where(FolderShare.folder_id == folder_id)
        )
        return dict(sorted((name, perm) for name, perm in rows))

    async def _view(self, db: AsyncSession, folder: Folder, perm: str) -> FolderView:
        names = await self._owner_names(db, [folder])
        owner = names.get(folder.owner_user_id or folder.owner_project_id or "", "?")
        return FolderView(folder, owner, perm, await self._shares(db, folder.id))

    async def live_sessions(self, db: AsyncSession, folder_id: str) -> list[str]:
        rows = await db.execute(
            select(SessionFolder.session_id)
            .join(Session, Session.id == SessionFolder.session_id)
            .where(SessionFolder.folder_id == folder_id, Session.status.not_in(TERMINAL))
            .order_by(SessionFolder.session_id)
        )
        return list(rows.scalars())

    # -- folders ----------------------------------------------------------------------
    async def create(
        self, principal: Principal, name: str, project: str | None, usage: str
    ) -> FolderView:
        async with self.db() as db, db.begin():
            owner = await resolve_owner(db, principal, project, admins_any=True)
            key, user_id, project_id = owner.key, owner.user_id, owner.project_id
            taken = (
                await db.execute(
                    select(Folder.id, Folder.trashed_at).where(
                        Folder.owner_key == key, Folder.name == name
                    )
                )
            ).first()
            if taken is not None:
                where = " (in the trash: restore or purge it)" if taken.trashed_at else ""
                raise Conflict(
                    f"{owner.label} already has a folder {name!r}{where}",
                    field="name",
                    folder=taken.id,
                )
            folder = Folder(
                name=name,
                owner_key=key,
                owner_user_id=user_id,
                owner_project_id=project_id,
                usage=usage,
                created_by=principal.user_id,
                created_at=utcnow(),
            )
            db.add(folder)
            try:
                await db.flush()
            except IntegrityError:
                raise Conflict(
                    f"{owner.label} already has a folder {name!r}", field="name"
                ) from None
            await asyncio.to_thread(self.fs.create, folder.id)
        return FolderView(folder, owner.label, "wd", {}, size=0, sessions=[])

    async def listing(self, principal: Principal, *, trashed: bool = False) -> list[FolderView]:
        async with self.db() as db:
            query = select(Folder).order_by(Folder.name, Folder.id)
            query = query.where(
                Folder.trashed_at.is_not(None) if trashed else Folder.trashed_at.is_(None)
            )
            if not principal.is_admin:
                projects = await self._projects(db, principal)
                shared = select(FolderShare.folder_id).where(
                    FolderShare.user_id == principal.user_id
                )
                query = query.where(
                    or_(
                        Folder.owner_user_id == principal.user_id,
                        Folder.owner_project_id.in_(projects),
                        Folder.id.in_(shared),
                    )
                )
            folders = list((await db.execute(query)).scalars())
            names = await self._owner_names(db, folders)
            views = []
            for f in folders:
                perm = await self.perm(db, principal, f)
                owner = names.get(f.owner_user_id or f.owner_project_id or "", "?")
                views.append(FolderView(f, owner, perm or "ro", {}))
            return views

    async def show(self, principal: Principal, ref: str) -> FolderView:
        async with self.db() as db:
            folder, perm = await self.resolve(db, principal, ref)
            names = await self._owner_names(db, [folder])
            owner = names.get(folder.owner_user_id or folder.owner_project_id or "", "?")
            shares = await self._shares(db, folder.id)
            sessions = await self.live_sessions(db, folder.id)
        size = await asyncio.to_thread(self.fs.usage, folder.id)
        return FolderView(folder, owner, perm, shares, size=size, sessions=sessions)

    async def access(self, principal: Principal, ref: str, wanted: str) -> Folder:
        """The folder, if the caller holds *wanted* on it and it is not in the trash."""
        async with self.db() as db:
            folder, perm = await self.resolve(db, principal, ref)
        if folder.trashed_at is not None:
            raise Conflict(f"folder {folder.name!r} is in the trash: restore it first")
        if not perm_allows(perm, wanted):
            raise Forbidden(
                f"{principal.name} holds {perm} on folder {folder.name!r}; this needs {wanted}"
            )
        return folder

    async def trash(self, principal: Principal, ref: str) -> FolderView:
        async with self.db() as db, db.begin():
            folder, perm = await self.resolve(db, principal, ref, lock=True)
            self._need(principal, folder, perm, "wd")
            if folder.trashed_at is not None:
                raise Conflict(f"folder {folder.name!r} is already in the trash")
            await self._not_mounted(db, folder, "moved to the trash")
            folder.trashed_at = utcnow()
            return await self._view(db, folder, perm)

    async def restore(self, principal: Principal, ref: str) -> FolderView:
        async with self.db() as db, db.begin():
            folder, perm = await self.resolve(db, principal, ref, lock=True)
            self._need(principal, folder, perm, "wd")
            if folder.trashed_at is None:
                raise Conflict(f"folder {folder.name!r} is not in the trash")
            folder.trashed_at = None
            return await self._view(db, folder, perm)

    async def purge(self, principal: Principal, ref: str) -> None:
        async with self.db() as db, db.begin():
            folder, perm = await self.resolve(db, principal, ref, lock=True)
            self._need(principal, folder, perm, "wd")
            if folder.trashed_at is None:
                raise Conflict(f"folder {folder.name!r} is not in the trash: `folders rm` it first")
            await self._not_mounted(db, folder, "purged")
            await db.execute(delete(SessionFolder).where(SessionFolder.folder_id == folder.id))
            await db.execute(delete(FolderShare).where(FolderShare.folder_id == folder.id))
            await db.delete(folder)
            await db.flush()
            await asyncio.to_thread(self.fs.purge, folder.id)

    def _need(self, principal: Principal, folder: Folder, perm: str, wanted: str) -> None:
        if not perm_allows(perm, wanted):
            raise Forbidden(
                f"{principal.name} holds {perm} on folder {folder.name!r}; this needs {wanted}"
            )

    async def _not_mounted(self, db: AsyncSession, folder: Folder, what: str) -> None:
        sessions = await self.live_sessions(db, folder.id)
        if sessions:
            raise Conflict(
                f"folder {folder.name!r} is mounted by {len(sessions)} live session(s) "
                f"({', '.join(sessions)}); it cannot be {what} until they end",
                sessions=sessions,
            )

    async def share(
        self, principal: Principal, ref: str, user: str, perm: str | None
    ) -> FolderView:
        """Give *user* *perm* on the folder (None: take their share away)."""
        async with self.db() as db, db.begin():
            folder, held = await self.resolve(db, principal, ref)
            if not await self.is_owner(db, principal, folder):
                raise Forbidden(f"only the owners of folder {folder.name!r} share it")
            target = (await db.execute(select(User).where(User.name == user))).scalar_one_or_none()
            if target is None:
                raise NotFound(f"no user {user!r}", field="user")
            if target.id == folder.owner_user_id:
                raise Conflict(f"{user} owns folder {folder.name!r}", field="user")
            row = await db.get(FolderShare, (folder.id, target.id))
            if perm is None:
                if row is None:
                    raise NotFound(f"folder {folder.name!r} is not shared with {user}")
                await db.delete(row)
            elif row is None:
                db.add(FolderShare(folder_id=folder.id, user_id=target.id, perm=perm))
            else:
                row.perm = perm
            await db.flush()
            return await self._view(db, folder, held)

    # -- quotas -----------------------------------------------------------------------
    async def _quota(self, db: AsyncSession, folder: Folder) -> tuple[str, int | None, set[str]]:
        """(who, limit, the owner's folder ids) for the folder's owner."""
        if folder.owner_user_id is not None:
            scope, subject = "user", folder.owner_user_id
        else:
            scope, subject = "project", str(folder.owner_project_id)
        rows = await db.execute(
            select(ResourcePolicy.subject_id, ResourcePolicy.max_folder_bytes).where(
                ResourcePolicy.scope == scope,
                ResourcePolicy.subject_id.in_([subject, DEFAULT_SUBJECT]),
            )
        )
        limits = dict(rows.all())
        limit = limits.get(subject, limits.get(DEFAULT_SUBJECT))
        ids = set(
            (
                await db.execute(select(Folder.id).where(Folder.owner_key == folder.owner_key))
            ).scalars()
        )
        names = await self._owner_names(db, [folder])
        return names.get(subject, f"{scope} {subject}"), limit, ids

    async def check_quota(self, folder: Folder, adding: int) -> None:
        """Refuse (413, with the numbers) what would take the owner over its byte quota."""
        async with self.db() as db:
            who, limit, ids = await self._quota(db, folder)
        if limit is None:
            return
        used = await asyncio.to_thread(self._used, ids)
        if used + adding > limit:
            raise FolderQuotaExceeded(
                f"{who} would hold {used + adding} bytes in data folders, over its quota of "
                f"{limit} ({used} used, {adding} more asked for)",
                field="Upload-Length",
                quota=limit,
                used=used,
                requested=adding,
            )

    def _used(self, ids: set[str]) -> int:
        return sum(self.fs.usage(i) for i in ids) + self.fs.pending_bytes(ids)

    # -- sessions ---------------------------------------------------------------------
    async def mounts_for(
        self,
        db: AsyncSession,
        principal: Principal,
        asked: list[Any],
        *,
        automount: Sequence[AutomountFolder] = (),
    ) -> list[dict[str, Any]]:
        """The folders a new session mounts, resolved to ids, each checked.

        *asked*: ``FolderMount`` specs (name, target, read_only). A folder held read-only
        is mounted read-only. *automount*: the caller's dot-folders to add (as session
        creates read them through ``lookups.py``; empty when automount is off), each
        unless it is asked for already. Refused: unknown or trashed folders, two mounts
        on one target, and writable mounts of an owner over its byte quota.
        """
        items: list[dict[str, Any]] = []
        for i, spec in enumerate(asked):
            try:
                folder, perm = await self.resolve(db, principal, spec.name, lock=False)
            except (NotFound, Conflict) as exc:
                raise type(exc)(exc.detail, field=f"folders.{i}.name") from None
            if folder.trashed_at is not None:
                raise Conflict(f"folder {spec.name!r} is in the trash", field=f"folders.{i}.name")
            target = spec.target or posixpath.join(MOUNT_BASE, folder.name)
            items.append(
                {
                    "id": folder.id,
                    "name": folder.name,
                    "target": target,
                    "read_only": bool(spec.read_only) or not perm_allows(perm, "rw"),
                    "automount": False,
                }
            )
        if items:  # one moved to the trash later is caught when the session is written
            ids = [item["id"] for item in items]
            trashed = await db.execute(
                select(Folder.name)
                .where(Folder.id.in_(ids), Folder.trashed_at.is_not(None))
                .with_for_update(read=True)
            )
            for name in trashed.scalars():
                raise Conflict(f"folder {name!r} is in the trash", field="folders")
        chosen = {item["id"] for item in items}
        for dot in automount:  # read with trashed_at IS NULL: no second look needed
            if dot.id not in chosen:
                items.append(
                    {
                        "id": dot.id,
                        "name": dot.name,
                        "target": posixpath.join(MOUNT_BASE, dot.name),
                        "read_only": False,
                        "automount": True,
                    }
                )
        targets = [item["target"] for item in items]
        for i, target in enumerate(targets):
            if targets.index(target) != i:
                raise Invalid(f"two folders are mounted at {target}", field=f"folders.{i}.target")
        await self._over_quota(db, items)
        return items

    async def _over_quota(self, db: AsyncSession, items: list[dict[str, Any]]) -> None:
        """The pending-blocking rule: an owner over its quota starts no session that could
        write more into its folders (docs/folders.md)."""
        writable = [item["id"] for item in items if not item["read_only"]]
        if not writable:
            return
        limited = (
            await db.execute(
                select(func.count())
                .select_from(ResourcePolicy)
                .where(ResourcePolicy.max_folder_bytes.is_not(None))
            )
        ).scalar_one()
        if not limited:
            return
        seen: set[str] = set()
        for fid in writable:
            folder = await db.get(Folder, fid)
            if folder is None or folder.owner_key in seen:
                continue
            seen.add(folder.owner_key)
            who, limit, ids = await self._quota(db, folder)
            if limit is None:
                continue
            used = await asyncio.to_thread(self._used, ids)
            if used > limit:
                raise QuotaExceeded(
                    f"{who} holds {used} bytes in data folders, over its quota of {limit}: "
                    f"delete files (or mount {folder.name!r} read-only) before starting "
                    "sessions that write to it",
                    quota=limit,
                    used=used,
                )
