"""Who owns a folder or a secret: a user or one of their projects, in one column.

``owner_key`` is ``"user:<id>"`` or ``"project:<id>"`` (one column, so a unique name per
owner has no NULLs); ``owner_user_id`` / ``owner_project_id`` keep the foreign keys that
delete the rows with their owner. Folders and secrets resolve an owner the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.models import Project, ProjectMember
from gateway.domain.errors import Forbidden, NotFound

__all__ = ["Owner", "owner_key", "resolve_owner"]


def owner_key(kind: str, ident: str) -> str:
    """``"user:<id>"`` or ``"project:<id>"``."""
    return f"{kind}:{ident}"


@dataclass(frozen=True, slots=True)
class Owner:
    key: str
    user_id: str | None
    project_id: str | None
    label: str  # "user NAME" | "project NAME", for messages


async def resolve_owner(
    db: AsyncSession, principal: Principal, project: str | None, *, admins_any: bool
) -> Owner:
    """The principal itself, or *project* (404 if there is none, 403 unless the principal
    is a member; *admins_any*: an admin needs not be one)."""
    if project is None:
        key = owner_key("user", principal.user_id)
        return Owner(key, principal.user_id, None, f"user {principal.name}")
    row = (await db.execute(select(Project).where(Project.name == project))).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no project {project!r}", field="project")
    exempt = admins_any and principal.is_admin
    if not exempt and await db.get(ProjectMember, (row.id, principal.user_id)) is None:
        raise Forbidden(f"{principal.name} is not a member of project {project!r}")
    return Owner(owner_key("project", row.id), None, row.id, f"project {project}")
