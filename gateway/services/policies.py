"""Resource policies of users and projects (admins): set, merge-patch, list, delete.

A subject is a user or project name, or ``*`` (the default); absent limits are unlimited.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.engine import SessionFactory
from gateway.db.models import Project, ResourcePolicy, User
from gateway.domain.errors import Invalid, NotFound
from gateway.domain.patch import merge_patch
from gateway.scheduler.policy import DEFAULT_SUBJECT
from plugins.resources import InvalidResource, ResourceSlots

__all__ = ["PolicyService", "ResourcePolicy", "Scope"]

Scope = Literal["user", "project"]
#: the limits a policy holds, by field name
LIMITS = (
    "max_sessions",
    "max_pending",
    "max_slots",
    "max_folder_bytes",
    "allow_commit",
    "max_priority",
)
#: the limits a merge patch sets as given (``max_slots`` merges slot by slot)
PLAIN = tuple(name for name in LIMITS if name != "max_slots")


class PolicyService:
    def __init__(self, db: SessionFactory) -> None:
        self.db = db

    async def listing(self) -> tuple[list[ResourcePolicy], dict[str, str]]:
        """Every policy, and the names of the subjects they name (by id)."""
        async with self.db() as db:
            users = {uid: name for uid, name in await db.execute(select(User.id, User.name))}
            projects = {
                pid: name for pid, name in await db.execute(select(Project.id, Project.name))
            }
            query = select(ResourcePolicy).order_by(ResourcePolicy.scope)
            rows = list((await db.execute(query)).scalars())
        return rows, users | projects | {DEFAULT_SUBJECT: DEFAULT_SUBJECT}

    async def set(self, scope: Scope, subject: str, limits: dict[str, Any]) -> ResourcePolicy:
        """Create or replace a policy: every limit not in *limits* becomes unlimited."""
        async with self.db() as db, db.begin():
            row = await _row(db, scope, subject)
            for name in LIMITS:
                setattr(row, name, limits.get(name))
            slots = limits.get("max_slots")
            row.max_slots = ResourceSlots.parse(slots).to_json() if slots else None
        return row

    async def update(self, scope: Scope, subject: str, given: dict[str, Any]) -> ResourcePolicy:
        """Change only the limits *given* (a JSON merge patch; ``max_slots`` slot by slot)."""
        async with self.db() as db, db.begin():
            row = await _row(db, scope, subject)
            for name in PLAIN:
                if name in given:
                    setattr(row, name, given[name])
            if "max_slots" in given:
                patch = given["max_slots"]
                slots = merge_patch(row.max_slots, patch or {}) if patch else {}
                if slots:
                    _check_slots(slots)
                row.max_slots = ResourceSlots.parse(slots).to_json() if slots else None
        return row

    async def delete(self, scope: Scope, subject: str) -> None:
        async with self.db() as db, db.begin():
            subject_id = await _subject_id(db, scope, subject)
            row = await _find(db, scope, subject_id)
            if row is None:
                raise NotFound(f"{scope} {subject!r} has no policy")
            await db.delete(row)


def _check_slots(value: dict[str, Any]) -> None:
    try:
        slots = ResourceSlots.parse(value)
    except InvalidResource as exc:
        raise Invalid(f"{exc.slot}: {exc.message}", field=f"max_slots.{exc.slot}") from None
    if len(slots) != len(value):
        raise Invalid(
            "a slot limit of 0 would block everything; use max_sessions=0", field="max_slots"
        )


async def _subject_id(db: AsyncSession, scope: Scope, subject: str) -> str:
    if subject == DEFAULT_SUBJECT:
        return DEFAULT_SUBJECT
    model = User if scope == "user" else Project
    found = (await db.execute(select(model.id).where(model.name == subject))).scalar_one_or_none()
    if found is None:
        raise NotFound(f"no {scope} {subject!r}")
    return str(found)


async def _find(db: AsyncSession, scope: Scope, subject_id: str) -> ResourcePolicy | None:
    query = select(ResourcePolicy).where(
        ResourcePolicy.scope == scope, ResourcePolicy.subject_id == subject_id
    )
    return (await db.execute(query.with_for_update())).scalar_one_or_none()


async def _row(db: AsyncSession, scope: Scope, subject: str) -> ResourcePolicy:
    """The subject's policy, locked; a new one (added to *db*) when it has none."""
    subject_id = await _subject_id(db, scope, subject)
    row = await _find(db, scope, subject_id)
    if row is None:
        row = ResourcePolicy(scope=scope, subject_id=subject_id)
        db.add(row)
    return row
