"""/v1/projects: projects and their members (admins manage them; members see theirs)."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import BaseModel, Field

from gateway.api.deps import Admin, CurrentUser, Projects
from gateway.api.rules import SHORT_NAME_PATTERN, USER_NAME_PATTERN
from gateway.domain.requests import Input
from gateway.services.projects import Project

router = APIRouter(prefix="/v1/projects", tags=["projects"])


class ProjectCreate(Input):
    name: str = Field(pattern=SHORT_NAME_PATTERN)


class MemberAdd(Input):
    user: str = Field(pattern=USER_NAME_PATTERN, description="a user's name")


class ProjectPatch(Input):
    share: float = Field(
        gt=0,
        le=1_000_000,
        allow_inf_nan=False,
        description="Its weight in the fair-share sequencer (docs/fair-share.md); default 1.",
    )


class ProjectPublic(BaseModel):
    id: str
    name: str
    members: list[str]
    share: float = Field(description="Its weight in the fair-share sequencer.")


def _public(project: Project, members: list[str]) -> ProjectPublic:
    return ProjectPublic(id=project.id, name=project.name, members=members, share=project.share)


@router.get("", operation_id="projects-list", response_model=list[ProjectPublic])
async def list_projects(principal: CurrentUser, projects: Projects) -> list[ProjectPublic]:
    """Every project (admins) or the caller's own."""
    return [_public(p, members) for p, members in await projects.listing(principal)]


@router.post(
    "",
    operation_id="projects-create",
    status_code=status.HTTP_201_CREATED,
    response_model=ProjectPublic,
)
async def create_project(body: ProjectCreate, _: Admin, projects: Projects) -> ProjectPublic:
    return _public(await projects.create(body.name), [])


@router.patch("/{name}", operation_id="projects-update", response_model=ProjectPublic)
async def update_project(
    name: str, body: ProjectPatch, _: Admin, projects: Projects
) -> ProjectPublic:
    """Set a project's fair-share weight (admins)."""
    return _public(*await projects.set_share(name, body.share))


@router.post("/{name}/members", operation_id="projects-add-member", response_model=ProjectPublic)
async def add_member(name: str, body: MemberAdd, _: Admin, projects: Projects) -> ProjectPublic:
    return _public(*await projects.add_member(name, body.user))


@router.delete(
    "/{name}/members/{user}", operation_id="projects-remove-member", response_model=ProjectPublic
)
async def remove_member(name: str, user: str, _: Admin, projects: Projects) -> ProjectPublic:
    return _public(*await projects.remove_member(name, user))
