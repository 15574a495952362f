"""Read side of sessions: find one (ownership rules), list with keyset pages, load details.

What it returns are rows and plain dataclasses; ``gateway.api.render`` maps them to the
response schemas.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.models import Kernel, Project, Session, SessionDependency, StatusHistory, User
from gateway.domain.errors import NotFound
from gateway.domain.status import SessionStatus

__all__ = [
    "SessionDetails",
    "details",
    "details_many",
    "get_owned",
    "list_page",
    "published_apps",
]


@dataclass
class SessionDetails:
    """A session with what its public view shows besides its own row."""

    session: Session
    kernels: list[Kernel]
    depends_on: list[str]
    owner: str  # the owner's name
    project: str | None  # the project's name
    history: list[StatusHistory] | None = None


async def get_owned(db: AsyncSession, principal: Principal, session_id: str) -> Session:
    """The session if the caller may see it; someone else's is 404, as if it did not exist."""
    query = select(Session).where(Session.id == session_id)
    if not principal.is_admin:
        query = query.where(Session.owner_id == principal.user_id)
    row = (await db.execute(query)).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no session {session_id}")
    return row


async def published_apps(db: AsyncSession, session_id: str) -> set[str]:
    """The apps whose ports the session's kernels have published."""
    published: set[str] = set()
    for (ports,) in await db.execute(select(Kernel.ports).where(Kernel.session_id == session_id)):
        published.update(ports)
    return published


def _encode_cursor(created_at: datetime, session_id: str) -> str:
    raw = f"{created_at.isoformat()}|{session_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, session_id = raw.split("|", 1)
        return datetime.fromisoformat(stamp), session_id
    except (ValueError, UnicodeDecodeError):
        raise NotFound(
            "no page at this cursor: it is not one this API returned", field="cursor"
        ) from None


async def list_page(
    db: AsyncSession,
    principal: Principal,
    *,
    statuses: Sequence[SessionStatus] = (),
    types: Sequence[str] = (),
    id_prefix: str | None = None,
    name: str | None = None,
    array: str | None = None,
    all_users: bool = False,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[Session], str | None]:
    query = select(Session)
    if not (all_users and principal.is_admin):
        query = query.where(Session.owner_id == principal.user_id)
    if statuses:
        query = query.where(Session.status.in_([str(s) for s in statuses]))
    if types:
        query = query.where(Session.type.in_(list(types)))
    if id_prefix:
        query = query.where(Session.id.startswith(id_prefix.lower(), autoescape=True))
    if name:
        query = query.where(Session.name == name)
    if array:
        query = query.where(Session.array_id == array.lower())
    if cursor:
        created_at, last_id = _decode_cursor(cursor)
        query = query.where(
            or_(
                Session.created_at < created_at,
                and_(Session.created_at == created_at, Session.id < last_id),
            )
        )
    query = query.order_by(Session.created_at.desc(), Session.id.desc()).limit(limit + 1)
    rows = list((await db.execute(query)).scalars())
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = _encode_cursor(rows[-1].created_at, rows[-1].id)
    return rows, next_cursor


async def details_many(db: AsyncSession, sessions: Sequence[Session]) -> list[SessionDetails]:
    """Details of several sessions with three queries, whatever their number."""
    if not sessions:
        return []
    ids = [s.id for s in sessions]
    kernels: dict[str, list[Kernel]] = defaultdict(list)
    for k in (
        await db.execute(
            select(Kernel).where(Kernel.session_id.in_(ids)).order_by(Kernel.cluster_idx)
        )
    ).scalars():
        kernels[k.session_id].append(k)
    deps: dict[str, list[str]] = defaultdict(list)
    for dep in (
        await db.execute(select(SessionDependency).where(SessionDependency.session_id.in_(ids)))
    ).scalars():
        deps[dep.session_id].append(dep.depends_on_id)
    owner_ids = {s.owner_id for s in sessions}
    names = {
        uid: name
        for uid, name in await db.execute(select(User.id, User.name).where(User.id.in_(owner_ids)))
    }
    project_ids = {s.project_id for s in sessions if s.project_id}
    projects: dict[str, str] = {}
    if project_ids:
        query = select(Project.id, Project.name).where(Project.id.in_(project_ids))
        projects = {pid: name for pid, name in await db.execute(query)}
    return [
        SessionDetails(
            s,
            kernels.get(s.id, []),
            deps.get(s.id, []),
            names.get(s.owner_id, s.owner_id),
            projects.get(s.project_id) if s.project_id else None,
        )
        for s in sessions
    ]


async def details(db: AsyncSession, session: Session, *, history: bool = False) -> SessionDetails:
    (found,) = await details_many(db, [session])
    if history:
        found.history = list(
            (
                await db.execute(
                    select(StatusHistory)
                    .where(StatusHistory.session_id == session.id)
                    .order_by(StatusHistory.id)
                )
            ).scalars()
        )
    return found
