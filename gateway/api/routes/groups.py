"""/v1/resource-groups: the pools of nodes and each one's scheduler pipeline (admins).

``PUT`` creates a group or replaces it; ``PATCH`` changes only the fields given, and
``scheduler`` merges key by key: a key given replaces the stored one whole (a plugin with
its options), ``null`` removes it. So every configuration the OpenAPI document's
``SchedulerConfig`` takes (the plugins loaded, ``gateway.api.openapi``) is taken by a PUT
and by a PATCH whatever the group stored. Both check the pipeline with the one reading of
a group's configuration that the scheduler's snapshot uses
(``gateway.scheduler.snapshot.group_config``), in strict JSON types, before storing it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from gateway.api.deps import Admin, CurrentUser, Groups
from gateway.api.rules import SHORT_NAME_PATTERN
from gateway.domain.requests import NO_NUL, Input
from gateway.services.groups import ResourceGroup

router = APIRouter(prefix="/v1/resource-groups", tags=["groups"])

GroupName = Annotated[str, Path(pattern=SHORT_NAME_PATTERN)]


class GroupSet(Input):
    description: str = Field(default="", max_length=500, pattern=NO_NUL)
    scheduler: dict[str, Any] = Field(
        default_factory=dict,
        description='pipeline configuration, e.g. {"sequencer": "drf", "scorers": ["dispersed"]}',
    )


class GroupPatch(Input):
    description: str | None = Field(default=None, max_length=500, pattern=NO_NUL)
    scheduler: dict[str, Any] | None = Field(
        default=None, description="merged into the pipeline configuration key by key"
    )


class GroupPublic(BaseModel):
    name: str
    description: str
    scheduler: dict[str, Any] = Field(description="the configuration as it was set")
    effective: dict[str, Any] = Field(
        description="the configuration the scheduler runs: every plugin by name with its "
        "options, the defaults (the gateway's included) filled in"
    )
    nodes: int


def _public(group: ResourceGroup, nodes: int, groups: Groups) -> GroupPublic:
    """A group as the API shows it; ``effective`` is exactly what the scheduler's snapshot
    reads from the same row."""
    return GroupPublic(
        name=group.name,
        description=group.description,
        scheduler=dict(group.scheduler),
        effective=groups.effective(group),
        nodes=nodes,
    )


@router.get("", operation_id="groups-list", response_model=list[GroupPublic])
async def list_groups(_: CurrentUser, groups: Groups) -> list[GroupPublic]:
    return [_public(g, n, groups) for g, n in await groups.listing()]


@router.put("/{name}", operation_id="groups-set", response_model=GroupPublic)
async def set_group(name: GroupName, body: GroupSet, _: Admin, groups: Groups) -> GroupPublic:
    """Create a group or replace its configuration; the pipeline is checked first."""
    return _public(*await groups.set(name, body.description, body.scheduler), groups)


@router.patch("/{name}", operation_id="groups-update", response_model=GroupPublic)
async def update_group(name: GroupName, body: GroupPatch, _: Admin, groups: Groups) -> GroupPublic:
    """Change only the fields given (creates the group if there is none); checked first."""
    given = body.model_dump(exclude_unset=True)
    return _public(*await groups.update(name, given), groups)
