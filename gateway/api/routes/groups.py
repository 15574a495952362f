"""/v1/resource-groups: the pools of nodes and each one's scheduler pipeline (admins)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select

from gateway.api.deps import Admin, CurrentUser, DbSession, State
from gateway.db.models import Node, ResourceGroup
from gateway.domain.errors import Invalid
from gateway.scheduler.snapshot import group_config
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.pipeline import build_pipeline

router = APIRouter(prefix="/v1/resource-groups", tags=["groups"])


class GroupSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = Field(default="", max_length=500)
    scheduler: dict[str, Any] = Field(
        default_factory=dict,
        description='pipeline configuration, e.g. {"sequencer": "drf", "scorers": ["dispersed"]}',
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


def _public(group: ResourceGroup, nodes: int, state: State) -> GroupPublic:
    """A group as the API shows it; ``effective`` is exactly what the scheduler's snapshot
    reads from the same row (``gateway.scheduler.snapshot.group_config``)."""
    effective = group_config(group, state.settings).model_dump(mode="json")
    return GroupPublic(
        name=group.name,
        description=group.description,
        scheduler=dict(group.scheduler),
        effective=effective,
        nodes=nodes,
    )


@router.get("", operation_id="groups-list", response_model=list[GroupPublic])
async def list_groups(_: CurrentUser, db: DbSession, state: State) -> list[GroupPublic]:
    counts = {
        group: n
        for group, n in await db.execute(
            select(Node.resource_group, func.count()).group_by(Node.resource_group)
        )
    }
    rows = (await db.execute(select(ResourceGroup).order_by(ResourceGroup.name))).scalars()
    return [_public(g, counts.get(g.name, 0), state) for g in rows]


@router.put("/{name}", operation_id="groups-set", response_model=GroupPublic)
async def set_group(
    name: str, body: GroupSet, _: Admin, db: DbSession, state: State
) -> GroupPublic:
    """Create a group or replace its configuration; the pipeline is checked first."""
    candidate = ResourceGroup(name=name, description=body.description, scheduler=body.scheduler)
    try:
        build_pipeline(group_config(candidate, state.settings))
    except (SchedulerConfigError, ValueError) as exc:
        raise Invalid(
            f"the scheduler configuration does not work: {exc}", field="scheduler"
        ) from None
    async with db.begin():
        group = await db.get(ResourceGroup, name)
        if group is None:
            group = ResourceGroup(name=name)
            db.add(group)
        group.description = body.description
        group.scheduler = dict(body.scheduler)
    nodes = (
        await db.execute(select(func.count()).select_from(Node).where(Node.resource_group == name))
    ).scalar_one()
    return _public(group, nodes, state)
