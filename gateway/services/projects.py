"""Projects and their members (admins manage them; members see theirs)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import Project, ProjectMember, User
from gateway.domain.errors import NotFound
from gateway.services.budgets import drop_member
from gateway.services.rows import add_named

__all__ = ["Project", "ProjectService"]

#: a project and its members' user names, sorted
Members = tuple[Project, list[str]]


class ProjectService:
    def __init__(self, db: SessionFactory) -> None:
        self.db = db

    async def listing(self, principal: Principal) -> list[Members]:
        """Every project (admins) or the caller's own, with members."""
        query = select(Project).order_by(Project.name)
        if not principal.is_admin:
            query = query.join(ProjectMember, ProjectMember.project_id == Project.id).where(
                ProjectMember.user_id == principal.user_id
            )
        async with self.db() as db:
            projects = list((await db.execute(query)).scalars())
            return [(p, await _members(db, p.id)) for p in projects]

    async def create(self, name: str) -> Project:
        return await add_named(self.db, Project(name=name), f"a project named {name!r} exists")

    async def set_share(self, name: str, share: float) -> Members:
        """A project's weight in the fair-share sequencer (docs/fair-share.md)."""
        async with self.db() as db:
            async with db.begin():
                project = await _project(db, name)
                project.share = share
            return project, await _members(db, project.id)

    async def add_member(self, name: str, user_name: str) -> Members:
        async with self.db() as db:
            async with db.begin():
                project = await _project(db, name)
                user = (
                    await db.execute(select(User).where(User.name == user_name))
                ).scalar_one_or_none()
                if user is None:  # the project (the resource) exists: the body is what is wrong
                    raise NotFound(f"no user {user_name!r}", field="user")
                member = await db.get(ProjectMember, (project.id, user.id))
                if member is None:
                    db.add(ProjectMember(project_id=project.id, user_id=user.id))
                else:  # a binding rule's until now: the admin's from now on (it stays)
                    member.via = None
            return project, await _members(db, project.id)

    async def remove_member(self, name: str, user_name: str) -> Members:
        async with self.db() as db:
            async with db.begin():
                project = await _project(db, name)
                row = (
                    await db.execute(
                        select(ProjectMember)
                        .join(User, User.id == ProjectMember.user_id)
                        .where(ProjectMember.project_id == project.id, User.name == user_name)
                    )
                ).scalar_one_or_none()
                if row is None:
                    raise NotFound(f"{user_name!r} is not a member of {name!r}")
                await db.delete(row)
                await drop_member(db, project.id, row.user_id)
            return project, await _members(db, project.id)


async def _project(db: AsyncSession, name: str) -> Project:
    project = (await db.execute(select(Project).where(Project.name == name))).scalar_one_or_none()
    if project is None:
        raise NotFound(f"no project {name!r}")
    return project


async def _members(db: AsyncSession, project_id: str) -> list[str]:
    rows = await db.execute(
        select(User.name)
        .join(ProjectMember, ProjectMember.user_id == User.id)
        .where(ProjectMember.project_id == project_id)
        .order_by(User.name)
    )
    return list(rows.scalars())
