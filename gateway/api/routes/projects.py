"""/v1/projects: projects and their members (admins manage them; members see theirs)."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gateway.api.deps import Admin, CurrentUser, DbSession
from gateway.db.models import Project, ProjectMember, User
from gateway.domain.errors import Conflict, NotFound
from gateway.domain.requests import Input

router = APIRouter(prefix="/v1/projects", tags=["projects"])


class ProjectCreate(Input):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class MemberAdd(Input):
    user: str = Field(max_length=64)


class ProjectPublic(BaseModel):
    id: str
    name: str
    members: list[str]


async def _project(db: DbSession, name: str) -> Project:
    project = (await db.execute(select(Project).where(Project.name == name))).scalar_one_or_none()
    if project is None:
        raise NotFound(f"no project {name!r}")
    return project


async def _members(db: DbSession, project_id: str) -> list[str]:
    rows = await db.execute(
        select(User.name)
        .join(ProjectMember, ProjectMember.user_id == User.id)
        .where(ProjectMember.project_id == project_id)
        .order_by(User.name)
    )
    return list(rows.scalars())


@router.get("", operation_id="projects-list", response_model=list[ProjectPublic])
async def list_projects(principal: CurrentUser, db: DbSession) -> list[ProjectPublic]:
    """Every project (admins) or the caller's own."""
    query = select(Project).order_by(Project.name)
    if not principal.is_admin:
        query = query.join(ProjectMember, ProjectMember.project_id == Project.id).where(
            ProjectMember.user_id == principal.user_id
        )
    projects = list((await db.execute(query)).scalars())
    return [ProjectPublic(id=p.id, name=p.name, members=await _members(db, p.id)) for p in projects]


@router.post(
    "",
    operation_id="projects-create",
    status_code=status.HTTP_201_CREATED,
    response_model=ProjectPublic,
)
async def create_project(body: ProjectCreate, _: Admin, db: DbSession) -> ProjectPublic:
    project = Project(name=body.name)
    try:
        async with db.begin():
            db.add(project)
    except IntegrityError:
        raise Conflict(f"a project named {body.name!r} exists") from None
    return ProjectPublic(id=project.id, name=project.name, members=[])


@router.post("/{name}/members", operation_id="projects-add-member", response_model=ProjectPublic)
async def add_member(name: str, body: MemberAdd, _: Admin, db: DbSession) -> ProjectPublic:
    async with db.begin():
        project = await _project(db, name)
        user = (await db.execute(select(User).where(User.name == body.user))).scalar_one_or_none()
        if user is None:  # the project (the resource) exists: the body is what is wrong
            raise NotFound(f"no user {body.user!r}", field="user")
        if await db.get(ProjectMember, (project.id, user.id)) is None:
            db.add(ProjectMember(project_id=project.id, user_id=user.id))
    return ProjectPublic(id=project.id, name=project.name, members=await _members(db, project.id))


@router.delete(
    "/{name}/members/{user}", operation_id="projects-remove-member", response_model=ProjectPublic
)
async def remove_member(name: str, user: str, _: Admin, db: DbSession) -> ProjectPublic:
    async with db.begin():
        project = await _project(db, name)
        row = (
            await db.execute(
                select(ProjectMember)
                .join(User, User.id == ProjectMember.user_id)
                .where(ProjectMember.project_id == project.id, User.name == user)
            )
        ).scalar_one_or_none()
        if row is None:
            raise NotFound(f"{user!r} is not a member of {name!r}")
        await db.delete(row)
    return ProjectPublic(id=project.id, name=project.name, members=await _members(db, project.id))
